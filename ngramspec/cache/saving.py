"""The cache's integrity check, save and load (the file format itself in
:mod:`ngramspec.cache.persist`): a mixin of :class:`NgramCache <ngramspec.NgramCache>`, as the
insert thread is (:mod:`ngramspec.cache.inserts`)."""

from __future__ import annotations

import dataclasses
import os
from typing import TYPE_CHECKING, TypeVar

from .. import _validate as v
from ..config import NgramConfig
from ..errors import CacheFileError
from . import persist
from .backends import BACKENDS, backend_class

if TYPE_CHECKING:
    from .._canonical import CanonicalContent

__all__ = ["Saving"]

_Cache = TypeVar("_Cache", bound="Saving")


class Saving:
    """What a cache file holds, written and read back; the backend's invariants checked."""

    def check_integrity(self) -> None:
        """Verify the backend's internal invariants; raise
        :class:`~ngramspec.errors.IntegrityError` naming the first broken one.

        Checks parent/child links, child recency lists, the child lookup table, frequency
        and global LRU order (parents ahead of children, so eviction only removes leaves),
        the free list, the node count against ``capacity`` and the match states.  Walks the
        whole trie in Python: a testing and debugging aid, not for every step in serving.

        Examples
        --------
        >>> from ngramspec import NgramCache
        >>> cache = NgramCache(max_trie_depth=4, capacity=5)
        >>> cache.insert([[1, 2, 3, 4, 5, 6, 7]])
        >>> cache.check_integrity()
        >>> len(cache)
        5
        """
        self.synchronize()
        with self._lock:
            self._backend.check_integrity()

    def save(self, path: str | os.PathLike) -> None:
        """Write the trie and the match states to ``path`` (format: :mod:`ngramspec.cache.persist`).

        Atomic: the file appears complete at ``path`` or not at all; a failure mid-write
        leaves a previous file there untouched.  A cache loaded from it continues exactly as
        this one would (same drafts for the same future calls, stateful matches included),
        on either backend.  External corpora are written too (their token streams, rebuilt
        into automata on loading, and SGLang's corpus order).

        Examples
        --------
        >>> import os, tempfile
        >>> from ngramspec import NgramCache
        >>> cache = NgramCache(capacity=1000, draft_token_num=4)
        >>> cache.insert([[1, 2, 3, 4]])
        >>> path = os.path.join(tempfile.mkdtemp(), "trie.npz")
        >>> cache.save(path)
        >>> NgramCache.load(path).match([[1, 2]]).tokens
        array([[2, 3, 4, 0]], dtype=int32)
        """
        from .._version import __version__

        self.synchronize()
        with self._lock:
            content = dataclasses.replace(self._backend.to_canonical(),
                                          **self._corpora.export())
        persist.write(path, content, config=self._config, saved_by_backend=self._backend_name,
                      library_version=__version__)

    def _canonical(self) -> "CanonicalContent":
        """The cache's canonical content (what :meth:`save` writes), states in id order."""
        self.synchronize()
        with self._lock:
            return persist.in_id_order(self._backend.to_canonical())

    @classmethod
    def load(cls: type[_Cache], path: str | os.PathLike, *, backend: str | None = None,
             config: NgramConfig | None = None) -> _Cache:
        """A cache read from a file written by :meth:`save`.

        Parameters
        ----------
        path : str or os.PathLike
        backend : {"numba", "reference"}, optional
            Default: the backend that saved the file.
        config : NgramConfig, optional
            The configuration the caller expects; a file with another one raises
            :class:`~ngramspec.errors.CacheFileError`.

        Raises
        ------
        CacheFileError
            Truncated, corrupted, of an unknown format version, or of another ``config``.
        """
        v.check_backend(backend, BACKENDS, allow_none=True)
        if config is not None:
            config = v.check_config(config, default=False)
        saved = persist.read(path, config=config)
        if backend is None:
            backend = saved.saved_by_backend if saved.saved_by_backend in BACKENDS else "numba"
        cache = cls(config=saved.config, backend=backend)
        cache._backend = backend_class(backend).from_canonical(saved.config, saved.content)
        c = saved.content
        if c.corpus_ids:
            try:
                cache._corpora.restore(c.corpus_ids, c.corpus_streams, c.corpus_table)
            except ValueError as e:
                raise CacheFileError(f"{os.fspath(path)}: {e}") from None
        return cache
