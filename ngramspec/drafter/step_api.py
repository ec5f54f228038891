"""``Drafter``: what SGLang's NGRAM worker does around the cache at every decode step.

The cache alone leaves the serving-loop bookkeeping to the caller: which window of each
request's sequence to match, what ``total_len`` is, which windows to insert and when, and when a
request's match state goes.  ``Drafter`` is the one readable definition of that bookkeeping for
SGLang 0.5.23's worker (spec sections 2.4, 3.1-3.2 and 5.4):

- prefill neither matches nor inserts: a request enters with its prompt and first token
  (beyond SGLang, :meth:`Drafter.prepare` indexes the prompt during the prefill);
- ``propose`` matches, per request in batch order, the last ``max_trie_depth`` tokens of
  prompt + output, with ``total_len`` = the full length;
- ``accept`` inserts exactly the windows that ``propose`` matched, in batch order (so the
  tokens accepted at this step reach the trie only at the next step), then appends each
  request's emitted tokens;
- ``finish`` forgets the request and erases its match state.

Profile ``sglang-0.5.9`` follows that release's worker instead (legacy spec section 7.2):
``propose`` matches the last ``max_match_window_size`` tokens statelessly, and ``accept``
appends first, then inserts the last ``branch_length`` tokens of every request of the batch.

The options beyond SGLang (``index_prompt``, ``exact_counts``, ``local_index``; see
:class:`NgramConfig`) change only what is inserted where and when:

- with ``exact_counts`` or ``local_index``, each n-gram occurrence of a request's sequence is
  counted once, as soon as its last token is known (prompt n-grams too with
  ``index_prompt``); without them, the windows above are inserted, plus the whole prompt at
  admission with ``index_prompt``;
- with ``local_index``, those exact counts go to the request's own trie, and the shared trie
  receives the request's sequence when it finishes (``exact_counts``) or SGLang's windows
  every step (without).
"""

from __future__ import annotations

from itertools import accumulate
from typing import Any, Hashable, Mapping, Sequence

import numpy as np

from .. import _validate as v
from .._jit import EntryPoints
from .accept import NONE as _NONE, AcceptSteps
from .admit import PrepareSteps
from .propose import ProposeSteps
from ..cache import BACKENDS, NgramCache
from ..config import NgramConfig
from ..drafts import DraftBatch
from ..errors import UnknownRequestError
from ..drafts.verify import VerifyResult, verify_greedy

__all__ = ["Drafter"]


class Drafter(PrepareSteps, ProposeSteps, AcceptSteps):
    """SGLang's per-step NGRAM bookkeeping around an :class:`NgramCache`, for your own loop.

    One step of a decode loop is ``propose`` (draft trees for some requests), the target's
    forward over the trees and verification (yours; see :func:`verify_greedy`), then
    ``accept`` (the :class:`VerifyResult`, or the tokens each request emitted: accepted drafts
    + bonus).  Requests enter with ``add_request`` after their prefill and leave with
    ``finish``.  Every call is compiled or batched: no Python runs per request or token
    beyond a dictionary look-up of each id.

    Parameters
    ----------
    config : NgramConfig, optional
        Settings of the cache this drafter creates (SGLang server defaults if omitted).
    cache : NgramCache, optional
        Use this cache instead of creating one (``config`` must then be omitted): several
        drafters, or a drafter and your own code, can share one trie.
    backend : {"numba", "reference"}
        Backend of the cache created here.
    costs : CostTable or CostModel, optional
        The step costs, required with ``min_expected_accept="auto"`` (refused otherwise):
        ``propose`` cuts the trees of each batch to the size that maximises the expected
        emitted tokens per unit of step time (:mod:`ngramspec.config.acceptance_table`).
    early_insert : bool, optional
        Profile ``sglang-0.5.23`` without ``exact_counts``/``local_index``: queue the windows
        that ``propose`` matched for the cache's insert thread as soon as the match is done,
        so that they are inserted while your target's forward runs (SGLang's worker inserts
        in a background thread too).  Every later call on the cache waits for them first, so
        every draft is exactly as with inserting in ``accept``; the one difference is that a
        request finished between ``propose`` and ``accept`` still has its window inserted.
        Default: on when this drafter creates its cache, off with ``cache=`` (a shared trie
        would see the windows of this step before ``accept``).
    reserve : bool, default False
        Allocate the trie's whole ``capacity`` now (:meth:`NgramCache.reserve`), as SGLang's
        worker does: no step ever waits for the trie to double (10-60 ms at 10^5-10^6
        nodes), for the memory of the whole capacity from the start.

    Examples
    --------
    >>> import ngramspec as ns
    >>> drafter = ns.Drafter(config=ns.NgramConfig(draft_token_num=4, capacity=10_000))
    >>> drafter.add_request("a", [1, 2, 3, 4, 1, 2, 3], first_token=4)
    >>> d = drafter.propose(["a"])        # nothing inserted yet: prefill does not insert
    >>> int(d.num_drafts[0])
    0
    >>> drafter.accept({"a": [1]})        # inserts the window it matched, appends [1]
    >>> d = drafter.propose(["a"])        # ... 4, 1 seen before: draft 2, 3, 4
    >>> d.tokens
    array([[1, 2, 3, 4]], dtype=int32)
    >>> r = ns.verify_greedy(d, [[2, 3, 4, 9]])   # the target's argmax at each slot
    >>> drafter.accept(r)                 # the fast form: the verify result itself
    >>> drafter.sequence("a").tolist()
    [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 9]
    >>> drafter.finish("a")
    """

    def __init__(self, *, config: NgramConfig | None = None, cache: NgramCache | None = None,
                 backend: str = "numba", costs: Any = None,
                 early_insert: bool | None = None, reserve: bool = False) -> None:
        if cache is not None:
            if config is not None:
                raise ValueError("pass either config or cache, not both (a cache carries its "
                                 "own config)")
            if not isinstance(cache, NgramCache):
                raise TypeError(f"cache must be an NgramCache, got {type(cache).__name__}")
            self.cache = cache
        else:
            self.cache = NgramCache(config=v.check_config(config),
                                    backend=v.check_backend(backend, BACKENDS))
        if v.check_bool(reserve, "reserve"):
            self.cache.reserve()
        cfg = self.cache.config
        from ..costs import check_costs

        self._costs = check_costs(cfg, costs)
        # Exact counting (once per occurrence, as tokens arrive) into which trie.
        self._exact = cfg.exact_counts or cfg.local_index
        # SGLang's windows go to the shared trie (every step, or after appending in 0.5.9).
        self._windows = not self._exact or (cfg.local_index and not cfg.exact_counts)
        can_early = cfg.stateful and self._windows and cfg.mode.backend_call == "match"
        if early_insert is None:
            early_insert = can_early and cache is None
        elif v.check_bool(early_insert, "early_insert") and not can_early:
            raise ValueError("early_insert=True is for profile 'sglang-0.5.23' with SGLang's "
                             "windows (BFS or PROB, without exact_counts/local_index): only "
                             "there are the inserted windows known at propose time")
        self._early = bool(early_insert)
        # SGLang's stateful BFS/PROB match (the serving path); small arrays reused per step.
        self._adaptive = cfg.mode.backend_call == "match_adaptive"  # read on every propose
        self._plain = cfg.stateful and not self._adaptive
        self._mlen, self._chain = cfg.match_length, cfg.chain
        self._offsets1: dict[int, np.ndarray] = {}
        self._rows: dict[int, np.ndarray] = {1: np.zeros(1, np.int64)}  # arange(b), by b
        self._one_slot: dict[int, np.ndarray] = {}
        self._info = np.zeros(3, np.int64)
        self._where = np.zeros(64, np.int64)
        # accept_rows' entry point: its arguments' types never vary (C-ordered arrays this
        # drafter or verification made), so their typing is skipped after the first call
        self._entries = EntryPoints()
        self._port = self.cache.port  # what a drafter may do beyond the cache's public calls
        self._slot: dict[Hashable, int] = {}  # request id -> store row, in order of arrival
        from ..engine.serving.request_store import RequestStore  # (no Numba until a kernel runs)

        self._store = RequestStore()
        self._local: list[Any] = [None] * self._store.size.size
        self._own_base: dict[int, int] = {}  # reference own tries: their window's start
        # prepare()'s prompts not added yet, with their own index's build (None: nothing to
        # build ahead) and the row it fills, and the one thread that builds them
        self._prepared: dict[Hashable, tuple[np.ndarray, Any, int | None]] = {}
        self._indexer: Any = None
        # The compiled replay's per-slot memory (engine.remembered) on the Numba backend, for
        # the exact counts and ADAPTIVE drafts of profile sglang-0.5.23.
        self._mem = None
        # (on another backend the same drafts through the cache's public calls, slower:
        # cache.port.why_not_compiled says why)
        if cfg.profile == "sglang-0.5.23" and self._port.compiled:
            from ..engine.serving.remembered import Remembered

            self._mem = Remembered(cfg, self._store.size.size, self._costs is not None)
            if cache is None:  # its own trie: the LRU order as stamps until it could evict
                self._port.backend.keep_stamps()
        # batch 1 straight to one compiled call (_propose_one): SGLang's match with early
        # inserts, or the remembered ADAPTIVE drafts without SGLang's windows
        self._one = self._mem is not None and (self._plain and self._early or
                                               self._adaptive and not self._windows)
        # accept can be one compiled call: no count in Python after appending (the reference
        # backend's exact counts) and no 0.5.9 windows
        self._one_call = not (self._exact and self._mem is None) and \
            not (self._windows and not cfg.stateful)
        # The last proposal not yet accepted: ids, rows, their rows in the drafts, windows.
        self._pend_keys: list[Hashable] = []
        self._pend_slots = self._pend_rows = _NONE
        self._pend_drafts: DraftBatch | None = None
        self._pend_windows: tuple[np.ndarray, np.ndarray] | None = None

    @property
    def config(self) -> NgramConfig:
        return self.cache.config

    @property
    def early_insert(self) -> bool:
        return self._early

    @property
    def requests(self) -> list[Hashable]:
        """Ids of the requests in flight, in the order they were added."""
        return list(self._slot)

    def __len__(self) -> int:
        """Requests in flight."""
        return len(self._slot)

    def __contains__(self, rid: object) -> bool:
        """Whether ``rid`` is in flight (added, not finished)."""
        try:
            return rid in self._slot
        except TypeError:  # (an unhashable id is none of them)
            return False

    @property
    def pending(self) -> list[Hashable]:
        """Ids proposed and not yet accepted, in batch order."""
        return list(self._pend_keys)

    def __repr__(self) -> str:
        return (f"Drafter(requests={len(self._slot)}, pending={len(self._pend_keys)}, "
                f"cache={self.cache!r})")

    def _get(self, rid: Any, name: str) -> tuple[Hashable, int]:
        slot = self._slot.get(rid) if type(rid) in (str, int) else None
        if slot is not None:
            return rid, slot
        key = v.as_request_id(rid, name)
        slot = self._slot.get(key)
        if slot is None:
            raise UnknownRequestError(key, len(self._slot))
        return key, slot

    def add_request(self, rid: Any, prompt_ids: Any, first_token: int) -> None:
        """Start drafting for a request whose prefill produced ``first_token``.

        Prefill neither matches nor inserts (SGLang's worker does neither for extend batches).

        Parameters
        ----------
        rid : str or int
            The request's id, unique among requests in flight.
        prompt_ids : 1-D sequence of int
            The prompt's token ids (may be empty): a list, tuple, NumPy array or torch tensor
            (a GPU tensor is copied to the host).
        first_token : int
            The token the prefill emitted (an int, or an array or tensor of one element).

        Raises
        ------
        ValueError
            A negative token id, named with its position (no tokenizer makes one; a ``-1``
            written as padding would otherwise be inserted and drafted): ids are ``>= 0``
            wherever the drafter takes them, here and in :meth:`accept`.
        """
        key, prompt = self._new_request(rid, prompt_ids)
        first = v.as_token(first_token, "first_token")
        self._admit(key, prompt, first, *self._take_prepared(key, prompt))

    def _count(self, slots: Sequence[int], starts: Sequence[int]) -> None:
        """Count once every n-gram of each slot's sequence that ends at its ``start`` or later
        (up to the trie depth long), into the request's own trie, else the shared one (the
        shared trie's batch in one insert, in batch order)."""
        depth = self.config.trie_depth
        store = self._store
        shared_seqs, shared_from = [], []
        for slot, start in zip(slots, starts):
            size = int(store.size[slot])
            if start >= size:
                continue
            lo = max(0, start - depth + 1)
            seq = store.buf[slot, lo:size].copy()
            target = self._local[slot]
            if target is not None:
                # The own index's window: full at own_window tokens, it starts again from
                # the last own_window // 2 (checked before each appended token).
                window, base = self.config.own_window, self._own_base[slot]
                for pos in range(start, size):
                    if pos - base >= window:
                        base = pos - window // 2
                if base != self._own_base[slot]:
                    self._own_base[slot] = base
                    target.reset()
                    cf = 0 if self.config.index_prompt else int(store.plen[slot])
                    lo, start = base, max(base, cf)
                    seq = store.buf[slot, lo:size].copy()
                target._insert_packed(seq, np.array([0, seq.size], np.int64),
                                      np.array([start - lo], np.int64), wait=True)
            else:
                shared_seqs.append(seq)
                shared_from.append(start - lo)
        if shared_seqs:
            self._port.insert_packed(
                np.concatenate(shared_seqs),
                np.fromiter(accumulate(map(len, shared_seqs), initial=0), np.int64,
                            len(shared_seqs) + 1),
                np.array(shared_from, np.int64), wait=True)

    def index_nbytes(self, rid: Any) -> int:
        """Bytes the request's own index holds (``local_index``; reserved, not only used), 0
        without one: about 60-80 bytes per token of its context with the compiled backend."""
        slot = self._get(rid, "rid")[1]
        if self._mem is not None and self.config.local_index:
            return self._mem.index(slot).nbytes
        return 0

    def total_len(self, rid: Any) -> int:
        """Tokens of the request so far, prompt included.  The KV cache of the target holds
        ``total_len - 1`` of them before a verify pass (the last one is the tree's root)."""
        return int(self._store.size[self._get(rid, "rid")[1]])

    def sequence(self, rid: Any) -> np.ndarray:
        """A copy of the request's prompt + output tokens."""
        return self._store.tokens(self._get(rid, "rid")[1]).copy()

    def output(self, rid: Any) -> np.ndarray:
        """A copy of the request's output tokens (first token included)."""
        slot = self._get(rid, "rid")[1]
        return self._store.tokens(slot)[self._store.plen[slot]:].copy()

    def accept(self, emitted: VerifyResult | Mapping[Any, Any], *,
               max_tokens: Any = None) -> None:
        """Record what each proposed request emitted; insert the windows SGLang inserts.

        Parameters
        ----------
        emitted : VerifyResult, or mapping of request id to 1-D int sequence
            The verification of the last ``propose``'s drafts (row ``b`` is request
            ``rids[b]``: the fast form), or, for every pending request (see
            :attr:`pending`), the tokens the verify step emitted: the accepted drafts
            followed by the bonus token (at least one token; lists, arrays or tensors).
        max_tokens : int or sequence of int, optional
            Per pending request (batch order) or for all: keep at most this many of its
            emitted tokens (where it stops: EOS, length limit); each >= 1.

        Raises
        ------
        ValueError
            If a request's emitted tokens are not a path of its proposed tree (from the root,
            each token a child of the previous one) followed by one bonus token, or hold a
            negative token id (a ``-1`` in the target's predictions, say); nothing is
            recorded then.

        The windows matched by the last ``propose`` are inserted in batch order (already
        queued there with ``early_insert``), then the tokens are appended; the emitted tokens
        reach the trie at the next step.
        """
        keys = self._pend_keys
        if isinstance(emitted, VerifyResult):
            drafts = self._pend_drafts
            lens = emitted.accept_lens
            if drafts is None or lens.size != drafts._tokens.shape[0]:
                self._refuse_result(emitted)
            matrix = emitted._tokens
            if matrix is None:
                matrix = emitted._matrix()
            if self._pend_rows.size != matrix.shape[0]:  # some were finished in between
                matrix, lens = matrix[self._pend_rows], lens[self._pend_rows]
            if type(max_tokens) is np.ndarray and max_tokens.shape == lens.shape and \
                    max_tokens.dtype.kind == "i":
                # (a cap below 1 is refused by the kernel: no pass over it here)
                self._accept_matrix(matrix, np.minimum(lens, max_tokens, dtype=np.int64))
                return
            lens = lens.astype(np.int64)
        elif isinstance(emitted, Mapping):
            matrix, lens = self._from_mapping(emitted)
            if matrix is None:
                return
        else:
            raise TypeError("emitted must be a VerifyResult or a mapping {request id: emitted "
                            f"tokens}}, got {type(emitted).__name__}")
        if max_tokens is not None:
            if type(max_tokens) is int and max_tokens >= 1:
                lens = np.minimum(lens, max_tokens)
            elif type(max_tokens) is np.ndarray and max_tokens.shape == lens.shape and \
                    max_tokens.dtype.kind == "i" and max_tokens.min() >= 1:
                lens = np.minimum(lens, max_tokens)  # (an int64 result: lens is int64)
            else:
                cap = v.as_lengths(max_tokens if np.ndim(max_tokens) else
                                   [max_tokens] * len(keys), len(keys), "max_tokens",
                                   minimum=1)
                lens = np.minimum(lens, cap)
        self._accept_matrix(matrix, lens)

    def accept_matrix(self, tokens: Any, lengths: Any) -> None:
        """:meth:`accept` of the pending requests' emitted tokens as one matrix: the form for a
        loop that verifies elsewhere and has the tokens in an array (vLLM's runner does).

        Parameters
        ----------
        tokens : (R, W) int array
            Row ``r``: what the ``r``-th request of :attr:`pending` emitted (its accepted
            drafts, then the bonus token), left-aligned; the rest of the row is not read.
        lengths : (R,) int array
            Tokens emitted per row, each in ``1 .. W``.

        Raises
        ------
        ValueError
            A shape that does not fit the pending requests, a length out of range, or what
            :meth:`accept` refuses (tokens that are no path of the proposed tree + a bonus
            token, a negative id); nothing is recorded then.

        Examples
        --------
        >>> import numpy as np, ngramspec as ns
        >>> drafter = ns.Drafter(config=ns.NgramConfig.recommended(draft_token_num=4))
        >>> drafter.add_request(0, [5, 6, 7, 5, 6], first_token=7)  # its own index: the prompt
        >>> drafter.propose([0]).tokens.tolist()
        [[7, 5, 6, 7]]
        >>> drafter.accept_matrix(np.array([[5, 6, 9]], np.int32), np.array([3]))
        >>> drafter.steps(0)
        [3]
        """
        r = len(self._pend_keys)
        if r == 0:
            raise ValueError("accept_matrix(): nothing is pending; call propose() first")
        if not (type(tokens) is np.ndarray and tokens.dtype == np.int32 and tokens.ndim == 2
                and tokens.flags.c_contiguous):
            tokens = v.as_int32_matrix(tokens, "tokens")
        if tokens.shape[0] != r:
            raise ValueError(f"tokens has {tokens.shape[0]} rows but {r} requests are pending "
                             "(one row each, in the order of Drafter.pending)")
        if not (type(lengths) is np.ndarray and lengths.dtype == np.int64 and
                lengths.shape == (r,)):
            lengths = v.as_lengths(lengths, r, "lengths", minimum=1)
        lo, hi = int(lengths.min()), int(lengths.max())
        if lo < 1 or hi > tokens.shape[1]:
            b = int(np.argmin(lengths) if lo < 1 else np.argmax(lengths))
            raise ValueError(f"lengths[{b}] = {int(lengths[b])}: each row emits 1 .. "
                             f"{tokens.shape[1]} tokens (the columns of tokens)")
        self._accept_matrix(tokens, lengths)

    def verify_and_accept(self, drafts: DraftBatch, target_predict: Any, *,
                          max_tokens: Any = None) -> VerifyResult:
        """:func:`verify_greedy` of the last proposal and :meth:`accept` of its result, in
        one call; returns the result.

        Examples
        --------
        >>> import ngramspec as ns
        >>> drafter = ns.Drafter(config=ns.NgramConfig(draft_token_num=4, capacity=1000))
        >>> drafter.add_request(0, [5, 6, 7, 5, 6], first_token=7)
        >>> d = drafter.propose([0])
        >>> drafter.verify_and_accept(d, [[5, 6, 7, 8]]).emitted[0].tolist()
        [5]
        """
        if drafts is not self._pend_drafts:
            raise ValueError("verify_and_accept(): drafts must be the DraftBatch the last "
                             "propose() returned")
        result = verify_greedy(drafts, target_predict)
        self.accept(result, max_tokens=max_tokens)
        return result

    def steps(self, rid: Any) -> list[int]:
        """Tokens emitted at each of the request's accepted steps, in order."""
        slot = self._get(rid, "rid")[1]
        return self._store.steps[slot, :self._store.nsteps[slot]].tolist()

    def finish(self, rid: Any) -> None:
        """The request is done: forget it, its pending window, and its match state (or the
        prompt :meth:`prepare` held for it, if it was never added)."""
        if self._prepared:
            key = v.as_request_id(rid, "rid")
            if key not in self._slot and self._drop_prepared(key):
                return
        key, slot = self._get(rid, "rid")
        cfg = self.config
        if cfg.local_index and cfg.exact_counts:
            # The shared trie learns the whole request (O(length x depth): about 5 ms for
            # 2k tokens), held by the cache until the next propose has drafted, then in its
            # insert thread: during that step's forward, not on the serving thread before
            # its drafts.  The propose after waits for it, so no draft depends on the
            # threads' timing (the compiled replay teaches finished requests at the same
            # point); any other read of the cache sees it at once.
            start = _finish_from(cfg, int(self._store.plen[slot]))
            size = int(self._store.size[slot])
            if start < size:
                lo = max(0, start - cfg.trie_depth + 1)
                self._port.hold(self._store.buf[slot, lo:size].copy(),
                                 np.array([0, size - lo], np.int64),
                                 np.array([start - lo], np.int64))
        del self._slot[key]
        self._local[slot] = None
        self._own_base.pop(slot, None)
        if key in self._pend_keys:
            i = self._pend_keys.index(key)
            keep = [j for j in range(len(self._pend_keys)) if j != i]
            self._pend_keys = [self._pend_keys[j] for j in keep]
            self._pend_slots = self._pend_slots[keep]
            self._pend_rows = self._pend_rows[keep]
            if self._pend_windows is not None:
                flat, offsets = self._pend_windows
                parts = [flat[offsets[j]:offsets[j + 1]] for j in keep]
                self._pend_windows = (np.concatenate(parts) if parts else flat[:0],
                                      np.fromiter(np.cumsum([0] + [p.size for p in parts]),
                                                  np.int64))
            if not self._pend_keys:
                self._clear_pending()
        self._store.free.append(slot)
        if cfg.stateful and not self._adaptive:  # (ADAPTIVE drafts keep no match state)
            self.cache.erase([key])



def _finish_from(cfg: NgramConfig, plen: int) -> int:
    """Where a finished request's n-grams counted into the shared trie end at the earliest
    (``local_index`` with ``exact_counts``): its prompt's start with ``index_prompt``, at
    most ``shared_prompt_window`` tokens before the prompt's end; else the prompt's end."""
    start = 0 if cfg.index_prompt else plen
    if cfg.shared_prompt_window is not None:
        start = max(start, plen - cfg.shared_prompt_window)
    return start
