"""The flags that several subcommands share: which models and how to load them, how to generate."""

from __future__ import annotations

import argparse

from localspec.decoding.params import STRATEGIES


def context_size(text: str) -> int | str:
    """``-c``'s value: a number of tokens or "auto"."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"expected a number of tokens or 'auto', got {text!r}"
        ) from None


def add_model_flags(p: argparse.ArgumentParser, n_ctx: int | str = 4096) -> None:
    """The "models" group: which pair, context size (default ``n_ctx``), GPU layers,
    threads, llama.cpp's log."""
    g = p.add_argument_group("models")
    g.add_argument(
        "-m",
        "--model",
        help="target: a pair or model name from models.toml, REPO:FILE, REPO:QUANT "
        "or a GGUF path (default: the catalogue's default pair)",
    )
    g.add_argument(
        "-md",
        "--model-draft",
        default="auto",
        help="draft: as for --model; 'auto' (default) takes the pair's draft, else the smallest "
        "compatible model on disk",
    )
    g.add_argument(
        "--no-draft", action="store_true", help="plain decoding with the target only (--draft none)"
    )
    g.add_argument(
        "-c",
        "--n-ctx",
        type=context_size,
        default=n_ctx,
        help="context size in tokens, or 'auto': the model's trained context, capped by memory "
        f"(default {n_ctx})",
    )
    g.add_argument(
        "-ngl", "--gpu-layers", type=int, default=-1, help="target layers on the GPU (-1 = all)"
    )
    g.add_argument(
        "-ngld",
        "--gpu-layers-draft",
        type=int,
        default=-1,
        help="draft layers on the GPU (-1 = all)",
    )
    g.add_argument(
        "-t", "--threads", type=int, default=None, help="CPU threads, 1 to 512 (default: all)"
    )
    g.add_argument("--verbose", action="store_true", help="show llama.cpp's log")


def add_generation_flags(p: argparse.ArgumentParser, max_tokens: int | None = 512) -> None:
    """The "generation" group: length, sampling, stop strings, system message, drafting;
    ``max_tokens`` is the default of ``-n`` (None: the request or the context decides)."""
    g = p.add_argument_group("generation")
    g.add_argument(
        "-n",
        "--max-tokens",
        type=int,
        default=max_tokens,
        help=f"most tokens to generate (default {max_tokens})"
        if max_tokens
        else "most tokens a request generates when it does not say (default: until the context "
        "is full)",
    )
    g.add_argument("--temp", type=float, default=0.0, help="temperature; 0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=40)
    g.add_argument("--top-p", type=float, default=0.95)
    g.add_argument("--min-p", type=float, default=0.05)
    g.add_argument("-s", "--seed", type=int, default=None, help="random seed; -1 or none = random")
    g.add_argument("--stop", action="append", default=[], help="stop string (repeatable)")
    g.add_argument("--system", help="system message")
    g.add_argument(
        "--draft",
        choices=STRATEGIES,
        default="auto",
        help="drafter: auto (adaptive over the draft model, the target's MTP block, suffix, "
        "prompt lookup and a --prediction, default), draft-model, mtp, suffix, prompt-lookup, "
        "prediction, none",
    )
    g.add_argument(
        "--draft-max",
        type=_draft_max,
        default=None,
        help="most draft tokens per round, or 'auto' to choose each round (default: auto)",
    )
    g.add_argument(
        "--draft-min", type=int, default=None, help="drop drafts shorter than this (default 0)"
    )
    g.add_argument(
        "--draft-p-min",
        type=float,
        default=None,
        help="stop drafting below this probability (default 0.75)",
    )
    g.add_argument("--no-color", action="store_true", help="do not colour accepted draft tokens")


def add_thinking_flags(p: argparse.ArgumentParser, think: bool = True) -> None:
    """Reasoning models (docs/reasoning.md): thinking on or off (``think``: run / chat; serve
    turns it off with ``--reasoning-budget 0``, as llama-server), its budget, the template."""
    g = p.add_argument_group("thinking")
    if think:
        switch = g.add_mutually_exclusive_group()
        switch.add_argument(
            "--think",
            dest="think",
            action="store_true",
            default=None,
            help="let a reasoning model think (enable_thinking)",
        )
        switch.add_argument(
            "--no-think", dest="think", action="store_false", help="answer at once, no thinking"
        )
    g.add_argument(
        "--reasoning-budget",
        type=int,
        default=None,
        metavar="N",
        help="most thinking tokens before the close is forced (-1 = unlimited, 0 = none)",
    )
    g.add_argument(
        "--reasoning-budget-message",
        default=None,
        metavar="TEXT",
        help="text forced before the close when the budget ends the thinking, so the model "
        'goes on to answer (e.g. "Time is up, I answer now.")',
    )
    g.add_argument(
        "--reasoning-format",
        choices=("auto", "none"),
        default=None,
        help="auto: thinking apart from the answer (dimmed); none: all of it as answer",
    )
    g.add_argument(
        "--chat-template-file",
        metavar="FILE",
        default=None,
        help="a Jinja chat template used instead of the GGUF's",
    )


def _draft_max(text: str) -> int | str:
    if text == "auto":
        return text
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer or 'auto', got {text!r}") from None
