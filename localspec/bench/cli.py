"""``localspec bench <name>``: every benchmark a subcommand, one argument style.

A benchmark is one module of this package with ``NAME``, ``HELP`` (one line for
``localspec bench --help``), ``add_arguments(parser)``, ``main(args) -> int`` and, where
options can be refused before any model loads, ``check(args)`` (raises
:class:`~localspec.errors.InvalidOptionError`).  Adding one = writing the module and naming
it in :data:`SUBCOMMANDS`.  Modules import only the standard library and localspec at the
top; openai, matplotlib and the like are imported where they are used, so that building the
parser stays cheap for every other ``localspec`` command.

Shared options: ``--out DIR`` (default ``benchmarks/results``, :mod:`localspec.bench.results`
names the files), ``--smoke`` (a short run that checks the benchmark works), ``--endpoint
URL`` (measure an OpenAI-compatible server that is already running, beside or instead of a
``localspec serve`` started for the run) and ``--llama-server PATH`` (start that binary as
the peer)."""

from __future__ import annotations

import argparse
import importlib
from types import ModuleType

from localspec.bench.results import DEFAULT_OUT

SUBCOMMANDS = (
    "speed",
    "structured",
    "protocols",
    "serve",
    "concurrency",
    "first_answer",
    "prefill",
    "fim",
    "agents",
    "threads",
    "replay",
    "ablation",
    "engine",
    "verify_cost",
    "rollback",
    "loop_cost",
    "vs_llama_cpp",
    "report",
)
DEFAULT = "speed"  # `localspec bench --quick` is `localspec bench speed --quick`


def modules() -> list[ModuleType]:
    return [importlib.import_module(f"localspec.bench.{name}") for name in SUBCOMMANDS]


def add_parser(sub) -> argparse.ArgumentParser:
    """Add ``bench`` and its subcommands to ``sub`` (the ``localspec`` parser's subparsers)."""
    found = {m.NAME: m for m in modules()}
    bench = sub.add_parser(
        "bench",
        help="benchmarks: `localspec bench NAME --help`; without NAME, speed",
        description="Run a benchmark; without NAME, `speed` with the options below.",
    )
    found[DEFAULT].add_arguments(bench)
    names = bench.add_subparsers(dest="benchmark", metavar="NAME", title="benchmarks")
    for name, module in found.items():
        parser = names.add_parser(
            name,
            help=module.HELP,
            description=module.__doc__,
            formatter_class=argparse.RawDescriptionHelpFormatter,
        )
        module.add_arguments(parser)
    bench.set_defaults(func=run, benchmark=None)
    return bench


def _chosen(args) -> ModuleType:
    name = args.benchmark or DEFAULT
    return importlib.import_module(f"localspec.bench.{name.replace('-', '_')}")


def check(args) -> None:
    """Refuse the chosen benchmark's bad options before it loads anything."""
    module = _chosen(args)
    if hasattr(module, "check"):
        module.check(args)


def run(args) -> int:
    return _chosen(args).main(args)


def add_out(parser, default: str = DEFAULT_OUT) -> None:
    parser.add_argument(
        "--out", default=default, help=f"folder for the results (default {default})"
    )


def add_smoke(parser, what: str) -> None:
    parser.add_argument("--smoke", action="store_true", help=f"a short check that it runs: {what}")


def add_peers(parser, *, llama_server: bool = True) -> None:
    """``--endpoint URL`` (a running OpenAI-compatible server) and ``--llama-server PATH``."""
    parser.add_argument(
        "--endpoint",
        metavar="URL",
        help="also measure this running OpenAI-compatible server (llama-server, vLLM), e.g. "
        "http://127.0.0.1:8081",
    )
    if llama_server:
        parser.add_argument(
            "--llama-server",
            metavar="PATH",
            help="start this llama-server binary as the peer, same GGUF files",
        )


def positive(flag: str, value: int | None, least: int = 1) -> None:
    """InvalidOptionError unless ``value`` (a count given as ``flag``) is at least ``least``."""
    from localspec.errors import InvalidOptionError

    if value is not None and value < least:
        raise InvalidOptionError(f"{flag} must be at least {least}, got {value}")


def comma_names(text: str) -> list[str]:
    """The names of a comma-separated option (``--servers default,plain``), blanks dropped."""
    return [name.strip() for name in text.split(",") if name.strip()]
