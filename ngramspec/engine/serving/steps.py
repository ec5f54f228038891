"""Compiled kernels of the custom-loop step API (:class:`~ngramspec.Drafter`, verification).

They work on the draft arrays of a :class:`~ngramspec.DraftBatch` and on the drafter's
request store (one row of token ids per request slot), never on trie arrays:

- :func:`greedy_walk`: SGLang's greedy tree verification (spec section 5.1), one request per
  row; :func:`ngramspec.reference.verify.verify_greedy` is its readable definition;
- :func:`path_errors`: whether the tokens a request emitted are a path of its draft tree
  followed by one bonus token (what ``Drafter.accept`` checks);
- :func:`gather_tails` and :func:`append_rows`: the last tokens of some requests packed for a
  match, and the emitted tokens appended to their rows.

Every slot's parent is read from the tree mask: the nearest ancestor, i.e. the largest
``j < i`` with ``mask[i, j]`` (level order puts parents before children).
"""

from __future__ import annotations

import numpy as np

from ..._jit import jit

__all__ = ["greedy_walk", "path_errors", "gather_tails", "append_rows", "accept_rows",
           "emitted_tails"]

# accept_rows' outcomes (info[0]); info[1] is the row, or the width the store needs.
ACCEPTED, NOT_A_PATH, TOO_LONG, NO_ROOM, NEGATIVE, NONE_KEPT = 0, 1, 2, 3, 4, 5


@jit
def _parents(mask, r, parent):
    n = parent.size
    parent[0] = -1
    for i in range(1, n):
        p = -1
        for j in range(i - 1, -1, -1):
            if mask[r, i, j]:
                p = j
                break
        parent[i] = p


@jit
def greedy_walk(tokens, mask, pred, accept_index, accept_lens, out):
    """Per request ``r``: from the root, the first child (in slot order) of the current slot
    whose token equals ``pred[r, slot]`` is accepted, until none is; the bonus is ``pred`` at
    the last accepted slot.  Writes ``accept_index[r]`` (slots, root first, -1 padded),
    ``accept_lens[r]`` (drafts + 1) and ``out[r, :accept_lens[r]]`` (accepted tokens + bonus).
    Returns -1, or (writing nothing) the first row with a prediction outside int32.
    """
    b, n = tokens.shape
    for r in range(b):
        for i in range(n):
            if pred[r, i] < -2147483648 or pred[r, i] > 2147483647:
                return r
    parent = np.empty(n, np.int64)
    for r in range(b):
        _parents(mask, r, parent)
        for i in range(n):
            accept_index[r, i] = -1
        accept_index[r, 0] = 0
        last = 0
        k = 0
        while True:
            want = pred[r, last]
            nxt = -1
            for i in range(last + 1, n):
                if parent[i] == last and tokens[r, i] == want:
                    nxt = i
                    break
            if nxt < 0:
                break
            k += 1
            accept_index[r, k] = nxt
            out[r, k - 1] = tokens[r, nxt]
            last = nxt
        out[r, k] = pred[r, last]
        accept_lens[r] = k + 1
    return -1


@jit
def path_errors(tokens, mask, emitted, lens, where):
    """For each request ``r``, whether ``emitted[r, :lens[r] - 1]`` follows a path of its
    tree from the root (any child with the token at each depth: duplicate tokens among
    siblings, such as SGLang's token-0 padding, may each continue it).  ``where[r]`` is set to
    the first position that does not (-1 when the whole row is a path + bonus).  Returns the
    first bad row, or -1."""
    b, n = tokens.shape
    parent = np.empty(n, np.int64)
    cur = np.zeros(n, np.bool_)
    nxt = np.zeros(n, np.bool_)
    first = -1
    for r in range(b):
        where[r] = -1
        _parents(mask, r, parent)
        for i in range(n):
            cur[i] = False
        cur[0] = True
        for k in range(lens[r] - 1):
            t = emitted[r, k]
            any_ = False
            for i in range(n):
                nxt[i] = False
            for i in range(1, n):
                p = parent[i]
                if p >= 0 and cur[p] and tokens[r, i] == t:
                    nxt[i] = True
                    any_ = True
            if not any_:
                where[r] = k
                break
            for i in range(n):
                cur[i] = nxt[i]
        if where[r] >= 0 and first < 0:
            first = r
    return first


@jit
def gather_tails(buf, size, slots, length, flat, offsets, lens):
    """The last ``length`` tokens (fewer if the row is shorter) of each slot's row, packed:
    ``flat[offsets[i]:offsets[i + 1]]``; ``lens[i]`` the row's size."""
    at = 0
    offsets[0] = 0
    for i in range(slots.size):
        s = slots[i]
        m = size[s]
        lo = m - length if m > length else 0
        for j in range(lo, m):
            flat[at] = buf[s, j]
            at += 1
        offsets[i + 1] = at
        lens[i] = m


@jit
def append_rows(buf, size, steps, nsteps, slots, emitted, lens):
    """Append ``emitted[i, :lens[i]]`` to slot ``slots[i]``'s row (room checked by the caller)
    and record ``lens[i]`` as that slot's next step."""
    for i in range(slots.size):
        s = slots[i]
        m = size[s]
        for j in range(lens[i]):
            buf[s, m + j] = emitted[i, j]
        size[s] = m + lens[i]
        steps[s, nsteps[s]] = lens[i]
        nsteps[s] += 1


@jit
def accept_rows(tokens, mask, emitted, lens, buf, size, steps, nsteps, slots, where, info):
    """``Drafter.accept`` in one call: every row's emitted tokens checked (at least one kept:
    else ``NONE_KEPT`` at row ``info[1]``; none negative
    among the ``lens[r]`` kept: else ``NEGATIVE``, the first in row-major order at row
    ``info[1]``, position ``where[row]``; at most ``n``, a path of its tree + bonus:
    :func:`path_errors`), the store's room checked, then :func:`append_rows`.  Writes nothing
    unless ``info[0]`` comes back ``ACCEPTED``."""
    b, n = tokens.shape
    for r in range(b):  # (a max_tokens below 1: checked here, one pass less in Python)
        if lens[r] < 1:
            info[0] = NONE_KEPT
            info[1] = r
            return
    for r in range(b):
        for k in range(min(lens[r], emitted.shape[1])):
            if emitted[r, k] < 0:
                info[0] = NEGATIVE
                info[1] = r
                where[r] = k
                return
    for r in range(b):
        if lens[r] > n:
            info[0] = TOO_LONG
            info[1] = r
            return
    bad = path_errors(tokens, mask, emitted, lens, where)
    if bad >= 0:
        info[0] = NOT_A_PATH
        info[1] = bad
        return
    need = 0
    for i in range(slots.size):
        if size[slots[i]] + lens[i] > need:
            need = size[slots[i]] + lens[i]
    if need > buf.shape[1]:
        info[0] = NO_ROOM
        info[1] = need
        return
    append_rows(buf, size, steps, nsteps, slots, emitted, lens)
    info[0] = ACCEPTED


@jit
def emitted_tails(flat, offsets, lens, seen, matrix, new):
    """What each request emitted since its last draft, read off the tail of its context (the
    SGLang adapter): ``new[i] = lens[i] - seen[i]`` tokens, the last ones of
    ``flat[offsets[i]:offsets[i + 1]]``, into ``matrix[i, :new[i]]`` (the rest 0).  Returns
    False, with ``matrix`` unspecified, unless every ``1 <= new[i] <=`` the context's length
    and the matrix's width."""
    b, width = matrix.shape
    for i in range(b):
        k = lens[i] - seen[i]
        end = offsets[i + 1]
        if k < 1 or k > width or k > end - offsets[i]:
            return False
        new[i] = k
        for j in range(k):
            matrix[i, j] = flat[end - k + j]
        for j in range(k, width):
            matrix[i, j] = 0
    return True
