"""The step API's remembered state: what the compiled replay keeps between steps, for
:class:`~ngramspec.Drafter`.

Per slot of the drafter's request store (a row of its token buffer) it keeps:

- the nodes its last counted insert into the shared trie walked (``pc``:
  :func:`~.trie.insert_suffixes`'s remembered paths), so that the next step's counted insert
  needs no child look-ups; the same (``pw``) for SGLang's window inserts at batch 1;
- with ``local_index``, the request's own index (:mod:`~.own_index`: a suffix automaton with
  exact counts, built at admission and appended to as tokens are accepted, O(new tokens) a
  step whatever the context's length), as a :class:`~.own_index.OwnIndexArrays`.

The kernels take the drafter's store arrays directly:

- :func:`propose_adaptive`: the ADAPTIVE trees of a batch (own index first;
  ``min_expected_accept="auto"``: the cap chosen over the batch), one call;
- :func:`count_step`: after ``accept`` appended the emitted tokens, every new n-gram counted
  once, into each request's own index or the shared trie, one call.

Remembered nodes of the shared trie are checked against the node versions (the shared trie
keeps its LRU list: anyone may insert into it) and forgotten when its epoch changes
(``reset``).  Drafts are those of the reference, node for node.
"""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
from numba.core import types as _nbtypes
from numba.experimental import structref as _structref

from ..._jit import EntryPoints, jit
from ...config import NgramConfig
from ..adaptive import adaptive_scratch, choose_cap, draft_tree, layout_prefix, save_creation
from .replay import _list_append, _list_of, _list_set  # the replay's typed-list kernels
from ..batch import match_one, match_pooled
from .steps import ACCEPTED, accept_rows
from ..tree import BUCKET_COUNTS
from .own_index import OwnIndex, OwnIndexArrays, own_append, own_reset
from ..trie import (LRU_LIST, LRU_STAMPS, M_EPOCH, M_SIZE, TrieArrays, build_lru, in_use,
                   insert_suffixes, unpack)

__all__ = ["Remembered", "OwnTrie", "StepState", "propose_adaptive", "accept_and_count",
           "count_step", "match_insert_one", "match_insert_batch",
           "SHARED_ROOM"]

# count_step's outcome: 0 done, else the trie that needs room first (-1 the shared one, else
# 1 + slot), with the node slots it must have allocated in ``need[0]``.
SHARED_ROOM = -1


@_structref.register
class _StepStateType(_nbtypes.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, _nbtypes.unliteral(typ)) for name, typ in fields)


class StepState(_structref.StructRefProxy):
    """What the step kernels read besides the store and the shared trie, as one Numba
    structure (unboxed in one step; measured: its ~45 arrays as loose arguments and tuples
    cost 4.4 us per call).  Fields: the remembered paths ``pc`` (``(node, ver, start, len)``
    per slot), per slot ``mode``/``clock`` (unused since the own tries gave way to own
    indexes) and ``epoch`` (the shared trie's, when its nodes were remembered), ``tries``
    (the own indexes' bundles, a typed list), ``path``/``need`` (work space), ADAPTIVE's
    ``params``, ``sc``,
    ``cal`` and ``saved`` (``min_expected_accept="auto"``'s rows), ``bc`` (bucket counts),
    and ``ints``: trie depth, capacity, match length, ``local_index``, nodes per step's
    counted insert; ``pw``/``wepoch``: the same as ``pc``/``epoch`` for SGLang's window
    inserts (batch 1, :func:`match_insert_one`).  A plain namespace where the JIT is off."""


_STATE_FIELDS = ("pc", "mode", "clock", "epoch", "pw", "wepoch", "tries", "path", "need",
                 "params", "sc", "cal", "saved", "bc", "ints")
_structref.define_proxy(StepState, _StepStateType, list(_STATE_FIELDS))


@jit
def _new_state(pc, mode, clock, epoch, pw, wepoch, tries, path, need, params, sc, cal, saved, bc,
               ints):
    return StepState(pc, mode, clock, epoch, pw, wepoch, tries, path, need, params, sc, cal,
                     saved, bc, ints)


@jit
def _set_rows(st, pc, mode, clock, epoch, pw, wepoch):
    st.pc = pc
    st.mode = mode
    st.clock = clock
    st.epoch = epoch
    st.pw = pw
    st.wepoch = wepoch


@jit
def _set_saved(st, saved):
    st.saved = saved


def _jit_on() -> bool:
    return getattr(_new_state, "overloads", None) is not None


def _typed_list(bundle):
    return _list_of(bundle) if _jit_on() else [bundle]


def _append(lst, bundle) -> None:
    if isinstance(lst, list):
        lst.append(bundle)
    else:
        _list_append(lst, bundle)


def _set(lst, i: int, bundle) -> None:
    if isinstance(lst, list):
        lst[i] = bundle
    else:
        _list_set(lst, i, bundle)


def _saved_rows(rows: int, n: int) -> tuple:
    """``min_expected_accept="auto"``: each tree's token, parent and probability rows and
    its size, kept while the cap is chosen over the batch."""
    return (np.zeros((rows, n), np.int32), np.zeros((rows, n), np.int32),
            np.zeros((rows, n), np.float64), np.zeros(rows, np.int32))


_NO_COSTS = np.zeros(0, np.float64)


class Remembered:
    """Per slot of a :class:`~ngramspec.Drafter`'s store: the remembered paths of its counted
    inserts, its own trie (``local_index``) with that trie's LRU mode and clock, and the shared
    trie's epoch the remembered nodes belong to (all in :attr:`state`, a :class:`StepState`);
    rows grow with the store (:meth:`grow`).  Its methods drive the kernels over the store's
    arrays (``buf``: a row of token ids per slot, ``size``: tokens per row); the caller holds
    the shared trie's lock."""

    def __init__(self, config: NgramConfig, rows: int, auto: bool) -> None:
        depth, n = config.trie_depth, config.draft_token_num
        self.depth, self.n, self.capacity = depth, n, config.capacity
        self.local = config.local_index
        width = depth - 1 + n  # a step's counted insert: depth - 1 + emitted tokens
        self.per_count = width * depth  # new nodes of one step's counted insert, at most
        self.rows = 0
        self.pc = (np.zeros((0, width, depth), np.int32), np.zeros((0, width, depth), np.int64),
                   np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.mode = np.zeros(0, np.int64)
        self.clock = np.zeros(0, np.int64)
        self.epoch = np.zeros(0, np.int64)
        self.pw = (np.zeros((0, depth, depth), np.int32), np.zeros((0, depth, depth), np.int64),
                   np.zeros(0, np.int64), np.zeros(0, np.int64))
        self.wepoch = np.zeros(0, np.int64)
        self.path = np.zeros(depth, np.int32)
        self.need = np.zeros(1, np.int64)
        self._entries = EntryPoints()  # (the same types at every call: no typing)
        adaptive = config.match_type == "ADAPTIVE"
        if adaptive:
            from ...config.acceptance_table import calibration_array

            params = (int(depth), int(config.budget), float(config.min_token_prob),
                      float(config.max_spec_factor),
                      0.0 if auto else float(config.min_expected_accept),
                      float(config.shared_pseudo_count))
            cal = calibration_array(config)
        else:  # placeholders of the same types (only counted inserts run)
            params, cal = (int(depth), 1, 0.0, 0.0, 0.0, 0.0), _NO_COSTS
        sc = adaptive_scratch(config.budget if adaptive else 1, depth)
        self.saved = _saved_rows(1 if auto else 0, n)
        self.window = config.own_window
        # The own indexes' bundles (a placeholder of their type without local_index).
        self.owns: list[OwnIndexArrays] = []
        self._empty: OwnIndexArrays | None = None
        self.trie_list = _typed_list(OwnIndexArrays(depth, self.window, 1).bundle)
        if self.local:
            self.trie_list = None
        self._grow_rows(rows)
        ints = np.asarray([depth, config.capacity, config.match_length, int(self.local),
                           self.per_count], np.int64)
        fields = (self.pc, self.mode, self.clock, self.epoch, self.pw, self.wepoch,
                  self.trie_list, self.path, self.need, params, sc, cal, self.saved,
                  BUCKET_COUNTS, ints)
        self.state = (_new_state(*fields) if _jit_on()
                      else SimpleNamespace(**dict(zip(_STATE_FIELDS, fields))))

    def _grow_rows(self, rows: int) -> None:
        old = self.rows

        def more(a: np.ndarray) -> np.ndarray:
            out = np.zeros((rows,) + a.shape[1:], a.dtype)
            out[:old] = a
            return out

        self.pc = tuple(more(a) for a in self.pc)
        self.pw = tuple(more(a) for a in self.pw)
        self.mode, self.clock, self.epoch, self.wepoch = (
            more(a) for a in (self.mode, self.clock, self.epoch, self.wepoch))
        self.rows = rows
        if not self.local:
            return
        # A row's own index is built at its request's admission (start): until then the
        # row holds one empty index shared by all such rows, which nothing reads or writes.
        if self._empty is None:
            self._empty = OwnIndexArrays(self.depth, self.window, 1)
        for _ in range(old, rows):
            self.owns.append(self._empty)
            if self.trie_list is None:
                self.trie_list = _typed_list(self._empty.bundle)
            else:
                _append(self.trie_list, self._empty.bundle)

    def grow(self, rows: int) -> None:
        """Room for ``rows`` slots."""
        if rows <= self.rows:
            return
        self._grow_rows(rows)
        if _jit_on():
            _set_rows(self.state, self.pc, self.mode, self.clock, self.epoch, self.pw,
                      self.wepoch)
        else:
            st = self.state
            st.pc, st.mode, st.clock, st.epoch = self.pc, self.mode, self.clock, self.epoch
            st.pw, st.wepoch = self.pw, self.wepoch

    def build(self, row: np.ndarray, stop: int, count: int, total: int | None = None
              ) -> OwnIndexArrays:
        """A new own index of ``row[:stop]`` (every n-gram ending at ``count`` or later
        counted), with room reserved for the decode of a request ``total`` tokens long
        (default ``stop``): a quarter of its length more, at least 1,024 tokens, so that its
        first steps' appends never grow it.  Touches nothing shared: any thread may run it
        (the kernels release the GIL)."""
        o = OwnIndexArrays(self.depth, self.window, 1)
        base = max(0, count - self.depth + 1)
        o.grow(min(max(stop - base, 1), self.window))
        own_reset(o.bundle, base, count)
        while own_append(o.bundle, row, stop, 0) < stop:
            o.make_room()
        o.reserve(max(1024, ((stop if total is None else total) - base) // 4))
        return o

    def start(self, buf: np.ndarray, size: np.ndarray, slot: int, count: int,
              built: OwnIndexArrays | None = None) -> None:
        """A new request in ``slot``: nothing remembered; with ``local``, its own index of its
        row (:meth:`build`), or ``built`` (:meth:`build` of the row's first tokens, from the
        same ``count``) with the rest of the row appended."""
        self.pc[3][slot] = 0
        self.pw[3][slot] = 0
        self.clock[slot] = 0
        if not self.local:
            return
        m = int(size[slot])
        if built is None:
            built = self.build(buf[slot], m, count)
        else:  # (entry points: the types never vary; a server adds many at once)
            args = (built.bundle, buf[slot], m, 0)
            while self._entries("own_append", own_append, args)(*args) < m:
                built.make_room()
                args = (built.bundle,) + args[1:]
        self.owns[slot] = built
        if _jit_on():
            args = (self.trie_list, slot, built.bundle)
            self._entries("list_set", _list_set, args)(*args)
        else:
            self.trie_list[slot] = built.bundle

    def make_room(self, slot: int) -> None:
        """``slot``'s own index stopped short of an append: grow it."""
        self.owns[slot].make_room()
        _set(self.trie_list, slot, self.owns[slot].bundle)

    def propose(self, buf: np.ndarray, size: np.ndarray, slots: np.ndarray,
                shared: TrieArrays, costs: np.ndarray | None, rate: np.ndarray) -> tuple:
        """ADAPTIVE trees of ``slots`` (:func:`propose_adaptive`): ``(tokens, mask, num,
        probs)``.  ``costs``: ``min_expected_accept="auto"``'s step time per cap, ``rate``
        its running totals."""
        b, n = slots.size, self.n
        tokens = np.empty((b, n), np.int32)
        mask = np.empty((b, n, n), np.bool_)
        num = np.empty(b, np.int32)
        probs = np.empty((b, n), np.float64)
        if costs is None:
            costs = _NO_COSTS
        elif self.saved[0].shape[0] < b:
            self.saved = _saved_rows(2 * b, n)
            if _jit_on():
                _set_saved(self.state, self.saved)
            else:
                self.state.saved = self.saved
        args = (buf, size, slots, shared.packed, self.state, costs, rate, tokens, mask, num,
                probs)
        self._entries("propose", propose_adaptive, args)(*args)
        return tokens, mask, num, probs

    def accept(self, drafts: tuple, emitted: np.ndarray, lens: np.ndarray, store,
               slots: np.ndarray, where: np.ndarray, info: np.ndarray,
               shared: TrieArrays | None, lru: np.ndarray) -> None:
        """:func:`accept_and_count` (``shared`` None: no counts), then the counts again after
        growing the tries it asked room in; ``info`` as :func:`~.steps.accept_rows`."""
        before = np.empty(slots.size, np.int64)
        tokens, mask = drafts
        bundle = shared.packed if shared is not None else None
        args = (tokens, mask, emitted, lens, store.buf, store.size, store.steps, store.nsteps,
                slots, where, info, before, bundle, self.state, lru)
        # (the arrays are the Drafter's and verification's own, C-ordered: types never vary)
        self._entries("accept" if bundle is not None else "accept_uncounted", accept_and_count,
                    args)(*args)
        while info[0] == ACCEPTED and info[2] != 0:
            want = int(self.need[0])
            if info[2] == SHARED_ROOM:
                while shared.alloc < min(shared.capacity, want):
                    shared.grow()
            else:
                self.make_room(int(info[2]) - 1)
            cargs = (store.buf, store.size, slots, before, shared.packed, self.state, lru)
            info[2] = self._entries("count", count_step, cargs)(*cargs)

    def match_insert(self, ctx: np.ndarray, row: int, total: int, eng, at: int,
                     slot: int, lru: np.ndarray) -> bool:
        """:func:`match_insert_one` (False: the shared trie needs ``need[0]`` node slots
        allocated first; nothing was done)."""
        args = (ctx, row, total, eng, at, slot, self.state, lru)
        return self._entries("match_insert", match_insert_one, args)(*args)

    def match_insert_batch(self, flat: np.ndarray, offsets: np.ndarray, rows: np.ndarray,
                           lens: np.ndarray, eng, at: int, slots: np.ndarray,
                           lru: np.ndarray) -> bool:
        """:func:`match_insert_batch` (False: as :meth:`match_insert`)."""
        args = (flat, offsets, rows, lens, eng, at, slots, self.state, lru)
        return self._entries("match_insert_batch", match_insert_batch, args)(*args)

    def own(self, slot: int) -> "OwnTrie":
        return OwnTrie(self, slot)

    def index(self, slot: int) -> OwnIndexArrays:
        """``slot``'s own index."""
        return self.owns[slot]


class OwnTrie:
    """A request's own index in the remembered state, as far as tests and debugging read it."""

    def __init__(self, mem: Remembered, slot: int) -> None:
        self._mem, self._slot = mem, slot

    def __len__(self) -> int:
        return int(self._mem.owns[self._slot].meta[0])

    def check_integrity(self) -> None:
        """The automaton's invariants (:meth:`~.own_index.OwnIndexArrays.check`)."""
        self._mem.owns[self._slot].check()


@jit(what="the step API's ADAPTIVE drafts")
def propose_adaptive(buf, size, slots, shared, st, costs, rate, tokens, mask, num, probs):
    """The ADAPTIVE tree of each slot ``slots[b]`` (its last match-length tokens of ``buf``'s
    row, ``size[slot]`` tokens so far) into row ``b`` of ``tokens``/``mask``/``num``/
    ``probs``: its own trie first with ``local_index`` (its anchors known from its last
    counted insert where they can be), then the ``shared`` trie (packed).  ``costs``
    (non-empty with ``min_expected_accept="auto"``): the step time per drafted-node cap, the
    cap chosen over the batch (:func:`~.adaptive.choose_cap`, ``rate`` updated)."""
    t = unpack(shared)
    params, sc, cal, bc = st.params, st.sc, st.cal, st.bc
    mlen = st.ints[2]
    use_local = st.ints[3] != 0
    b_n = slots.size
    auto = costs.size > 0
    tok_rows, par_rows, prob_rows, used_rows = st.saved
    for b in range(b_n):
        s = slots[b]
        m = size[s]
        ctx = buf[s, max(0, m - mlen):m]
        if use_local:
            used = draft_tree(ctx, params, None, t, bc, sc, tokens[b], mask[b], probs[b], cal,
                              OwnIndex(*st.tries[s]))
        else:
            used = draft_tree(ctx, params, None, t, bc, sc, tokens[b], mask[b], probs[b], cal)
        num[b] = used
        if auto:
            save_creation(sc, used, tok_rows[b], par_rows[b], prob_rows[b])
            used_rows[b] = used
    if auto:
        cap = choose_cap(prob_rows[:b_n], used_rows[:b_n], costs, rate)
        for b in range(b_n):
            if num[b] > cap:
                num[b] = cap
                s = slots[b]
                layout_prefix(buf[s, size[s] - 1], cap, tok_rows[b], par_rows[b], prob_rows[b],
                              sc, bc, tokens[b], mask[b], probs[b])


@jit
def _shared_key(t, lru, new_nodes, capacity):
    """Before an insert of at most ``new_nodes`` nodes into the shared trie ``t`` (``lru``:
    its LRU mode, clock and list switches, as :class:`~.backend.EngineBackend` keeps them):
    the list from the first insert that could evict on; returns the key remembered nodes of
    the shared trie are valid under (its epoch and list switches: nodes remembered under
    stamps carry no versions)."""
    if lru[0] == LRU_STAMPS and t.meta[M_SIZE] + new_nodes > capacity:
        build_lru(t)
        lru[0] = LRU_LIST
        lru[2] += 1
    return (t.meta[M_EPOCH] << 24) + lru[2]


@jit
def _count(buf, size, slots, before, shared, st, lru):
    """:func:`count_step`'s work (``shared``: the packed shared trie)."""
    t = unpack(shared)
    depth, capacity = st.ints[0], st.ints[1]
    use_local = st.ints[3] != 0
    per_count = st.ints[4]
    pc, epoch, path = st.pc, st.epoch, st.path
    b_n = slots.size
    if use_local:
        # Each own index appends what it has not indexed yet (resumable: one that stops
        # short is grown by the caller and the call repeated).
        for b in range(b_n):
            s = slots[b]
            m = size[s]
            if own_append(st.tries[s], buf[s], m, 0) < m:
                return 1 + s
        return 0
    else:
        want = in_use(t) + b_n * per_count
        if t.tok.size < min(capacity, want):
            st.need[0] = want
            return SHARED_ROOM
    zero = np.int64(0)
    key = _shared_key(t, lru, b_n * per_count, capacity)
    for b in range(b_n):
        s = slots[b]
        start = before[b]
        m = size[s]
        if start >= m:
            continue
        lo = max(0, start - depth + 1)
        seq = buf[s, lo:m]
        if epoch[s] != key:  # emptied, or become the list, since
            pc[3][s] = 0
            epoch[s] = key
        lru[1] = insert_suffixes(seq, zero, lo, zero, start - lo, depth, capacity, lru[0],
                                 lru[1], t, path, pc, s)[1]
    return 0


@jit(what="the step API's counted inserts")
def count_step(buf, size, slots, before, shared, st, lru):
    """Count once every n-gram of each slot's row that ends at ``before[b]`` or later (the
    tokens ``accept`` just appended), into its own trie (``local_index``) or the ``shared``
    trie (packed), with the remembered paths of its last counted insert.

    First checks that every trie has room for the call (a step's insert creates at most
    ``ints[4]`` nodes per request): if one has not, returns its code (``SHARED_ROOM``, or
    ``1 + slot``) with the node slots wanted in ``need[0]``, having changed nothing; the
    caller grows it and calls again.  Returns 0 when done."""
    return _count(buf, size, slots, before, shared, st, lru)


@jit(what="the step API's accept")
def accept_and_count(tokens, mask, emitted, lens, buf, size, steps, nsteps, slots, where, info,
                     before, shared, st, lru):
    """:func:`~.steps.accept_rows` (``info[0]``, ``info[1]``), then, once the tokens are
    appended and with ``shared`` (packed; None: no counts), :func:`count_step` from each
    row's size before (kept in ``before``), its code in ``info[2]``."""
    for i in range(slots.size):
        before[i] = size[slots[i]]
    info[2] = 0
    accept_rows(tokens, mask, emitted, lens, buf, size, steps, nsteps, slots, where, info)
    if shared is not None and info[0] == ACCEPTED:
        info[2] = _count(buf, size, slots, before, shared, st, lru)


@jit(what="the step API's match and window insert")
def match_insert_one(ctx, row, total, eng, at, slot, st, lru):
    """SGLang's stateful match of one request (:func:`~.batch.match_one` into pool row
    ``at``), then the insert of the window it matched (``ctx``, the last tokens of the
    request in store slot ``slot``, ``total`` tokens so far) into the shared trie, with the
    remembered paths of that slot's last window insert: what the insert thread would do next
    with ``early_insert``, without handing it over.  Returns False, having done nothing,
    when the shared trie needs more node slots allocated first (``need[0]``)."""
    t = unpack(eng.trie)
    depth, capacity = st.ints[0], st.ints[1]
    want = in_use(t) + depth * (depth + 1) // 2  # a window's new nodes, at most
    if t.tok.size < min(capacity, want):
        st.need[0] = want
        return False
    match_one(ctx, row, total, False, eng, at)
    key = _shared_key(t, lru, depth * (depth + 1) // 2, capacity)
    if st.wepoch[slot] != key:  # emptied, or become the list, since
        st.pw[3][slot] = 0
        st.wepoch[slot] = key
    zero = np.int64(0)
    lru[1] = insert_suffixes(ctx, zero, total - ctx.size, zero, zero, depth, capacity, lru[0],
                             lru[1], t, st.path, st.pw, slot)[1]
    return True


@jit(what="the step API's match and window insert")
def match_insert_batch(flat, offsets, rows, lens, eng, at, slots, st, lru):
    """:func:`match_insert_one` of a batch: SGLang's stateful match of every request
    (:func:`~.batch.match_pooled`: contexts ``flat[offsets[b]:offsets[b + 1]]``, state rows
    ``rows``, total lengths ``lens``, pool rows from ``at``), then the windows matched
    inserted in batch order, each with the remembered paths of its store slot ``slots[b]``."""
    t = unpack(eng.trie)
    depth, capacity = st.ints[0], st.ints[1]
    b_n = slots.size
    per_window = depth * (depth + 1) // 2
    want = in_use(t) + b_n * per_window
    if t.tok.size < min(capacity, want):
        st.need[0] = want
        return False
    match_pooled(flat, offsets, rows, lens, False, eng, at)
    _windows(flat, offsets, lens, slots, t, st, lru)
    return True


@jit
def _windows(flat, offsets, lens, slots, t, st, lru):
    depth, capacity = st.ints[0], st.ints[1]
    b_n = slots.size
    key = _shared_key(t, lru, b_n * (depth * (depth + 1) // 2), capacity)
    zero = np.int64(0)
    for b in range(b_n):
        slot = slots[b]
        if st.wepoch[slot] != key:  # emptied, or become the list, since
            st.pw[3][slot] = 0
            st.wepoch[slot] = key
        ctx = flat[offsets[b]:offsets[b + 1]]
        lru[1] = insert_suffixes(ctx, zero, lens[b] - ctx.size, zero, zero, depth, capacity,
                                 lru[0], lru[1], t, st.path, st.pw, slot)[1]
