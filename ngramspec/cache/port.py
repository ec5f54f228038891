"""The serving port of an :class:`~ngramspec.NgramCache`: what the drafters that serve from a
cache (the step API's :class:`~ngramspec.Drafter` and the integrations built on it) may do
beyond the cache's public calls, named here once instead of reached for in its private fields.

Everything here skips the public calls' checks: the callers pass arrays they made themselves
(int32 tokens, int64 offsets and lengths, plain ``str``/``int`` ids).  ``cache.port`` is the
one port of a cache.
"""

from __future__ import annotations

from typing import Any, Hashable

import numpy as np

__all__ = ["ServingPort"]


class _Settled:
    """``with port.settled() as backend``: the queued inserts applied (the held ones stay
    held), then the cache's lock held around the block."""

    __slots__ = ("_cache",)

    def __init__(self, cache: Any) -> None:
        self._cache = cache

    def __enter__(self) -> Any:
        c = self._cache
        if c._due or c._done != c._queued or c._errors:
            c.synchronize()
        c._lock.acquire()
        return c._backend

    def __exit__(self, *exc: Any) -> None:
        self._cache._lock.release()


class ServingPort:
    """A cache's friend API for the drafters serving from it (see the module).

    Parameters
    ----------
    cache : NgramCache
        The cache (``NgramCache`` makes its own port: ``cache.port``).
    """

    __slots__ = ("_cache", "_settled")

    def __init__(self, cache: Any) -> None:
        self._cache = cache
        self._settled = _Settled(cache)

    # ---- what the backend can do ------------------------------------------------------------

    @property
    def compiled(self) -> bool:
        """Whether the backend runs the compiled serving steps (the step API's own memory,
        exact counts and ADAPTIVE drafts in one call): the Numba backend does; the reference
        backend serves the same drafts through its public calls (see :attr:`why_not_compiled`).
        """
        return self.why_not_compiled is None

    @property
    def why_not_compiled(self) -> str | None:
        """None, or why the backend cannot run the compiled serving steps."""
        name = self._cache.backend
        if name == "numba":
            return None
        return (f"backend {name!r} holds its trie as Python objects, which the compiled "
                "serving steps cannot read; it serves the same drafts through the cache's "
                "public calls, slower (backend='numba' runs them compiled)")

    def settled(self) -> _Settled:
        """A context manager: the queued inserts applied, the cache locked; it gives the
        backend (``with cache.port.settled() as backend: ...``)."""
        return self._settled

    @property
    def backend(self) -> Any:
        """The backend object, unlocked (for what does not read the trie)."""
        return self._cache._backend

    @property
    def corpora_active(self) -> bool:
        """Whether external corpora are drawn from (the fused serving steps do not)."""
        return self._cache._corpora.active

    # ---- matches and inserts, unchecked -------------------------------------------------------

    def match_one(self, ctx: np.ndarray, key: Hashable, total: int) -> Any:
        """A stateful match of one request (a non-empty int32 tail of its row)."""
        return self._cache._match_one(ctx, key, total)

    def match_packed(self, flat: np.ndarray, offsets: np.ndarray, keys: list,
                     total_lens: np.ndarray) -> Any:
        """A stateful match of a batch packed by the caller."""
        return self._cache._match_packed(flat, offsets, keys, total_lens)

    def insert_packed(self, flat: np.ndarray, offsets: np.ndarray,
                      count_from: np.ndarray | None = None, *, wait: bool) -> None:
        """Insert packed sequences (never written again by the caller); ``wait=False``:
        queued for the insert thread."""
        self._cache._insert_packed(flat, offsets, count_from, wait=wait)

    def step_costs(self, costs: Any, batch_size: Any, n: int) -> np.ndarray | None:
        """``min_expected_accept="auto"``'s step time per cap for this batch."""
        return self._cache._step_costs(costs, batch_size, n)

    # ---- finished requests' counts: held, then due ---------------------------------------------

    @property
    def holding(self) -> bool:
        """Whether finished requests' counts are held for the next drafts."""
        return bool(self._cache._held)

    def hold(self, flat: np.ndarray, offsets: np.ndarray, count_from: np.ndarray) -> None:
        """Hold a finished request's counted insert until the next propose has drafted."""
        self._cache._hold(flat, offsets, count_from)

    def take_held(self) -> list:
        """The held inserts, taken out (a propose drafts without them)."""
        c = self._cache
        held, c._held = c._held, []
        return held

    def drafted(self, held: list) -> None:
        """A propose has drafted: ``held`` (from :meth:`take_held`) back in front of what
        was held since, and all of it due."""
        c = self._cache
        c._held[:0] = held
        c._drafted()

    def put_back(self, held: list) -> None:
        """A refused propose: ``held`` back, still held."""
        self._cache._held[:0] = held

    def defer_due(self) -> None:
        """Queue due inserts only at :meth:`release_due` (the SGLang drop-in's ``batch_put``),
        not as soon as they are due."""
        self._cache._defer = True

    def release_due(self) -> None:
        """Queue the due inserts for the insert thread now."""
        self._cache._release_due()

    def wait_queued(self) -> None:
        """Wait for the insert thread's queue (the held inserts stay held)."""
        self._cache._wait_queued()
