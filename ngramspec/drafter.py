"""``Drafter``: what SGLang's NGRAM worker does around the cache at every decode step.

The cache alone leaves the serving-loop bookkeeping to the caller: which window of each
request's sequence to match, what ``total_len`` is, which windows to insert and when, and when a
request's match state goes.  ``Drafter`` is the one readable definition of that bookkeeping for
SGLang 0.5.23's worker (spec sections 2.4, 3.1-3.2 and 5.4):

- prefill neither matches nor inserts: a request enters with its prompt and first token;
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

from dataclasses import dataclass, field
from typing import Any, Hashable, Iterable, Mapping, Sequence

import numpy as np

from . import _validate as v
from .cache import BACKENDS, NgramCache
from .config import NgramConfig
from .drafts import DraftBatch

__all__ = ["Drafter"]


@dataclass
class _Request:
    """One request's full token sequence (prompt + output) in a growable int32 buffer."""

    buf: np.ndarray
    size: int
    prompt_len: int
    steps: int = 0
    emitted: list[int] = field(default_factory=list)
    local: NgramCache | None = None  # local_index: the request's own trie

    def tokens(self) -> np.ndarray:
        return self.buf[:self.size]

    def append(self, tokens: np.ndarray) -> None:
        need = self.size + tokens.size
        if need > self.buf.size:
            grown = np.empty(max(need, 2 * self.buf.size), np.int32)
            grown[:self.size] = self.buf[:self.size]
            self.buf = grown
        self.buf[self.size:need] = tokens
        self.size = need


class Drafter:
    """SGLang's per-step NGRAM bookkeeping around an :class:`NgramCache`, for your own loop.

    One step of a decode loop is ``propose`` (draft trees for some requests), the target's
    forward over the trees and greedy verification (yours; see :func:`verify_greedy`), then
    ``accept`` (the tokens each request emitted: accepted drafts + bonus).  Requests enter with
    ``add_request`` after their prefill and leave with ``finish``.

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
        emitted tokens per unit of step time (:mod:`ngramspec.acceptance`).

    Examples
    --------
    >>> import ngramspec as ns
    >>> drafter = ns.Drafter(config=ns.NgramConfig(draft_token_num=4, capacity=10_000))
    >>> drafter.add_request("a", [1, 2, 3, 4, 1, 2, 3], first_token=4)
    >>> d = drafter.propose(["a"])        # nothing inserted yet: prefill does not insert
    >>> int(d.num_drafts[0])
    0
    >>> drafter.accept({"a": [1]})        # inserts the window it matched, appends [1]
    >>> drafter.propose(["a"]).tokens     # ... 4, 1 seen before: draft 2, 3, 4
    array([[1, 2, 3, 4]], dtype=int32)
    >>> drafter.accept({"a": [2, 3, 4, 9]})
    >>> drafter.sequence("a").tolist()
    [1, 2, 3, 4, 1, 2, 3, 4, 1, 2, 3, 4, 9]
    >>> drafter.finish("a")
    """

    def __init__(self, *, config: NgramConfig | None = None, cache: NgramCache | None = None,
                 backend: str = "numba", costs: Any = None) -> None:
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
        cfg = self.cache.config
        from .acceptance import check_costs

        self._costs = check_costs(cfg, costs)
        # Exact counting (once per occurrence, as tokens arrive) into which trie.
        self._exact = cfg.exact_counts or cfg.local_index
        self._requests: dict[Hashable, _Request] = {}
        # Windows matched by propose() and not yet inserted, in batch order.
        self._pending: dict[Hashable, np.ndarray] = {}

    @property
    def config(self) -> NgramConfig:
        return self.cache.config

    @property
    def requests(self) -> list[Hashable]:
        """Ids of the requests in flight, in the order they were added."""
        return list(self._requests)

    @property
    def pending(self) -> list[Hashable]:
        """Ids proposed and not yet accepted, in batch order."""
        return list(self._pending)

    def __repr__(self) -> str:
        return (f"Drafter(requests={len(self._requests)}, pending={len(self._pending)}, "
                f"cache={self.cache!r})")

    def _get(self, rid: Any, name: str) -> tuple[Hashable, _Request]:
        key = v.as_request_id(rid, name)
        req = self._requests.get(key)
        if req is None:
            raise KeyError(f"{name}: unknown request {rid!r}; add it with add_request() first "
                           f"(requests in flight: {len(self._requests)})")
        return key, req

    def add_request(self, rid: Any, prompt_ids: Any, first_token: int) -> None:
        """Start drafting for a request whose prefill produced ``first_token``.

        Prefill neither matches nor inserts (SGLang's worker does neither for extend batches).

        Parameters
        ----------
        rid : str or int
            The request's id, unique among requests in flight.
        prompt_ids : 1-D sequence of int
            The prompt's token ids (may be empty).
        first_token : int
            The token the prefill emitted.
        """
        key = v.as_request_id(rid, "rid")
        if key in self._requests:
            raise ValueError(f"rid {rid!r} is already in flight; finish() it first or use a "
                             "new id")
        prompt = v.as_sequence(prompt_ids, "prompt_ids")
        first = v.as_sequence([first_token], "first_token")
        buf = np.empty(max(64, 2 * (prompt.size + 1)), np.int32)
        req = _Request(buf, 0, int(prompt.size))
        req.append(prompt)
        req.append(first)
        cfg = self.config
        if cfg.local_index:
            # Its own trie counts exactly, whatever the shared one does.
            req.local = NgramCache(config=cfg.replace(index_prompt=False, exact_counts=True,
                                                      local_index=False),
                                   backend=self.cache.backend)
        if self._exact:
            self._count(req, 0 if cfg.index_prompt else req.prompt_len)
        elif cfg.index_prompt and prompt.size:
            self.cache.insert([prompt])
        self._requests[key] = req

    def _count(self, req: _Request, start: int, into: NgramCache | None = None) -> None:
        """Count once every n-gram of the request's sequence that ends at ``start`` or later
        (up to the trie depth long), into ``into`` (default: its own trie, else the shared
        one)."""
        if start >= req.size:
            return
        target = into if into is not None else req.local if req.local is not None else self.cache
        lo = max(0, start - self.config.trie_depth + 1)
        target.insert([req.tokens()[lo:].copy()], count_from=[start - lo])

    def total_len(self, rid: Any) -> int:
        """Tokens of the request so far, prompt included.  The KV cache of the target holds
        ``total_len - 1`` of them before a verify pass (the last one is the tree's root)."""
        return self._get(rid, "rid")[1].size

    def sequence(self, rid: Any) -> np.ndarray:
        """A copy of the request's prompt + output tokens."""
        return self._get(rid, "rid")[1].tokens().copy()

    def output(self, rid: Any) -> np.ndarray:
        """A copy of the request's output tokens (first token included)."""
        req = self._get(rid, "rid")[1]
        return req.tokens()[req.prompt_len:].copy()

    def propose(self, rids: Sequence[Any], *, batch_size: int | None = None) -> DraftBatch:
        """Draft trees for these requests, in this order (one row each).

        Matches each request's last ``max_trie_depth`` tokens statefully, with its full
        length as ``total_len`` (0.5.9: the last ``max_match_window_size``, statelessly;
        ADAPTIVE: statelessly, the request's own trie first with ``local_index``).  Every
        request proposed must be accepted (or finished) before it is proposed again.
        ``batch_size`` (with ``costs``): requests in the step's forward, default
        ``len(rids)``.
        """
        if batch_size is not None and self._costs is None:
            raise ValueError("batch_size= goes with costs= (min_expected_accept='auto')")
        if isinstance(rids, (str, bytes)) or not isinstance(rids, (Sequence, np.ndarray)):
            raise TypeError(f"rids must be a sequence of request ids, got {type(rids).__name__}")
        if len(rids) == 0:
            raise ValueError("rids is empty; propose at least one request")
        keys, contexts, lens, locals_ = [], [], [], []
        cfg = self.config
        for i, rid in enumerate(rids):
            key, req = self._get(rid, f"rids[{i}]")
            if key in self._pending or key in keys:
                raise ValueError(f"rids[{i}] = {rid!r} was proposed and not accepted yet; call "
                                 "accept() for it first")
            keys.append(key)
            contexts.append(req.tokens()[-cfg.match_length:])
            lens.append(req.size)
            locals_.append(req.local)
        if cfg.match_type == "ADAPTIVE":
            drafts = self.cache.match(contexts, local=locals_ if cfg.local_index else None,
                                      costs=self._costs, batch_size=batch_size)
        elif cfg.stateful:
            drafts = self.cache.match(contexts, request_ids=keys, total_lens=lens)
        else:
            drafts = self.cache.match(contexts)
        for key, ctx in zip(keys, contexts):
            self._pending[key] = ctx.copy()
        return drafts

    def accept(self, emitted: Mapping[Any, Any]) -> None:
        """Record what each proposed request emitted; insert the windows SGLang inserts.

        Parameters
        ----------
        emitted : mapping of request id to 1-D int sequence
            For every pending request (see :attr:`pending`), the tokens the verify step
            emitted: the accepted drafts followed by the bonus token (at least one token).
            Cut it yourself where the request stops (EOS, length limit).

        The windows matched by the last ``propose`` are inserted in batch order, then the
        tokens are appended; the emitted tokens reach the trie at the next step.
        """
        if not isinstance(emitted, Mapping):
            raise TypeError("emitted must be a mapping {request id: emitted tokens}, got "
                            f"{type(emitted).__name__}")
        checked: dict[Hashable, np.ndarray] = {}
        for rid, toks in emitted.items():
            key = v.as_request_id(rid, "emitted key")
            if key not in self._pending:
                raise ValueError(f"emitted[{rid!r}]: that request has no pending proposal "
                                 f"(pending: {self.pending})")
            arr = v.as_sequence(toks, f"emitted[{rid!r}]")
            if arr.size == 0:
                raise ValueError(f"emitted[{rid!r}] is empty; a verify step emits at least the "
                                 "bonus token")
            checked[key] = arr
        missing = [k for k in self._pending if k not in checked]
        if missing:
            raise ValueError(f"emitted lacks pending requests {missing}: every request of the "
                             "proposed batch is accepted together (finish() drops one)")
        cfg = self.config
        sglang_windows = not self._exact or (cfg.local_index and not cfg.exact_counts)
        if sglang_windows and cfg.stateful:  # 0.5.23: the windows matched, before appending
            self.cache.insert(list(self._pending.values()))
        for key in self._pending:
            req = self._requests[key]
            before = req.size
            req.append(checked[key])
            req.steps += 1
            req.emitted.append(int(checked[key].size))
            if self._exact:
                self._count(req, before)
        if sglang_windows and not cfg.stateful:  # 0.5.9: after appending, every request
            self.cache.insert([self._requests[k].tokens()[-cfg.insert_length:].copy()
                               for k in self._pending])
        self._pending.clear()

    def steps(self, rid: Any) -> list[int]:
        """Tokens emitted at each of the request's accepted steps, in order."""
        return list(self._get(rid, "rid")[1].emitted)

    def finish(self, rid: Any) -> None:
        """The request is done: forget it, its pending window, and its match state."""
        key, req = self._get(rid, "rid")
        cfg = self.config
        if cfg.local_index and cfg.exact_counts:  # the shared trie learns the whole request
            self._count(req, 0 if cfg.index_prompt else req.prompt_len, into=self.cache)
        del self._requests[key]
        self._pending.pop(key, None)
        if cfg.stateful:
            self.cache.erase([key])

    def finish_all(self, rids: Iterable[Any] | None = None) -> None:
        """``finish`` these requests (all in flight if omitted)."""
        for rid in list(self._requests if rids is None else rids):
            self.finish(rid)
