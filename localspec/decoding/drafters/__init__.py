"""Drafters, one module each: the draft model, prompt lookup, suffix, the caller's prediction."""

from localspec.decoding.drafters.base import NO_INPUTS, Draft, Drafter, DrafterInputs, round_label
from localspec.decoding.drafters.draft_model import DraftModelDrafter
from localspec.decoding.drafters.grammar import GrammarDrafter
from localspec.decoding.drafters.mtp import MtpDrafter
from localspec.decoding.drafters.prediction import PredictionDrafter
from localspec.decoding.drafters.prompt_lookup import PromptLookupDrafter
from localspec.decoding.drafters.suffix import SuffixDrafter

__all__ = [
    "NO_INPUTS",
    "DrafterInputs",
    "Draft",
    "Drafter",
    "DraftModelDrafter",
    "GrammarDrafter",
    "MtpDrafter",
    "PredictionDrafter",
    "PromptLookupDrafter",
    "SuffixDrafter",
    "round_label",
]
