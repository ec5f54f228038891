"""A request's own index (``engine.own_index``, a suffix automaton) holds exactly what the
own trie of the reference holds: every n-gram of its window up to the trie depth, counted
once per occurrence ending at ``count_from`` or later, with its last end position (the
trie's recency order of children), the children of each, and the state of every context
suffix drafting reads; through appends in chunks, growth from tiny arrays, and the window's
rebuilds.  Counted by brute force over the row, not by another index."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ngramspec.engine.serving.own_index import (E_NEXT, E_TOK, S_CNT, S_HEAD, S_LAST, OwnIndexArrays,
                                        own_append, own_rebuilds, own_reset, own_state_of,
                                        own_tail)
from ngramspec.engine.serving.own_index import _target


def _occurrences(row, base, end, count_from, depth):
    """n-gram -> (occurrences ending at count_from or later, last end), within [base, end)."""
    occ = {}
    for e in range(base, end):
        for length in range(1, depth + 1):
            s = e - length + 1
            if s < base:
                break
            key = tuple(int(t) for t in row[s:e + 1])
            c, _ = occ.get(key, (0, -1))
            occ[key] = (c + (e >= count_from), e)
    return occ


def _walk(o: OwnIndexArrays, tokens) -> int:
    x = 0
    for c in tokens:
        x = _target(o.st, o.ed, o.rh, x, c)
        if x == -1:
            return -1
    return x


def _children(o: OwnIndexArrays, x: int) -> set[int]:
    kids, e = set(), o.st[x, S_HEAD]
    while e != -1:
        kids.add(int(o.ed[e, E_TOK]))
        e = o.ed[e, E_NEXT]
    return kids


def _check_against_brute_force(o: OwnIndexArrays, row, count_from, depth):
    base, end = int(o.meta[6]), int(o.meta[7])
    occ = _occurrences(row, base, end, count_from, depth)
    for key, (count, last) in occ.items():
        x = _walk(o, key)
        assert x > 0, key
        assert (o.st[x, S_CNT], o.st[x, S_LAST]) == (count, last), key
        if len(key) < depth:
            want = {k[-1] for k in occ if len(k) == len(key) + 1 and k[:-1] == key}
            assert _children(o, x) == want, key
    tail, tail_len = own_tail(o.bundle)
    assert tail_len == min(end - base, depth - 1)
    for d in range(1, tail_len + 1):
        assert own_state_of(o.st, tail, d) == _walk(o, row[end - d:end]), d
    o.check()


def _append(o: OwnIndexArrays, row, stop, through_offset: bool):
    first = own_rebuilds(o.bundle, stop) if through_offset else 0
    part = np.ascontiguousarray(row[first:stop])
    while own_append(o.bundle, part, stop, first) < stop:
        o.make_room()


@settings(max_examples=150, deadline=None)
@given(depth=st.integers(1, 6), vocab=st.integers(1, 4), n=st.integers(1, 90),
       seed=st.integers(0, 2**32 - 1), counted_prompt=st.booleans(),
       through_offset=st.booleans())
def test_the_own_index_counts_every_ngram_of_its_window(depth, vocab, n, seed, counted_prompt,
                                                       through_offset):
    rng = np.random.default_rng(seed)
    row = rng.integers(0, vocab, n).astype(np.int32)
    count_from = 0 if counted_prompt else int(rng.integers(0, n + 1))
    window = 4 * depth + int(rng.integers(0, 20))
    o = OwnIndexArrays(depth, window, tokens=1)  # grows from nothing
    own_reset(o.bundle, max(0, count_from - depth + 1), count_from)
    pos = int(o.meta[7])
    while pos < n:
        pos = min(n, pos + int(rng.integers(1, 8)))
        _append(o, row, pos, through_offset)
        _check_against_brute_force(o, row, count_from, depth)


def test_a_full_window_starts_again_from_its_last_half():
    row = np.arange(100, dtype=np.int32) % 7
    o = OwnIndexArrays(3, 12, tokens=1)
    own_reset(o.bundle, 0, 0)
    _append(o, row, 12, False)
    assert (o.meta[6], o.meta[7]) == (0, 12)
    _append(o, row, 13, False)  # the 13th token: rebuilt from the last 6, then appended
    assert (o.meta[6], o.meta[7]) == (6, 13)
    _check_against_brute_force(o, row, 0, 3)


@pytest.mark.parametrize("n", [1_000, 20_000])
def test_reserved_room_takes_a_quarter_more_without_growing(n):
    rng = np.random.default_rng(n)
    row = rng.zipf(1.3, n + n // 4).astype(np.int32) % 5_000
    o = OwnIndexArrays(24, 10**6, tokens=n)
    own_reset(o.bundle, 0, 0)
    _append(o, row, n, False)
    o.reserve(n // 4)
    arrays = (o.st, o.ed)
    for stop in range(n + 1, n + n // 4 + 1, 7):
        assert own_append(o.bundle, row, stop, 0) == stop  # never short of room
    assert o.st is arrays[0] and o.ed is arrays[1]
    o.check()
