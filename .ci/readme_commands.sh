#!/usr/bin/env bash
# The README's commands, run exactly as the README shows them (each is first looked up in
# README.md, so the two cannot drift apart): the main job, `localspec doctor`,
# `localspec serve` with its curl and openai examples, and the Python example.
set -euo pipefail
cd "$(dirname "$0")/.."

shown() {  # fail unless README.md shows this exact text
    grep -qF -- "$1" README.md || { echo "README.md no longer shows: $1" >&2; exit 1; }
}

run_cmd='python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/localspec run "Write a Python function that checks whether a number is prime."'
shown "$run_cmd"
echo "\$ $run_cmd"
answer=$(bash -c "$run_cmd")
grep -q "def " <<<"$answer" || { echo "localspec run gave no code: $answer" >&2; exit 1; }

doctor_cmd='.venv/bin/localspec doctor'
shown "$doctor_cmd"
echo "\$ $doctor_cmd"
report=$($doctor_cmd)
grep -q "llama-cpp-python" <<<"$report"

serve_cmd='.venv/bin/localspec serve'
shown "$serve_cmd"
echo "\$ $serve_cmd &"
log=$(mktemp)
$serve_cmd 2>"$log" &
server=$!
trap 'kill $server 2>/dev/null || true' EXIT
for _ in $(seq 1 300); do
    curl -sf http://127.0.0.1:8080/health >/dev/null && break
    kill -0 $server 2>/dev/null || { cat "$log" >&2; echo "localspec serve exited" >&2; exit 1; }
    sleep 1
done
curl -sf http://127.0.0.1:8080/health >/dev/null || { cat "$log" >&2; echo "no /health after 300 s" >&2; exit 1; }

# The curl and python examples exactly as the README shows them (and as serve prints them).
curl_cmd=$(grep -m1 -F "curl http://127.0.0.1:8080/v1/chat/completions" README.md | sed 's/^ *//')
[ -n "$curl_cmd" ] || { echo "README.md shows no curl example" >&2; exit 1; }
grep -qF -- "$curl_cmd" "$log" || { echo "serve printed another curl example than the README's" >&2; exit 1; }
echo "\$ $curl_cmd"
reply=$(bash -c "$curl_cmd -sS -w '\n%{http_code}'")
status=$(tail -n1 <<<"$reply")
[ "$status" = 200 ] || { echo "curl example answered $status: $reply" >&2; exit 1; }
head -n -1 <<<"$reply" | .venv/bin/python -c "import json, sys; c = json.load(sys.stdin)['choices'][0]['message']['content']; assert c.strip(), 'empty answer'; print(c[:80])"

py_cmd=$(grep -m1 -F "python -c \"from openai import OpenAI" README.md | sed 's/^ *//')
[ -n "$py_cmd" ] || { echo "README.md shows no openai example" >&2; exit 1; }
grep -qF -- "python -c${py_cmd#*python -c}" "$log" || { echo "serve printed another openai example than the README's" >&2; exit 1; }
echo "\$ $py_cmd"
reply=$(bash -c "$py_cmd")
[ -n "$reply" ] || { echo "the openai example printed nothing" >&2; exit 1; }

kill $server
wait $server || true
trap - EXIT

# The README's Python example: its first ```python block.
example=$(mktemp --suffix .py)
awk '/^```python$/{on=1; next} /^```$/{if (on) exit} on' README.md >"$example"
[ -s "$example" ] || { echo "README.md has no python example" >&2; exit 1; }
echo "\$ .venv/bin/python <README's Python example>"
out=$(.venv/bin/python "$example")
[ -n "$out" ] || { echo "the Python example printed nothing" >&2; exit 1; }

# The desktop chat as the README starts it: it must come up and keep running (offscreen here).
gui_install='.venv/bin/pip install -e '"'"'.[gui]'"'"''
gui_cmd='.venv/bin/localspec gui'
shown "$gui_install"; shown "$gui_cmd"
echo "\$ $gui_install && $gui_cmd   (offscreen, 20 s)"
bash -c "$gui_install" >/dev/null
QT_QPA_PLATFORM=offscreen $gui_cmd &
gui=$!
sleep 20
kill -0 $gui 2>/dev/null || { wait $gui; echo "localspec gui exited with status $?" >&2; exit 1; }
kill $gui; wait $gui || true

# The README's benchmark command (one repetition: 10 min 23 s on a 2-core Xeon at 7a4848f); its
# results go to a scratch folder, not over the committed ones.
bench_extras=".venv/bin/pip install -e '.[bench]'"
bench_cmd='.venv/bin/localspec bench --quick'
shown "$bench_extras && $bench_cmd"
echo "\$ $bench_extras"
bash -c "$bench_extras" >/dev/null
echo "\$ $bench_cmd --out <scratch>"
scratch=$(mktemp -d)
$bench_cmd --out "$scratch" >/dev/null
ls "$scratch"/bench-quick-*.json "$scratch"/bench-quick-*.png >/dev/null
echo "README commands: all ran"
