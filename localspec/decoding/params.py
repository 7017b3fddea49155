"""What one generation is asked for: :class:`GenerationParams` (length, sampling, stop
strings, seed, logprobs) and its :class:`DraftParams` (how it drafts), checked when made."""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.decoding.sampling import SamplingParams
from localspec.errors import InvalidOptionError

STRATEGIES = ("auto", "draft-model", "prompt-lookup", "suffix", "prediction", "none")


@dataclass(frozen=True)
class DraftParams:
    """draft_max: most tokens drafted per round, or "auto": the adaptive policy chooses
    each round's drafter and length (0 included) from costs measured on this machine.
    draft_min: a shorter draft is dropped (the round runs plain).  p_min: the draft model
    stops once its top probability falls below it.  strategy: "auto" (every available
    drafter), "draft-model", "prompt-lookup", "suffix", "prediction" (the caller's
    predicted output only) or "none".  Names and meaning as llama.cpp's
    ``--draft-max``, ``--draft-min``, ``--draft-p-min``.  Raises InvalidOptionError when
    out of range."""

    draft_max: int | str = "auto"
    draft_min: int = 0
    p_min: float = 0.75
    strategy: str = "auto"

    @property
    def adaptive(self) -> bool:
        return self.draft_max == "auto"

    def __post_init__(self) -> None:
        if not self.adaptive and (
            isinstance(self.draft_max, bool) or not isinstance(self.draft_max, int) or self.draft_max < 0
        ):
            raise InvalidOptionError(f"draft_max must be 'auto' or an integer >= 0, got {self.draft_max!r}")
        if isinstance(self.draft_min, bool) or not isinstance(self.draft_min, int) or self.draft_min < 0:
            raise InvalidOptionError(f"draft_min must be an integer >= 0, got {self.draft_min!r}")
        if not self.adaptive and self.draft_min > self.draft_max:
            raise InvalidOptionError(f"draft_min ({self.draft_min}) must not exceed draft_max ({self.draft_max})")
        if isinstance(self.p_min, bool) or not isinstance(self.p_min, (int, float)) or not 0.0 <= self.p_min <= 1.0:
            raise InvalidOptionError(f"p_min must be a number in [0, 1], got {self.p_min!r}")
        if self.strategy not in STRATEGIES:
            raise InvalidOptionError(f"strategy must be one of {', '.join(STRATEGIES)}, got {self.strategy!r}")


@dataclass(frozen=True)
class GenerationParams:
    """max_tokens: most tokens to generate.  stop: strings that end the generation
    (not included in the text).  seed: None draws a fresh one.  logprobs: None, or the
    number (0 to 20) of most likely alternatives each :class:`TokenEvent` reports with
    its own log-probability (natural log, the target's raw distribution, before
    temperature and filters)."""

    max_tokens: int = 512
    sampling: SamplingParams = field(default_factory=SamplingParams)
    draft: DraftParams = field(default_factory=DraftParams)
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logprobs: int | None = None

    def __post_init__(self) -> None:
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens < 1:
            raise InvalidOptionError(f"max_tokens must be an integer >= 1, got {self.max_tokens!r}")
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise InvalidOptionError(f"stop strings must be non-empty strings, got {self.stop!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0):
            raise InvalidOptionError(
                f"seed must be a non-negative integer, or None / -1 for a random one, got {self.seed!r}"
            )
        if self.logprobs is not None and (
            isinstance(self.logprobs, bool) or not isinstance(self.logprobs, int) or not 0 <= self.logprobs <= 20
        ):
            raise InvalidOptionError(f"logprobs must be an integer from 0 to 20, got {self.logprobs!r}")


KNOWN_OPTIONS = frozenset(
    "max_tokens temperature top_k top_p min_p seed stop draft_max draft_min p_min strategy logprobs".split()
)


def params_from_options(options: dict, draft: DraftParams) -> GenerationParams:
    """The :class:`GenerationParams` of a call's keyword options (``max_tokens``,
    ``temperature``, ``top_k``, ``top_p``, ``min_p``, ``seed`` (-1: random), ``stop``,
    ``logprobs``, and ``draft_max`` / ``draft_min`` / ``p_min`` / ``strategy`` over the
    model's defaults ``draft``).  InvalidOptionError for an unknown option or a bad value."""
    unknown = set(options) - KNOWN_OPTIONS
    if unknown:
        raise InvalidOptionError(f"unknown option(s): {', '.join(sorted(unknown))}")
    stop = options.get("stop")
    stop = () if stop is None else (stop,) if isinstance(stop, str) else stop
    if not isinstance(stop, (list, tuple)):
        raise InvalidOptionError(f"stop must be a string or a list of strings, got {stop!r}")
    seed = options.get("seed")
    return GenerationParams(
        max_tokens=options.get("max_tokens", 512),
        sampling=SamplingParams(
            temperature=options.get("temperature", 0.0),
            top_k=options.get("top_k", 40),
            top_p=options.get("top_p", 0.95),
            min_p=options.get("min_p", 0.05),
        ),
        draft=DraftParams(
            draft_max=options.get("draft_max", draft.draft_max),
            draft_min=options.get("draft_min", draft.draft_min),
            p_min=options.get("p_min", draft.p_min),
            strategy=options.get("strategy", draft.strategy),
        ),
        stop=tuple(stop),
        seed=None if seed == -1 else seed,  # -1 = random, as in llama.cpp
        logprobs=options.get("logprobs"),
    )
