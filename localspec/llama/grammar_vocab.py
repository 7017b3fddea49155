"""llguidance's tokenizer for a loaded model, built from llama.cpp's vocabulary.

``llguidance.llamacpp.lltokenizer_from_vocab`` reads every token's bytes through llama.cpp
(about 1 s for Qwen2.5's 151,936 tokens on a 2-core AMD EPYC), so it runs on the engine's
own llama.cpp thread and once per engine.  End-of-generation tokens (EOS, EOT,
``<|im_end|>``, ...) all count as the grammar's end, so a finished answer may stop on the
token the chat template uses.
"""

from __future__ import annotations

import warnings

from localspec.llama.engine import Engine


def grammar_tokenizer(engine: Engine):
    """The ``llguidance.LLTokenizer`` of ``engine``'s vocabulary, built on first use and
    kept with the engine.  Raises ImportError when llguidance is not installed."""
    tokenizer = getattr(engine, "_grammar_tokenizer", None)
    if tokenizer is None:
        tokenizer = engine.owner.run(_build, engine)
        engine._grammar_tokenizer = tokenizer
    return tokenizer


def _build(engine: Engine):
    from llguidance.llamacpp import lltokenizer_from_vocab

    engine._check_open()
    with warnings.catch_warnings():  # it reads each token's attributes through a deprecated binding
        warnings.simplefilter("ignore", DeprecationWarning)
        return lltokenizer_from_vocab(
            engine._vocab, n_vocab=engine.n_vocab, eos_token=engine.eog_tokens()
        )
