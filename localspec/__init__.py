"""localspec: speculative decoding for local GGUF models.

import localspec
print(localspec.chat("Write a Python function that reverses a string.").text)

with localspec.load("qwen2.5-coder-1.5b") as model:
    for event in model.chat([{"role": "user", "content": "Hi"}], stream=True):
        print(event.text, end="")
"""

from localspec.api import SpeculativeModel, chat, load, resolve_pair
from localspec.decoding.loop import Generation
from localspec.decoding.params import CallOptions, LoadOptions
from localspec.decoding.stats import GenerationResult, GenerationStats, TokenEvent, TokenSource
from localspec.errors import (
    CatalogError,
    ContextOverflowError,
    DownloadError,
    EngineError,
    IncompatibleDraftError,
    InvalidOptionError,
    LocalspecError,
    ModelFileError,
    UnsupportedModelError,
)

__version__ = "0.1.0"

__all__ = [
    "SpeculativeModel",
    "chat",
    "load",
    "resolve_pair",
    "LoadOptions",
    "CallOptions",
    "Generation",
    "GenerationResult",
    "GenerationStats",
    "TokenEvent",
    "TokenSource",
    "LocalspecError",
    "CatalogError",
    "ContextOverflowError",
    "DownloadError",
    "EngineError",
    "IncompatibleDraftError",
    "InvalidOptionError",
    "ModelFileError",
    "UnsupportedModelError",
]
