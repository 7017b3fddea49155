"""What each sequence's KV cache holds: its tokens, the cells used, and the operations on them:
trim, reuse the common prefix, copy a prefix to another sequence (:class:`KvCache`, a mixin of
:class:`~localspec.llama.engine.Engine`)."""

from __future__ import annotations

from collections.abc import Sequence

import llama_cpp

from localspec.errors import UnsupportedModelError
from localspec.llama.owner import owned
from localspec.llama.sequence import common_prefix


class KvCache:
    """The tokens each sequence's cache holds (``self._caches``, position i = token i), its
    cells (``self._cells``), and trimming, reusing and copying them."""

    @property
    def cache_tokens(self) -> list[int]:
        """What sequence 0's KV cache holds, position i = token i (see :meth:`seq_tokens`)."""
        return self._caches[0]

    def seq_tokens(self, seq: int) -> list[int]:
        """What sequence ``seq``'s cache holds (the engine's own list: do not modify)."""
        return self._caches[seq]

    @property
    def cells_used(self) -> int:
        """KV cells held by all sequences together (a cell shared by several counts once)."""
        return self._cells.used

    def cells_held(self, seqs: Sequence[int]) -> int:
        """KV cells held by the sequences ``seqs`` together (a shared cell counts once)."""
        return self._cells.held(seqs)

    def _note_held(
        self, seq: int, tokens: Sequence[int]
    ) -> None:  # llama.cpp wrote them after seq's cells
        self._caches[seq].extend(int(t) for t in tokens)
        self._cells.extend(seq, len(tokens))

    @owned
    def copy_prefix(self, src: int, dst: int, n: int) -> int:
        """Make sequence ``dst`` hold the first ``n`` cells of ``src`` (shared, not copied:
        ``llama_memory_seq_cp`` in the unified cache), dropping what it held past its common prefix
        with them; its length after."""
        source = self._caches[src][:n]
        keep = common_prefix(self._caches[dst], source)
        self.trim(keep, dst)
        if len(source) > keep and not self.recurrent:  # a recurrent state is not shared by prefix
            llama_cpp.llama_memory_seq_cp(self._memory, src, dst, keep, len(source))
            self._caches[dst].extend(source[keep:])
            self._cells.copy(src, dst, keep, len(source))
        return len(self._caches[dst])

    @owned
    def trim(self, n_keep: int, seq: int = 0) -> None:
        """Remove every cached position >= ``n_keep`` of sequence ``seq``
        (``llama_memory_seq_rm``; a recurrent state goes back as
        :mod:`~localspec.llama.engine.rollback` says)."""
        cache = self._caches[seq]
        if n_keep >= len(cache):
            return
        if self.recurrent:
            self._trim_recurrent(n_keep, seq)
            return
        if not llama_cpp.llama_memory_seq_rm(self._memory, seq, n_keep, -1):
            raise UnsupportedModelError(
                f"{self.path.name}: llama.cpp refused to trim the KV cache at position {n_keep}"
            )
        del cache[n_keep:]
        self._cells.trim(seq, n_keep)
        if self.mtp is not None:
            self.mtp.trim(n_keep)

    @owned
    def reuse_prefix(self, tokens: Sequence[int], seq: int = 0) -> int:
        """Trim sequence ``seq``'s cache to its longest common prefix with ``tokens``; return its
        length."""
        cache = self._caches[seq]
        n = common_prefix(cache, tokens)
        self.trim(n, seq)
        return n
