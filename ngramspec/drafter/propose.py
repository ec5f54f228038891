"""The :class:`~ngramspec.Drafter`'s ``propose``: each request's window matched (statefully, as
SGLang's worker does; ADAPTIVE across the request's sources), and the windows a later
``accept`` inserts held pending.  A mixin, as its ``accept`` (:mod:`.accept`) and ``prepare``
(:mod:`.admit`) are, so that the hot path reads the drafter's own fields."""

from __future__ import annotations

from typing import Any, Hashable, Sequence

import numpy as np

from .. import _validate as v
from ..drafts import DraftBatch
from ..engine import kernels

__all__ = ["ProposeSteps"]

_ID_TYPES = frozenset((str, int))
# early_insert: windows inserted in the match's call up to this batch, beyond by the thread
# (step_api, 2 ms forward: 1.1-2x faster at batch 1-8, the thread 1.1-1.6x at 16 and 48).
_FUSED_MAX = 8


class ProposeSteps:
    """``propose`` and what it leaves for ``accept``."""

    def propose(self, rids: Sequence[Any], *, batch_size: int | None = None) -> DraftBatch:
        """Draft trees for these requests, in this order (one row each).

        Matches each request's last ``max_trie_depth`` tokens statefully, with its full
        length as ``total_len`` (0.5.9: the last ``max_match_window_size``, statelessly;
        ADAPTIVE: statelessly, the request's own trie first with ``local_index``).  Every
        request proposed must be accepted (or finished) before it is proposed again.
        ``batch_size`` (with ``costs``): requests in the step's forward, default
        ``len(rids)``.
        """
        if self._port.holding:  # finished requests: taught once these trees are drafted
            return self._propose_then_release(rids, batch_size)
        if type(rids) is list and len(rids) == 1 and self._one and not self._pend_keys \
                and type(rids[0]) in _ID_TYPES and batch_size is None:
            slot = self._slot.get(rids[0])  # a server's batch 1: the fewest interpreter steps
            if slot is not None and not self._port.corpora_active:
                return self._propose_one(rids[0], slot)
        if batch_size is not None and self._costs is None:
            raise ValueError("batch_size= goes with costs= (min_expected_accept='auto')")
        if type(rids) is not list and v.is_tensor(rids):
            rids = v.as_request_ids(rids, name="rids")
        if type(rids) is not list and (isinstance(rids, (str, bytes)) or
                                       not isinstance(rids, (Sequence, np.ndarray))):
            raise TypeError(f"rids must be a sequence of request ids, got {type(rids).__name__}")
        b = len(rids)
        if b == 0:
            raise ValueError("rids is empty; propose at least one request")
        slots = None
        if type(rids) is list and set(map(type, rids)) <= _ID_TYPES:
            get = self._slot.get
            slots = [get(r) for r in rids]
            keys = rids.copy()
        if slots is None or None in slots:  # other id types, or an unknown id: the slow way
            found = [self._get(r, f"rids[{i}]") for i, r in enumerate(rids)]
            keys, slots = [k for k, _ in found], [s for _, s in found]
        if self._pend_keys or (b > 1 and len(set(slots)) != b):
            self._check_not_pending(rids, keys)
        cfg = self.config
        store = self._store
        length = cfg.match_length
        if b == 1 and self._plain:  # one request: its row's tail as it is
            slot_arr = self._one_slot.get(slots[0])
            if slot_arr is None:
                slot_arr = self._one_slot[slots[0]] = np.array(slots, np.int64)
            size = int(store.size[slots[0]])
            flat = store.buf[slots[0], max(0, size - length):size]
            if self._early and self._mem is not None and not self._port.corpora_active:
                # the window inserted in the match's call: no hand-off to the insert thread
                drafts = self._match_insert(flat, None, keys, size, slot_arr)
                return self._pend(keys, slot_arr, drafts, None, None)
            drafts = self._port.match_one(flat, keys[0], size)
            offsets = self._offsets1.get(flat.size)
            if offsets is None:
                offsets = self._offsets1[flat.size] = np.array([0, flat.size], np.int64)
            return self._pend(keys, slot_arr, drafts, flat.copy(), offsets)
        slot_arr = np.array(slots, np.int64)
        remembered = self._adaptive and self._mem is not None
        flat = offsets = None  # the contexts, packed (remembered ADAPTIVE: for windows only)
        if not remembered or self._windows:
            flat = np.empty(b * length, np.int32)
            offsets = np.empty(b + 1, np.int64)
            lens = np.empty(b, np.int64)
            kernels("serving.steps").gather_tails(store.buf, store.size, slot_arr, length,
                                                  flat, offsets, lens)
        if remembered:
            drafts = self._propose_adaptive(slot_arr, batch_size)
        elif self._adaptive:
            ctxs = [flat[offsets[i]:offsets[i + 1]] for i in range(b)]
            local = [self._local[s] for s in slots] if cfg.local_index else None
            drafts = self.cache.match(ctxs, local=local, costs=self._costs,
                                      batch_size=batch_size)
        elif cfg.stateful and self._early and self._mem is not None and \
                not self._port.corpora_active and b <= _FUSED_MAX:
            # the windows inserted in the match's call: no hand-off to the insert thread
            drafts = self._match_insert(flat, offsets, keys, lens, slot_arr)
            flat = None
        elif cfg.stateful:
            drafts = self._port.match_packed(flat, offsets, keys, lens)
        else:
            drafts = self.cache.match([flat[offsets[i]:offsets[i + 1]] for i in range(b)])
        return self._pend(keys, slot_arr, drafts, flat, offsets)

    def _propose_then_release(self, rids: Sequence[Any], batch_size: int | None
                              ) -> DraftBatch:
        """:meth:`propose` without the cache's held inserts (:meth:`finish`'s counts), which
        are due once the trees are drafted (a refused call leaves them held)."""
        port = self._port
        held = port.take_held()
        try:
            drafts = self.propose(rids, batch_size=batch_size)
        except BaseException:
            port.put_back(held)
            raise
        port.drafted(held)
        return drafts

    def _propose_adaptive(self, slots: np.ndarray, batch_size: int | None) -> DraftBatch:
        """ADAPTIVE trees of these store rows in one compiled call, from the remembered
        state (:mod:`ngramspec.engine.serving.remembered`)."""
        port = self._port
        costs = None
        if self._costs is not None:
            costs = np.array(port.step_costs(self._costs, batch_size, slots.size), np.float64)
        with port.settled() as backend:
            out = self._mem.propose(self._store.buf, self._store.size, slots, backend.trie,
                                    costs, backend.auto_rate)
        return DraftBatch._trusted(*out)

    def _propose_one(self, key: Hashable, slot: int) -> DraftBatch:
        """:meth:`propose` of one known request, nothing pending (``_one``): a server's
        batch 1, with :meth:`_match_insert` and :meth:`_pend` spelled out for one request
        (their two calls cost 1.1-1.6 us a step here, with the caches a forward has just
        evicted: measured A/B with the step API benchmark's loop); :meth:`_match_insert`
        when the shared trie must grow first."""
        slot_arr = self._one_slot.get(slot)
        if slot_arr is None:
            slot_arr = self._one_slot[slot] = np.array([slot], np.int64)
        drafts = None
        if self._adaptive:
            drafts = self._propose_adaptive(slot_arr, None)
        else:
            store = self._store
            size = int(store.size[slot])
            ctx = store.buf[slot, max(0, size - self._mlen):size]
            with self._port.settled() as backend:
                eng, at = backend.engine_for(1)
                if self._mem.match_insert(ctx, backend.row_of(key), size, eng, at, slot,
                                          backend.lru):
                    pool = backend.pool
                    drafts = DraftBatch._trusted(pool[0][at:at + 1], pool[1][at:at + 1],
                                                 pool[2][at:at + 1])
            if drafts is None:  # the shared trie grows first
                drafts = self._match_insert(ctx, None, [key], size, slot_arr)
        if self._chain:
            drafts = drafts.chains()
        self._pend_keys = [key]
        self._pend_slots = slot_arr
        self._pend_rows = self._rows[1]
        self._pend_drafts = drafts
        self._pend_windows = None
        return drafts

    def _match_insert(self, flat: np.ndarray, offsets: np.ndarray | None, keys: list,
                      lens: Any, slots: np.ndarray) -> DraftBatch:
        """``early_insert`` up to ``_FUSED_MAX`` requests: the match and the inserts of its
        windows in one compiled call (:mod:`ngramspec.engine.serving.remembered`'s
        ``match_insert_one``, or ``match_insert_batch``); ``offsets`` None: one request,
        ``lens`` its total length."""
        mem = self._mem
        b = slots.size
        with self._port.settled() as backend:
            rows = backend.row_of(keys[0]) if offsets is None else backend.rows_of(keys)
            while True:
                eng, at = backend.engine_for(b)
                if (mem.match_insert(flat, rows, lens, eng, at, int(slots[0]), backend.lru)
                        if offsets is None else mem.match_insert_batch(
                            flat, offsets, rows, lens, eng, at, slots, backend.lru)):
                    pool = backend.pool  # (its rows as arrays now: no lazy views later)
                    return DraftBatch._trusted(pool[0][at:at + b], pool[1][at:at + b],
                                               pool[2][at:at + b])
                t = backend.trie
                while t.alloc < min(t.capacity, int(mem.need[0])):
                    t.grow()

    def _pend(self, keys: list[Hashable], slots: np.ndarray, drafts: DraftBatch,
              flat: np.ndarray, offsets: np.ndarray) -> DraftBatch:
        """Record the proposal and return what is sent (with ``chain``, one path per request:
        a verifier of chains is sent nothing else); 0.5.23's windows (the contexts matched,
        packed in ``flat``, which nothing writes again) go to the insert thread now with
        ``early_insert``."""
        if self._chain:
            drafts = drafts.chains()
        windows = None
        if self._windows and self.config.stateful and flat is not None:
            if self._early:  # inserted while the caller's forward runs
                self._port.insert_packed(flat, offsets, wait=False)
            else:
                windows = (flat, offsets)
        self._pend_keys = keys
        self._pend_slots = slots
        rows = self._rows.get(len(keys))
        if rows is None:
            rows = self._rows[len(keys)] = np.arange(len(keys), dtype=np.int64)
        self._pend_rows = rows
        self._pend_drafts = drafts
        self._pend_windows = windows
        return drafts

    def _check_not_pending(self, rids: Sequence[Any], keys: list[Hashable]) -> None:
        if len(set(keys)) != len(keys):
            raise v.duplicate_error(keys, "rids", "each request is proposed once per step")
        pending = set(self._pend_keys)
        for i, (rid, key) in enumerate(zip(rids, keys)):
            if key in pending:
                raise ValueError(f"rids[{i}] = {rid!r} was proposed and not accepted yet; call "
                                 "accept() for it first")
