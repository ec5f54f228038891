"""The accept half of :class:`~ngramspec.drafter.Drafter`: what verification emitted, checked
against the proposed trees and appended to the requests, with the counts its configuration
keeps, in one compiled call where it can be.

A mixin (as :mod:`ngramspec.cache.inserts` is the cache's), so that the hot path reads the
drafter's pending proposal as its own plain attributes.  The drafter provides ``cache``,
``config``, ``_store``, ``_mem``, ``_exact``, ``_windows``, ``_one_call``, ``_slot``,
``_pend_*`` (the proposal), ``_info``/``_where`` (the kernel's outcome), ``_accept_rows`` (its
entry point) and ``_count``.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any, Mapping

import numpy as np

from .. import _validate as v
from ..engine import kernels
from ..errors import UnknownRequestError
from ..drafts.verify import VerifyResult

__all__ = ["AcceptSteps"]

NONE = np.zeros(0, np.int64)  # no rows pending


class AcceptSteps:
    """:meth:`Drafter.accept`'s machinery (see the module)."""

    def _accept_counted(self, tokens: np.ndarray, mask: np.ndarray, matrix: np.ndarray,
                        lens: np.ndarray, where: np.ndarray, info: np.ndarray) -> None:
        """``accept_rows`` and the exact counts of the remembered state, in one call (under
        the cache's lock unless only the requests' own tries are written)."""
        port = self._port
        with nullcontext(port.backend) if self.config.local_index else port.settled() \
                as backend:
            self._mem.accept((tokens, mask), matrix, lens, self._store, self._pend_slots,
                             where, info, backend.trie, backend.lru)

    def _refuse_result(self, emitted: VerifyResult) -> None:
        if self._pend_drafts is None:
            raise ValueError("accept(): nothing was proposed since the last accept; call "
                             "propose() first")
        raise ValueError(f"accept(): the result has {emitted.batch_size} rows but the last "
                         f"propose() drafted {self._pend_drafts.batch_size}; pass the "
                         "verification of those drafts")

    def _accept_matrix(self, matrix: np.ndarray, lens: np.ndarray) -> None:
        """:meth:`accept` of the pending requests' emitted tokens as rows in batch order
        (``matrix[b, :lens[b]]``; int32 matrix, int64 lengths, no other checks made yet)."""
        fast = self._exact and self._mem is not None  # appended and counted in one call
        if self._one_call and self._pend_windows is None:
            # The whole accept is that call: done in as few interpreter steps as it takes
            # when it accepts; else nothing was written, and the path below says why.
            self._accept_call(matrix, lens, fast)
            if self._info[0] == 0:  # (steps.ACCEPTED)
                self._clear_pending()
                return
        cfg = self.config
        store = self._store
        slots = self._pend_slots
        before = store.size[slots].tolist() if self._exact and not fast else None
        self._check_and_append(matrix, lens, fast)
        if self._pend_windows is not None:  # 0.5.23: the windows matched, before appending
            self._port.insert_packed(*self._pend_windows, wait=True)
        if before is not None:
            self._count(slots.tolist(), before)
        if self._windows and not cfg.stateful:  # 0.5.9: after appending, every request
            b = slots.size
            flat = np.empty(b * cfg.insert_length, np.int32)
            offsets = np.empty(b + 1, np.int64)
            kernels("serving.steps").gather_tails(store.buf, store.size, slots,
                                                  cfg.insert_length, flat, offsets,
                                                  np.empty(b, np.int64))
            self._port.insert_packed(flat, offsets, wait=True)
        self._clear_pending()

    def _from_mapping(self, emitted: Mapping[Any, Any]
                      ) -> tuple[np.ndarray | None, np.ndarray]:
        """The mapping form as (rows in batch order, lengths); (None, _) when nothing is
        pending and nothing given."""
        row_of = {k: i for i, k in enumerate(self._pend_keys)}
        arrays: list[np.ndarray | None] = [None] * len(row_of)
        for rid, toks in emitted.items():
            key = v.as_request_id(rid, "emitted key")
            i = row_of.get(key)
            if i is None:
                if key not in self._slot:
                    raise UnknownRequestError(key, len(self._slot))
                raise ValueError(f"emitted[{rid!r}]: that request has no pending proposal "
                                 f"(pending: {self.pending})")
            arr = v.as_sequence(toks, f"emitted[{rid!r}]")
            if arr.size == 0:
                raise ValueError(f"emitted[{rid!r}] is empty; a verify step emits at least the "
                                 "bonus token")
            arrays[i] = arr
        missing = [k for k, a in zip(self._pend_keys, arrays) if a is None]
        if missing:
            raise ValueError(f"emitted lacks pending requests {missing}: every request of the "
                             "proposed batch is accepted together (finish() drops one)")
        if not arrays:
            return None, np.zeros(0, np.int64)
        lens = np.fromiter(map(len, arrays), np.int64, len(arrays))
        matrix = np.zeros((len(arrays), int(lens.max())), np.int32)
        for i, a in enumerate(arrays):
            matrix[i, :a.size] = a
        return matrix, lens

    def _accept_call(self, matrix: np.ndarray, lens: np.ndarray, count: bool) -> None:
        """The one compiled call of :meth:`_check_and_append` (its outcome in ``_info``,
        ``_where``)."""
        d = self._pend_drafts
        tokens, mask = d._tokens, d._mask
        rows = self._pend_rows
        if rows.size != tokens.shape[0]:
            tokens, mask = tokens[rows], mask[rows]
        if not (tokens.flags.c_contiguous and mask.flags.c_contiguous and
                matrix.flags.c_contiguous):  # (the kernels' entry points read C order)
            tokens, mask, matrix = (np.ascontiguousarray(a) for a in (tokens, mask, matrix))
        if self._where.size < lens.size:
            self._where = np.zeros(2 * lens.size, np.int64)
        if count:
            self._accept_counted(tokens, mask, matrix, lens, self._where, self._info)
            return
        store = self._store
        args = (tokens, mask, matrix, lens, store.buf, store.size, store.steps, store.nsteps,
                self._pend_slots, self._where, self._info)
        self._entries("accept_rows", kernels("serving.steps").accept_rows, args)(*args)

    def _check_and_append(self, matrix: np.ndarray, lens: np.ndarray, count: bool) -> None:
        """Check every row of emitted tokens against its proposed tree, then append them (one
        compiled call; nothing is written if a row is refused); ``count``: the exact counts
        of the remembered state in the same call."""
        steps, info = kernels("serving.steps"), self._info
        while True:
            self._accept_call(matrix, lens, count)
            code, bad = info[:2].tolist()
            if code != steps.NO_ROOM:
                break
            self._store.reserve(bad)
        if code == steps.ACCEPTED:
            return
        if code == steps.NONE_KEPT:  # only a max_tokens array is not checked before
            raise ValueError(f"max_tokens[{bad}] = {int(lens[bad])}; lengths must be >= 1")
        if code == steps.NEGATIVE:  # the first among those kept: past max_tokens, unread
            k = int(self._where[bad])
            raise v.negative_error(f"emitted[{self._pend_keys[bad]!r}][{k}]", matrix[bad, k])
        if code == steps.TOO_LONG:
            n = self._pend_drafts._tokens.shape[1]
            raise ValueError(f"emitted[{self._pend_keys[bad]!r}] has {int(lens[bad])} tokens, "
                             f"but a tree of {n} slots emits at most {n} (its longest path + "
                             "the bonus token)")
        if code == steps.NOT_A_PATH:
            k = int(self._where[bad])
            raise ValueError(f"emitted[{self._pend_keys[bad]!r}] is not a path of its proposed "
                             f"tree + a bonus token: token {int(matrix[bad, k])} at position {k} "
                             f"is no child of the previous one (accepted drafts "
                             f"{matrix[bad, :k].tolist()}); pass what verification emitted")

    def _clear_pending(self) -> None:
        self._pend_keys = []
        self._pend_slots = self._pend_rows = NONE
        self._pend_drafts = None
        self._pend_windows = None
