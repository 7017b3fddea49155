"""The GUI's settings, kept as JSON in the user config dir between runs."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import platformdirs

ALL_LAYERS = -1  # n_gpu_layers value meaning "offload every layer"
MAX_LAYERS = 128  # the layer sliders' end; its last step means "all"
DRAFT_MAX_CHOICES = ["auto"] + [str(n) for n in range(1, 17)]
# field -> (lowest, highest) the panel accepts; a saved value outside is replaced by the default
LIMITS = {
    "draft_min": (0, 16),
    "p_min": (0.0, 1.0),
    "temperature": (0.0, 2.0),
    "top_p": (0.0, 1.0),
    "seed": (-1, 2**31 - 1),
    "max_tokens": (1, 32768),
    "n_ctx": (16, 1 << 20),
    "gpu_layers": (ALL_LAYERS, MAX_LAYERS),
    "gpu_layers_draft": (ALL_LAYERS, MAX_LAYERS),
    "serve_port": (1024, 65535),
    "parallel": (1, 16),
    "reasoning_budget": (-1, 32768),
}
# What to do when a chat no longer fits the context: refuse with the numbers, or leave the
# oldest turns out of what is sent (the system prompt and the new message always stay).
OVERFLOW_CHOICES = {"stop": "Stop at the limit", "drop-oldest": "Drop the oldest turns"}
THINKING_FIELDS = ("thinking", "reasoning_budget")  # the settings each conversation keeps


@dataclass
class Settings:
    """Everything the side panel sets.

    ``target`` / ``draft``: model specs for :func:`localspec.models.discovery.model_ref` (catalogue
    name or GGUF path); ``draft`` "" means no draft.  ``draft_max``: "auto" or a
    number of tokens as text.  ``seed`` -1 draws a fresh seed.  ``max_tokens`` and
    ``n_ctx`` are tokens; ``gpu_layers*`` -1 means all layers.  ``thinking``: let a
    reasoning model think (``enable_thinking``); ``reasoning_budget``: the most thinking
    tokens before the close is forced (-1 unlimited, 0 none); both are also kept with each
    conversation (:data:`THINKING_FIELDS`, see :class:`~gui.chat.store.ConversationStore`).
    """

    target: str = ""
    draft: str = ""
    draft_max: str = "auto"
    draft_min: int = 0
    p_min: float = 0.75
    temperature: float = 0.0
    top_p: float = 0.95
    seed: int = -1
    max_tokens: int = 512
    system_prompt: str = ""
    gpu_layers: int = ALL_LAYERS
    gpu_layers_draft: int = ALL_LAYERS
    n_ctx: int = 4096
    highlight: bool = True
    overflow: str = "stop"  # a key of OVERFLOW_CHOICES
    serve: bool = False  # the "Serve on localhost" switch, off until turned on
    serve_port: int = 8090  # not localspec serve's 8080, so both can run
    parallel: int = (
        4  # slots: answers generated at once (this window's and the server's), as serve's -np
    )
    thinking: bool = True
    reasoning_budget: int = -1  # tokens; -1 unlimited

    def generation_options(self) -> dict:
        """Keyword options for ``SpeculativeModel.chat``."""
        return {
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": None if self.seed < 0 else self.seed,
            "draft_max": self.draft_max_value(),
            "draft_min": self.draft_min,
            "p_min": self.p_min,
            "enable_thinking": self.thinking,
            "reasoning_budget": self.reasoning_budget,
        }

    def thinking_options(self) -> dict:
        """The options a conversation keeps: ``{"thinking": bool, "reasoning_budget": int}``."""
        return {name: getattr(self, name) for name in THINKING_FIELDS}

    def take_thinking_options(self, options: dict) -> None:
        """Set the thinking switch and budget from a conversation's ``options``; missing or
        bad values leave the current ones."""
        thinking, budget = options.get("thinking"), options.get("reasoning_budget")
        if isinstance(thinking, bool):
            self.thinking = thinking
        lo, hi = LIMITS["reasoning_budget"]
        if isinstance(budget, int) and not isinstance(budget, bool) and lo <= budget <= hi:
            self.reasoning_budget = budget

    def draft_max_value(self) -> int | str:
        return "auto" if self.draft_max == "auto" else int(self.draft_max)

    def load_options(self) -> dict:
        """Keyword options for ``SpeculativeModel(...)`` (context size, slots, GPU layers)."""
        return {
            "n_ctx": self.n_ctx,
            "parallel": self.parallel,
            "n_gpu_layers": self.gpu_layers,
            "n_gpu_layers_draft": self.gpu_layers_draft,
            "draft_max": self.draft_max_value(),
            "draft_min": self.draft_min,
            "p_min": self.p_min,
        }


def settings_path() -> Path:
    """``<user config dir>/localspec/gui.json`` (``$XDG_CONFIG_HOME`` on Linux)."""
    return Path(platformdirs.user_config_dir("localspec")) / "gui.json"


def load_settings(path: Path | None = None) -> Settings:
    """Read saved settings; missing file, unreadable JSON or a bad value give defaults
    (per field), never an error."""
    path = path or settings_path()
    defaults = Settings()
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return defaults
    if not isinstance(raw, dict):
        return defaults
    values = {}
    for f in fields(Settings):
        default = getattr(defaults, f.name)
        value = raw.get(f.name, default)
        if isinstance(default, bool):
            ok = isinstance(value, bool)
        elif isinstance(default, float):
            ok = isinstance(value, (int, float)) and not isinstance(value, bool)
            value = float(value) if ok else value
        else:
            ok = isinstance(value, type(default)) and not isinstance(value, bool)
        if ok and f.name in LIMITS:
            lo, hi = LIMITS[f.name]
            ok = lo <= value <= hi
        values[f.name] = value if ok else default
    if values["draft_max"] not in DRAFT_MAX_CHOICES:
        values["draft_max"] = defaults.draft_max
    if values["overflow"] not in OVERFLOW_CHOICES:
        values["overflow"] = defaults.overflow
    return Settings(**values)


def save_settings(settings: Settings, path: Path | None = None) -> None:
    """Write the settings as JSON (creates the folder).  Raises OSError when the
    config dir is not writable."""
    path = path or settings_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    try:
        tmp.write_text(json.dumps(asdict(settings), indent=2), encoding="utf-8")
        tmp.replace(path)
    finally:
        tmp.unlink(missing_ok=True)  # nothing half-written left behind when the replace failed
