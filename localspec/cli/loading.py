"""What run, chat and serve take from their flags: the models, loaded with Ctrl-C held until
llama.cpp is done (:func:`load_models`), and the generation options (:func:`generation_options`).
"""

from __future__ import annotations

import contextlib
import signal
import sys

from localspec.api import load


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


DEFAULT_PARALLEL = 4


def _default_parallel(model, draft) -> int:
    """serve's slots when -np is not given: 4, or 1 where the draft is Gemma 4's assistant
    (it drafts for one sequence), said on stderr."""
    from localspec.api import resolve_pair
    from localspec.llama.assistant import is_assistant
    from localspec.models.gguf_info import check_gguf_file

    resolved = resolve_pair(model, draft)
    if resolved.draft is None or not is_assistant(check_gguf_file(resolved.draft).architecture):
        return DEFAULT_PARALLEL
    print(
        f"localspec: {resolved.draft.name} (Gemma 4's assistant) drafts for one sequence: "
        "serving one request at a time (-np 1)",
        file=sys.stderr,
    )
    return 1


def load_models(args):
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
    if hasattr(args, "parallel"):  # serve's slots and prompt cache, its requests' thinking
        parallel = args.parallel or _default_parallel(args.model, draft)
        kwargs.update(parallel=parallel, cache_ram_mib=args.cache_ram)
        for key in ("reasoning_budget", "reasoning_budget_message", "reasoning_format"):
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
    if model.drafter is None and not model.builtin_drafter and not no_draft_model:
        print(
            "localspec: no compatible draft model found for this target; drafting by prompt "
            "lookup only "
            "(see `localspec models --drafts-for TARGET`, or pass --model-draft)",
            file=sys.stderr,
        )
    return model


def generation_options(args) -> dict:
    return dict(
        max_tokens=args.max_tokens,
        temperature=args.temp,
        top_k=args.top_k,
        top_p=args.top_p,
        min_p=args.min_p,
        seed=args.seed,
        stop=args.stop,
    )
