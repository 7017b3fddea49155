"""``localspec run`` and ``localspec chat``: the answer streamed with the accepted draft tokens and
the target's corrections coloured (a reasoning model's thinking dimmed), then the stats line; run's
``--json`` and ``--prediction``.
"""

from __future__ import annotations

import json
import os
import sys

from localspec.cli.loading import generation_options, load_models
from localspec.decoding.stats import GenerationResult, TokenSource
from localspec.errors import InvalidOptionError, LocalspecError

_COLOURS = {
    TokenSource.ACCEPTED: "\x1b[32m",
    TokenSource.CORRECTION: "\x1b[33m",
    TokenSource.FORCED: "\x1b[36m",
}
_RESET = "\x1b[0m"
_DIM = "\x1b[2m"  # a reasoning model's thinking


def _thinking_options(args) -> dict:
    """run / chat's reasoning options (``--think`` / ``--no-think``, ``--reasoning-budget``,
    ``--reasoning-budget-message``, ``--reasoning-format``), only those given."""
    given = {
        "enable_thinking": args.think,
        "reasoning_budget": args.reasoning_budget,
        "reasoning_budget_message": args.reasoning_budget_message,
        "reasoning_format": args.reasoning_format,
    }
    return {key: value for key, value in given.items() if value is not None}


def _stream(model, messages, args, colour: bool, extra: dict | None = None) -> GenerationResult:
    return _print_stream(_call(model, messages, args, True, extra or {}), colour)


def _call(model, messages: list[dict], args, stream: bool, extra: dict):
    """The chat call of ``messages``; for a model without a chat template (a base model), the
    messages' texts (the system text first) as raw text, continued (:func:`_raw_text` says so
    once)."""
    options = {**generation_options(args), **extra}
    if _raw_text(model):
        text = "\n\n".join(m["content"] for m in messages)
        return model.generate(text, stream=stream, **options)
    return model.chat(messages, stream=stream, **options, **_thinking_options(args))


_SAID_RAW_TEXT: set = set()  # the models whose raw-text note was printed


def _raw_text(model) -> bool:
    """Whether ``model`` has no chat template, said once on stderr."""
    if model.target.chat_template:
        return False
    if model.target.path not in _SAID_RAW_TEXT:
        _SAID_RAW_TEXT.add(model.target.path)
        print(
            f"localspec: {model.target.path.name} has no chat template: the prompt is sent as "
            "raw text, which a base model continues",
            file=sys.stderr,
        )
    return True


def _print_stream(generation, colour: bool) -> GenerationResult:
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


def cmd_run(args) -> int:
    prediction = _prediction(args.prediction)
    with load_models(args) as model:
        if args.json:
            result = _call(model, _messages(args, args.prompt), args, False, prediction)
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


def cmd_chat(args) -> int:
    colour = sys.stdout.isatty() and not args.no_color
    with load_models(args) as model:
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
