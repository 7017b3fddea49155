"""The Python API: ``load()`` a target (and draft), then ``chat()`` or ``generate()``.

:mod:`.model` holds :class:`SpeculativeModel` (a loaded pair), :mod:`.generation_calls` its
chat / generate / infill calls, :mod:`.pairs` how names become checked GGUF files,
:mod:`.calls` the one-call functions.
"""

from localspec.api.calls import chat, load
from localspec.api.generation_calls import Messages
from localspec.api.model import SpeculativeModel
from localspec.api.pairs import ResolvedPair, resolve_pair

__all__ = [
    "Messages",
    "ResolvedPair",
    "SpeculativeModel",
    "chat",
    "load",
    "resolve_pair",
]
