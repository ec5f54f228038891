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

from collections import namedtuple

import numpy as np

from .._jit import jit
from .match import States, match_anchors, new_states
from .tree import build_bfs, build_prob, fill_result, new_scratch
from .trie import (M_FREEHEAD, M_FREETOP, M_GHEAD, M_SIZE, M_UNUSED, Trie, TrieArrays,
                   _g_push_back, _g_push_front, _g_unlink, _ht_put, _push_child_front,
                   _unlink_child, child_of, squeeze)

__all__ = ["Replay", "ReplayState", "replay_kernel", "DONE", "PAUSED", "NEED_ROOM", "L_NEXT",
           "L_NRUN", "L_STEPS", "L_LEFT", "LOOP_SIZE"]

# Return codes.
DONE, PAUSED, NEED_ROOM = 0, 1, 2
# Slots of the int64 ``loop`` state array: next request to admit, requests running, verify
# steps done, an upper bound of the request-steps still to come (output tokens left).
L_NEXT, L_NRUN, L_STEPS, L_LEFT = range(4)
LOOP_SIZE = 4

#: The replay's own state (all int64 but ``pc_node`` int32): ``loop`` (``L_*`` slots),
#: ``run_req``/``run_row`` (running requests in batch order, their state rows), ``free_rows``,
#: ``out_len`` (output tokens so far per request), the per-step record ``em_off``/``em_steps``/
#: ``em_count``/``em_drafts`` (int32 counts), and the remembered windows ``pc_node``/``pc_ver``/
#: ``pc_start``/``pc_len`` per state row.  Allocated by :class:`Replay`.
ReplayState = namedtuple("ReplayState", "loop run_req run_row free_rows out_len em_off em_steps "
                                        "em_count em_drafts pc_node pc_ver pc_start pc_len")


@jit
def _insert_window(win, w, start, row, max_depth, capacity, lru, check, t, path, rs):
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
    tok, par, freq, ver, c_head, c_next, c_prev = (t.tok, t.par, t.freq, t.ver, t.c_head,
                                                   t.c_next, t.c_prev)
    g_next, g_prev, ht, meta = t.g_next, t.g_prev, t.ht, t.meta
    pc_node, pc_ver, pc_start, pc_len = rs.pc_node, rs.pc_ver, rs.pc_start, rs.pc_len
    old_start = pc_start[row]
    old_len = pc_len[row]
    for i in range(w):
        length = min(w - i, max_depth)
        free_count = capacity - meta[M_SIZE]
        if length > free_count:
            squeeze(t, length - free_count)
        oi = start + i - old_start
        known = old_len - oi if 0 <= oi < old_len else 0
        cur = 0
        for k in range(length):
            tk = win[i + k]
            child = -1
            if k < known:
                cand = pc_node[row, oi, k]
                if not check or ver[cand] == pc_ver[row, oi, k]:
                    child = cand
            if child == -1:
                child = child_of(ht, par, tok, cur, tk)
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
                freq[child] = 1
                c_head[child] = -1
                _ht_put(ht, cur, tk, child)
                _push_child_front(c_head, c_next, c_prev, cur, child)
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
def replay_kernel(p_flat, p_off, o_flat, o_off, concurrency, params, capacity, trie, states,
                  bucket_counts, replay_state, max_steps):
    """Advance the replay; returns DONE, PAUSED (``max_steps`` reached) or NEED_ROOM.

    ``params``: ``(max_depth, min_b, max_b, budget, prob_mode)``; ``trie``, ``states``,
    ``replay_state``: plain :data:`~.trie.Trie`, :data:`~.match.States` and
    :data:`ReplayState` bundles.

    Per request ``r`` (file order), step ``k`` of it writes ``em_count[em_off[r] + k]`` (tokens
    emitted) and ``em_drafts[em_off[r] + k]`` (real draft nodes in its tree); ``em_steps[r]``
    counts its steps and ``out_len[r]`` its output tokens so far.  ``loop`` holds the next
    request to admit, the number running, the steps done and the output tokens left;
    ``pc_*`` the remembered window paths per state row; ``run_req``/``run_row`` the
    running requests in batch order and their match-state rows; ``free_rows`` (a stack whose
    size is ``concurrency - loop[L_NRUN]``) the unused state rows.
    """
    t = Trie(*trie)
    st = States(*states)
    rs = ReplayState(*replay_state)
    max_depth, min_b, max_b, budget, prob_mode = params
    tok, meta = t.tok, t.meta
    st_epoch, st_ptl, st_n = st.epoch, st.ptl, st.n
    loop, run_req, run_row, free_rows, out_len = (rs.loop, rs.run_req, rs.run_row,
                                                  rs.free_rows, rs.out_len)
    em_off, em_steps, em_count, em_drafts = rs.em_off, rs.em_steps, rs.em_count, rs.em_drafts
    pc_len = rs.pc_len
    n_req = p_off.size - 1
    n = budget + 1
    depth = max_depth
    # Scratch of the match and tree kernels (as in backend.match_batch), allocated once.
    sc = new_scratch(budget, depth, max_b)
    slot_parent = sc.slot_parent
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
            count = match_anchors(ctx, total, run_row[b], depth, t, st, sc.m_scratch,
                                  sc.a_nodes, sc.a_depths)
            if prob_mode:
                used = build_prob(count, budget, max_b, t, sc, bucket_counts)
            else:
                used = build_bfs(count, budget, depth, min_b, max_b, t, sc, bucket_counts)
            fill_result(ctx[ctx.size - 1], n, sc, out_tokens, out_mask)
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
                           run_row[b], depth, capacity, lru, check, t, path, rs)
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


class Replay:
    """The compiled replay of recorded streams, with every array it needs.

    ``prompts``/``outputs``: per request, int32 token arrays.  Call :meth:`run` until it
    returns ``DONE``; on ``NEED_ROOM`` call :meth:`make_room` first.
    """

    def __init__(self, prompts, outputs, config, concurrency: int) -> None:
        from .backend import _BUCKET_COUNTS

        self.p_flat, self.p_off = _pack(prompts)
        self.o_flat, self.o_off = _pack(outputs)
        self.config = config
        self.concurrency = concurrency
        n_req = len(prompts)
        depth = self.depth = config.max_trie_depth
        self.params = (int(depth), int(config.min_bfs_breadth), int(config.max_bfs_breadth),
                       int(config.budget), int(config.match_type == "PROB"))
        self.bucket_counts = _BUCKET_COUNTS
        self.trie = TrieArrays(config.capacity)
        rows = concurrency
        self.states = new_states(rows, depth)
        loop = np.zeros(LOOP_SIZE, np.int64)
        loop[L_LEFT] = sum(max(o.size - 1, 0) for o in outputs)
        # Request r has at most len(output) - 1 verify steps (each emits at least one token).
        em_off = np.zeros(n_req + 1, np.int64)
        np.cumsum([max(o.size - 1, 0) for o in outputs], out=em_off[1:])
        self.state = ReplayState(
            loop=loop, run_req=np.zeros(concurrency, np.int64),
            run_row=np.zeros(concurrency, np.int64),
            free_rows=np.arange(concurrency - 1, -1, -1, dtype=np.int64),
            out_len=np.zeros(n_req, np.int64), em_off=em_off,
            em_steps=np.zeros(n_req, np.int64), em_count=np.zeros(int(em_off[-1]), np.int32),
            em_drafts=np.zeros(int(em_off[-1]), np.int32),
            pc_node=np.zeros((rows, depth, depth), np.int32),
            pc_ver=np.zeros((rows, depth, depth), np.int64), pc_start=np.zeros(rows, np.int64),
            pc_len=np.zeros(rows, np.int64))

    def run(self, max_steps: int) -> int:
        """Advance by at most ``max_steps`` verify steps; returns DONE, PAUSED or NEED_ROOM."""
        return int(replay_kernel(self.p_flat, self.p_off, self.o_flat, self.o_off,
                                 self.concurrency, self.params, self.config.capacity,
                                 self.trie.bundle, self.states, self.bucket_counts,
                                 tuple(self.state), max_steps))

    def make_room(self) -> None:
        """Grow the trie so that one step of the running requests fits."""
        d = self.depth
        self.trie.ensure_room(int(self.state.loop[L_NRUN]) * d * (d + 1) // 2)

    @property
    def steps(self) -> int:
        return int(self.state.loop[L_STEPS])

    @property
    def tokens_done(self) -> int:
        return int(self.state.out_len.sum())

    def per_request(self) -> tuple[list[np.ndarray], list[np.ndarray]]:
        """Per request: tokens emitted per step, real draft nodes per step."""
        s = self.state
        n_req = s.out_len.size
        return ([s.em_count[s.em_off[r]:s.em_off[r] + s.em_steps[r]].copy()
                 for r in range(n_req)],
                [s.em_drafts[s.em_off[r]:s.em_off[r] + s.em_steps[r]].copy()
                 for r in range(n_req)])


def _pack(seqs) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum([s.size for s in seqs], out=off[1:])
    flat = np.concatenate(seqs) if seqs else np.zeros(0, np.int32)
    return np.ascontiguousarray(flat, dtype=np.int32), off
