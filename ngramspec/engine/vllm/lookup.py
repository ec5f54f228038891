"""vLLM 0.33's n-gram (prompt lookup) proposer, compiled, and its replay on recorded streams.

The rule is :mod:`ngramspec.reference.lookup`'s: the longest context suffix of ``min_n ..
max_n`` tokens that occurs earlier (ending before the last token), its first occurrence, the
up-to-``k`` tokens after it.  Here one pass over the occurrence's possible end positions
``e`` counts how far ``context[.. e]`` and the whole context agree backwards (at most
``max_n``): the longest agreement wins, the smallest ``e`` among equals (the first
occurrence).  A step costs a scan of the context, as vLLM's own kernel does.

Requests do not share anything (vLLM drafts from each request's own tokens), so the replay
runs them one after another; only the step count of the serving loop depends on the
concurrency, and the caller takes it from the admission rule.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from ..._jit import compile_free_clock, jit

__all__ = ["lookup_draft", "replay_lookup"]


@jit
def _find(buf, size, min_n, max_n):
    """``(end, n)`` of the draft's anchor in ``buf[:size]``: the occurrence ends at ``end``
    and agrees with the context's last ``n`` tokens; ``(-1, 0)`` when none of ``min_n``."""
    best_n = 0
    best_e = -1
    last = size - 1
    for e in range(size - 1):
        n = 0
        while n < max_n and n <= e and buf[e - n] == buf[last - n]:
            n += 1
        if n > best_n:
            best_n = n
            best_e = e
            if n == max_n:
                break  # no longer agreement counts; later ends are later occurrences
    if best_n < min_n:
        return -1, 0
    return best_e, best_n


@jit
def _lookup_into(buf, size, min_n, max_n, k, out):
    e, n = _find(buf, size, min_n, max_n)
    if e < 0:
        return 0
    m = min(k, size - (e + 1))
    for i in range(m):
        out[i] = buf[e + 1 + i]
    return m


@jit(what="vLLM's n-gram lookup")
def lookup_draft(context, min_n, max_n, k, out):
    """Write the draft for ``context`` into ``out`` (at least ``k`` long); return its length."""
    return _lookup_into(context, context.size, min_n, max_n, k, out)


@jit(what="the replay of vLLM's n-gram proposer")
def _replay_kernel(p_flat, p_off, o_flat, o_off, lo, hi, min_n, max_n, k, em_flat, dr_flat,
                   em_off, counts):
    """Requests ``lo .. hi-1``: per verify step, tokens emitted and the draft's length, written
    from ``em_off[r]``; ``counts[r]``: the request's verify steps."""
    for r in range(lo, hi):
        plen = p_off[r + 1] - p_off[r]
        olen = o_off[r + 1] - o_off[r]
        buf = np.empty(plen + olen, np.int32)
        buf[:plen] = p_flat[p_off[r]:p_off[r + 1]]
        buf[plen:] = o_flat[o_off[r]:o_off[r + 1]]
        total = plen + olen
        done = 1  # the prefill's token
        w = em_off[r]
        while done < olen:
            size = plen + done
            e, n = _find(buf, size, min_n, max_n)
            m = 0 if e < 0 else min(k, size - (e + 1))
            accepted = 0
            while accepted < m and size + accepted < total and \
                    buf[e + 1 + accepted] == buf[size + accepted]:
                accepted += 1
            emit = min(accepted + 1, olen - done)
            em_flat[w] = emit
            dr_flat[w] = m
            w += 1
            done += emit
        counts[r] = w - em_off[r]


def replay_lookup(prompts: Sequence[np.ndarray], outputs: Sequence[np.ndarray], *, min_n: int,
                  max_n: int, k: int, progress: Callable[[int, int], None] | None = None
                  ) -> tuple[list[np.ndarray], list[np.ndarray], float, float]:
    """Every request's verify steps under vLLM's n-gram proposer and greedy chain
    verification: ``(emitted, drafts, cpu_seconds, wall_seconds)``, per request int32 arrays
    of the tokens each step emitted (cut where the recording ends) and of its draft's length.
    """
    n_req = len(prompts)
    p_off = np.zeros(n_req + 1, np.int64)
    o_off = np.zeros(n_req + 1, np.int64)
    np.cumsum([p.size for p in prompts], out=p_off[1:])
    np.cumsum([o.size for o in outputs], out=o_off[1:])
    p_flat = np.ascontiguousarray(np.concatenate(list(prompts)) if n_req else
                                  np.zeros(0, np.int32), dtype=np.int32)
    o_flat = np.ascontiguousarray(np.concatenate(list(outputs)) if n_req else
                                  np.zeros(0, np.int32), dtype=np.int32)
    # At most one step per output token after the first: room for every request's steps.
    room = np.maximum(np.diff(o_off) - 1, 0)
    em_off = np.zeros(n_req + 1, np.int64)
    np.cumsum(room, out=em_off[1:])
    em_flat = np.zeros(int(em_off[-1]), np.int32)
    dr_flat = np.zeros(int(em_off[-1]), np.int32)
    counts = np.zeros(n_req, np.int64)
    total = int(o_off[-1])
    chunk = 64
    with compile_free_clock() as clock:  # a first run compiles the kernel in its first call
        t0 = clock.now()
        for lo in range(0, n_req, chunk):
            hi = min(n_req, lo + chunk)
            _replay_kernel(p_flat, p_off, o_flat, o_off, lo, hi, int(min_n), int(max_n), int(k),
                           em_flat, dr_flat, em_off, counts)
            if progress is not None:
                progress(int(o_off[hi]), total)
        wall, cpu = clock.since(t0)
    emitted, drafts = [], []
    for r in range(n_req):
        a, b = int(em_off[r]), int(em_off[r] + counts[r])
        emitted.append(em_flat[a:b].copy())
        drafts.append(dr_flat[a:b].copy())
    return emitted, drafts, cpu, wall
