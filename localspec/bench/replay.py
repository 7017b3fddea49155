"""``localspec bench replay``: the adaptive policy replayed offline on recorded greedy traces,
under several machines' costs.

    localspec bench replay record   # ~10 min on 2 cores: answers + every drafter's view
    localspec bench replay profile  # ~1 min: add this machine's measured costs
    localspec bench replay          # replay (seconds): policy vs best fixed in hindsight

``record`` (traces saved as they come) runs the default pair greedily (plain decoding, 128 new
tokens) on: first turns (HumanEval, MT-Bench), MT-Bench second turns (after the model's own first
answer), three-turn HumanEval revisions, and edits of HumanEval solutions (with the original code as
a prediction), in that order, so the suffix store holds the earlier answers as it would in one
session.  It writes benchmarks/results/traces.json with this machine's measured costs (the policy's
calibration), which it also keeps in benchmarks/results/profiles.json under the CPU's name;
``profile`` adds the running machine's costs there without recording anything, so the traces replay
under the costs of every machine measured so far.

First turns whose question was already answered earlier in the run (the conversations
start with questions the first-turn set asked) are reported as "first-turn-again".
The answers are replayed in the order recorded, the policies carried from one to the next
as a loaded model carries them across requests (what the policy learnt of each drafter's
confidences is kept; each acceptance estimate is pulled back to its prior per answer).
The replay prints, per profile and workload, the adaptive policy's decode speed-up (total
plain time over total time of the workload's answers), the best fixed (drafter, k) in
hindsight for that workload, the ratio of the two, and the profile's copy ceiling.
traces.json and profiles.json live in ``--out`` (default benchmarks/results); the replay
writes ``replay-<machine>-<date>-<commit>.{json,md}`` there.
"""

import json
from datetime import date
from pathlib import Path

from localspec.bench import policy_replay
from localspec.bench.cli import add_out
from localspec.bench.results import Results
from localspec.bench.workloads import (
    code_prompts,
    edit_prompts,
    humaneval_tasks,
    mtbench_prompts,
    mtbench_second_turns,
    revision_conversations,
)
from localspec.decoding.drafters import SuffixDrafter
from localspec.decoding.policy import BATCH_SIZES
from localspec.llama.report import machine_line, machine_record

NAME = "replay"
HELP = (
    "the adaptive policy replayed on recorded greedy traces under several machines' costs (seconds)"
)
N_TOKENS = 128
ACCEPTANCE_K = 8  # the fixed draft length `localspec bench` compares the free drafters at
# MT-Bench first turns recorded: prose, and the categories where drafting tends to lose
# (math, extraction: few repeats, short answers).
FIRST_TURN_CATEGORIES = ("writing", "roleplay", "math", "coding", "extraction")


def greedy_answer(model, messages):
    model.reset_cache()
    r = model.chat(messages, max_tokens=N_TOKENS, strategy="none")
    return r


def measured_profile(model, name: str) -> policy_replay.Profile:
    """This machine's costs, as the adaptive policy's calibration measured them."""
    policy = model._policy(model.default_draft, greedy=True, predicted=False)
    return policy_replay.Profile(
        name,
        {b: policy.costs.verify_s(b) for b in BATCH_SIZES},
        policy.costs.draft_cost(model.drafter).value,
        policy.costs.prefill.get(model.drafter.name, 0.0),
        f"measured by the policy's calibration on {machine_line(machine_record())}, {date.today()}",
    )


def save_profile(profile: policy_replay.Profile, folder: Path) -> None:
    """Keep ``profile`` in benchmarks/results/profiles.json (replacing one of the same name)."""
    path = folder / "profiles.json"
    saved = json.loads(path.read_text()) if path.is_file() else {}
    saved[profile.name] = vars(profile)
    path.write_text(json.dumps(saved, indent=1) + "\n")
    print(
        f"{profile.name}: c(1) {1000 * profile.verify(1):.0f} ms, c(17) "
        f"{1000 * profile.verify(17):.0f} ms, "
        f"copy ceiling x{profile.ceiling()[0]:.2f}; saved in {path}"
    )


def record_profile(folder: Path) -> None:
    from localspec.api import SpeculativeModel, resolve_pair

    pair = resolve_pair()
    with SpeculativeModel(pair.target, pair.draft, n_ctx=4096) as model:
        save_profile(measured_profile(model, machine_record()["cpu"]), folder)


def record_all(folder: Path) -> None:
    from localspec.api import SpeculativeModel, resolve_pair

    pair = resolve_pair()
    traces = []
    # The model's own suffix store takes in each answer as it is generated; the traces
    # are recorded with a store of the earlier answers only, as a live request sees it.
    recorder = SuffixDrafter()
    with SpeculativeModel(pair.target, pair.draft, n_ctx=4096) as model:
        here = measured_profile(model, machine_record()["cpu"])
        extra = {"machine": machine_record(), "profile": vars(here)}

        def one(messages, workload, name, prediction=None):
            r = greedy_answer(model, messages)
            prompt = model.target.chat_tokens(messages)
            answer = list(r.tokens) + ([] if r.finish_reason != "stop" else [])
            pred = model.target.tokenize(prediction, add_special=False) if prediction else None
            traces.append(
                policy_replay.record(model, prompt, answer, workload, name, pred, suffix=recorder)
            )
            policy_replay.save(
                traces, folder / "traces.json", extra
            )  # as it goes: a stopped run keeps what it has
            print(f"{workload} {name}: {len(answer)} tokens", flush=True)
            return r.text

        for p in code_prompts(2) + mtbench_prompts(1, FIRST_TURN_CATEGORIES):
            one([{"role": "user", "content": p.text}], "first-turn", p.name)
        for conv in mtbench_second_turns(1)[:4] + revision_conversations(2):
            messages = []
            for i, turn in enumerate(conv.turns):
                messages.append({"role": "user", "content": turn})
                workload = conv.workload if i >= conv.measured else "first-turn"
                text = one(list(messages), workload, f"{conv.name} turn {i + 1}")
                messages.append({"role": "assistant", "content": text})
        for p, task in zip(edit_prompts(3), humaneval_tasks(3)):
            one([{"role": "user", "content": p.text}], "edit", p.name)
            one(
                [{"role": "user", "content": p.text}],
                "edit+prediction",
                p.name,
                task["prompt"] + task["canonical_solution"],
            )
    save_profile(here, folder)  # only once the recording is whole


def load_traces(folder: Path) -> tuple[list, dict]:
    """The recorded traces of ``folder``/traces.json and their extra record; a question asked
    again (its answer already in the suffix store) is its own workload, "first-turn-again"."""
    traces, extra = policy_replay.load(folder / "traces.json")
    seen = set()
    for t in traces:
        key = (t.n_prompt, tuple(t.answer))
        if t.workload == "first-turn" and key in seen:
            t.workload = "first-turn-again"
        seen.add(key)
    return traces, extra


def load_profiles(folder: Path) -> dict:
    """The design notes' machines and the assumed GPU, then every machine measured with
    ``record`` or ``profile`` (``folder``/profiles.json)."""
    profiles = dict(policy_replay.PROFILES)
    measured = folder / "profiles.json"
    if measured.is_file():
        profiles.update(
            {
                name: policy_replay.Profile(**p)
                for name, p in json.loads(measured.read_text()).items()
            }
        )
    return profiles


def replay_all(folder: Path) -> None:
    traces, extra = load_traces(folder)
    profiles = load_profiles(folder)
    workloads = sorted({t.workload for t in traces})
    rows = [
        row
        for name, profile in profiles.items()
        for row in replay_rows(traces, name, profile, workloads)
    ]
    acceptance = acceptance_rows(traces, workloads)
    text = markdown(rows, acceptance, profiles, extra)
    print(text)
    result = {
        "rows": rows,
        "acceptance": acceptance,
        "profiles": {n: vars(p) for n, p in profiles.items()},
    }
    results = Results(folder, NAME, machine_record())
    results.write(result, text)
    results.done()
    worst = min(r["adaptive_over_best"] for r in rows)
    print(f"\nworst adaptive / best fixed: {worst:.3f}")


def replay_rows(traces, pname: str, profile: policy_replay.Profile, workloads) -> list[dict]:
    """One row per workload: the traces replayed in recorded order under ``profile``, one
    loaded model's policies carried across its requests, against the best fixed strategy."""
    ceiling, _ = profile.ceiling()
    session = {}
    replayed = [(t, policy_replay.replay(t, profile, session=session)) for t in traces]
    rows = []
    for w in workloads:
        ts = [t for t in traces if t.workload == w]
        runs = [r for t, r in replayed if t.workload == w]
        speedup = sum(r["plain_s"] for r in runs) / sum(r["time_s"] for r in runs)
        fixed = policy_replay.best_fixed(ts, profile)
        rounds = {}
        for r in runs:
            for k, v in r["rounds"].items():
                rounds[k] = rounds.get(k, 0) + v
        rows.append(
            {
                "profile": pname,
                "workload": w,
                "answers": len(ts),
                "adaptive": speedup,
                "best_fixed": f"{fixed[0]} k={fixed[1]}" if fixed[1] else "plain",
                "best_fixed_speedup": fixed[2],
                "adaptive_over_best": speedup / fixed[2],
                "ceiling": ceiling,
                "share_of_ceiling": (speedup - 1) / (ceiling - 1) if ceiling > 1 else None,
                "rounds": rounds,
            }
        )
    return rows


def markdown(rows: list[dict], acceptance: list[dict], profiles: dict, extra: dict) -> str:
    lines = [
        f"Traces recorded on {machine_line(extra['machine'])}.",
        "",
        "| profile | workload | answers | adaptive | best fixed in hindsight | adaptive / best | "
        "ceiling | share of ceiling |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['profile']} | {r['workload']} | {r['answers']} | ×{r['adaptive']:.2f} | "
            f"{r['best_fixed']} "
            f"×{r['best_fixed_speedup']:.2f} | {r['adaptive_over_best']:.2f} | "
            f"×{r['ceiling']:.2f} | "
            f"{100 * r['share_of_ceiling']:.0f} % |"
        )
    lines += ["", "Profiles:"] + [f"- {n}: {p.source}" for n, p in profiles.items()]
    lines += [
        "",
        f"Greedy acceptance at a fixed k = {ACCEPTANCE_K} (the suffix drafter's drafts cut to "
        "the match they rest on, "
        "as `localspec bench` runs it): accepted / drafted tokens, and tokens per target step.",
        "",
        "| workload | prompt lookup | suffix | suffix ≥ lookup |",
        "|---|---|---|---|",
    ]
    for a in acceptance:
        lines.append(
            f"| {a['workload']} | {a['prompt-lookup']:.0%}, {a['prompt-lookup_per_step']:.2f} | "
            f"{a['suffix']:.0%}, {a['suffix_per_step']:.2f} | "
            f"{'yes' if a['suffix'] >= a['prompt-lookup'] else 'no'} |"
        )
    return "\n".join(lines)


def acceptance_rows(traces, workloads) -> list[dict]:
    """Per workload, prompt lookup's and the suffix drafter's greedy acceptance at k =
    ``ACCEPTANCE_K`` over all its answers, and tokens emitted per target step."""
    rows = []
    for w in workloads:
        row = {"workload": w}
        for name, factor in (("prompt-lookup", None), ("suffix", SuffixDrafter().max_spec_factor)):
            counts = [
                policy_replay.fixed_acceptance(t, name, ACCEPTANCE_K, factor)
                for t in traces
                if t.workload == w
            ]
            drafted, accepted, rounds = (sum(c[i] for c in counts) for i in range(3))
            row[name] = accepted / drafted if drafted else 0.0
            row[f"{name}_per_step"] = (accepted + rounds) / rounds if rounds else 1.0
        rows.append(row)
    return rows


ACTIONS = {"replay": replay_all, "record": record_all, "profile": record_profile}


def add_arguments(parser) -> None:
    parser.add_argument(
        "action",
        nargs="?",
        default="replay",
        choices=tuple(ACTIONS),
        help="replay (default, seconds), record the traces (~10 min), or profile this machine's "
        "costs (~1 min)",
    )
    add_out(parser)


def main(args) -> int:
    ACTIONS[args.action](Path(args.out))
    return 0
