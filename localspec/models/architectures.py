"""What localspec knows of model architectures that keep a recurrent state (from the pinned
llama.cpp's sources): which layers keep one, and which architectures llama.cpp keeps
recurrent-state snapshots for, so a sequence can go back a few tokens
(:mod:`localspec.llama.engine.rollback`, :mod:`localspec.models.memory`); and the drafters
that read their target's memory (Gemma 4's assistant, :mod:`localspec.llama.assistant`)."""

from __future__ import annotations

RS_SNAPSHOTS = 16  # recurrent-state snapshots per sequence: the longest draft a round verifies
MAMBA_ARCHS = ("mamba", "mamba2")
GATED_DELTA_NET_ARCHS = ("qwen35", "qwen35moe", "qwen3next")
SHORT_CONV_ARCHS = ("lfm2", "lfm2moe")
# drafters that run against their target's memory, and the architecture each drafts for
ASSISTANTS = {"gemma4-assistant": "gemma4"}
# llama.cpp keeps snapshots for these (src/llama-arch.cpp, llm_arch_supports_rs_rollback)
SNAPSHOT_ARCHS = ("qwen35", "qwen35moe", "nemotron_h", "nemotron_h_moe", "lfm2", "lfm2moe")
