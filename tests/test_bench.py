"""The benchmark's bookkeeping (pure functions) and its smoke run's shape."""

import pytest

from localspec.bench.runner import summarize
from localspec.bench.speed import markdown
from localspec.bench.workloads import EDIT_REQUESTS, edit_prompts, mtbench_prompts


def row(workload, prompt, strategy, tps, temp=0.0, rep=0, acc=None):
    return {
        "workload": workload,
        "prompt": prompt,
        "strategy": strategy,
        "temperature": temp,
        "rep": rep,
        "tokens_per_s": tps / 2,
        "decode_tokens_per_s": tps,
        "acceptance_rate": acc,
        "mean_accepted_length": None,
        "ttft_s": 0.1,
        "overhead_share": 0.01,
        "overhead_ms_per_round": 0.3,
    }


def test_speedups_are_paired_with_plain_of_the_same_prompt_and_workload():
    rows = [
        row("code", "HumanEval/0", "plain", 20.0),
        row("code", "HumanEval/0", "lookup", 30.0, acc=0.5),
        row("code", "HumanEval/1", "plain", 10.0),
        row("code", "HumanEval/1", "lookup", 12.0, acc=0.7),
        row("edit", "HumanEval/0", "plain", 40.0),
        row("edit", "HumanEval/0", "lookup", 20.0, acc=0.1),
    ]
    summary = {(s["workload"], s["strategy"]): s for s in summarize(rows)}
    assert summary[("code", "lookup")]["speedup"] == pytest.approx((1.5 + 1.2) / 2)
    assert summary[("code", "lookup")]["acceptance_rate"] == pytest.approx(0.6)
    assert summary[("edit", "lookup")]["speedup"] == pytest.approx(0.5)
    assert summary[("code", "plain")]["speedup"] == 1.0
    from localspec.llama.report import machine_record

    table = markdown(
        {"machine": machine_record(2), "config": {}, "peers": {}, "summary": list(summary.values())}
    )
    assert "| edit | 0.0 | lookup | 10.0 | 20.0 | 0.50 |" in table


def test_acceptance_is_pooled_over_runs_that_count_their_tokens():
    few, many = (
        row("code", "HumanEval/0", "lookup", 30.0, acc=1.0),
        row("code", "HumanEval/0", "lookup", 30.0, rep=1, acc=0.5),
    )
    few.update(drafted_tokens=5, accepted_tokens=5)
    many.update(drafted_tokens=60, accepted_tokens=30)
    rows = [
        row("code", "HumanEval/0", "plain", 20.0),
        row("code", "HumanEval/0", "plain", 20.0, rep=1),
        few,
        many,
    ]
    summary = {s["strategy"]: s for s in summarize(rows)}
    assert summary["lookup"]["acceptance_rate"] == pytest.approx(
        35 / 65
    )  # the median of the two rates is 0.75
    assert (
        summary["plain"]["acceptance_rate"] is None
    )  # plain rows carry no counts here: the median of None rates


def test_workloads_come_from_real_sources():
    edits = edit_prompts(2)
    assert edits[0].text.startswith(EDIT_REQUESTS[0]) and "def has_close_elements" in edits[0].text
    mt = mtbench_prompts(1)
    assert len(mt) == 8 and mt[0].workload == "mtbench-writing" and "Hawaii" in mt[0].text


def test_multi_turn_workloads_carry_their_own_history():
    from localspec.bench.workloads import (
        REVISION_REQUESTS,
        measured_turns,
        mtbench_second_turns,
        revision_conversations,
    )

    conversation = revision_conversations(1)[0]
    prompts = measured_turns(
        conversation, lambda messages: f"answer after {len(messages)} messages"
    )
    assert [p.name for p in prompts] == ["HumanEval/0 turn 2", "HumanEval/0 turn 3"]
    last = prompts[1].messages
    assert [m["role"] for m in last] == ["user", "assistant", "user", "assistant", "user"]
    assert (
        last[-1]["content"] == REVISION_REQUESTS[1]
        and last[3]["content"] == "answer after 3 messages"
    )
    second = mtbench_second_turns(1)
    assert len(second) == 8 and all(len(c.turns) == 2 and c.measured == 1 for c in second)


def test_strategies_are_chosen_by_their_result_names_with_plain_always_first():
    from localspec.bench.runner import chosen_strategies
    from localspec.errors import InvalidOptionError

    chosen = chosen_strategies("adaptive, suffix k=8,adaptive")
    assert [s.name for s in chosen] == ["plain", "adaptive", "suffix k=8"]
    assert chosen[2].options == {"strategy": "suffix", "draft_max": 8}
    with pytest.raises(
        InvalidOptionError, match="unknown strategy 'suffix k=9'; choose from: plain, "
    ):
        chosen_strategies("suffix k=9")


def test_the_quick_run_asks_every_workload_once_with_four_strategies():
    """--quick keeps each workload (first turns of four MT-Bench categories, a second turn,
    a revision, an edit, a code prompt, two BFCL calls under their schema) and the strategies the adaptive one is judged
    against; without a model the conversations' measured turns are not built."""
    from localspec.bench.runner import BenchConfig, prompts_for

    config = BenchConfig.quick()
    prompts = prompts_for(config)
    assert [p.workload for p in prompts] == [
        "code",
        "edit",
        "json-call",
        "json-call",
        "mtbench-writing",
        "mtbench-math",
        "mtbench-coding",
        "mtbench-extraction",
    ]
    assert [s.name for s in config.strategies] == [
        "plain",
        "prompt-lookup k=8",
        "suffix k=8",
        "adaptive",
    ]
    assert (config.second_turns, config.revisions, config.reps) == (2, 1, 1)


def test_unknown_mtbench_categories_are_refused_not_dropped():
    from localspec.errors import InvalidOptionError

    for bad in (("Writing",), "math", ("math", "poetry")):
        with pytest.raises(InvalidOptionError, match="MT-Bench categories"):
            mtbench_prompts(1, bad)
    assert [p.workload for p in mtbench_prompts(1, ("math",))] == ["mtbench-math"]


def test_bfcl_parallel_calls_pair_with_the_answer_in_any_order_and_only_one_to_one():
    """BFCL's own parallel_0: two calls to spotify.play; the tools carry OpenAI-legal names."""
    from localspec.bench.bfcl import bfcl_cases, calls_match, openai_tools

    case = bfcl_cases("parallel", 1)[0]
    assert [t["function"]["name"] for t in openai_tools(case)] == ["spotify_play"]
    swift = {"name": "spotify_play", "arguments": {"artist": "Taylor Swift", "duration": 20}}
    maroon = {"name": "spotify.play", "arguments": {"artist": "maroon 5 ", "duration": 15.0}}
    assert calls_match(case, [swift, maroon]) and calls_match(case, [maroon, swift])
    assert not calls_match(case, [swift, swift])
    assert not calls_match(case, [swift])
    assert not calls_match(
        case, [swift, {**maroon, "arguments": {**maroon["arguments"], "extra": 1}}]
    )
    assert not calls_match(case, [swift, {**maroon, "name": "spotify_pause"}])


def _bench_parser():
    from localspec.cli import commands

    return commands._parser()


def test_bench_help_lists_every_subcommand_with_one_line(capsys):
    from localspec.bench.cli import SUBCOMMANDS, modules

    with pytest.raises(SystemExit):
        _bench_parser().parse_args(["bench", "--help"])
    out = capsys.readouterr().out
    for module in modules():
        assert module.NAME.replace("-", "_") in SUBCOMMANDS and "\n" not in module.HELP
        assert f"    {module.NAME} " in out, module.NAME


def test_bench_without_a_name_is_speed_and_every_subcommand_s_defaults_pass_its_checks(monkeypatch):
    import importlib.util

    from localspec.bench.cli import _chosen, check, modules

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util,
        "find_spec",
        lambda n, *a, **k: real("json") if n == "matplotlib" else real(n),
    )
    args = _bench_parser().parse_args(["bench", "--smoke", "--out", "/tmp/x"])
    assert _chosen(args).NAME == "speed" and args.smoke and args.out == "/tmp/x"
    for module in modules():
        args = _bench_parser().parse_args(["bench", module.NAME])
        assert _chosen(args) is module
        check(args)


@pytest.mark.parametrize(
    "argv, says",
    [
        (["structured", "--simple", "-1"], "--simple"),
        (["protocols", "--rounds", "0"], "--rounds"),
        (["serve", "--peer-only"], "--peer-only needs --endpoint"),
        (["concurrency", "--max-tokens", "0"], "--max-tokens"),
    ],
)
def test_a_bad_benchmark_option_is_refused_before_anything_loads(argv, says):
    from localspec.bench.cli import check
    from localspec.errors import InvalidOptionError

    with pytest.raises(InvalidOptionError, match=says):
        check(_bench_parser().parse_args(["bench", *argv]))


def test_building_the_parser_imports_no_benchmark_only_package():
    import subprocess
    import sys

    code = (
        "import sys; from localspec.cli import commands; commands._parser(); "
        "print(sorted(m for m in ('openai', 'matplotlib', 'jsonschema', 'uvicorn') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_results_are_named_by_machine_date_and_commit_and_share_one_header(tmp_path):
    from localspec.bench.results import Results, machine_slug

    record = {"cpu": "AMD EPYC", "threads": 2}
    results = Results(tmp_path, "fim", record)
    assert machine_slug(record) == "amd-epyc"
    assert machine_slug({"cpu": "Intel(R) Xeon(R) Processor"}) == "intel-xeon-processor"
    assert results.stem == f"fim-amd-epyc-{results.date}-{results.commit}"
    path = results.write({"summary": {"x": 1}}, "| a |", lambda p: p.write_bytes(b"png"))
    import json

    body = json.loads(path.read_text())
    assert list(body)[:5] == ["benchmark", "command", "date", "commit", "machine"] and body[
        "summary"
    ] == {"x": 1}
    assert (tmp_path / f"{results.stem}.md").read_text() == "| a |\n" and (
        tmp_path / f"{results.stem}.png"
    ).exists()
    assert Results(tmp_path, "concurrency", record, smoke=True).stem == "concurrency-smoke"


def test_one_reader_gives_decode_tps_from_every_kind_of_answer():
    from types import SimpleNamespace

    from localspec.bench.client import client_decode_tps, decode_tps
    from localspec.bench.servers import base_url

    assert decode_tps({"timings": {"predicted_per_second": 31.5}}) == 31.5
    assert (
        decode_tps(SimpleNamespace(model_extra={"timings": {"predicted_per_second": 7.0}})) == 7.0
    )
    assert decode_tps(SimpleNamespace(model_extra=None)) is None and decode_tps({}) is None
    assert client_decode_tps(11, 1.0, 2.0) == 10.0 and client_decode_tps(1, 1.0, 2.0) == 0.0
    assert {
        base_url(u) for u in ("http://h:1", "http://h:1/", "http://h:1/v1", "http://h:1/v1/")
    } == {"http://h:1"}


def test_the_docs_tables_are_the_result_files_tables():
    """docs/benchmarks.md's marked tables, rendered again from benchmarks/results/, are unchanged;
    a figure edited by hand in the page is found."""
    from pathlib import Path

    from localspec.bench.report import render_page

    root = Path(__file__).resolve().parents[1]
    text = (root / "docs" / "benchmarks.md").read_text()
    new, changed = render_page(text, root / "benchmarks" / "results")
    assert changed == [] and new == text and text.count("<!-- table: ") >= 5
    edited = text.replace("| 4 | 37.3 (1.82 s)", "| 4 | 99.9 (1.82 s)")
    assert render_page(edited, root / "benchmarks" / "results")[1] == [
        ("concurrency", "concurrency-amd-epyc.json")
    ]
