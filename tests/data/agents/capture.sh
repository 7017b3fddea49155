#!/bin/bash
# Re-capture the agent request fixtures in this folder (see README.md).
#   AGENTS=/work/agents tests/data/agents/capture.sh [session ...]
# Each session: a fresh empty git repo and HOME under /tmp, tests/agent_capture.py on a loopback port,
# the agent's headless mode asked to "create hello.py that prints hello"; requests land here as
# <session>-NN-<endpoint>.json with the repo path written /tmp/REPO and HOME /tmp/HOME.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
STUB=$HERE/../../agent_capture.py
AGENTS=${AGENTS:-/work/agents}
BIN=$AGENTS/node_modules/.bin
TASK="create hello.py that prints hello"
CC=$($BIN/claude --version | cut -d' ' -f1)
CX=$($BIN/codex --version | cut -d' ' -f2)
OC=$($BIN/opencode --version)
AD=$($AGENTS/aider-venv/bin/aider --version | cut -d' ' -f2)

session() {  # session NAME PORT CMD... (CMD sees $REPO, $HOME, $PORT)
  local name=$1; export PORT=$2; shift 2
  export REPO=$(mktemp -d /tmp/repo.XXXXXX) AHOME=$(mktemp -d /tmp/home.XXXXXX)
  (cd "$REPO" && git init -q)
  rm -f "$HERE/$name"-[0-9][0-9]-*.json
  python3 "$STUB" --port "$PORT" --out "$HERE" --prefix "$name" --workdir "$REPO" \
    --replace "$REPO=/tmp/REPO" --replace "$AHOME=/tmp/HOME" > "/tmp/$name.stub.log" 2>&1 &
  local stub=$!
  sleep 1
  (cd "$REPO" && HOME=$AHOME timeout 300 "$@" > "/tmp/$name.agent.log" 2>&1 < /dev/null)
  local rc=$?
  kill $stub; wait $stub 2>/dev/null
  local hello=none; [ -f "$REPO/hello.py" ] && hello=$(tr -d '\n' < "$REPO/hello.py")
  echo "$name: rc=$rc hello.py=$hello requests=$(ls "$HERE/$name"-[0-9][0-9]-*.json | wc -l) (logs /tmp/$name.*.log)"
  rm -rf "$REPO" "$AHOME"
}

claude_quiet() { env DISABLE_TELEMETRY=1 DISABLE_AUTOUPDATER=1 DISABLE_ERROR_REPORTING=1 \
  CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1 ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT ANTHROPIC_API_KEY=dummy "$@"; }

codex_exec() {  # a provider at the stub in $HOME/.codex/config.toml, then codex exec ARGS
  mkdir -p "$HOME/.codex"
  printf 'model = "local"\nmodel_provider = "stub"\n\n[model_providers.stub]\nname = "stub"\nbase_url = "http://127.0.0.1:%s/v1"\nwire_api = "responses"\nenv_key = "STUB_API_KEY"\n' \
    "$PORT" > "$HOME/.codex/config.toml"
  STUB_API_KEY=dummy "$BIN/codex" exec "$@"
}

opencode_run() {  # an OpenAI-compatible provider at the stub in $HOME/.config/opencode/opencode.json
  mkdir -p "$HOME/.config/opencode"
  cat > "$HOME/.config/opencode/opencode.json" <<JSON
{
  "\$schema": "https://opencode.ai/config.json",
  "provider": {
    "localspec": {
      "npm": "@ai-sdk/openai-compatible",
      "name": "localspec",
      "options": {"baseURL": "http://127.0.0.1:$PORT/v1", "apiKey": "dummy"},
      "models": {"local": {"name": "local"}}
    }
  },
  "model": "localspec/local"
}
JSON
  OPENCODE_DISABLE_AUTOUPDATE=1 OPENCODE_DISABLE_MODELS_FETCH=1 OPENCODE_DISABLE_SHARE=1 \
    OPENCODE_DISABLE_LSP_DOWNLOAD=1 "$BIN/opencode" run "$@"
}

aider_run() { OPENAI_API_BASE=http://127.0.0.1:$PORT/v1 OPENAI_API_KEY=none "$AGENTS/aider-venv/bin/aider" "$@"; }

export -f claude_quiet codex_exec opencode_run aider_run
export BIN AGENTS
run() {
  case $1 in
    claude) session "claude-code-$CC" 8781 bash -c 'claude_quiet "$BIN/claude" -p "$0" --permission-mode acceptEdits' "$TASK" ;;
    claude-default) session "claude-code-$CC-default" 8782 bash -c \
      'ANTHROPIC_BASE_URL=http://127.0.0.1:$PORT ANTHROPIC_API_KEY=dummy "$BIN/claude" -p "$0"' "$TASK" ;;
    claude-model-local) session "claude-code-$CC-model-local" 8783 bash -c \
      'ANTHROPIC_MODEL=local claude_quiet "$BIN/claude" -p "$0" --permission-mode acceptEdits' "$TASK" ;;
    codex-default) session "codex-$CX-default" 8784 bash -c 'codex_exec "$0"' "$TASK" ;;
    codex) session "codex-$CX-workspace-write" 8785 bash -c 'codex_exec -s workspace-write "$0"' "$TASK" ;;
    codex-gpt-5.5) session "codex-$CX-gpt-5.5" 8786 bash -c 'codex_exec -m gpt-5.5 -s workspace-write "$0"' "$TASK" ;;
    opencode) session "opencode-$OC" 8787 bash -c 'opencode_run "$0"' "$TASK" ;;
    aider) session "aider-$AD" 8788 bash -c \
      'aider_run --model openai/local --message "$0" --yes-always --no-check-update --analytics-disable' "$TASK" ;;
    *) echo "unknown session $1"; return 1 ;;
  esac
}
for s in "${@:-claude claude-default claude-model-local codex-default codex codex-gpt-5.5 opencode aider}"; do
  for one in $s; do run "$one"; done
done
