"""``localspec bench concurrency --fresh``, ``first-answer`` and ``prefill``: their options,
the arithmetic of their ratios and equality counts, and the shapes of the files they write
(no model loads except the synthetic ones)."""

from __future__ import annotations

import dataclasses
import json
import statistics
from pathlib import Path

import pytest
from support.bench import MACHINE_RECORD, bench_args

from localspec.bench import first_answer, fresh_clients, prefill
from localspec.bench.results import Results
from localspec.errors import InvalidOptionError


def test_the_new_benchmarks_parse_their_options():
    from localspec.bench.cli import _chosen, check

    args = bench_args(
        "concurrency",
        "--fresh",
        "--seed",
        "7",
        "--llama-server",
        "/x/llama-server",
        "--out",
        "/tmp/o",
    )
    assert (
        args.fresh
        and args.seed == 7
        and args.llama_server == "/x/llama-server"
        and args.max_tokens is None
    )
    check(args)
    args = bench_args("first-answer")
    assert _chosen(args) is first_answer and (
        args.pairs,
        args.max_tokens,
        args.store,
        args.smoke,
    ) == (
        10,
        128,
        None,
        False,
    )
    args = bench_args("prefill", "--smoke")
    assert (
        _chosen(args) is prefill
        and args.reps == 5
        and prefill.sizes_of(args.tokens) == (2048, 8192, 16384)
    )


@pytest.mark.parametrize(
    ("argv", "says"),
    [
        (["concurrency", "--seed", "3"], "--seed"),
        (["concurrency", "--fresh", "--one-client", "2"], "--one-client"),
        (["concurrency", "--fresh", "--endpoint", "http://h:1"], "--endpoint"),
        (["first-answer", "--pairs", "0"], "--pairs"),
        (["first-answer", "--prompts", "readme,poem"], "poem"),
        (["first-answer", "--stores", ","], "--stores"),
        (["prefill", "--reps", "0"], "--reps"),
        (["prefill", "--tokens", "2k"], "--tokens"),
        (["prefill", "--tokens", "8"], "--tokens"),
    ],
)
def test_the_new_benchmarks_refuse_bad_options(argv, says):
    from localspec.bench.cli import check

    with pytest.raises(InvalidOptionError, match=says):
        check(bench_args(*argv))


def test_greedy_equality_counts_answers_and_names_the_first_differing_character():
    assert fresh_clients.first_difference("abc", "abc") is None
    assert fresh_clients.first_difference("abcd", "abXd") == 2
    assert fresh_clients.first_difference("ab", "abc") == 2
    got = fresh_clients.equality(
        ["same", "hello world", "x"], ["same", "hello there", "x"], ["p0", "p1", "p2"]
    )
    assert (got["equal"], got["compared"]) == (2, 3)
    assert got["differ"] == [
        {
            "prompt": "p1",
            "position": 6,
            "default": "world",
            "plain": "there",
            "default_answer": "hello world",
            "plain_answer": "hello there",
        }
    ]


def test_a_divergence_where_the_target_was_sure_is_not_called_a_near_tie(real_model):
    """Default's answer made to part from plain's at the token where the target was surest: the
    classification finds a large fresh top-2 gap there, above the tolerance."""
    from localspec.bench.noise import fresh_gap
    from localspec.bench.workloads import code_prompts

    prompt = code_prompts(1)[0]
    plain = real_model.chat(prompt.messages, max_tokens=24, temperature=0, draft_max=0)
    chat = real_model.target.chat_tokens(prompt.messages)
    tokens = real_model.target.tokenize(plain.text, add_special=False)
    first = range(1, min(len(tokens), 5))  # each a fresh prefill: the first four positions
    sure = max(first, key=lambda i: fresh_gap(real_model, chat, tokens, i))
    text = b"".join(real_model.target.token_bytes(t) for t in tokens[:sure]).decode()
    summary = [
        {"clients": 2, "equality": fresh_clients.equality([text + " @@@"], [plain.text], ["p"])}
    ]
    fresh_clients.classify(summary, {2: [dataclasses.replace(prompt, name="p")]}, real_model)
    (d,) = summary[0]["equality"]["differ"]
    assert d["near_tie"] is False and d["gap"] > d["tolerance"] > 0
    assert "NOT a near-tie" in fresh_clients._verdict(d)


def _level(clients, tps, answers, each=None):
    return {"clients": clients, "aggregate_tps": tps, "answers": answers, "request_tps": each}


def test_fresh_concurrency_compares_default_with_plain_and_llama_server_per_level(tmp_path):
    from localspec.bench.workloads import Prompt

    work = {
        1: [Prompt("code", "HumanEval/3", "q")],
        2: [Prompt("mtbench-writing", "mtbench/81", "q")] * 2,
    }
    results = {
        fresh_clients.PLAIN: [_level(1, 20.0, ["a"]), _level(2, 30.0, ["b", "c"], [10.0, 20.0])],
        fresh_clients.DEFAULT: [_level(1, 25.0, ["a"]), _level(2, 27.0, ["b", "cX"], [9.0, 20.0])],
        fresh_clients.LLAMA: [_level(1, 25.0, ["a"]), _level(2, 36.0, ["b", "c"])],
    }
    account = {"won": 0.5, "lost": 0.25, "catch_up": 0.0, "draft_prompt": 0.0, "policy": 0.01}
    account |= {"batch_wait": 0.04, "net": 0.2}
    results[fresh_clients.DEFAULT][1]["against_plain_s"] = account
    results[fresh_clients.PLAIN][1]["against_plain_s"] = {"batch_wait": 0.03, "net": -0.03}
    rows = fresh_clients.compare(results, work)
    assert [r["clients"] for r in rows] == [1, 2]
    assert rows[1]["attribution"] == account and rows[0]["attribution"] == {}
    assert (
        rows[0]["default_over_plain"] == 1.25 and rows[0]["default_over_llama_server_plain"] == 1.0
    )
    assert (
        rows[1]["default_over_plain"] == pytest.approx(0.9)
        and rows[1]["default_over_llama_server_plain"] == 0.75
    )
    assert rows[1]["equality"]["equal"] == 1 and rows[1]["equality"]["differ"][0]["position"] == 1
    assert (
        rows[1]["per_request"]["mean"] == pytest.approx(0.95) and rows[1]["per_request"]["n"] == 2
    )
    assert rows[0]["per_request"] == {}  # a level without per-request speeds
    out = Results(tmp_path, fresh_clients.KIND, MACHINE_RECORD, smoke=True, benchmark="concurrency")
    result = {
        "seed": 5,
        "max_tokens": 64,
        "waves": 3,
        "levels": [1, 2],
        "sets": {"fresh": {"summary": rows}},
    }
    body = json.loads(
        out.write(result, fresh_clients.markdown({**out.header(), **result})).read_text()
    )
    assert (
        body["benchmark"] == "concurrency"
        and body["sets"]["fresh"]["summary"][1]["equality"]["compared"] == 2
    )
    md = (tmp_path / "concurrency-fresh-smoke.md").read_text()
    assert (
        "| 2 | 30.0 | 27.0 | 36.0 | 0.90 | 0.95 [0.31, 1.59] | 0.75 | 1 of 2 |" in md
        and "mtbench/81: from character 1" in md
        and "| 2 | +0.50 | +0.25 | +0.00 | +0.00 | +0.01 | +0.04 | +0.20 | 0.03 | +0.23 |" in md
    )


def test_fresh_prompts_are_real_alternate_prose_and_code_and_change_with_the_seed():
    from localspec.bench.workloads import fresh_prompts, real_text

    a, b = fresh_prompts(8, seed=1), fresh_prompts(8, seed=2)
    assert [p.workload == "code" for p in a] == [False, True] * 4
    assert [p.name for p in a] == [p.name for p in fresh_prompts(8, seed=1)] and a != b
    assert len({p.name for p in a}) == 8
    with pytest.raises(InvalidOptionError):
        fresh_prompts(1000, seed=1)
    text = real_text()
    assert "def has_close_elements" in text and "Hawaii" in text and len(text) > 100_000


def test_first_answer_ratios_mean_median_worst_and_interleaved_order(tmp_path):
    def pair(d, p, same=True, lost=0.0):
        account = {k: 0.0 for k in first_answer.ACCOUNT} | {"lost_s": lost, "net_s": -lost}
        return {
            "default": {
                "decode_tps": d,
                "text": "t",
                "decode_s": 16 / d,
                "against_plain": account,
            },
            "plain": {
                "decode_tps": p,
                "text": "t" if same else "u",
                "decode_s": 16 / p if p else 0,
            },
        }

    got = first_answer.ratios([pair(20, 20), pair(18, 20, lost=0.04), pair(30, 25, same=False)])
    assert got["ratios"] == [1.0, 0.9, 1.2] and got["median"] == 1.0 and got["worst"] == 0.9
    assert (
        got["mean"] == pytest.approx(31 / 30)
        and got["same_text"] == 2
        and got["plain_tps_range"] == [20, 25]
    )
    half = 4.303 * statistics.stdev([1.0, 0.9, 1.2]) / 3**0.5  # Student's t, 2 dof
    assert got["interval"] == pytest.approx([31 / 30 - half, 31 / 30 + half])
    account = got["attribution"]
    assert account["lost_s"] == pytest.approx(0.04 / 3)
    slower = ((16 / 20 - 16 / 20) + (16 / 18 - 16 / 20) + (16 / 30 - 16 / 25)) / 3
    assert account["slower_s"] == pytest.approx(slower)
    assert account["unexplained_s"] == pytest.approx(slower - 0.04 / 3)
    assert first_answer.order(0, 0) == ("default", "plain") and first_answer.order(0, 1) == (
        "plain",
        "default",
    )
    assert first_answer.ratios([pair(5, 0)])["mean"] is None
    runs = {"readme": {"warm": [pair(20, 20)], "cold": [pair(19, 20)]}}
    out = Results(tmp_path, first_answer.KIND, MACHINE_RECORD, smoke=True)
    result = {
        "pairs": 1,
        "max_tokens": 16,
        "warm_store": "/s",
        "runs": runs,
        "summary": first_answer.summary(runs),
    }
    body = json.loads(
        out.write(result, first_answer.markdown({**out.header(), **result})).read_text()
    )
    assert [(r["prompt"], r["store"]) for r in body["summary"]] == [
        ("readme", "warm"),
        ("readme", "cold"),
    ]
    table = (tmp_path / "first-answer-smoke.md").read_text()
    assert "| readme | cold | 0.95 | 0.95 | 0.95 | 1 | 1 | 20.0–20.0 |" in table
    assert "| readme | cold | +0.00 | +0.00 | +0.00 | +0.00 | +0.00 | +0.00 | +0.04 | +0.04 |" in (
        table
    )


def test_the_first_prompts_are_the_readme_s_and_four_kinds_one_with_a_schema():
    prompts = first_answer.first_prompts()
    assert list(prompts) == ["readme", "code", "prose", "edit", "json"]
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    assert f'localspec run "{first_answer.README_PROMPT}"' in readme
    assert prompts["json"]["response_format"]["type"] == "json_schema"
    assert all(p["response_format"] is None for k, p in prompts.items() if k != "json")


def test_prefill_medians_and_ratios_to_llama_cpp_python(tmp_path):
    def runs(*tps):
        return [{"prompt_tps": x} for x in tps]

    got = {
        2048: {
            "library": runs(60, 70, 66),
            "server": runs(50, 55, 52),
            "llama-cpp-python": runs(60, 64, 62),
        }
    }
    (row,) = prefill.summary(got)
    assert row["median_prompt_tps"] == {"library": 66, "server": 52, "llama-cpp-python": 62}
    assert row["library_over_llama_cpp_python"] == pytest.approx(66 / 62)
    assert row["server_over_llama_cpp_python_per_rep"] == pytest.approx([50 / 60, 55 / 64, 52 / 62])
    assert [prefill.rotated(r)[0] for r in range(3)] == list(prefill.READERS)
    out = Results(tmp_path, prefill.KIND, MACHINE_RECORD, smoke=True)
    result = {"reps": 3, "runs": got, "summary": [row]}
    out.write(result, prefill.markdown({**out.header(), **result}))
    assert (
        "| 2,048 | 66.0 | 52.0 | 62.0 | 1.06 | 0.84 |"
        in (tmp_path / "prefill-smoke.md").read_text()
    )
    assert json.loads((tmp_path / "prefill-smoke.json").read_text())["summary"][0]["tokens"] == 2048


def test_prefill_cuts_real_text_to_the_token_count_and_every_reader_reads_it(tmp_path, target_gguf):
    texts = prefill.cut_texts(target_gguf, (64, 200), tmp_path)
    assert texts[64].read_text() and len(texts[200].read_text()) > len(texts[64].read_text())
    peer = prefill.peer_child(str(texts[200]), 200 + prefill.MARGIN, target=str(target_gguf))
    ours = prefill.library_child(
        str(texts[200]), 200 + prefill.MARGIN, target=str(target_gguf), draft=None
    )
    assert abs(peer["prompt_n"] - 200) <= 2 and abs(ours["prompt_n"] - 200) <= 2
    assert peer["prompt_s"] > 0 and ours["prompt_s"] > 0


def test_first_answer_child_answers_once_with_the_figures(target_gguf):
    spec = {
        "messages": [{"role": "user", "content": "hello"}],
        "response_format": None,
        "max_tokens": 8,
    }
    got = first_answer.child({**spec, "mode": "plain", "target": str(target_gguf)})
    assert (
        got["tokens"] >= 1
        and got["load_s"] > 0
        and got["drafted"] == 0
        and isinstance(got["text"], str)
    )


def test_each_level_gets_prompts_of_its_own_in_both_sets():
    got = fresh_clients.split(list(range(45)), (1, 2, 4, 8), 3)
    assert got[1] == [0, 1, 2] and got[2] == [3, 4, 5, 6, 7, 8] and got[8] == list(range(21, 45))
    sets = fresh_clients.prompt_sets((1, 2), 1, seed=3)
    assert list(sets) == ["fresh", "committed"] and [len(sets["fresh"][n]) for n in (1, 2)] == [
        1,
        2,
    ]
    assert sets["committed"][1][
        0
    ].name == "mtbench/81" and "committed" not in fresh_clients.prompt_sets((1,), 1, 3, False)


def test_a_levels_account_is_the_mean_of_its_requests_and_empty_without_one():
    from localspec.bench.clients_at_once import account_per_request

    one = {"won_ms": 400.0, "lost_ms": 100.0, "net_ms": 300.0}
    two = {"won_ms": 200.0, "lost_ms": 300.0, "net_ms": -100.0}
    got = account_per_request([{"against_plain_ms": one}, {"against_plain_ms": two}])
    assert got["won"] == pytest.approx(0.3) and got["net"] == pytest.approx(0.1)
    assert got["catch_up"] == 0.0
    assert account_per_request([{"against_plain_ms": one}, {"against_plain_ms": None}]) == {}
