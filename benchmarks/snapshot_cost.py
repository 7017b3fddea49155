"""What keeping recurrent-state snapshots costs every decode of a hybrid target.

    .venv/bin/python benchmarks/snapshot_cost.py [PAIRS] [ROUNDS]

A GGUF of Qwen3.5-0.8B's dimensions (random weights, Q4_K_M;
:data:`localspec.llama.synthetic_hybrid.QWEN35_0_8B`) is written once, then loaded PAIRS times
each way (default 4), interleaved, the order swapped every other pair: with the 16 snapshots
per sequence localspec asks llama.cpp for (``n_rs_seq``; a rollback is then free) and without
(``rs_snapshots=0``, as ``--draft none`` loads a target).  Each load reads a 256-token prompt,
then ROUNDS times (default 12) a one-token step and a 5-token verify taken back; medians per
load.  With snapshots llama.cpp's Gated DeltaNet writes the state after each of the last
tokens of a decode (up to n_rs_seq + 1), so a verify of 5 writes 5 states of the sequence
where a plain load writes 1.  Prints each load, each pair's with ÷ without and their mean with
a Student's-t 95 % interval.
"""

import statistics
import sys
import tempfile
from pathlib import Path

from localspec.bench.ratios import interval_text, mean_interval
from localspec.llama.engine import Engine, EngineConfig
from localspec.llama.quantize import quantize_q4_k_m
from localspec.llama.synthetic_hybrid import QWEN35_0_8B, write_hybrid_model

WAYS = {"with": None, "without": 0}  # EngineConfig.rs_snapshots


def measure(path: Path, snapshots: int | None, rounds: int) -> dict:
    engine = Engine(path, EngineConfig(n_ctx=1024, rs_snapshots=snapshots))
    try:
        engine.decode([3 + i % 300 for i in range(256)], [255])
        steps, verifies = [], []
        for r in range(rounds):
            before = engine.decode_s
            engine.decode([5 + r % 50], [0])
            steps.append(engine.decode_s - before)
            before = engine.decode_s
            engine.decode([7 + (r + i) % 50 for i in range(5)], range(5))
            verifies.append(engine.decode_s - before)
            engine.trim(len(engine.cache_tokens) - 5)
        return {
            "n_rs_seq": engine.n_rs_seq,
            "step_ms": 1000 * statistics.median(steps),
            "verify_ms": 1000 * statistics.median(verifies),
        }
    finally:
        engine.close()


def main(pairs: int = 4, rounds: int = 12) -> None:
    with tempfile.TemporaryDirectory(prefix="localspec-snapshots-") as tmp:
        f16 = write_hybrid_model(Path(tmp) / "q35-f16.gguf", 1, "qwen35", QWEN35_0_8B)
        path = Path(tmp) / "q35-q4_k_m.gguf"
        if not quantize_q4_k_m(f16, path):
            sys.exit("llama.cpp could not quantize the model")
        f16.unlink()
        ratios = {"step_ms": [], "verify_ms": []}
        for i in range(pairs):
            order = ("with", "without") if i % 2 == 0 else ("without", "with")
            got = {way: measure(path, WAYS[way], rounds) for way in order}
            print(f"pair {i + 1}: {got}", flush=True)
            for key, values in ratios.items():
                values.append(got["with"][key] / got["without"][key])
    for key, values in ratios.items():
        shown = ", ".join(f"{v:.2f}" for v in values)
        print(f"{key} with ÷ without: {shown}; mean {interval_text(mean_interval(values))}")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:3]))
