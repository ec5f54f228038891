"""The serving-loop replay as one compiled kernel (SGLang 0.5.23, greedy verification).

``replay_kernel`` runs the loop of :mod:`ngramspec.simulate` over recorded streams with the
engine's own kernels (``match_anchors``, ``build_bfs``/``build_prob``, ``fill_result``) and,
for inserts, ``_insert_window``: ``insert_kernel``'s algorithm on the trie's own helpers, with
two shortcuts that change no result (see its docstring).  All loop state lives in caller-owned
arrays, so the kernel can stop and be called again with the same arguments to continue:

- after ``max_steps`` verify steps (the caller shows progress between chunks);
- before a step whose inserts could need more node slots than are allocated: the caller grows
  the trie (``TrieArrays.grow``) and calls again.  A step inserts at most ``batch * D*(D+1)/2``
  new nodes (every suffix of every window of at most ``D`` tokens), so checking that bound at
  the top of a step means the inserts never run out of room mid-step.

Greedy verification against a recording: the target's argmax after a slot whose path follows
the recording is the next recorded token, so walking the tree from the root and taking, at each
level, the first child in slot order whose token is the next recorded token gives SGLang's
accepted path (token-0 padding slots included, spec section 5.3); the bonus is the recorded
token after it.  What the target would predict beyond the end of the recording never matters:
emitted tokens are cut there.
"""

from __future__ import annotations

import numpy as np

from .._jit import jit
from .match import match_anchors
from .tree import build_bfs, build_prob, fill_result
from .trie import (M_FREETOP, M_GHEAD, M_SIZE, M_UNUSED, _g_push_back, _g_push_front,
                   _g_unlink, _ht_put, _push_child_front, _squeeze, _unlink_child, child_of)

__all__ = ["replay_kernel", "DONE", "PAUSED", "NEED_ROOM", "L_NEXT", "L_NRUN", "L_STEPS",
           "L_LEFT", "LOOP_SIZE"]

# Return codes.
DONE, PAUSED, NEED_ROOM = 0, 1, 2
# Slots of the int64 ``loop`` state array: next request to admit, requests running, verify
# steps done, an upper bound of the request-steps still to come (output tokens left).
L_NEXT, L_NRUN, L_STEPS, L_LEFT = range(4)
LOOP_SIZE = 4


@jit
def _insert_window(win, w, start, row, max_depth, capacity, lru, check, tok, par, freq, ver, c_head,
                   c_next, c_prev, nchild, g_next, g_prev, free, ht_key, ht_val, meta, path,
                   pc_node, pc_ver, pc_start, pc_len):
    """``insert_kernel`` for one window (every suffix, in order), with two shortcuts that
    change nothing observable:

    - the nodes of the request's previous window are remembered (``pc_*``, with versions):
      the window moved forward by the tokens emitted, so most n-grams of this window were
      paths of the previous one and need no hash lookup (a stale node, evicted since, is
      looked up as usual);
    - with ``lru`` False the global LRU list is not maintained: the caller has proven that
      no eviction can happen for the rest of the run, and only eviction reads that list.
      Without eviction no node goes stale, so ``check`` (the version checks of remembered
      nodes) is needed only while evictions were still possible at the previous step.

    ``start`` is the absolute position of the window in its request's sequence.
    """
    old_start = pc_start[row]
    old_len = pc_len[row]
    for i in range(w):
        length = min(w - i, max_depth)
        free_count = capacity - meta[M_SIZE]
        if length > free_count:
            _squeeze(length - free_count, tok, par, ver, c_head, c_next, c_prev, nchild,
                     g_next, g_prev, free, ht_key, ht_val, meta)
        oi = start + i - old_start
        known = old_len - oi if 0 <= oi < old_len else 0
        cur = 0
        for k in range(length):
            t = win[i + k]
            child = -1
            if k < known:
                cand = pc_node[row, oi, k]
                if not check or ver[cand] == pc_ver[row, oi, k]:
                    child = cand
            if child == -1:
                child = child_of(ht_key, ht_val, cur, t)
            if child == -1:
                if meta[M_FREETOP] > 0:
                    meta[M_FREETOP] -= 1
                    child = free[meta[M_FREETOP]]
                else:
                    child = meta[M_UNUSED]
                    meta[M_UNUSED] += 1
                meta[M_SIZE] += 1
                tok[child] = t
                par[child] = cur
                freq[child] = 1
                c_head[child] = -1
                nchild[child] = 0
                _ht_put(ht_key, ht_val, cur, t, child)
                _push_child_front(c_head, c_next, c_prev, cur, child)
                nchild[cur] += 1
                if lru:
                    _g_push_back(g_next, g_prev, meta, child)
            else:
                freq[child] += 1
                if c_head[cur] != child:
                    _unlink_child(c_head, c_next, c_prev, cur, child)
                    _push_child_front(c_head, c_next, c_prev, cur, child)
            path[k] = child
            cur = child
        if lru:
            for k in range(length - 1, -1, -1):
                node = path[k]
                if meta[M_GHEAD] != node:
                    _g_unlink(g_next, g_prev, meta, node)
                    _g_push_front(g_next, g_prev, meta, node)
        # Remember this suffix's nodes (reads of the old entries above came first: oi >= i).
        for k in range(length):
            pc_node[row, i, k] = path[k]
            if check:
                pc_ver[row, i, k] = ver[path[k]]
    pc_start[row] = start
    pc_len[row] = w


@jit
def replay_kernel(p_flat, p_off, o_flat, o_off, concurrency, max_depth, min_b, max_b, budget,
                  prob_mode, capacity, tok, par, freq, ver, c_head, c_next, c_prev, nchild,
                  g_next, g_prev, free, ht_key, ht_val, meta, st_epoch, st_ptl, st_n, st_node,
                  st_ver, bucket_counts, loop, run_req, run_row, free_rows, out_len, em_off,
                  em_steps, em_count, em_drafts, pc_node, pc_ver, pc_start, pc_len, max_steps):
    """Advance the replay; returns DONE, PAUSED (``max_steps`` reached) or NEED_ROOM.

    Per request ``r`` (file order), step ``k`` of it writes ``em_count[em_off[r] + k]`` (tokens
    emitted) and ``em_drafts[em_off[r] + k]`` (real draft nodes in its tree); ``em_steps[r]``
    counts its steps and ``out_len[r]`` its output tokens so far.  ``loop`` holds the next
    request to admit, the number running, the steps done and the output tokens left;
    ``pc_*`` the remembered window paths per state row; ``run_req``/``run_row`` the
    running requests in batch order and their match-state rows; ``free_rows`` (a stack whose
    size is ``concurrency - loop[L_NRUN]``) the unused state rows.
    """
    n_req = p_off.size - 1
    n = budget + 1
    depth = max_depth
    # Scratch of the match and tree kernels (as in backend._match_batch), allocated once.
    scratch = np.empty(depth, np.int32)
    a_nodes = np.empty(depth, np.int32)
    a_depths = np.empty(depth, np.int32)
    t_tok = np.empty(n, np.int32)
    t_head = np.empty(n, np.int32)
    t_next = np.empty(n, np.int32)
    t_cnt = np.empty(n, np.int32)
    t_bc = np.empty(n, np.int64)
    order = np.empty(n, np.int32)
    q_par = np.empty(n + 1, np.int32)
    q_breadth = np.empty(n + 1, np.float64)
    q_node = np.empty(n + 1, np.int32)
    slot_parent = np.empty(n, np.int32)
    heap_cap = max_b * depth * (n + 1) + 1
    h_p = np.empty(heap_cap, np.float64)
    h_par = np.empty(heap_cap, np.int32)
    h_node = np.empty(heap_cap, np.int32)
    k_node = np.empty(max_b, np.int32)
    out_tokens = np.empty(n, np.int32)
    out_mask = np.empty((n, n), np.bool_)
    win_flat = np.empty(concurrency * depth, np.int32)
    win_off = np.zeros(concurrency + 1, np.int64)
    emitted = np.empty(concurrency, np.int64)
    path = np.empty(depth, np.int32)
    per_window = depth * (depth + 1) // 2
    steps_here = 0
    checked_lru = True  # whether evictions were possible at the previous step (True: unknown)
    while True:
        # Admission (prefill): the first output token; prefill neither matches nor inserts.
        while loop[L_NEXT] < n_req and loop[L_NRUN] < concurrency:
            r = loop[L_NEXT]
            loop[L_NEXT] += 1
            out_len[r] = 1
            if o_off[r + 1] - o_off[r] > 1:
                k = loop[L_NRUN]
                row = free_rows[concurrency - k - 1]
                st_epoch[row] = 0  # a new request's state always rebuilds
                st_ptl[row] = 0
                st_n[row] = 0
                pc_len[row] = 0  # no remembered window
                run_req[k] = r
                run_row[k] = row
                loop[L_NRUN] = k + 1
        nrun = loop[L_NRUN]
        if nrun == 0:
            return DONE
        if steps_here >= max_steps:
            return PAUSED
        if tok.size < capacity and (meta[M_FREETOP] + tok.size - meta[M_UNUSED]
                                    < nrun * per_window):
            return NEED_ROOM
        # Windows: the last max_trie_depth tokens of prompt + output so far, batch order.
        for b in range(nrun):
            r = run_req[b]
            plen = p_off[r + 1] - p_off[r]
            total = plen + out_len[r]
            w = min(total, depth)
            start = total - w
            lo = win_off[b]
            for j in range(w):
                i = start + j
                if i < plen:
                    win_flat[lo + j] = p_flat[p_off[r] + i]
                else:
                    win_flat[lo + j] = o_flat[o_off[r] + i - plen]
            win_off[b + 1] = lo + w
        # Match and verify each request.
        for b in range(nrun):
            r = run_req[b]
            ctx = win_flat[win_off[b]:win_off[b + 1]]
            total = p_off[r + 1] - p_off[r] + out_len[r]
            count = match_anchors(ctx, total, run_row[b], depth, ver, nchild, ht_key, ht_val,
                                  meta, st_epoch, st_ptl, st_n, st_node, st_ver, scratch,
                                  a_nodes, a_depths)
            if prob_mode:
                used = build_prob(a_nodes, count, budget, max_b, tok, freq, c_head, c_next,
                                  t_tok, t_head, t_next, t_cnt, t_bc, bucket_counts, order,
                                  k_node, h_p, h_par, h_node)
            else:
                used = build_bfs(a_nodes, a_depths, count, budget, depth, min_b, max_b, tok,
                                 c_head, c_next, t_tok, t_head, t_next, t_cnt, t_bc,
                                 bucket_counts, order, q_par, q_breadth, q_node)
            fill_result(ctx[ctx.size - 1], n, t_tok, t_head, t_next, order, slot_parent,
                        out_tokens, out_mask)
            # Greedy verify along the recording: rec = output[out_len:].
            rec = o_off[r] + out_len[r]
            left = o_off[r + 1] - rec
            last = 0
            k = 0
            while k < left:
                want = o_flat[rec + k]
                hit = -1
                for i in range(last + 1, n):  # children of `last`, in slot order
                    if slot_parent[i] == last and out_tokens[i] == want:
                        hit = i
                        break
                if hit == -1:
                    break
                last = hit
                k += 1
            e = min(k + 1, left)
            emitted[b] = e
            at = em_off[r] + em_steps[r]
            em_count[at] = e
            em_drafts[at] = used
            em_steps[r] += 1
        # Insert the same windows, in batch order.  Every request-step to come inserts at
        # most per_window new nodes: when those cannot fill the trie, nothing will ever be
        # evicted and the LRU list (read only by eviction) need not be kept.
        lru = meta[M_SIZE] + loop[L_LEFT] * per_window > capacity
        check = lru or checked_lru
        checked_lru = lru
        for b in range(nrun):
            r = run_req[b]
            lo = win_off[b]
            w = win_off[b + 1] - lo
            _insert_window(win_flat[lo:lo + w], w, p_off[r + 1] - p_off[r] + out_len[r] - w,
                           run_row[b], depth, capacity, lru, check, tok, par, freq, ver, c_head,
                           c_next, c_prev, nchild, g_next, g_prev, free, ht_key, ht_val, meta,
                           path, pc_node, pc_ver, pc_start, pc_len)
        # Append; finished requests leave (order kept) and free their state rows.
        keep = 0
        for b in range(nrun):
            r = run_req[b]
            out_len[r] += emitted[b]
            loop[L_LEFT] -= emitted[b]
            if out_len[r] < o_off[r + 1] - o_off[r]:
                run_req[keep] = run_req[b]
                run_row[keep] = run_row[b]
                keep += 1
            else:
                free_rows[concurrency - loop[L_NRUN]] = run_row[b]
                loop[L_NRUN] -= 1
        loop[L_NRUN] = keep
        loop[L_STEPS] += 1
        steps_here += 1
