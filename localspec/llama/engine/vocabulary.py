"""The engine's vocabulary: text to tokens, each token's bytes and text, the
end-of-generation and fill-in-the-middle tokens (:class:`Vocabulary`, a mixin of
:class:`~localspec.llama.engine.Engine`)."""

from __future__ import annotations

import ctypes

import llama_cpp

from localspec.llama.owner import owned


class Vocabulary:
    """Tokenize, token bytes and text, end-of-generation and FIM tokens of an engine's
    vocabulary (``self._vocab``)."""

    @owned
    def tokenize(
        self, text: str, add_special: bool = True, parse_special: bool = False
    ) -> list[int]:
        """Text to token ids.  ``add_special`` adds BOS when the model asks for it;
        ``parse_special`` turns "<|im_start|>"-style text into its special token."""
        self._check_open()
        data = text.encode(
            "utf-8", errors="replace"
        )  # lone surrogates (bad terminal input) become "?"
        n_max = len(data) + 8
        buf = (llama_cpp.llama_token * n_max)()
        n = llama_cpp.llama_tokenize(
            self._vocab, data, len(data), buf, n_max, add_special, parse_special
        )
        if n < 0:
            n_max = -n
            buf = (llama_cpp.llama_token * n_max)()
            n = llama_cpp.llama_tokenize(
                self._vocab, data, len(data), buf, n_max, add_special, parse_special
            )
        return list(buf[:n])

    def token_bytes(self, token: int) -> bytes:
        """The bytes a token stands for in generated text (special tokens give b"")."""
        piece = self._piece_cache.get(token)
        if piece is None:
            piece = self._piece(token)
        return piece

    @owned
    def _piece(self, token: int) -> bytes:
        self._check_open()
        n = llama_cpp.llama_token_to_piece(
            self._vocab, token, self._piece_buf, len(self._piece_buf), 0, False
        )
        if n < 0:
            buf = ctypes.create_string_buffer(-n)
            n = llama_cpp.llama_token_to_piece(self._vocab, token, buf, -n, 0, False)
            piece = buf.raw[:n]
        else:
            piece = self._piece_buf.raw[:n]
        self._piece_cache[token] = piece
        return piece

    def is_eog(self, token: int) -> bool:
        """True for end-of-generation tokens (EOS, EOT, <|im_end|>, ...); remembered per
        id, since the loop asks for every drafted token.  EngineError once closed."""
        eog = self._eog_cache.get(token)
        if eog is None:
            eog = self._eog_cache[token] = self._vocab_is_eog(token)
        return eog

    @owned
    def _vocab_is_eog(self, token: int) -> bool:
        self._check_open()
        return bool(llama_cpp.llama_vocab_is_eog(self._vocab, token))

    @owned
    def eog_tokens(self) -> list[int]:
        """Every end-of-generation token id of the vocabulary, ascending (a scan of
        ``n_vocab`` ids: 0.08-0.1 s for Qwen2.5's 151,936 on a 2-core AMD EPYC).
        EngineError once closed."""
        self._check_open()
        return [t for t in range(self.n_vocab) if llama_cpp.llama_vocab_is_eog(self._vocab, t)]

    @owned
    def fim_tokens(self) -> dict[str, int]:
        """The vocabulary's fill-in-the-middle tokens that exist, by llama.cpp's names
        (``pre``, ``suf``, ``mid``, ``pad``, ``rep``, ``sep``; Qwen2.5-Coder: ``<|fim_prefix|>``,
        ``<|fim_suffix|>``, ``<|fim_middle|>``, ``<|fim_pad|>``, ``<|repo_name|>``,
        ``<|file_sep|>``); empty for a model without them.  EngineError once closed."""
        self._check_open()
        found = {}
        for name in ("pre", "suf", "mid", "pad", "rep", "sep"):
            token = int(getattr(llama_cpp, f"llama_vocab_fim_{name}")(self._vocab))
            if token >= 0:
                found[name] = token
        return found

    @owned
    def token_text(self, token: int) -> str:
        """The vocabulary's text of ``token`` (special tokens by name); EngineError once closed."""
        self._check_open()
        return llama_cpp.llama_vocab_get_text(self._vocab, token).decode("utf-8", errors="replace")
