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
# hybrids with Mamba mixers (src/models/*.cpp): a layer without KV heads keeps a state; in
# Nemotron-H, a layer with neither KV heads nor a feed-forward (its MLP layers have no KV either);
# in Falcon-H1, every layer keeps both
MAMBA_HYBRID_ARCHS = ("granitehybrid", "jamba")
NEMOTRON_H_ARCHS = ("nemotron_h", "nemotron_h_moe")
PARALLEL_HYBRID_ARCHS = ("falcon-h1",)
# drafters that run against their target's memory, and the architecture each drafts for
ASSISTANTS = {"gemma4-assistant": "gemma4"}
# llama.cpp keeps snapshots for these (src/llama-arch.cpp, llm_arch_supports_rs_rollback)
SNAPSHOT_ARCHS = (
    "qwen35", "qwen35moe", "qwen4exp", "nemotron_h", "nemotron_h_moe", "lfm2", "lfm2moe",
    "kimi-k3", "deepseek4", "glm5-next", "bailingmoe3",
)  # fmt: skip
# the recurrent and hybrid architectures without them (llm_arch_is_recurrent / _is_hybrid):
# rolled back from a state saved before each verify
SAVED_STATE_ARCHS = (
    "mamba", "mamba2", "rwkv6", "rwkv6qwen2", "rwkv7", "arwkv7", "jamba", "falcon-h1", "plamo2",
    "granitehybrid", "qwen3next", "kimi-linear", "minimax-01",
)  # fmt: skip
NOT_CACHED = (
    "a prompt that does not extend the whole cached conversation reads its common prefix again;"
    " slots (--parallel) never share a prompt prefix"
)
