"""The backends behind :class:`~ngramspec.NgramCache`: the protocol each follows, and their names.

A backend is SGLang's ``Ngram`` object (one trie, the live requests' match states) for one
configuration.  :class:`~ngramspec.NgramCache` validates input, holds the lock and the insert
thread, and calls a backend through :class:`Backend` alone; the fast serving paths (drafts
written into an output pool, no per-request Python) through :class:`PooledBackend`, which a
backend declares with ``pooled = True``.  A new backend: a class with these methods, a row in
:data:`BACKEND_CLASSES`, and the differential tests against the reference
(``tests/engine/test_engine_vs_reference.py``).
"""

from __future__ import annotations

import importlib
from typing import Any, ClassVar, Hashable, Protocol, Sequence

import numpy as np

__all__ = ["Backend", "PooledBackend", "BACKEND_CLASSES", "BACKENDS", "backend_class"]

#: ``backend=`` name to ``"module:Class"``; imported on first use (the numba one imports numba).
BACKEND_CLASSES = {
    "numba": "ngramspec.engine:EngineBackend",
    "reference": "ngramspec.reference:ReferenceBackend",
}
#: The names ``backend=`` accepts; the first is the default.
BACKENDS = tuple(BACKEND_CLASSES)

Drafts = tuple[np.ndarray, np.ndarray, np.ndarray]  # tokens (B, n), mask (B, n, n), num_drafts


class Backend(Protocol):
    """What every backend does.  Inputs arrive validated: 1-D int32 arrays, consistent
    lengths, keys hashable; ``keys is None`` for a stateless match."""

    #: Has the :class:`PooledBackend` calls.
    pooled: ClassVar[bool]

    def __init__(self, config: Any) -> None: ...

    def insert(self, sequences: Sequence[np.ndarray]) -> None:
        """Insert every suffix of each sequence, as the configuration's profile does."""

    def insert_counted(self, sequences: Sequence[np.ndarray], count_from: Sequence[int]
                       ) -> None:
        """Exact counting: every suffix inserted, positions ``>= count_from`` counted."""

    def insert_packed(self, flat: np.ndarray, offsets: np.ndarray,
                      count_from: np.ndarray | None = None) -> None:
        """:meth:`insert` (or :meth:`insert_counted`) of sequences packed end to end:
        sequence ``i`` is ``flat[offsets[i]:offsets[i + 1]]``."""

    def match(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
              total_lens: np.ndarray | None, *, budget: int | None = None) -> Drafts:
        """SGLang's BFS or PROB drafts of every context (``budget + 1`` slots)."""

    def match_adaptive(self, contexts: Sequence[np.ndarray], local: Sequence[Any] | None = None,
                       costs: np.ndarray | None = None
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """ADAPTIVE drafts and their expected accept lengths (``local[b]``: request ``b``'s
        own backend, searched first)."""

    def erase(self, keys: Sequence[Hashable]) -> None:
        """Forget the match states of these requests."""

    def reset(self) -> None:
        """Empty the trie and forget every match state."""

    def reserve(self) -> None:
        """Allocate the trie's whole capacity now (no growth later)."""

    @property
    def node_count(self) -> int:
        """Trie nodes in use."""

    def check_integrity(self) -> None:
        """Raise :class:`~ngramspec.errors.IntegrityError` if the state is inconsistent."""

    def to_canonical(self) -> Any:
        """The state in the backend-independent form that files store."""

    @classmethod
    def from_canonical(cls, config: Any, content: Any) -> "Backend":
        """A backend holding ``content`` (:meth:`to_canonical`'s form)."""


class PooledBackend(Backend, Protocol):
    """The serving paths of a compiled backend: drafts written into an output pool and
    returned as ``(pool, rows)``, read by :class:`~ngramspec.DraftBatch` without copies."""

    def match_one(self, ctx: np.ndarray, key: Hashable, total: int) -> tuple[tuple, int]:
        """One request's drafts."""

    def match_packed(self, flat: np.ndarray, offsets: np.ndarray, keys: list,
                     total_lens: np.ndarray) -> tuple:
        """A batch whose contexts are packed end to end."""

    def match_pooled(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
                     total_lens: np.ndarray | None) -> tuple:
        """A batch of contexts."""

    def match_one_corpora(self, ctx: np.ndarray, key: Hashable, total: int, budget: int,
                          *args: Any) -> tuple[tuple, int]:
        """One request's drafts merged with the external corpora's."""

    def match_corpora(self, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
                      total_lens: np.ndarray | None, budget: int, *args: Any) -> Drafts:
        """:meth:`match` merged with the external corpora's drafts."""

    def match_packed_corpora(self, flat: np.ndarray, offsets: np.ndarray, keys: list,
                             total_lens: np.ndarray, budget: int, *args: Any) -> tuple:
        """A packed batch merged with the external corpora's drafts."""


def backend_class(name: str) -> type[Backend]:
    """The class behind ``backend=name`` (one of :data:`BACKENDS`, checked by the caller)."""
    module, _, cls = BACKEND_CLASSES[name].partition(":")
    return getattr(importlib.import_module(module), cls)
