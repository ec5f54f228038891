"""The serving-loop replay as one compiled kernel, for every configuration.

:func:`replay` is the engine's one entry point for :func:`ngramspec.simulate`: it takes the
recorded streams as arrays, allocates every engine array itself, and runs the loop of
:mod:`ngramspec.simulate` in :func:`replay_kernel`, in chunks (so that progress can be shown and
the tries can grow between chunks).  What is matched, inserted where and when is exactly what
:class:`~ngramspec.Drafter` does (its module docstring is the definition), per configuration:

- profile ``sglang-0.5.23``: stateful anchors (``match_anchors``) on the last
  ``max_trie_depth`` tokens; the same windows are inserted after verification, before the
  emitted tokens are appended;
- profile ``sglang-0.5.9``: stateless match windows (``window_anchors``) on the last
  ``max_match_window_size`` tokens; after appending, the last ``branch_length`` tokens are
  inserted, skipping the shortest ``min_match_window_size`` suffixes;
- ``BFS``/``PROB`` trees (``build_bfs_scheduled``/``build_prob``), ``ADAPTIVE`` trees
  (``draft_tree``, which may send an empty tree with ``min_expected_accept``);
- ``index_prompt``: the whole prompt at admission; ``exact_counts``/``local_index``: every
  n-gram occurrence counted once as its last token arrives (``exact_counts`` without
  ``local_index``: into the shared trie); ``local_index``: one own trie per concurrency slot,
  reset at admission and growing on demand, and the shared trie receives the request's whole
  sequence when it finishes (with ``exact_counts``) or SGLang's windows every step (without).

Inserts use :func:`_insert`: ``insert_counted_kernel``'s algorithm with two shortcuts that
change no result (see its docstring).  Greedy verification against a recording: the target's
argmax after a slot whose path follows the recording is the next recorded token, so walking the
tree from the root and taking, at each level, the first child in slot order whose token is the
next recorded token gives SGLang's accepted path (token-0 padding slots included, spec section
5.3); the bonus is the recorded token after it.  What the target would predict beyond the end of
the recording never matters: emitted tokens are cut there.

All loop state lives in arrays owned by :func:`replay`, so the kernel can stop and be called
again to continue: after ``max_steps`` verify steps (PAUSED), or at the top of a serving-loop
iteration whose inserts could need more node slots than a trie has allocated (NEED_ROOM: the
wrapper grows that trie; nothing of the iteration has run yet).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from numba.typed import List

from .._jit import jit
from ..config import NgramConfig
from .adaptive import adaptive_scratch, choose_cap, draft_tree, layout_prefix, save_creation
from .match import States, match_anchors, new_states, window_anchors
from .sam import corpus_scratch_in, draft_with_corpora, replay_corpora
from .tree import BUCKET_COUNTS, build_bfs_scheduled, build_prob, fill_result, new_scratch
from .trie import (_SCAN, M_FREEHEAD, M_FREETOP, M_GHEAD, M_GTAIL, M_SIZE, M_UNUSED,
                   Trie, TrieArrays, _g_push_back, _g_push_front, _g_unlink, _slot, squeeze)

__all__ = ["replay", "replay_stream", "ReplayOutput"]


# Return codes of the kernel.
DONE, PAUSED, NEED_ROOM = 0, 1, 2
# (replay_stream) the requests given ran out while more are to come (L_MORE): nothing of the
# iteration has run yet.
NEED_REQUESTS = 3
# Slots of the int64 ``loop`` state: next request to admit, requests running, verify steps
# done, finished requests whose finish inserts are pending, how the shared trie keeps its LRU
# order (LRU_*) and its touch clock, output tokens still to emit, node bounds of the
# admissions and finishes still to come.
(L_NEXT, L_NRUN, L_STEPS, L_NFIN, L_GMODE, L_GCLOCK, L_LEFT, L_ADMLEFT,
 L_FINLEFT) = range(9)
# (replay_stream) nonzero while requests beyond those given are still to come.
L_MORE = 9
LOOP_SIZE = 10
# How a trie keeps its LRU order (see _insert): touch stamps, the list, not at all.
LRU_STAMPS, LRU_LIST, LRU_NONE = 0, 1, 2
# Slots of the int64 ``cfg`` array.
(C_DEPTH, C_MLEN, C_MINB, C_MAXB, C_BUDGET, C_MODE, C_CAP, C_STATEFUL, C_MINW, C_MAXW, C_SKIP,
 C_WINDOWS, C_EXACT, C_LOCAL, C_FINISH, C_PROMPT, C_CONC) = range(17)
CFG_SIZE = 17
MODE_BFS, MODE_PROB, MODE_ADAPTIVE = 0, 1, 2

# Verify steps per compiled chunk between progress reports.
_CHUNK_STEPS = 4096

ProgressFn = Callable[[int, int], None]


@jit
def _insert(seq, start, skip, count_from, max_depth, capacity, mode, clock, t, path, pc, row):
    """Insert the suffixes ``i < w - skip`` of ``seq`` (``w`` tokens; each suffix at most
    ``max_depth`` long) into the named trie ``t``
    in order, as ``insert_counted_kernel`` does: positions ``< count_from`` are touched but not
    counted.  Returns the trie's touch clock.  Two shortcuts change nothing observable:

    - with ``row >= 0`` the nodes of the previous insert of the same kind for that slot are
      remembered (``pc``, with versions while the trie can evict): the sequence moved forward,
      so most n-grams of this one were paths of the previous one and need no hash lookup (a
      stale node, evicted since, is looked up as usual).  ``start`` is the absolute position
      of ``seq`` in its request;
    - the global LRU list (read only by eviction) is kept as a list only in ``mode``
      LRU_LIST, which the caller sets from the first insert that could evict on.  Before that
      (LRU_STAMPS) each touch writes the ``clock`` (< 2**62) into the node's LRU links instead
      (``g_next`` its high bits, ``g_prev`` its low 31); :func:`_build_lru` turns those stamps into the very
      list the linked moves would have made (a touch moves a node to the front).  In LRU_NONE
      the caller has proven that this trie cannot evict for the rest of the run: nothing is
      kept.  Without eviction no node goes stale, so remembered nodes need version checks
      only in LRU_LIST.
    """
    tok, par, freq, ver, c_head, c_next, c_prev = (t.tok, t.par, t.freq, t.ver, t.c_head,
                                                   t.c_next, t.c_prev)
    g_next, g_prev, ht, meta = t.g_next, t.g_prev, t.ht, t.meta
    pc_node, pc_ver, pc_start, pc_len = pc
    mask = ht.size - 1
    w = seq.size
    old_start = 0
    old_len = 0
    if row >= 0:
        old_start = pc_start[row]
        old_len = pc_len[row]
    known_end = old_len - skip  # the previous insert's suffixes are those before this
    # The loop below spells out the child lookup, the table insert and the sibling moves
    # instead of calling the trie's helpers: a helper with a loop, inlined here, makes Numba
    # count references to its array arguments at every node (measured: half of the replay's
    # time went to those atomic counts).
    for i in range(w - skip):
        length = min(w - i, max_depth)
        free_count = capacity - meta[M_SIZE]
        if length > free_count:
            squeeze(t, length - free_count)
        oi = start + i - old_start
        known = min(old_len - oi, max_depth) if 0 <= oi < known_end else 0
        cur = 0
        fresh = False  # below a node created just now there is nothing to look up
        for k in range(length):
            tk = seq[i + k]
            child = -1
            if k < known:
                cand = pc_node[row, oi, k]
                if mode != LRU_LIST or ver[cand] == pc_ver[row, oi, k]:
                    child = cand
            if child == -1 and not fresh:
                # The first few children (most nodes have one or two, whose slots lie near
                # their parent's), then the child table (scattered slots).
                ch = c_head[cur]
                for _ in range(_SCAN):
                    if ch == -1 or tok[ch] == tk:
                        break
                    ch = c_next[ch]
                if ch != -1 and tok[ch] == tk:
                    child = ch
                elif ch != -1:
                    s = _slot(cur, tk, mask)
                    while True:
                        v = ht[s]
                        if v == -1:
                            break
                        if tok[v] == tk and par[v] == cur:
                            child = v
                            break
                        s = (s + 1) & mask
            if child == -1:
                if meta[M_FREETOP] > 0:
                    meta[M_FREETOP] -= 1
                    child = meta[M_FREEHEAD]
                    meta[M_FREEHEAD] = g_next[child]
                else:
                    child = meta[M_UNUSED]
                    meta[M_UNUSED] += 1
                meta[M_SIZE] += 1
                tok[child] = tk
                par[child] = cur
                freq[child] = 1 if i + k >= count_from else 0
                c_head[child] = -1
                s = _slot(cur, tk, mask)  # into the child table
                while ht[s] != -1:
                    s = (s + 1) & mask
                ht[s] = child
                h = c_head[cur]  # the front of its siblings
                c_next[child] = h
                c_prev[child] = -1
                if h != -1:
                    c_prev[h] = child
                c_head[cur] = child
                if mode == LRU_LIST:
                    _g_push_back(g_next, g_prev, meta, child)
                fresh = True
            else:
                if i + k >= count_from:
                    freq[child] += 1
                h = c_head[cur]
                if h != child:  # to the front of its siblings (trie's unlink + push front)
                    p = c_prev[child]
                    nx = c_next[child]
                    c_next[p] = nx  # p != -1: child is not the head
                    if nx != -1:
                        c_prev[nx] = p
                    c_next[child] = h
                    c_prev[child] = -1
                    c_prev[h] = child
                    c_head[cur] = child
            path[k] = child
            cur = child
        if mode == LRU_LIST:
            for k in range(length - 1, -1, -1):
                node = path[k]
                if meta[M_GHEAD] != node:
                    _g_unlink(g_next, g_prev, meta, node)
                    _g_push_front(g_next, g_prev, meta, node)
        elif mode == LRU_STAMPS:
            for k in range(length - 1, -1, -1):
                clock += 1
                node = path[k]  # the touch stamp in its two int32 LRU links
                g_next[node] = clock >> 31
                g_prev[node] = clock & 0x7FFFFFFF
        if row >= 0:
            # Remember this suffix's nodes (the reads of old entries came first: oi >= i).
            for k in range(length):
                pc_node[row, i, k] = path[k]
                if mode == LRU_LIST:
                    pc_ver[row, i, k] = ver[path[k]]
    if row >= 0:
        pc_start[row] = start
        pc_len[row] = w
    return clock


@jit
def _build_lru(t):
    """The global LRU list from the touch stamps (front: the latest touch).  Every slot below
    ``M_UNUSED`` but the root holds a live node: nothing was freed before the first eviction."""
    g_next, g_prev, meta = t.g_next, t.g_prev, t.meta
    used = meta[M_UNUSED]
    stamps = np.empty(used - 1, np.int64)
    for v in range(1, used):
        stamps[v - 1] = (np.int64(g_next[v]) << 31) | np.int64(g_prev[v])
    order = np.argsort(stamps)  # oldest first: the back of the list
    prev = -1
    for j in range(used - 2, -1, -1):
        v = order[j] + 1
        g_prev[v] = prev
        if prev == -1:
            meta[M_GHEAD] = v
        else:
            g_next[prev] = v
        prev = v
    if prev == -1:
        meta[M_GHEAD] = -1
    else:
        g_next[prev] = -1
    meta[M_GTAIL] = prev


@jit
def _gather(p_flat, p_off, o_flat, o_off, r, lo, hi, dst):
    """Tokens ``lo:hi`` of request ``r``'s prompt + output into ``dst[:hi - lo]``."""
    plen = p_off[r + 1] - p_off[r]
    for i in range(lo, hi):
        if i < plen:
            dst[i - lo] = p_flat[p_off[r] + i]
        else:
            dst[i - lo] = o_flat[o_off[r] + i - plen]


@jit
def _known_anchors(pc, row, total, top, mode, out):
    """The own trie's node of each of the last ``top`` tokens' suffixes of a request of
    ``total`` tokens, from its remembered counted insert (``pc``), into ``out[1:top + 1]``;
    False when they are not all known.

    That insert ended at the request's last token and walked (or created) the path of every
    n-gram ending there, and nothing touched the own trie since; in mode LRU_LIST a node it
    walked could have been evicted by a later suffix of the same insert: not used there."""
    pc_node, _, pc_start, pc_len = pc
    w = pc_len[row]
    if mode == LRU_LIST or w < top or pc_start[row] + w != total:
        return False
    for d in range(1, top + 1):
        out[d] = pc_node[row, w - d, d - 1]
    return True


@jit
def _reset_trie(t):
    """An empty trie (``TrieArrays.reset`` without the epoch: local tries match statelessly)."""
    meta = t.meta
    meta[M_SIZE] = 1
    meta[M_GHEAD] = -1
    meta[M_GTAIL] = -1
    meta[M_FREEHEAD] = -1
    meta[M_UNUSED] = 1
    meta[M_FREETOP] = 0
    t.c_head[0] = -1
    t.ht[:] = -1


@jit
def _in_use(t):
    return t.meta[M_UNUSED] - t.meta[M_FREETOP]


@jit
def replay_kernel(streams, cfg, fcfg, trie, local_tries, states, remembered, run, per_req, out,
                  bucket_counts, max_steps, cal, costs, rate, corpora):
    """Advance the replay; returns DONE, PAUSED (``max_steps`` reached), NEED_ROOM or (with
    ``loop[L_MORE]`` set, for :func:`replay_stream`) NEED_REQUESTS.

    ``trie``: the shared trie's plain bundle; ``local_tries``: a (typed) list of the slots' own
    tries' bundles; ``states``: a plain :data:`~.match.States`; ``remembered``: the remembered
    paths of window inserts and of counted inserts, ``(pc_node, pc_ver, pc_start, pc_len)``
    each, per slot; ``run``: the loop state (``loop`` with the ``L_*`` slots, the running
    requests ``run_req`` and their slots ``run_row`` in batch order, the free slots
    ``free_rows``, the finished requests ``fin_req`` whose finish inserts are pending, per slot
    ``l_mode``/``l_clock`` (its own trie's LRU mode and touch clock) and ``need``); ``per_req``:
    ``out_len`` and the node bounds ``adm_shared``/``adm_local``/``fin_bound`` of each
    request's inserts at admission and finish; ``out``: the per-step record; ``cal``: the
    ADAPTIVE calibration table (empty: count ratios); ``costs``: with ``min_expected_accept=
    "auto"``, row ``b`` the step time of batch ``b`` per drafted-node cap (else 0 rows), and
    ``rate`` the expected tokens and time of the steps so far (``choose_cap``).

    Per request ``r`` (file order), step ``k`` of it writes ``em_count[em_off[r] + k]`` (tokens
    emitted) and ``em_drafts[em_off[r] + k]`` (real draft nodes in its tree).  NEED_ROOM sets
    ``need[0]`` (shared trie) or ``need[1 + slot]`` (a slot's own trie) to the node slots that
    trie must have allocated before the next call.

    ``corpora``: external corpora (:func:`~ngramspec.engine.sam.replay_corpora`; a per-corpus
    budget of 0: none), drafted and merged as ``NgramCache.match`` does; each accepted draft
    token (the bonus, and tokens cut at the end of the recording, excluded) of request ``r``
    adds 1 to ``corpora[5][r, source]``, its slot's source (the trie's tree 0, corpus ``k``
    of the merge order ``k + 1``).
    """
    p_flat, p_off, o_flat, o_off = streams
    loop, run_req, run_row, free_rows, fin_req, l_mode, l_clock, need = run
    out_len, adm_shared, adm_local, fin_bound = per_req
    em_off, em_steps, em_count, em_drafts = out
    pcw, pcc = remembered
    t = Trie(*trie)
    st = States(*states)
    tok, meta = t.tok, t.meta
    depth = cfg[C_DEPTH]
    mlen = cfg[C_MLEN]
    min_b = cfg[C_MINB]
    max_b = cfg[C_MAXB]
    budget = cfg[C_BUDGET]
    mode = cfg[C_MODE]
    capacity = cfg[C_CAP]
    stateful = cfg[C_STATEFUL] != 0
    min_w = cfg[C_MINW]
    max_w = cfg[C_MAXW]
    skip = cfg[C_SKIP]
    windows = cfg[C_WINDOWS] != 0
    exact = cfg[C_EXACT] != 0
    local = cfg[C_LOCAL] != 0
    finish_counts = cfg[C_FINISH] != 0
    index_prompt = cfg[C_PROMPT] != 0
    conc = cfg[C_CONC]
    n_req = p_off.size - 1
    n = budget + 1
    # Work arrays of the match and tree kernels (the backend's), allocated once per call.
    sc = new_scratch(budget, depth, max_b)
    c_scratch = corpus_scratch_in(corpora[2])  # external corpora's work arrays
    asc = adaptive_scratch(budget, depth)
    a_params = (depth, budget, fcfg[0], fcfg[1], fcfg[2], fcfg[3])
    out_tokens = np.empty(n, np.int32)
    out_mask = np.empty((n, n), np.bool_)
    out_prob = np.empty(n, np.float64)
    with_corpora = corpora[1][0] > 0
    # Per slot, the part of the merge that drafted it (then corpus_row's work space).
    out_source = np.zeros(3 * n, np.int32)
    by_source = corpora[5]
    auto = costs.shape[0] > 0
    # "auto": every tree of a step is drafted and saved first, then cut to one cap.
    tok_rows = np.zeros((conc if auto else 0, n), np.int32)
    par_rows = np.zeros((conc if auto else 0, n), np.int32)
    prob_rows = np.zeros((conc if auto else 0, n), np.float64)
    used_rows = np.zeros(conc if auto else 0, np.int32)
    longest = 1
    for r in range(n_req):
        longest = max(longest, p_off[r + 1] - p_off[r] + o_off[r + 1] - o_off[r])
    seq = np.empty(longest, np.int32)
    win_flat = np.empty(conc * mlen, np.int32)
    win_off = np.zeros(conc + 1, np.int64)
    emitted = np.empty(conc, np.int64)
    path = np.empty(depth, np.int32)
    bfs_top = max(1, depth - 1) if stateful else max_w
    bfs_steps = max(1, depth - 1) if stateful else max_w - min_w + 1
    # Upper bounds of new nodes: a window insert; a counted insert of one step (at most
    # depth - 1 + n tokens, each suffix at most depth nodes).
    per_window = depth * (depth + 1) // 2
    per_count = (depth - 1 + n) * depth
    step_shared = (per_window if windows else 0) + (per_count if exact and not local else 0)
    # Per output token still to come (a step emits e >= 1 tokens; its windows create at most
    # per_window <= e * per_window nodes, its counts (depth - 1 + e) * depth <= e * depth**2).
    token_shared = (per_window if windows else 0) + (depth * depth if exact and not local else 0)
    token_local = depth * depth
    steps_here = 0
    while True:
        if steps_here >= max_steps:
            return PAUSED
        # Room for this whole iteration (pending finishes, admissions, the step), checked
        # before anything of it runs.
        nrun = loop[L_NRUN]
        short = False
        need[:] = 0
        g_need = 0
        for f in range(loop[L_NFIN]):
            g_need += fin_bound[fin_req[f]]
        k = nrun
        r = loop[L_NEXT]
        while r < n_req and k < conc:
            if o_off[r + 1] - o_off[r] > 1:
                g_need += adm_shared[r]
                if local:
                    row = free_rows[conc - k - 1]
                    want = 1 + adm_local[r] + per_count
                    if local_tries[row][0].size < min(capacity, want):  # [0]: tok
                        need[1 + row] = want
                        short = True
                k += 1
            r += 1
        if k < conc and loop[L_MORE] != 0:
            return NEED_REQUESTS  # admission would look past the requests given
        g_need += k * step_shared
        if local:
            for b in range(nrun):
                row = run_row[b]
                lt = Trie(*local_tries[row])
                want = _in_use(lt) + per_count
                if lt.tok.size < min(capacity, want):
                    need[1 + row] = want
                    short = True
        want = _in_use(t) + g_need
        if tok.size < min(capacity, want):
            need[0] = want
            short = True
        if short:
            return NEED_ROOM
        # The shared trie's LRU order: nothing once the inserts still to come cannot fill it;
        # else the list from the first iteration whose inserts could evict (with versions of
        # remembered nodes: forget those remembered without); touch stamps before.
        if loop[L_GMODE] == LRU_STAMPS:
            if (meta[M_SIZE] + loop[L_LEFT] * token_shared + loop[L_ADMLEFT] + loop[L_FINLEFT]
                    <= capacity):
                loop[L_GMODE] = LRU_NONE
            elif meta[M_SIZE] + g_need > capacity:
                _build_lru(t)
                loop[L_GMODE] = LRU_LIST
                pcw[3][:] = 0
                if not local:
                    pcc[3][:] = 0
        g_mode = loop[L_GMODE]
        clock = loop[L_GCLOCK]
        # Finish inserts of the requests that finished at the previous step, in batch order:
        # the shared trie learns the whole request (local_index with exact_counts).
        for f in range(loop[L_NFIN]):
            r = fin_req[f]
            plen = p_off[r + 1] - p_off[r]
            size = plen + o_off[r + 1] - o_off[r]
            start = 0 if index_prompt else plen
            lo = max(0, start - depth + 1)
            _gather(p_flat, p_off, o_flat, o_off, r, lo, size, seq)
            clock = _insert(seq[:size - lo], lo, 0, start - lo, depth, capacity, g_mode, clock, t,
                            path, pcc, -1)
            loop[L_FINLEFT] -= fin_bound[r]
        loop[L_NFIN] = 0
        # Admission (prefill): the first output token; prefill neither matches nor inserts
        # (the options beyond SGLang index the prompt here).
        while loop[L_NEXT] < n_req and loop[L_NRUN] < conc:
            r = loop[L_NEXT]
            loop[L_NEXT] += 1
            out_len[r] = 1
            olen = o_off[r + 1] - o_off[r]
            if olen <= 1:
                continue
            k = loop[L_NRUN]
            row = free_rows[conc - k - 1]
            st.epoch[row] = 0  # a new request's state always rebuilds
            st.ptl[row] = 0
            st.n[row] = 0
            pcw[3][row] = 0  # nothing remembered
            pcc[3][row] = 0
            run_req[k] = r
            run_row[k] = row
            loop[L_NRUN] = k + 1
            loop[L_ADMLEFT] -= adm_shared[r]
            plen = p_off[r + 1] - p_off[r]
            if exact:
                start = 0 if index_prompt else plen
                lo = max(0, start - depth + 1)
                _gather(p_flat, p_off, o_flat, o_off, r, lo, plen + 1, seq)
                if local:
                    lt = Trie(*local_tries[row])
                    _reset_trie(lt)  # an empty LRU list: list or stamps from here
                    if 1 + adm_local[r] + (olen - 1) * token_local <= capacity:
                        l_mode[row] = LRU_NONE
                    elif 1 + adm_local[r] > capacity:
                        l_mode[row] = LRU_LIST
                    else:
                        l_mode[row] = LRU_STAMPS
                    l_clock[row] = _insert(seq[:plen + 1 - lo], lo, 0, start - lo, depth,
                                           capacity, l_mode[row], 0, lt, path, pcc, -1)
                else:
                    clock = _insert(seq[:plen + 1 - lo], lo, 0, start - lo, depth, capacity,
                                    g_mode, clock, t, path, pcc, -1)
            elif index_prompt and plen > 0:
                _gather(p_flat, p_off, o_flat, o_off, r, 0, plen, seq)
                clock = _insert(seq[:plen], 0, 0, 0, depth, capacity, g_mode, clock, t, path, pcc,
                                -1)
        loop[L_GCLOCK] = clock
        nrun = loop[L_NRUN]
        if nrun == 0:
            return DONE
        # Contexts: the last match-length tokens of prompt + output so far, batch order.
        for b in range(nrun):
            r = run_req[b]
            total = p_off[r + 1] - p_off[r] + out_len[r]
            w = min(total, mlen)
            lo = win_off[b]
            _gather(p_flat, p_off, o_flat, o_off, r, total - w, total, win_flat[lo:lo + w])
            win_off[b + 1] = lo + w
        cap = 0
        if auto:
            for b in range(nrun):
                r = run_req[b]
                ctx = win_flat[win_off[b]:win_off[b + 1]]
                if local:
                    row = run_row[b]
                    known = _known_anchors(pcc, row, p_off[r + 1] - p_off[r] + out_len[r],
                                           min(ctx.size, depth), l_mode[row], asc.l_nodes)
                    used = draft_tree(ctx, a_params, Trie(*local_tries[row]), t, bucket_counts,
                                      asc, out_tokens, out_mask, out_prob, cal, known)
                else:
                    used = draft_tree(ctx, a_params, None, t, bucket_counts, asc, out_tokens,
                                      out_mask, out_prob, cal)
                save_creation(asc, used, tok_rows[b], par_rows[b], prob_rows[b])
                used_rows[b] = used
            cap = choose_cap(prob_rows[:nrun], used_rows[:nrun], costs[nrun], rate)
        # Match, draft and verify each request.
        for b in range(nrun):
            r = run_req[b]
            row = run_row[b]
            ctx = win_flat[win_off[b]:win_off[b + 1]]
            if mode == MODE_ADAPTIVE:
                if auto:
                    used = min(used_rows[b], cap)
                    layout_prefix(ctx[ctx.size - 1], used, tok_rows[b], par_rows[b],
                                  prob_rows[b], asc, bucket_counts, out_tokens, out_mask,
                                  out_prob)
                elif local:
                    known = _known_anchors(pcc, row, p_off[r + 1] - p_off[r] + out_len[r],
                                           min(ctx.size, depth), l_mode[row], asc.l_nodes)
                    used = draft_tree(ctx, a_params, Trie(*local_tries[row]), t, bucket_counts,
                                      asc, out_tokens, out_mask, out_prob, cal, known)
                else:
                    used = draft_tree(ctx, a_params, None, t, bucket_counts, asc, out_tokens,
                                      out_mask, out_prob, cal)
                parents = asc.slot_parent
            else:
                if stateful:
                    total = p_off[r + 1] - p_off[r] + out_len[r]
                    count = match_anchors(ctx, total, row, depth, t, st, sc.m_scratch,
                                          sc.a_nodes, sc.a_depths)
                else:
                    count = window_anchors(ctx, min_w, max_w, t, sc.a_nodes, sc.a_depths)
                if with_corpora:  # external corpora (stateful profile only)
                    used = draft_with_corpora(ctx, count, row, total, mode == MODE_PROB, bfs_top,
                                              bfs_steps, min_b, max_b, t, sc, bucket_counts,
                                              corpora, c_scratch, out_tokens, out_mask,
                                              out_source)
                    parents = c_scratch[9]
                elif mode == MODE_PROB:
                    used = build_prob(count, budget, max_b, t, sc, bucket_counts)
                else:
                    used = build_bfs_scheduled(count, budget, bfs_top, bfs_steps, min_b, max_b,
                                               t, sc, bucket_counts)
                if not with_corpora:
                    fill_result(ctx[ctx.size - 1], n, sc, out_tokens, out_mask)
                    parents = sc.slot_parent
            # Greedy verify along the recording: rec = output[out_len:].
            rec = o_off[r] + out_len[r]
            left = o_off[r + 1] - rec
            last = 0
            k = 0
            while k < left:
                want = o_flat[rec + k]
                hit = -1
                for i in range(last + 1, n):  # children of `last`, in slot order
                    if parents[i] == last and out_tokens[i] == want:
                        hit = i
                        break
                if hit == -1:
                    break
                if with_corpora and k < left - 1:  # an accepted draft (the cut one is not)
                    by_source[r, out_source[hit]] += 1
                last = hit
                k += 1
            e = min(k + 1, left)
            emitted[b] = e
            at = em_off[r] + em_steps[r]
            em_count[at] = e
            em_drafts[at] = used
            em_steps[r] += 1
        # 0.5.23: the windows matched, in batch order, before appending.
        if windows and stateful:
            for b in range(nrun):
                r = run_req[b]
                lo = win_off[b]
                w = win_off[b + 1] - lo
                total = p_off[r + 1] - p_off[r] + out_len[r]
                clock = _insert(win_flat[lo:lo + w], total - w, 0, 0, depth, capacity, g_mode,
                                clock, t, path, pcw, run_row[b])
        # Append; exact counting of the new n-grams as they arrive.
        for b in range(nrun):
            r = run_req[b]
            row = run_row[b]
            before = p_off[r + 1] - p_off[r] + out_len[r]
            e = emitted[b]
            if exact:
                lo = max(0, before - depth + 1)
                _gather(p_flat, p_off, o_flat, o_off, r, lo, before + e, seq)
                if local:
                    lt = Trie(*local_tries[row])
                    if l_mode[row] == LRU_STAMPS:
                        left = o_off[r + 1] - o_off[r] - out_len[r]
                        if lt.meta[M_SIZE] + left * token_local <= capacity:
                            l_mode[row] = LRU_NONE
                        elif lt.meta[M_SIZE] + per_count > capacity:
                            _build_lru(lt)
                            l_mode[row] = LRU_LIST
                            pcc[3][row] = 0
                    l_clock[row] = _insert(seq[:before + e - lo], lo, 0, before - lo, depth,
                                           capacity, l_mode[row], l_clock[row], lt, path, pcc,
                                           row)
                else:
                    clock = _insert(seq[:before + e - lo], lo, 0, before - lo, depth, capacity,
                                    g_mode, clock, t, path, pcc, row)
            out_len[r] += e
            loop[L_LEFT] -= e
        # 0.5.9: after appending, the last branch_length tokens of every request.
        if windows and not stateful:
            for b in range(nrun):
                r = run_req[b]
                total = p_off[r + 1] - p_off[r] + out_len[r]
                w = min(total, depth)
                _gather(p_flat, p_off, o_flat, o_off, r, total - w, total, seq)
                clock = _insert(seq[:w], total - w, skip, 0, depth, capacity, g_mode, clock, t,
                                path, pcw, run_row[b])
        # Finished requests leave (order kept) and free their slots; their finish inserts
        # run at the top of the next iteration, before anything else touches the tries.
        keep = 0
        for b in range(nrun):
            r = run_req[b]
            if out_len[r] < o_off[r + 1] - o_off[r]:
                run_req[keep] = r
                run_row[keep] = run_row[b]
                keep += 1
            else:
                free_rows[conc - loop[L_NRUN]] = run_row[b]
                loop[L_NRUN] -= 1
                if finish_counts:
                    fin_req[loop[L_NFIN]] = r
                    loop[L_NFIN] += 1
        loop[L_NRUN] = keep
        loop[L_STEPS] += 1
        loop[L_GCLOCK] = clock
        steps_here += 1


@dataclass(frozen=True)
class ReplayOutput:
    """What :func:`replay` measured.

    Attributes
    ----------
    emitted : list of np.ndarray
        Per request, int32: tokens emitted at each of its verify steps.
    drafts : list of np.ndarray
        Per request, int32: real draft nodes in its tree at each verify step.
    batch_steps : int
        Serving-loop iterations (one target forward each).
    draft_seconds : float
        CPU time of the compiled loop (drafting, inserting, and the verification bookkeeping).
    wall_seconds : float
        Wall time of the loop (compiling or loading the kernel excluded).
    concurrency : int
        The concurrency used (at most the number of requests).
    accepted_by_source : np.ndarray or None
        With corpora, ``(R, 1 + K)`` int64: per request, its accepted draft tokens (the bonus
        tokens excluded) by the part of the merged tree that drafted them: column 0 the
        trie's tree, column ``k + 1`` corpus ``k`` in merge order.  A row sums to
        ``emitted[r].sum() - emitted[r].size``.  None without corpora.
    """

    emitted: list[np.ndarray]
    drafts: list[np.ndarray]
    batch_steps: int
    draft_seconds: float
    wall_seconds: float
    concurrency: int
    accepted_by_source: np.ndarray | None = None


def _pack(seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum([s.size for s in seqs], out=off[1:])
    flat = np.concatenate(seqs) if len(seqs) else np.zeros(0, np.int32)
    return np.ascontiguousarray(flat, dtype=np.int32), off


@jit
def _list_of(bundle):
    out = List()
    out.append(bundle)
    return out


@jit
def _list_append(out, bundle):
    out.append(bundle)


@jit
def _list_set(out, i, bundle):
    out[i] = bundle


def _trie_list(tries: list[TrieArrays]):
    """The slots' own tries as the kernel takes them (a typed list; a list without the JIT).

    The typed list is built and changed only inside cached kernels: its methods called from
    Python compile on every start (about a second), which dominated short replays."""
    import numba

    if numba.config.DISABLE_JIT:
        return [t.bundle for t in tries]
    out = _list_of(tries[0].bundle)
    for t in tries[1:]:
        _list_append(out, t.bundle)
    return out


def _config_arrays(config: NgramConfig, concurrency: int) -> tuple[np.ndarray, np.ndarray]:
    cfg = np.zeros(CFG_SIZE, np.int64)
    exact = config.exact_counts or config.local_index
    cfg[C_DEPTH] = config.trie_depth
    cfg[C_MLEN] = config.match_length
    cfg[C_MINB] = config.min_bfs_breadth
    cfg[C_MAXB] = config.max_bfs_breadth
    cfg[C_BUDGET] = config.budget
    cfg[C_MODE] = {"BFS": MODE_BFS, "PROB": MODE_PROB, "ADAPTIVE": MODE_ADAPTIVE}[
        config.match_type]
    cfg[C_CAP] = config.capacity
    cfg[C_STATEFUL] = config.stateful
    if not config.stateful:
        cfg[C_MINW] = config.min_match_window_size
        cfg[C_MAXW] = config.max_match_window_size
        cfg[C_SKIP] = config.min_match_window_size
    cfg[C_WINDOWS] = not exact or (config.local_index and not config.exact_counts)
    cfg[C_EXACT] = exact
    cfg[C_LOCAL] = config.local_index
    cfg[C_FINISH] = config.local_index and config.exact_counts
    cfg[C_PROMPT] = config.index_prompt
    cfg[C_CONC] = concurrency
    auto = config.min_expected_accept == "auto"
    fcfg = np.asarray([config.min_token_prob, config.max_spec_factor,
                       0.0 if auto else config.min_expected_accept,
                       config.shared_pseudo_count], np.float64)
    return cfg, fcfg


def replay(prompts: Sequence[np.ndarray], outputs: Sequence[np.ndarray], config: NgramConfig,
           *, concurrency: int, progress: ProgressFn | None = None,
           costs: object = None, corpora: Sequence = ()) -> ReplayOutput:
    """Replay the serving loop of :mod:`ngramspec.simulate` over recorded streams, compiled.

    Parameters
    ----------
    prompts, outputs : sequences of 1-D int32 arrays
        Per request (in admission order), its prompt and recorded greedy output tokens.
    config : NgramConfig
        Any configuration (both profiles, every match type and option).
    concurrency : int
        Requests decoded together (>= 1); more than the number of requests is clamped to it.
    progress : callable(done, total), optional
        Called now and then with output tokens replayed so far and in total.
    costs : CostTable or CostModel, optional
        The step costs of ``min_expected_accept="auto"`` (required there).
    corpora : sequence of FlatAutomaton, optional
        External corpora loaded before the traffic, in SGLang's merge order
        (``NgramCache.corpora()`` order), built for ``config``'s match type.

    Returns
    -------
    ReplayOutput
        Per-request emitted and draft counts, batch steps and timings; equal, step for step,
        to the :class:`~ngramspec.Drafter` replay of the same configuration.  With corpora
        also the accepted draft tokens by source (a budget too small to split among the
        corpora drafts from the trie alone: all the trie's).
    """
    n_req = len(prompts)
    if n_req != len(outputs):
        raise ValueError(f"prompts and outputs differ in length ({n_req} != {len(outputs)})")
    conc = max(1, min(int(concurrency), max(n_req, 1)))
    p_flat, p_off = _pack(prompts)
    o_flat, o_off = _pack(outputs)
    plen = np.diff(p_off)
    olen = np.diff(o_off)
    depth = config.trie_depth
    n = config.draft_token_num
    exact = config.exact_counts or config.local_index
    cfg, fcfg = _config_arrays(config, conc)
    from ..acceptance import calibration_array, check_costs, cost_matrix

    cal = calibration_array(config)
    costs = check_costs(config, costs)
    cost_rows = (np.zeros((0, n), np.float64) if costs is None
                 else cost_matrix(costs, conc, n))
    rate = np.zeros(2, np.float64)
    admitted = olen > 1
    # Node bounds of the inserts at admission and at finish, per request (see the kernel).
    start = plen if not config.index_prompt else np.zeros_like(plen)
    count_len = plen + 1 - np.maximum(0, start - depth + 1)
    adm_local = np.where(admitted, count_len * depth, 0) if config.local_index else \
        np.zeros(n_req, np.int64)
    if exact and not config.local_index:
        adm_shared = np.where(admitted, count_len * depth, 0)
    elif config.index_prompt and not exact:
        adm_shared = np.where(admitted, plen * depth, 0)
    else:
        adm_shared = np.zeros(n_req, np.int64)
    if config.local_index and config.exact_counts:
        fin = np.where(admitted, (plen + olen - np.maximum(0, start - depth + 1)) * depth, 0)
    else:
        fin = np.zeros(n_req, np.int64)
    adm_shared = np.ascontiguousarray(adm_shared, np.int64)
    adm_local = np.ascontiguousarray(adm_local, np.int64)
    fin = np.ascontiguousarray(fin, np.int64)

    trie = TrieArrays(config.capacity)
    local = ([TrieArrays(config.capacity) for _ in range(conc)] if config.local_index
             else [TrieArrays(2, initial=2)])
    local_list = _trie_list(local)
    rows = conc
    states = new_states(rows, depth)
    windows = bool(cfg[C_WINDOWS])

    def remembered(r: int, width: int, on: bool):
        shape = (r, width, depth) if on else (1, 1, 1)
        return (np.zeros(shape, np.int32), np.zeros(shape, np.int64), np.zeros(rows, np.int64),
                np.zeros(rows, np.int64))

    pcw = remembered(rows, depth, windows)
    pcc = remembered(rows, depth - 1 + n, exact)
    loop = np.zeros(LOOP_SIZE, np.int64)
    loop[L_LEFT] = int(np.maximum(olen - 1, 0).sum())
    loop[L_ADMLEFT] = int(adm_shared.sum())
    loop[L_FINLEFT] = int(fin.sum())
    need = np.zeros(conc + 1, np.int64)
    run = (loop, np.zeros(conc, np.int64), np.zeros(conc, np.int64),
           np.arange(conc - 1, -1, -1, dtype=np.int64), np.zeros(conc, np.int64),
           np.zeros(conc, np.int64), np.zeros(conc, np.int64), need)
    out_len = np.zeros(n_req, np.int64)
    per_req = (out_len, adm_shared, adm_local, fin)
    # Request r has at most len(output) - 1 verify steps (each emits at least one token).
    em_off = np.zeros(n_req + 1, np.int64)
    np.cumsum(np.maximum(olen - 1, 0), out=em_off[1:])
    em_steps = np.zeros(n_req, np.int64)
    em_count = np.zeros(int(em_off[-1]), np.int32)
    em_drafts = np.zeros(int(em_off[-1]), np.int32)
    out = (em_off, em_steps, em_count, em_drafts)
    streams = (p_flat, p_off, o_flat, o_off)
    total_tokens = int(o_off[-1])
    chunk = _CHUNK_STEPS if progress is not None else np.iinfo(np.int64).max
    # External corpora: SGLang's budget split (spec §3.6.7), the same for the whole run.
    k = len(corpora)
    per = min(config.external_sam_budget, config.budget) // k if k else 0
    corpus_args = replay_corpora(list(corpora) if per else [], per,
                                 config.budget - per * k if per else config.budget,
                                 n=n, max_depth=depth, min_breadth=config.min_bfs_breadth,
                                 max_breadth=config.max_bfs_breadth,
                                 prob=config.match_type == "PROB", rows=rows,
                                 requests=n_req if per else 0)
    first = True  # the first call runs nothing (max_steps 0): it compiles or loads the kernel
    cpu = wall = 0.0
    while True:
        c0 = time.thread_time()
        w0 = time.perf_counter()
        code = replay_kernel(streams, cfg, fcfg, trie.bundle, local_list, states, (pcw, pcc),
                             run, per_req, out, BUCKET_COUNTS, 0 if first else chunk, cal,
                             cost_rows, rate, corpus_args)
        if first:
            first = False
        else:
            cpu += time.thread_time() - c0
            wall += time.perf_counter() - w0
        if code == DONE:
            break
        if code == NEED_ROOM:
            wall += _make_room(trie, local, local_list, need)
        elif code == PAUSED:
            if progress is not None:
                progress(int(out_len.sum()), total_tokens)
        else:
            raise AssertionError(f"replay kernel failed with code {code}")
    if progress is not None:
        progress(total_tokens, total_tokens)
    emitted = [em_count[em_off[r]:em_off[r] + em_steps[r]].copy() for r in range(n_req)]
    drafts = [em_drafts[em_off[r]:em_off[r] + em_steps[r]].copy() for r in range(n_req)]
    by_source = None
    if per:
        by_source = corpus_args[5]
    elif k:  # corpora loaded, but no budget for them: every accepted draft is the trie's
        by_source = np.zeros((n_req, 1 + k), np.int64)
        by_source[:, 0] = [int(e.sum()) - e.size for e in emitted]
    return ReplayOutput(emitted, drafts, int(loop[L_STEPS]), cpu, wall, conc, by_source)


def _make_room(trie: TrieArrays, local: list[TrieArrays], local_list, need: np.ndarray
               ) -> float:
    """Grow the tries the kernel asked room in (``need``: the shared trie's nodes, then each
    slot's own); returns the seconds it took."""
    w0 = time.perf_counter()
    _grow(trie, int(need[0]))
    for s in np.flatnonzero(need[1:]):
        _grow(local[s], int(need[1 + s]))
        _set_slot(local_list, int(s), local[s].bundle)
    return time.perf_counter() - w0


def _set_slot(local_list, i: int, bundle) -> None:
    if isinstance(local_list, list):  # without the JIT
        local_list[i] = bundle
    else:
        _list_set(local_list, i, bundle)


def _grow(trie: TrieArrays, want: int) -> None:
    """Grow until ``want`` node slots are allocated (or the trie reached its capacity)."""
    while trie.alloc < min(trie.capacity, want):
        trie.grow()


# --- streaming: requests admitted from an iterator ----------------------------------------


def _bounds(plen: np.ndarray, olen: np.ndarray, config: NgramConfig):
    """Node bounds of each request's inserts at admission (shared, local) and at finish: the
    same as :func:`replay` computes for all requests at once."""
    depth = config.trie_depth
    exact = config.exact_counts or config.local_index
    admitted = olen > 1
    start = plen if not config.index_prompt else np.zeros_like(plen)
    count_len = plen + 1 - np.maximum(0, start - depth + 1)
    zeros = np.zeros(plen.size, np.int64)
    adm_local = np.where(admitted, count_len * depth, 0) if config.local_index else zeros
    if exact and not config.local_index:
        adm_shared = np.where(admitted, count_len * depth, 0)
    elif config.index_prompt and not exact:
        adm_shared = np.where(admitted, plen * depth, 0)
    else:
        adm_shared = zeros
    if config.local_index and config.exact_counts:
        fin = np.where(admitted, (plen + olen - np.maximum(0, start - depth + 1)) * depth, 0)
    else:
        fin = zeros
    return tuple(np.ascontiguousarray(a, np.int64) for a in (adm_shared, adm_local, fin))


def replay_stream(requests: Iterable[tuple[np.ndarray, np.ndarray]], config: NgramConfig, *,
                  concurrency: int,
                  on_finish: Callable[[int, np.ndarray, np.ndarray], None],
                  chunk: int = 4096, progress: ProgressFn | None = None,
                  costs: Any = None) -> ReplayOutput:
    """:func:`replay` over requests taken from an iterator as the loop admits them.

    Only the requests admitted and not yet finished, and the next ``chunk`` or so, are held
    (with the tries): the kernel stops at the top of an iteration whose admissions would look
    past the requests given (NEED_REQUESTS), the finished ones are handed to ``on_finish``
    and dropped, the others renumbered, and more are read.  The result is the same as
    :func:`replay` on all requests at once, request for request and step for step.

    Parameters
    ----------
    requests : iterable of (prompt, output) 1-D int32 arrays
        In admission order.
    config, concurrency
        As :func:`replay` (the concurrency is clamped to the number of requests when the
        iterator holds fewer than it, as there).
    on_finish : callable(index, emitted, drafts)
        Called once per request (``index``: its position in ``requests``), soon after it
        finished, with its per-step emitted tokens and draft nodes (int32 arrays).
    chunk : int
        Requests read at a time (at least the concurrency).
    progress : callable(done, total), optional
        Output tokens replayed so far and read so far.
    costs : CostTable or CostModel, optional
        As :func:`replay` (``min_expected_accept="auto"``).

    Returns
    -------
    ReplayOutput
        Its ``emitted`` and ``drafts`` are empty (they went to ``on_finish``).
    """
    it = iter(requests)
    chunk = max(int(chunk), int(concurrency), 1)
    win_p: list[np.ndarray] = []
    win_o: list[np.ndarray] = []
    win_g: list[int] = []
    n_read = 0
    exhausted = False
    tokens_read = 0

    def read(k: int) -> None:
        nonlocal n_read, exhausted, tokens_read
        for _ in range(k):
            item = next(it, None)
            if item is None:
                exhausted = True
                return
            p, o = item
            win_p.append(np.ascontiguousarray(p, np.int32))
            win_o.append(np.ascontiguousarray(o, np.int32))
            win_g.append(n_read)
            n_read += 1
            tokens_read += win_o[-1].size

    read(chunk)
    conc = max(1, min(int(concurrency), max(n_read, 1))) if exhausted else int(concurrency)
    depth = config.trie_depth
    n = config.draft_token_num
    exact = config.exact_counts or config.local_index
    cfg, fcfg = _config_arrays(config, conc)
    from ..acceptance import calibration_array, check_costs, cost_matrix

    cal = calibration_array(config)
    costs = check_costs(config, costs)
    cost_rows = (np.zeros((0, n), np.float64) if costs is None
                 else cost_matrix(costs, conc, n))
    rate = np.zeros(2, np.float64)
    no_corpora = replay_corpora([], 0, config.budget, n=n, max_depth=depth,
                                min_breadth=config.min_bfs_breadth,
                                max_breadth=config.max_bfs_breadth,
                                prob=config.match_type == "PROB", rows=1)
    trie = TrieArrays(config.capacity)
    local = ([TrieArrays(config.capacity) for _ in range(conc)] if config.local_index
             else [TrieArrays(2, initial=2)])
    local_list = _trie_list(local)
    states = new_states(conc, depth)
    windows = bool(cfg[C_WINDOWS])

    def remembered(width: int, on: bool):
        shape = (conc, width, depth) if on else (1, 1, 1)
        return (np.zeros(shape, np.int32), np.zeros(shape, np.int64), np.zeros(conc, np.int64),
                np.zeros(conc, np.int64))

    pcw = remembered(depth, windows)
    pcc = remembered(depth - 1 + n, exact)
    loop = np.zeros(LOOP_SIZE, np.int64)
    # Until the last request is read, the shared trie must not be proven free of eviction.
    unknown = config.capacity + 1
    need = np.zeros(conc + 1, np.int64)
    run = (loop, np.zeros(conc, np.int64), np.zeros(conc, np.int64),
           np.arange(conc - 1, -1, -1, dtype=np.int64), np.zeros(conc, np.int64),
           np.zeros(conc, np.int64), np.zeros(conc, np.int64), need)
    run_req, fin_req = run[1], run[4]
    # Carried per window request: output length so far, verify steps so far and their counts.
    out_len = np.zeros(0, np.int64)
    em_steps = np.zeros(0, np.int64)
    em_count = np.zeros(0, np.int32)
    em_drafts = np.zeros(0, np.int32)
    em_off = np.zeros(1, np.int64)
    n_old = 0  # window requests whose bounds are already in the loop's totals

    def rebuild():
        nonlocal out_len, em_steps, em_count, em_drafts, em_off, n_old, streams, per_req, out
        p_flat, p_off = _pack(win_p)
        o_flat, o_off = _pack(win_o)
        plen, olen = np.diff(p_off), np.diff(o_off)
        adm_shared, adm_local, fin = _bounds(plen, olen, config)
        loop[L_LEFT] += int(np.maximum(olen[n_old:] - 1, 0).sum())
        loop[L_ADMLEFT] += int(adm_shared[n_old:].sum())
        loop[L_FINLEFT] += int(fin[n_old:].sum())
        if exhausted and loop[L_MORE]:
            loop[L_ADMLEFT] -= unknown
        loop[L_MORE] = 0 if exhausted else 1
        new_off = np.zeros(len(win_p) + 1, np.int64)
        np.cumsum(np.maximum(olen - 1, 0), out=new_off[1:])
        new_count = np.zeros(int(new_off[-1]), np.int32)
        new_drafts = np.zeros(int(new_off[-1]), np.int32)
        new_steps = np.zeros(len(win_p), np.int64)
        new_len = np.zeros(len(win_p), np.int64)
        for w in range(n_old):  # requests carried over keep what they did so far
            k = em_steps[w]
            new_count[new_off[w]:new_off[w] + k] = em_count[em_off[w]:em_off[w] + k]
            new_drafts[new_off[w]:new_off[w] + k] = em_drafts[em_off[w]:em_off[w] + k]
        new_steps[:n_old] = em_steps[:n_old]
        new_len[:n_old] = out_len[:n_old]
        out_len, em_steps, em_count, em_drafts, em_off = (new_len, new_steps, new_count,
                                                          new_drafts, new_off)
        n_old = len(win_p)
        streams = (p_flat, p_off, o_flat, o_off)
        per_req = (out_len, adm_shared, adm_local, fin)
        out = (em_off, em_steps, em_count, em_drafts)

    def compact():
        """Hand the finished requests over, drop them and renumber the others."""
        nonlocal n_old, out_len, em_steps, em_count, em_drafts, em_off, done_tokens
        nxt, nrun, nfin = int(loop[L_NEXT]), int(loop[L_NRUN]), int(loop[L_NFIN])
        busy = set(run_req[:nrun].tolist()) | set(fin_req[:nfin].tolist())
        keep = []
        for w in range(len(win_p)):
            if w < nxt and w not in busy:
                k = em_steps[w]
                on_finish(win_g[w], em_count[em_off[w]:em_off[w] + k].copy(),
                          em_drafts[em_off[w]:em_off[w] + k].copy())
                done_tokens += win_o[w].size
            else:
                keep.append(w)
        new_index = np.full(len(win_p) + 1, -1, np.int64)
        new_index[keep] = np.arange(len(keep))
        run_req[:nrun] = new_index[run_req[:nrun]]
        fin_req[:nfin] = new_index[fin_req[:nfin]]
        loop[L_NEXT] = sum(1 for w in keep if w < nxt)
        win_p[:] = [win_p[w] for w in keep]
        win_o[:] = [win_o[w] for w in keep]
        win_g[:] = [win_g[w] for w in keep]
        idx = np.asarray(keep, np.int64)
        k_steps = em_steps[idx]
        k_off = np.zeros(len(keep) + 1, np.int64)
        np.cumsum(k_steps, out=k_off[1:])
        k_count = np.zeros(int(k_off[-1]), np.int32)
        k_drafts = np.zeros(int(k_off[-1]), np.int32)
        for j, w in enumerate(keep):
            k_count[k_off[j]:k_off[j + 1]] = em_count[em_off[w]:em_off[w] + k_steps[j]]
            k_drafts[k_off[j]:k_off[j + 1]] = em_drafts[em_off[w]:em_off[w] + k_steps[j]]
        out_len, em_steps, em_count, em_drafts, em_off = (out_len[idx], k_steps, k_count,
                                                          k_drafts, k_off)
        n_old = len(keep)

    streams = per_req = out = None
    done_tokens = 0
    if not exhausted:
        loop[L_ADMLEFT] += unknown
    rebuild()
    max_steps = _CHUNK_STEPS if progress is not None else np.iinfo(np.int64).max
    first = True
    cpu = wall = 0.0
    while True:
        c0 = time.thread_time()
        w0 = time.perf_counter()
        code = replay_kernel(streams, cfg, fcfg, trie.bundle, local_list, states, (pcw, pcc),
                             run, per_req, out, BUCKET_COUNTS, 0 if first else max_steps, cal,
                             cost_rows, rate, no_corpora)
        if first:
            first = False
        else:
            cpu += time.thread_time() - c0
            wall += time.perf_counter() - w0
        if code == DONE:
            break
        if code == NEED_ROOM:
            wall += _make_room(trie, local, local_list, need)
        elif code == NEED_REQUESTS:
            compact()
            read(chunk)
            rebuild()
            if progress is not None:
                progress(done_tokens + int(out_len.sum()), tokens_read)
        elif code == PAUSED:
            if progress is not None:
                progress(done_tokens + int(out_len.sum()), tokens_read)
        else:
            raise AssertionError(f"replay kernel failed with code {code}")
    compact()
    if progress is not None:
        progress(tokens_read, tokens_read)
    return ReplayOutput([], [], int(loop[L_STEPS]), cpu, wall, conc)
