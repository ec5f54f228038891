"""The cache's external-corpus calls (SGLang 0.5.23's ``/add_external_corpus`` and the rest;
the corpora themselves in :mod:`ngramspec.cache.corpora`): a mixin of :class:`NgramCache
<ngramspec.NgramCache>`, as the insert thread is (:mod:`ngramspec.cache.inserts`)."""

from __future__ import annotations

__all__ = ["CorpusCalls"]


class CorpusCalls:
    """Loading, unloading and listing external corpora under the cache's lock."""

    def add_corpus(self, corpus_id: str, documents, *, max_bytes: int | None = None) -> int:
        """Load an external corpus: a suffix automaton over ``documents`` that every match
        then drafts from, with ``external_sam_budget`` nodes shared by the loaded corpora
        (SGLang's ``/add_external_corpus``).  Corpora survive :meth:`reset`.

        Parameters
        ----------
        corpus_id : str
            A new, non-empty id.
        documents : iterable of 1-D int sequences
            Token ids within int32, except ``INT32_MIN``: the separator SGLang puts between
            documents.  Empty documents are skipped.
        max_bytes : int, optional
            Beyond SGLang: a memory bound for this corpus's automaton (its bytes as
            :meth:`corpus_info` reports them); a corpus that would exceed it is refused.

        Returns
        -------
        int
            Tokens loaded, separators included (what :meth:`corpora` reports).

        Raises
        ------
        ValueError
            A duplicate id, no tokens, more tokens than ``external_corpus_max_tokens`` or
            than the loaded corpora leave of it (SGLang would truncate a corpus over the
            cap), more bytes than ``max_bytes``, a bad token, or ``external_sam_budget == 0``.
            Nothing changes then.

        Examples
        --------
        >>> from ngramspec import NgramCache
        >>> cache = NgramCache(max_trie_depth=4, max_bfs_breadth=3, draft_token_num=6,
        ...                    external_sam_budget=2)
        >>> cache.insert([[1, 2, 3, 4]])
        >>> cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]])
        10
        >>> cache.match([[1, 2]]).tokens
        array([[2, 5, 3, 4, 0, 0]], dtype=int32)
        >>> cache.corpora()
        {'docs': 10}
        """
        self.synchronize()
        with self._lock:
            return self._corpora.add(corpus_id, documents, max_bytes)

    def remove_corpus(self, corpus_id: str) -> None:
        """Unload a corpus; KeyError if no corpus has this id (SGLang accepts it silently)."""
        with self._lock:
            self._corpora.remove(corpus_id)

    def clear_corpora(self) -> None:
        """Unload every corpus (the trie is untouched)."""
        with self._lock:
            self._corpora.clear()

    def corpora(self) -> dict[str, int]:
        """``{corpus_id: tokens}`` of the loaded corpora, separators included, in SGLang's
        order (the one in which their trees are merged)."""
        with self._lock:
            return self._corpora.counts()

    def corpus_info(self) -> dict[str, dict[str, int]]:
        """Per loaded corpus, in :meth:`corpora`'s order: ``tokens`` (separators included)
        and ``bytes``, the memory its automaton takes in the engine's flat layout plus its
        token stream, kept for :meth:`save` (the same figure on both backends; what
        ``add_corpus(max_bytes=)`` bounds).

        Examples
        --------
        >>> from ngramspec import NgramCache
        >>> cache = NgramCache(draft_token_num=6, external_sam_budget=2)
        >>> cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]])
        10
        >>> cache.corpus_info()
        {'docs': {'tokens': 10, 'bytes': 664}}
        """
        with self._lock:
            return self._corpora.info()
