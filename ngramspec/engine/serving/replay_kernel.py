"""The serving-loop replay's compiled kernel, for every configuration.

:func:`replay_kernel` runs the loop of :mod:`ngramspec.simulate` on arrays that its driver
(:mod:`ngramspec.engine.serving.replay`) allocates, in chunks (so that progress can be shown and the
tries can grow between chunks).  What is matched, inserted where and when is exactly what
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
  sequence when it finishes (with ``exact_counts``: once the next step's trees are drafted, as
  the ``Drafter`` hands it to the insert thread then) or SGLang's windows every step
  (without).

Inserts use the trie's one insert (:func:`~ngramspec.engine.trie.insert_suffixes`) with its
two shortcuts that change no result (see its docstring).  Greedy verification against a
recording: the target's argmax after a slot whose path follows the recording is the next
recorded token, so walking the tree from the root and taking, at each level, the first child
in slot order whose token is the next recorded token gives SGLang's accepted path (token-0
padding slots included, spec section 5.3); the bonus is the recorded token after it.  What the
target would predict beyond the end of the recording never matters: emitted tokens are cut
there.

All loop state lives in arrays owned by the driver, so the kernel can stop and be called
again to continue: after ``max_steps`` verify steps (PAUSED), or at the top of a serving-loop
iteration whose inserts could need more node slots than a trie has allocated (NEED_ROOM: the
wrapper grows that trie; nothing of the iteration has run yet).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..._jit import jit, jit_inline
from ..adaptive import adaptive_scratch, choose_cap, draft_tree, layout_prefix, save_creation
from ..match import States, match_anchors, window_anchors
from .own_index import OwnIndex, own_append, own_rebuilds, own_reset
from ..corpora.sam import corpus_scratch_in, draft_with_corpora
from ..tree import build_bfs_scheduled, build_prob, fill_result, new_scratch
from ..trie import (LRU_LIST, LRU_NONE, LRU_STAMPS, M_SIZE, Trie, build_lru, in_use,
                   insert_suffixes)

if TYPE_CHECKING:
    from ...config import NgramConfig

__all__ = ["replay_kernel", "DONE", "PAUSED", "NEED_ROOM", "NEED_REQUESTS", "LOOP_SIZE",
           "CFG_SIZE"]


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
# Slots of the int64 ``cfg`` array.
(C_DEPTH, C_MLEN, C_MINB, C_MAXB, C_BUDGET, C_MODE, C_CAP, C_STATEFUL, C_MINW, C_MAXW, C_SKIP,
 C_WINDOWS, C_EXACT, C_LOCAL, C_FINISH, C_PROMPT, C_CONC, C_SHARED_PROMPT) = range(18)
CFG_SIZE = 18
MODE_BFS, MODE_PROB, MODE_ADAPTIVE = 0, 1, 2


def _config_arrays(config: NgramConfig, concurrency: int) -> tuple[np.ndarray, np.ndarray]:
    """The kernel's ``cfg`` (int64, ``C_*`` slots) and ``fcfg`` (float64: ADAPTIVE's
    ``min_token_prob``, ``max_spec_factor``, ``min_expected_accept``, ``shared_pseudo_count``)."""
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
    # (-1: a finished request teaches the shared trie its whole prompt)
    cfg[C_SHARED_PROMPT] = (-1 if config.shared_prompt_window is None
                            else config.shared_prompt_window)
    auto = config.min_expected_accept == "auto"
    fcfg = np.asarray([config.min_token_prob, config.max_spec_factor,
                       0.0 if auto else config.min_expected_accept,
                       config.shared_pseudo_count], np.float64)
    return cfg, fcfg


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
def _teach_finished(p_flat, p_off, o_flat, o_off, cfg, loop, fin_req, fin_bound, seq, t, path,
                    pcc, g_mode, clock):
    """The finish inserts pending (``fin_req[:loop[L_NFIN]]``), in order: the shared trie
    learns each whole request (``local_index`` with ``exact_counts``; of its prompt the last
    ``shared_prompt_window`` tokens).  Returns the LRU clock after them."""
    depth, capacity = cfg[C_DEPTH], cfg[C_CAP]
    index_prompt = cfg[C_PROMPT] != 0
    zero, no_row = np.int64(0), np.int64(-1)
    for f in range(loop[L_NFIN]):
        r = fin_req[f]
        plen = p_off[r + 1] - p_off[r]
        size = plen + o_off[r + 1] - o_off[r]
        start = 0 if index_prompt else plen
        if cfg[C_SHARED_PROMPT] >= 0:  # only the prompt's last shared_prompt_window
            start = max(start, plen - cfg[C_SHARED_PROMPT])
        lo = max(0, start - depth + 1)
        _gather(p_flat, p_off, o_flat, o_off, r, lo, size, seq)
        clock = insert_suffixes(seq[:size - lo], zero, lo, zero, start - lo, depth, capacity,
                                g_mode, clock, t, path, pcc, no_row)[1]
        loop[L_FINLEFT] -= fin_bound[r]
    loop[L_NFIN] = 0
    return clock


@jit_inline
def _adaptive_tree(ctx, row, local, local_tries, a_params, t, bucket_counts, asc, out_tokens,
                   out_mask, out_prob, cal):
    """One request's ADAPTIVE tree (slot ``row``): from its own index first with ``local``,
    then the shared trie ``t``."""
    if local:
        return draft_tree(ctx, a_params, None, t, bucket_counts, asc, out_tokens, out_mask,
                          out_prob, cal, OwnIndex(*local_tries[row]))
    return draft_tree(ctx, a_params, None, t, bucket_counts, asc, out_tokens, out_mask, out_prob,
                      cal)


@jit(what="the serving-loop replay for this configuration")
def replay_kernel(streams, cfg, trie, local_tries, states, remembered, run, per_req, out,
                  bucket_counts, max_steps, adaptive, prob, corpora):
    """Advance the replay; returns DONE, PAUSED (``max_steps`` reached), NEED_ROOM or (with
    ``loop[L_MORE]`` set, for :func:`replay_stream`) NEED_REQUESTS.

    ``trie``: the shared trie's plain bundle; ``local_tries``: a (typed) list of the slots' own
    indexes' bundles (None but for ADAPTIVE trees: BFS/PROB runs compile no own index);
    ``states``: a plain :data:`~.match.States`; ``remembered``: the remembered
    paths of window inserts and of counted inserts, ``(pc_node, pc_ver, pc_start, pc_len)``
    each, per slot; ``run``: the loop state (``loop`` with the ``L_*`` slots, the running
    requests ``run_req`` and their slots ``run_row`` in batch order, the free slots
    ``free_rows``, the finished requests ``fin_req`` whose finish inserts are pending, per slot
    ``l_mode``/``l_clock`` (its own trie's LRU mode and touch clock) and ``need``); ``per_req``:
    ``out_len``, the node bounds ``adm_shared``/``fin_bound`` of each request's inserts at
    admission and finish, and ``adm_local``, the tokens its own index holds at most; ``out``: the per-step record.

    ``adaptive``: None but for ADAPTIVE trees, then ``(fcfg, cal, costs, rate)``: ``fcfg``
    the float options (:func:`_config_arrays`), ``cal`` the calibration table (empty: count
    ratios), ``costs`` with ``min_expected_accept="auto"`` row ``b`` the step time of batch
    ``b`` per drafted-node cap (else 0 rows), and ``rate`` the expected tokens and time of the
    steps so far (``choose_cap``).  ``adaptive`` and ``corpora`` are None when unused, and
    ``prob`` None but for PROB trees (then True), so that Numba prunes their branches: a run
    compiles only the drafting it needs (the ADAPTIVE, PROB and corpus drafting are most of
    the kernel's compile time).

    Per request ``r`` (file order), step ``k`` of it writes ``em_count[em_off[r] + k]`` (tokens
    emitted) and ``em_drafts[em_off[r] + k]`` (real draft nodes in its tree).  NEED_ROOM sets
    ``need[0]`` (shared trie) or ``need[1 + slot]`` (a slot's own trie) to the node slots that
    trie must have allocated before the next call.

    ``corpora``: None, or external corpora (:func:`~ngramspec.engine.corpora.sam.replay_corpora`),
    drafted and merged as ``NgramCache.match`` does; each accepted draft
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
    # int64, not literal, arguments: Numba compiles a callee once per literal value.
    zero, no_row = np.int64(0), np.int64(-1)
    out_tokens = np.empty(n, np.int32)
    out_mask = np.empty((n, n), np.bool_)
    out_prob = np.empty(n, np.float64)
    if corpora is not None:
        c_scratch = corpus_scratch_in(corpora[2])  # external corpora's work arrays
    # Per slot, the part of the merge that drafted it (then corpus_row's work space).
    out_source = np.zeros(3 * n, np.int32)
    auto = False
    if adaptive is not None:
        fcfg, cal, costs, rate = adaptive
        asc = adaptive_scratch(budget, depth)
        a_params = (depth, budget, fcfg[0], fcfg[1], fcfg[2], fcfg[3])
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
                if local_tries is not None and local:  # its own index for its whole length
                    row = free_rows[conc - k - 1]
                    whole = adm_local[r]
                    o = OwnIndex(*local_tries[row])
                    if (o.st.shape[0] < 2 * whole + 2 or o.ed.shape[0] < 3 * whole + 4 or
                            o.rh.shape[0] < 2 * whole + 2):
                        need[1 + row] = whole
                        short = True
                k += 1
            r += 1
        if k < conc and loop[L_MORE] != 0:
            return NEED_REQUESTS  # admission would look past the requests given
        g_need += k * step_shared
        want = in_use(t) + g_need
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
                build_lru(t)
                loop[L_GMODE] = LRU_LIST
                pcw[3][:] = 0
                if not local:
                    pcc[3][:] = 0
        g_mode = loop[L_GMODE]
        clock = loop[L_GCLOCK]
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
                if local_tries is not None and local:
                    o = local_tries[row]
                    own_reset(o, lo, start)
                    own_append(o, seq, plen + 1, lo)
                else:
                    clock = insert_suffixes(seq[:plen + 1 - lo], zero, lo, zero, start - lo, depth,
                                            capacity, g_mode, clock, t, path, pcc, no_row)[1]
            elif index_prompt and plen > 0:
                _gather(p_flat, p_off, o_flat, o_off, r, 0, plen, seq)
                clock = insert_suffixes(seq[:plen], zero, zero, zero, zero, depth, capacity,
                                        g_mode, clock, t, path, pcc, no_row)[1]
        loop[L_GCLOCK] = clock
        nrun = loop[L_NRUN]
        if nrun == 0:  # the last finished requests, as a read of the Drafter's cache would
            if local_tries is not None:  # (finish inserts: local_index only)
                loop[L_GCLOCK] = _teach_finished(p_flat, p_off, o_flat, o_off, cfg, loop,
                                                 fin_req, fin_bound, seq, t, path, pcc, g_mode,
                                                 clock)
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
        if adaptive is not None and auto:
            for b in range(nrun):
                r = run_req[b]
                ctx = win_flat[win_off[b]:win_off[b + 1]]
                used = _adaptive_tree(ctx, run_row[b], local, local_tries, a_params, t,
                                      bucket_counts, asc, out_tokens, out_mask, out_prob, cal)
                save_creation(asc, used, tok_rows[b], par_rows[b], prob_rows[b])
                used_rows[b] = used
            cap = choose_cap(prob_rows[:nrun], used_rows[:nrun], costs[nrun], rate)
        # Match, draft and verify each request.
        for b in range(nrun):
            r = run_req[b]
            row = run_row[b]
            ctx = win_flat[win_off[b]:win_off[b + 1]]
            if adaptive is not None:
                if auto:
                    used = min(used_rows[b], cap)
                    layout_prefix(ctx[ctx.size - 1], used, tok_rows[b], par_rows[b],
                                  prob_rows[b], asc, bucket_counts, out_tokens, out_mask,
                                  out_prob)
                else:
                    used = _adaptive_tree(ctx, row, local, local_tries, a_params, t,
                                          bucket_counts, asc, out_tokens, out_mask, out_prob,
                                          cal)
                parents = asc.slot_parent
            else:
                if stateful:
                    total = p_off[r + 1] - p_off[r] + out_len[r]
                    count = match_anchors(ctx, total, row, depth, t, st, sc.m_scratch,
                                          sc.a_nodes, sc.a_depths)
                else:
                    count = window_anchors(ctx, min_w, max_w, t, sc.a_nodes, sc.a_depths)
                if corpora is not None:  # external corpora (stateful profile only)
                    used = draft_with_corpora(ctx, count, row, total, prob is not None, bfs_top,
                                              bfs_steps, min_b, max_b, t, sc, bucket_counts,
                                              corpora, c_scratch, out_tokens, out_mask,
                                              out_source)
                    parents = c_scratch[9]
                else:
                    if prob is not None:
                        used = build_prob(count, budget, max_b, t, sc, bucket_counts)
                    else:
                        used = build_bfs_scheduled(count, budget, bfs_top, bfs_steps, min_b,
                                                   max_b, t, sc, bucket_counts)
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
                if corpora is not None:
                    if k < left - 1:  # an accepted draft (the cut one is not)
                        corpora[5][r, out_source[hit]] += 1
                last = hit
                k += 1
            e = min(k + 1, left)
            emitted[b] = e
            at = em_off[r] + em_steps[r]
            em_count[at] = e
            em_drafts[at] = used
            em_steps[r] += 1
        # Finish inserts of the requests that finished at the previous step, in batch order,
        # once this step's trees are drafted (the Drafter hands them to the cache's insert
        # thread then, so that they run during the forward, not before the drafts).
        if local_tries is not None:
            clock = _teach_finished(p_flat, p_off, o_flat, o_off, cfg, loop, fin_req,
                                    fin_bound, seq, t, path, pcc, g_mode, clock)
        # 0.5.23: the windows matched, in batch order, before appending.
        if windows and stateful:
            for b in range(nrun):
                r = run_req[b]
                lo = win_off[b]
                w = win_off[b + 1] - lo
                total = p_off[r + 1] - p_off[r] + out_len[r]
                clock = insert_suffixes(win_flat[lo:lo + w], zero, total - w, zero, zero, depth,
                                        capacity, g_mode, clock, t, path, pcw, run_row[b])[1]
        # Append; exact counting of the new n-grams as they arrive.
        for b in range(nrun):
            r = run_req[b]
            row = run_row[b]
            before = p_off[r + 1] - p_off[r] + out_len[r]
            e = emitted[b]
            if exact:
                if local_tries is not None and local:
                    o = local_tries[row]
                    first = own_rebuilds(o, before + e)  # (a rebuild reads further back)
                    _gather(p_flat, p_off, o_flat, o_off, r, first, before + e, seq)
                    own_append(o, seq, before + e, first)
                else:
                    lo = max(0, before - depth + 1)
                    _gather(p_flat, p_off, o_flat, o_off, r, lo, before + e, seq)
                    clock = insert_suffixes(seq[:before + e - lo], zero, lo, zero, before - lo,
                                            depth, capacity, g_mode, clock, t, path, pcc, row)[1]
            out_len[r] += e
            loop[L_LEFT] -= e
        # 0.5.9: after appending, the last branch_length tokens of every request.
        if windows and not stateful:
            for b in range(nrun):
                r = run_req[b]
                total = p_off[r + 1] - p_off[r] + out_len[r]
                w = min(total, depth)
                _gather(p_flat, p_off, o_flat, o_off, r, total - w, total, seq)
                clock = insert_suffixes(seq[:w], zero, total - w, skip, zero, depth, capacity,
                                        g_mode, clock, t, path, pcw, run_row[b])[1]
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
