"""One writer for every benchmark's results: ``<name>-<machine>-<date>-<commit>.{json,md,png}``.

Every result file carries the same header: ``benchmark`` (the subcommand), ``command`` (the
command line that wrote it), ``machine`` (:func:`localspec.llama.report.machine_record`),
``date`` (UTC, ISO) and ``commit`` (the checkout's short hash, ``+`` when it had changes).
A smoke run (CI's check that a benchmark runs) writes ``<name>-smoke.*`` instead: it is not
a measurement to keep.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

DEFAULT_OUT = "benchmarks/results"
_ROOT = Path(__file__).resolve().parents[2]


def machine_slug(record: dict) -> str:
    """The file-name form of a machine record's CPU: ``"AMD EPYC"`` -> ``"amd-epyc"``,
    ``"Intel(R) Xeon(R) Processor"`` -> ``"intel-xeon-processor"``."""
    name = re.sub(r"\((r|tm)\)", "", str(record.get("cpu") or "unknown-cpu").lower())
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown-cpu"


def commit() -> str:
    """The checkout's short commit hash, ``+`` appended when tracked files have changes;
    ``"nogit"`` outside a git checkout."""
    try:
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
    except (OSError, subprocess.CalledProcessError):
        return "nogit"
    return head + ("+" if dirty else "")


def _git(*args: str) -> str:
    done = subprocess.run(
        ["git", "-C", str(_ROOT), *args], capture_output=True, text=True, check=True
    )
    return done.stdout.strip()


def utc_date() -> str:
    return datetime.now(timezone.utc).strftime("%Y-%m-%d")


def command_line(argv: list[str] | None = None) -> str:
    """How this run was started, as a user would type it (``localspec bench ...``)."""
    argv = sys.argv if argv is None else argv
    head = Path(argv[0]).name if argv else "localspec"
    return " ".join(["localspec" if head in ("localspec", "__main__.py") else argv[0], *argv[1:]])


class Results:
    """Where one run's results go: ``out/<stem>.json`` (and ``.md``, ``.png``), the stem fixed
    when the run starts, so a run that rewrites its file after every case keeps one file.

    ``name`` is the result's kind (``"concurrency"``, ``"bench-quick"``); ``smoke`` names the
    files ``<name>-smoke.*``."""

    def __init__(
        self,
        out: str | Path,
        name: str,
        record: dict,
        *,
        smoke: bool = False,
        benchmark: str | None = None,
    ):
        self.out = Path(out)
        self.record = record
        self.benchmark = benchmark or name
        self.commit, self.date = commit(), utc_date()
        self.stem = (
            f"{name}-smoke" if smoke else f"{name}-{machine_slug(record)}-{self.date}-{self.commit}"
        )
        self.command = command_line()

    @property
    def json_path(self) -> Path:
        return self.out / f"{self.stem}.json"

    def header(self) -> dict:
        return {
            "benchmark": self.benchmark,
            "command": self.command,
            "date": self.date,
            "commit": self.commit,
            "machine": self.record,
        }

    def write(
        self, result: dict, markdown: str | None = None, plot: Callable[[Path], None] | None = None
    ) -> Path:
        """Write ``result`` (after the header's keys; its own ``machine`` wins) as JSON,
        ``markdown`` as
        ``.md`` and ``plot(path)``'s figure as ``.png``; returns the JSON's path."""
        self.out.mkdir(parents=True, exist_ok=True)
        body = {**self.header(), **result}
        self.json_path.write_text(json.dumps(body, indent=1) + "\n")
        if markdown is not None:
            (self.out / f"{self.stem}.md").write_text(
                markdown if markdown.endswith("\n") else markdown + "\n"
            )
        if plot is not None:
            plot(self.out / f"{self.stem}.png")
        return self.json_path

    def done(self) -> None:
        print(f"wrote {self.out / self.stem}.*", file=sys.stderr)


def read(path: str | Path) -> dict:
    return json.loads(Path(path).read_text())
