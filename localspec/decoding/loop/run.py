"""What the steps of one generation share (:class:`_Run`)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from localspec.decoding.stats import GenerationStats
from localspec.decoding.text import TextAssembler
from localspec.decoding.thinking import ThinkingBudget


@dataclass
class _Run:
    """What the steps of one generation share: the context so far (prompt and emitted
    tokens), its statistics and text, the random streams of acceptance and drafting, the
    round number and the decode, catch-up and batch-wait clocks as prompt eval ended."""

    context: list[int]
    stats: GenerationStats
    out: TextAssembler
    rng: np.random.Generator
    draft_rng: np.random.Generator
    round_no: int = 0
    verify_start_s: float = 0.0
    draft_start_s: float = 0.0
    catch_up_start_s: float = 0.0
    wait_start_s: float = 0.0
    budget: ThinkingBudget | None = (
        None  # the thinking budget (None: no reasoning format or no budget)
    )
