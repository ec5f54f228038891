"""Where the microseconds of ``NgramCache.match`` go: input checks, request ids, lock, backend,
``DraftBatch``.

Replays the recorded streams shipped with ngramspec through SGLang's serving loop (the trace of
``compare_sglang.py``: each step one stateful ``match`` of the batch's last-18-token windows as
int32 arrays, then one ``insert`` of them).  Every step is timed as a whole (``cache.match``),
and each phase alone on the same inputs:

- ``checks``: the contexts' checks and coercion (one int32 array per request); where the
  cache checks the serving call in one pass (``serving_one`` at batch 1, ``serving_batch``
  with the packing of the batch), that pass, ids and lengths included;
- ``ids``: request ids and ``total_lens`` checked and coerced (0 after that one pass);
- ``lock``: ``synchronize()`` and taking the lock;
- ``backend``: the backend's ``match`` on a twin cache in the same state (the kernel call and
  its packing, the id-to-row mapping included);
- ``DraftBatch``: building the returned object (where drafts are written into an output pool,
  its row views are made when first read, which this leaves out);
- ``rest``: the whole call minus the phases (call overhead, glue);
- ``SGLang``: SGLang 0.5.23's C++ core on the same trace (``compare_sglang.py``'s peer, inputs
  packed beforehand), timed the same way, and ``ratio`` = ``match`` / ``SGLang`` (``--no-sglang``
  leaves them out, e.g. where the core cannot be built).

Figures are microseconds per call (batch 1) or per call and per request (batch 48, full
steps only): for each step the fastest of ``--repeats`` identical replays (the one that load
from elsewhere slowed least), averaged over the steps.

With ``--kernel-phases`` it splits the backend's kernel time instead, per request at the
given batch sizes: ``anchors`` (the match state advanced or rebuilt and the anchors listed),
``tree`` (the BFS or PROB expansion) and ``layout`` (level order and ancestor mask), each
measured as the time of a kernel that stops after that phase minus the one that stops before
it, on twin caches in the same state (the phases leave the states as the whole kernel does).

    python -m benchmarks.studies.match_overhead                      # BFS and PROB, batch 1 and 48
    python -m benchmarks.studies.match_overhead --batch 1 --repeats 3 --match-type BFS --no-sglang
    python -m benchmarks.studies.match_overhead --batch 48 --kernel-phases
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import ngramspec as ns
from ngramspec.drafts import DraftBatch

from benchmarks.common import DEFAULTS, load_rows, trace
from benchmarks.peers import sglang as peer

PHASES = ("checks", "ids", "lock", "backend", "DraftBatch")


def _phase_functions():
    """The wrapper's checks as the installed version spells them."""
    try:
        from ngramspec import _validate as v
    except ImportError:  # before the checks had their own module
        from ngramspec import cache as v

        def checks(ctxs, ids_, lens):
            batch = v._as_batch(ctxs, "contexts")
            for c in batch:
                if c.size == 0:
                    raise ValueError
            return batch, None

        def ids(ids_, lens, batch):
            keys = v._as_request_ids(ids_)
            if len(set(keys)) != len(keys):
                raise ValueError
            total = v._as_lengths(lens, len(batch))
            sizes = np.fromiter((c.size for c in batch), np.int64, len(batch))
            if (total < sizes).any():
                raise ValueError
            return keys, total
        return checks, ids

    one = getattr(v, "as_serving_one", None)

    def checks(ctxs, ids_, lens):
        got = one(ctxs, ids_, lens) if one is not None else None
        return (got[0], got[1:]) if got is not None else (v.as_contexts(ctxs), None)

    def ids(ids_, lens, batch):
        return v.as_request_ids(ids_, len(batch)), v.as_total_lens(lens, batch)
    return checks, ids


def _serving_checks(ctxs, rids, lens):
    """The cache's one-pass checks of a serving call (contexts, ids and lengths; batches also
    packed)."""
    from ngramspec import _validate as v

    if len(ctxs) == 1:
        return v.serving_one(ctxs, rids, lens)
    return v.serving_batch(ctxs, rids, lens)


def _time(f, *args):
    t0 = time.perf_counter_ns()
    out = f(*args)
    return time.perf_counter_ns() - t0, out


def replay(steps, cfg, batch):
    """Per phase, the ns of each timed step (full steps of ``batch`` requests only).

    The whole call and the phases are timed in two separate replays (each cache sees only
    its own work between steps, as in serving)."""
    times = {k: [] for k in ("match",) + PHASES}
    cache = ns.NgramCache(**cfg)
    for ctxs, rids, lens in steps:
        t0 = time.perf_counter_ns()
        cache.match(ctxs, request_ids=rids, total_lens=lens)
        dt = time.perf_counter_ns() - t0
        if len(ctxs) == batch:
            times["match"].append(dt)
        cache.insert(ctxs)
    twin = ns.NgramCache(**cfg)
    checks, ids = _phase_functions()
    make_batch = getattr(DraftBatch, "_trusted", DraftBatch)  # what the cache calls
    pooled = hasattr(twin._backend, "match_packed")  # drafts written into an output pool
    for ctxs, rids, lens in steps:
        if len(ctxs) == batch and pooled:
            t_checks, got = _time(_serving_checks, ctxs, rids, lens)
            t0 = time.perf_counter_ns()
            twin.synchronize()
            with twin._lock:
                pass
            t_lock = time.perf_counter_ns() - t0
            be = twin._backend
            if batch == 1:
                t_backend, (pool, at) = _time(be.match_one, *got)
            else:
                t_backend, (pool, at, _) = _time(be.match_packed, got[0], got[1], rids, got[2])
            t_batch, _ = _time(DraftBatch._pooled, pool, at, at + batch)
            for k, t in zip(PHASES, (t_checks, 0, t_lock, t_backend, t_batch)):
                times[k].append(t)
        elif len(ctxs) == batch:
            t_checks, (packed, done) = _time(checks, ctxs, rids, lens)
            if done is None:
                t_ids, (keys, total) = _time(ids, rids, lens, packed)
            else:  # checked with the contexts
                t_ids, (keys, total) = 0, done
            t0 = time.perf_counter_ns()
            twin.synchronize()
            with twin._lock:
                pass
            t_lock = time.perf_counter_ns() - t0
            t_backend, (tok, mask, num) = _time(twin._backend.match, packed, keys, total)
            t_batch, _ = _time(make_batch, tok, mask, num)
            for k, t in zip(PHASES, (t_checks, t_ids, t_lock, t_backend, t_batch)):
                times[k].append(t)
        else:
            twin.match(ctxs, request_ids=rids, total_lens=lens)
        twin.insert(ctxs)
    return {k: np.asarray(v, np.float64) for k, v in times.items()}


def replay_sglang(steps, cfg, batch):
    """ns of each full step's ``match`` on SGLang's core (inputs packed beforehand)."""
    p = peer.SglangPeer(**cfg)
    packed = [(len(c), p.pack_match(c, i, n), p.pack_insert(c)) for c, i, n in steps]
    out = []
    for b, pm, pi in packed:
        t0 = time.perf_counter_ns()
        p.match_packed(pm)
        dt = time.perf_counter_ns() - t0
        if b == batch:
            out.append(dt)
        p.insert_packed(pi)
    return np.asarray(out, np.float64)


def _phase_kernel():
    """A copy of the engine's batch kernel that stops after phase ``stop`` (0: anchors,
    1: tree, 2: layout), for timing the phases one by one."""
    import numba

    from ngramspec.engine.match import States, match_anchors
    from ngramspec.engine.tree import (build_bfs_scheduled, build_prob, fill_result,
                                       scratch_in)
    from ngramspec.engine.trie import unpack

    @numba.njit(nogil=True)
    def kernel(stop, flat, offsets, rows, lens, params, trie, states, bc, buf, o_tok, o_mask):
        t = unpack(trie)
        st = States(*states)
        max_depth, min_b, max_b, budget, prob = params
        sc = scratch_in(buf, budget, max_depth, max_b)
        mmd = max(1, max_depth - 1)
        acc = 0
        for b in range(offsets.size - 1):
            ctx = flat[offsets[b]:offsets[b + 1]]
            count = match_anchors(ctx, lens[b], rows[b], max_depth, t, st, sc.m_scratch,
                                  sc.a_nodes, sc.a_depths)
            acc += count
            if stop == 0:
                continue
            if prob:
                acc += build_prob(count, budget, max_b, t, sc, bc)
            else:
                acc += build_bfs_scheduled(count, budget, mmd, mmd, min_b, max_b, t, sc, bc)
            if stop == 2:
                fill_result(ctx[ctx.size - 1], budget + 1, sc, o_tok[b], o_mask[b])
        return acc
    return kernel


def kernel_phases(steps, cfg, batch, repeats):
    """Per request, the µs of the kernel's phases at full steps of ``batch`` requests: the
    fastest of ``repeats`` replays per step, averaged over the steps."""
    from ngramspec import _validate as v
    from ngramspec.engine.tree import BUCKET_COUNTS

    kernel = _phase_kernel()
    runs = []
    for _ in range(repeats + 1):  # the first replay compiles the kernel: not counted
        caches = [ns.NgramCache(**cfg) for _ in range(3)]
        times = [[] for _ in caches]
        for ctxs, rids, lens in steps:
            packed = v.serving_batch(ctxs, rids, lens) if len(ctxs) == batch else None
            for stop, cache in enumerate(caches):
                if packed is None:
                    cache.match(ctxs, request_ids=rids, total_lens=lens)
                    continue
                be = cache._backend
                flat, offsets, total = packed
                _, at = be.engine_for(batch)  # the pool rows a match would write
                o_tok, o_mask = (a[at:at + batch] for a in be._pool[:2])
                args = (stop, flat, offsets, be.rows_of(rids), total, be._params,
                        be.trie.packed, be.states, BUCKET_COUNTS, be._buf, o_tok, o_mask)
                t0 = time.perf_counter_ns()
                kernel(*args)
                times[stop].append(time.perf_counter_ns() - t0)
            for cache in caches:
                cache.insert(ctxs)
        runs.append(times)
    best = np.min(np.asarray(runs[1:], np.float64), axis=0).mean(axis=1) / 1e3 / batch
    return {"anchors": best[0], "tree": best[1] - best[0], "layout": best[2] - best[1]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 48])
    ap.add_argument("--match-type", nargs="+", default=["BFS", "PROB"])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--no-sglang", action="store_true", help="leave SGLang's core out")
    ap.add_argument("--kernel-phases", action="store_true",
                    help="split the backend's kernel time into its phases instead")
    args = ap.parse_args()
    rows = load_rows()
    ns.NgramCache(**DEFAULTS).warmup()
    if args.kernel_phases:
        print("µs per request in the backend's kernel; per step the fastest of "
              f"{args.repeats} replays, mean over full steps\n")
        print("| match_type | batch | anchors | tree | layout |\n|---|---|---|---|---|")
        for mt in args.match_type:
            cfg = dict(DEFAULTS, match_type=mt, capacity=1_000_000)
            for batch in [b for b in args.batch if b > 1]:
                got = kernel_phases(trace(rows, batch), cfg, batch, args.repeats)
                print(f"| {mt} | {batch} | {got['anchors']:.2f} | {got['tree']:.2f} | "
                      f"{got['layout']:.2f} |")
        return
    print(f"ngramspec {ns.__version__} from {Path(ns.__file__).parent}; numpy {np.__version__};"
          f" µs per match call (per request in brackets); per step the fastest of "
          f"{args.repeats} replays, mean over steps\n")
    cols = ("match",) + PHASES + ("rest",) + (() if args.no_sglang else ("SGLang",))
    print("| match_type | batch | steps | " + " | ".join(cols) + " |"
          + ("" if args.no_sglang else " ratio |"))
    print("|---|---|---|" + "---|" * (len(cols) + (not args.no_sglang)))
    for mt in args.match_type:
        cfg = dict(DEFAULTS, match_type=mt, capacity=1_000_000)
        for batch in args.batch:
            steps = trace(rows, batch)
            runs = []
            for _ in range(args.repeats):  # interleaved: load from elsewhere hits both alike
                runs.append(replay(steps, cfg, batch))
                if not args.no_sglang:
                    runs[-1]["SGLang"] = replay_sglang(steps, cfg, batch)
            # Every replay does the same work at step i: the fastest of the replays at each
            # step (what load from elsewhere did not slow down), averaged over the steps.
            med = {k: np.min([r[k] for r in runs], axis=0).mean() / 1e3 for k in runs[0]}
            med["rest"] = med["match"] - sum(med[p] for p in PHASES)
            n_steps = runs[0]["match"].size
            cells = [f"{med[c]:.1f}" + (f" ({med[c] / batch:.2f})" if batch > 1 else "")
                     for c in cols]
            ratio = "" if args.no_sglang else f" {med['match'] / med['SGLang']:.2f} |"
            print(f"| {mt} | {batch} | {n_steps} | " + " | ".join(cells) + " |" + ratio)


if __name__ == "__main__":
    main()
