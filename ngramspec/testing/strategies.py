"""Hypothesis strategies for n-gram drafters: configurations, token sequences, operations.

Every strategy draws values that :class:`~ngramspec.NgramCache` accepts, and is biased towards
what breaks drafters: tiny vocabularies (deep, repetitive tries), wide fan-outs (the sibling
orders of libstdc++'s ``unordered_map`` past 13 children), negative ids and int32 extremes,
tight capacities (eviction on every insert), request lengths that grow, repeat and jump.

Examples
--------
>>> from hypothesis import given
>>> from ngramspec.testing import strategies as nst
>>> @given(nst.configs(tight=True), nst.token_sequences(vocab=(0, 3)))
... def test_inserts_stay_within_capacity(config, seq):
...     import ngramspec as ns
...     cache = ns.NgramCache(config=config, backend="reference")
...     cache.insert([seq])
...     assert len(cache) <= config.capacity
>>> test_inserts_stay_within_capacity()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from ..config import PROFILES, NgramConfig

__all__ = ["Op", "configs", "vocabularies", "token_sequences", "operations", "apply",
           "INT32_MIN", "INT32_MAX", "REQUEST_IDS", "History", "next_operation",
           "match_contexts"]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
# Few ids, so that they are reused, erased and reused again.
REQUEST_IDS = ("a", "b", "c", 7)
_VOCABS = ((0, 1), (0, 3), (-2, 5), (0, 9), (0, 40), (-(10**6), 10**6), (INT32_MIN, INT32_MAX))


# The profiles with a trie (vLLM's n-gram proposer has none to draw caches of).
_TRIE_PROFILES = tuple(p for p in PROFILES if p.startswith("sglang"))


def _check_profile(profile: str) -> str:
    if profile not in _TRIE_PROFILES:
        raise ValueError(f"profile must be one of {_TRIE_PROFILES}, got {profile!r}")
    return profile


@st.composite
def configs(draw: Any, profile: str = "sglang-0.5.23", tight: bool = False,
            beyond: bool = False) -> NgramConfig:
    """Valid :class:`~ngramspec.NgramConfig` values of one profile, BFS and PROB.

    Parameters
    ----------
    profile : {"sglang-0.5.23", "sglang-0.5.9"}
    tight : bool
        Capacities from ``trie depth + 1`` (the smallest allowed) to a few dozen nodes more,
        so that nearly every insert evicts.  Otherwise half tight, half roomy.
    beyond : bool
        Also ``match_type="ADAPTIVE"`` (ngramspec's own, ``sglang-0.5.23`` only).
    """
    _check_profile(profile)
    depth = draw(st.one_of(st.integers(2, 8), st.integers(9, 20)))
    lo = draw(st.integers(1, 6))
    hi = lo + draw(st.sampled_from([0, 1, 2, 3, 5, 8, 14, 20, 40]))
    slack = st.sampled_from([0, 0, 1, 2, 5, 15, 40])
    if tight or draw(st.booleans()):
        cap = depth + 1 + draw(slack)
    else:
        cap = draw(st.integers(100, 100_000))
    types = ["BFS", "PROB"] + (["ADAPTIVE"] if beyond and profile == "sglang-0.5.23" else [])
    common = dict(min_bfs_breadth=lo, max_bfs_breadth=hi, capacity=cap,
                  draft_token_num=draw(st.sampled_from([1, 2, 4, 8, 12, 16, 16, 24, 40, 64, 64])),
                  match_type=draw(st.sampled_from(types)), profile=profile)
    if profile == "sglang-0.5.23":
        return NgramConfig(max_trie_depth=depth, **common)
    max_w = draw(st.integers(1, depth - 1))
    min_w = draw(st.integers(1, max_w))
    return NgramConfig(branch_length=depth, min_match_window_size=min_w,
                       max_match_window_size=max_w, **common)


def vocabularies() -> st.SearchStrategy[tuple[int, int]]:
    """Inclusive ``(low, high)`` token ranges: tiny ones make deep, repetitive tries; huge ones,
    negative ids and the int32 extremes test hashing and sibling orders."""
    return st.sampled_from(_VOCABS)


def token_sequences(vocab: tuple[int, int] | None = None, *, min_size: int = 0,
                    max_size: int = 30) -> st.SearchStrategy[list[int]]:
    """Lists of token ids within ``vocab`` (inclusive; default: a drawn vocabulary), with
    repeats (a short motif written several times) and, where the vocabulary allows, its
    extremes."""
    if vocab is None:
        return vocabularies().flatmap(
            lambda v: token_sequences(v, min_size=min_size, max_size=max_size))
    lo, hi = vocab
    if not (INT32_MIN <= lo <= hi <= INT32_MAX):
        raise ValueError(f"vocab must be (low, high) with {INT32_MIN} <= low <= high <= "
                         f"{INT32_MAX}, got {vocab!r}")
    tok = st.one_of(st.integers(lo, hi), st.sampled_from(sorted({lo, hi, max(lo, min(hi, 0))})))
    plain = st.lists(tok, min_size=min_size, max_size=max_size)
    if max_size == 0:
        return plain
    return st.one_of(plain, _repeats(tok, min_size, max_size))


@st.composite
def _repeats(draw: Any, tok: st.SearchStrategy[int], min_size: int, max_size: int) -> list[int]:
    # A short motif written several times: the repetitive text n-gram drafting lives on.
    motif = draw(st.lists(tok, min_size=1, max_size=min(5, max_size)))
    times = draw(st.integers(1, max(1, max_size // len(motif))))
    seq = (motif * times)[:max_size]
    while len(seq) < min_size:
        seq += motif
    return seq[:max(min_size, min(len(seq), max_size))]


@dataclass(frozen=True)
class Op:
    """One call on a cache: ``insert``, ``match`` (stateless when ``request_ids`` is None),
    ``erase`` or ``reset``.  ``repr`` is the call as Python source."""

    kind: str
    sequences: tuple[tuple[int, ...], ...] = ()
    request_ids: tuple[Any, ...] | None = None
    total_lens: tuple[int, ...] | None = None

    def call(self) -> str:
        seqs = [list(s) for s in self.sequences]
        if self.kind == "insert":
            return f"insert({seqs})"
        if self.kind == "match":
            if self.request_ids is None:
                return f"match({seqs})"
            return (f"match({seqs}, request_ids={list(self.request_ids)}, "
                    f"total_lens={list(self.total_lens or ())})")
        if self.kind == "erase":
            return f"erase({list(self.request_ids or ())})"
        return "reset()"

    def __repr__(self) -> str:
        return f"<{self.call()}>"


def apply(cache: Any, op: Op) -> Any:
    """Run ``op`` on ``cache``; returns what ``match`` returned, else None."""
    seqs = [list(s) for s in op.sequences]
    if op.kind == "insert":
        return cache.insert(seqs)
    if op.kind == "match":
        if op.request_ids is None:
            return cache.match(seqs)
        return cache.match(seqs, request_ids=list(op.request_ids),
                           total_lens=list(op.total_lens or ()))
    if op.kind == "erase":
        return cache.erase(list(op.request_ids or ()))
    if op.kind == "reset":
        return cache.reset()
    raise ValueError(f"unknown op kind {op.kind!r}")


class History:
    """What earlier operations left behind, for the next ones to build on: each request's last
    ``total_len`` and the recently inserted sequences (contexts are often cut from them, so
    that matches find something even in a huge vocabulary)."""

    def __init__(self) -> None:
        self.lens: dict[Any, int] = {}
        self.erased_lens: dict[Any, int] = {}  # the last length of each erased request
        self.contexts: dict[Any, tuple[int, ...]] = {}  # each live request's last context
        self.recent: list[tuple[int, ...]] = []

    def inserted(self, op: Op) -> Op:
        self.recent = (self.recent + list(op.sequences))[-8:]
        return op

    def erased(self, op: Op) -> Op:
        for rid in op.request_ids or ():
            if rid in self.lens:
                self.erased_lens[rid] = self.lens.pop(rid)
                self.contexts.pop(rid, None)
        return op

    def reset(self, op: Op) -> Op:
        self.lens.clear()
        self.erased_lens.clear()
        self.contexts.clear()
        return op


def _insert_ops(vocab: tuple[int, int], depth: int, history: History) -> st.SearchStrategy[Op]:
    seq = token_sequences(vocab, max_size=3 * depth + 4)
    lo, hi = vocab
    plain = st.lists(seq, min_size=1, max_size=3)
    # A fan-out: one token followed by 14 to 40 distinct ones, past libstdc++'s first rehashes
    # (13, 29 children), whose sibling orders a port easily gets wrong.  In a small
    # vocabulary the fan's tokens reach beyond it.
    first = min(lo, INT32_MAX - 63)
    fan = st.tuples(st.integers(lo, hi),
                    st.lists(st.integers(first, first + 63), min_size=14, max_size=40,
                             unique=True)).map(lambda p: [[p[0], t] for t in p[1]])
    batches = st.one_of(plain, fan)
    return batches.map(lambda b: history.inserted(Op("insert", tuple(tuple(s) for s in b))))


@st.composite
def _context(draw: Any, vocab: tuple[int, int], config: NgramConfig, history: History) -> list[int]:
    longest = config.match_length + 2
    if history.recent and draw(st.booleans()):
        # A cut of a recent sequence, ending anywhere in it, sometimes with a token more.
        seq = history.recent[draw(st.integers(0, len(history.recent) - 1))]
        if seq:
            end = draw(st.integers(1, len(seq)))
            ctx = list(seq[max(0, end - draw(st.integers(1, longest))):end])
            if draw(st.integers(0, 3)) == 0:
                ctx.append(draw(st.integers(*vocab)))
            return ctx[-longest:]
    return draw(token_sequences(vocab, min_size=1, max_size=longest))


def match_contexts(vocab: tuple[int, int], config: NgramConfig,
                   history: History | None = None) -> st.SearchStrategy[list[list[int]]]:
    """Batches of non-empty contexts up to a few tokens longer than SGLang sends, often cut
    from the sequences ``history`` saw inserted."""
    return st.lists(_context(vocab, config, history or History()), min_size=1, max_size=3)


@st.composite
def _stateful_match(draw: Any, vocab: tuple[int, int], config: NgramConfig,
                    history: History) -> Op:
    ids = draw(st.lists(st.sampled_from(REQUEST_IDS), min_size=1, max_size=3, unique=True))
    if history.erased_lens and draw(st.integers(0, 3)):
        # Reuse an erased id: stale state after erase is a classic port bug.
        again = draw(st.sampled_from(sorted(history.erased_lens, key=str)))
        ids = [again] + [i for i in ids if i != again][:2]
    ctxs, totals = [], []
    lens, last = history.lens, history.contexts
    window = config.match_length
    for rid in ids:
        step = draw(st.sampled_from([1, 1, 2, 0, 5, -3]))
        if rid in lens and step >= 0 and draw(st.integers(0, 3)):
            # Serving: the same request grown by `step` tokens, its last `window` sent.
            grown = last[rid] + tuple(draw(st.lists(st.integers(*vocab), min_size=step,
                                                    max_size=step)))
            total = lens[rid] + step
            ctx = list(grown[-min(window, total):]) or [draw(st.integers(*vocab))]
        else:
            ctx = draw(_context(vocab, config, history))
            if rid in lens:
                # The same length again, a jump, or a step back (which rebuilds the state).
                total = max(1, lens[rid] + step)
                ctx = ctx[-total:]
            elif rid in history.erased_lens:
                # An erased id reused, its length going on from where it stopped (what a port
                # that keys states by batch slot sees), its context the full window.
                total = history.erased_lens.pop(rid) + draw(st.sampled_from([0, 1, 2]))
                short = min(window, total) - len(ctx)
                if short > 0:
                    ctx = draw(st.lists(st.integers(*vocab), min_size=short,
                                        max_size=short)) + ctx
                ctx = ctx[-min(window, total):]
            elif draw(st.integers(0, 7)):
                # A new request as SGLang's worker sends it: its last `window` tokens.
                ctx = ctx[-window:]
                total = len(ctx) + (draw(st.sampled_from([0, 1, 3, 10]))
                                    if len(ctx) == window else 0)
            else:  # a context shorter than the request's tail: the state always rebuilds
                total = len(ctx) + draw(st.sampled_from([0, 1, 3, 10]))
        total = max(total, len(ctx))
        lens[rid] = total
        last[rid] = tuple(ctx)
        ctxs.append(tuple(ctx))
        totals.append(total)
    return Op("match", tuple(ctxs), tuple(ids), tuple(totals))


@st.composite
def operations(draw: Any, config: NgramConfig, *, vocab: tuple[int, int] | None = None,
               stateful: bool = True, max_size: int = 20) -> list[Op]:
    """Lists of :class:`Op` for a cache of ``config``: inserts (fan-outs among them), stateful
    matches with reused, growing and jumping ``total_lens``, stateless matches, erases of
    known and unknown ids, resets.  ``stateful=False``: stateless matches only, no erase.

    Replay them with :func:`apply`."""
    if not isinstance(config, NgramConfig):
        raise TypeError(f"config must be an NgramConfig, got {type(config).__name__}")
    vocab = draw(vocabularies()) if vocab is None else vocab
    step = next_operation(config, vocab, History(), stateful=stateful)
    return [draw(step) for _ in range(draw(st.integers(1, max_size)))]


@st.composite
def _erase(draw: Any, history: History) -> Op:
    ids = draw(st.lists(st.sampled_from(REQUEST_IDS + ("zz",)), max_size=2, unique=True))
    if history.lens and draw(st.integers(0, 3)):  # mostly live requests, as in serving
        live = draw(st.sampled_from(sorted(history.lens, key=str)))
        ids = [live] + [i for i in ids if i != live][:1]
    return history.erased(Op("erase", request_ids=tuple(ids)))


def next_operation(config: NgramConfig, vocab: tuple[int, int], history: History, *,
                   stateful: bool = True) -> st.SearchStrategy[Op]:
    """One operation after those recorded in ``history`` (which every draw updates).  Build it
    once per sequence of operations: drawing from the same strategy object is cheap."""
    stateless = match_contexts(vocab, config, history).map(
        lambda cs: Op("match", tuple(tuple(c) for c in cs)))
    inserts = _insert_ops(vocab, config.trie_depth, history)
    choices = [inserts, inserts, stateless]
    if stateful and config.stateful and config.match_type != "ADAPTIVE":
        stateful_match = _stateful_match(vocab, config, history)
        erase = _erase(history)
        choices += [stateful_match, stateful_match, stateful_match, erase, erase]
    choices.append(st.just(Op("reset")).map(history.reset))
    return st.one_of(*choices)
