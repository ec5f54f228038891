"""The custom-loop step API against SGLang's C++ match, per request-step, in one run.

One decode step of a custom loop is the three calls ``docs/custom-loop.md`` teaches:
``Drafter.propose`` -> ``verify_greedy`` -> ``Drafter.accept``.  This benchmark runs that loop
over the shipped recorded streams (teacher-forced: the greedy target's argmax is the recorded
next token, computed outside the timed region), at batch 1 and at 48 requests, and times the
three calls together (and each alone).  It then replays exactly the same steps (the contexts,
request ids and total lengths the loop matched, and the windows it inserted) through SGLang
0.5.23's C++ core, built from its PyPI wheel (``benchmarks/peers/sglang.py``), with SGLang's
server defaults, and times its ``match`` alone at its C entry point with every input packed
beforehand.  Ratio = our three calls per request-step / SGLang's match per request-step, with
the forward stand-in between calls on both sides; the goal column is issue 35's (SGLang's
defaults <= 1.5 at batch 1 and <= 1.0 at 48, ``recommended()`` <= 2.0 at 1 and <= 3.0 at 48).

    python -m benchmarks.studies.step_api                        # both configs, batch 1 and 48
    python -m benchmarks.studies.step_api --repeats 5 --requests 40
    python -m benchmarks.studies.step_api --form mapping         # accept({rid: tokens}) instead
    python -m benchmarks.studies.step_api --grow                 # the trie grows as it fills

Both tries are allocated whole before the loop by default, as SGLang's worker allocates its
capacity (``Drafter(reserve=True)``); ``--grow`` leaves ours to double as it fills (the
default of ``Drafter``), whose doublings the matches then wait for.

``--form result`` (default) passes the :class:`VerifyResult` to ``accept`` (the form the docs
teach); ``--form mapping`` passes ``{rid: result.emitted[b]}``; ``--form fused`` times
``Drafter.verify_and_accept`` in place of the last two calls.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the forward stand-in: one core

import argparse
import gc
import statistics
import time

import numpy as np

import ngramspec as ns
from ngramspec.simulate import _recorded_argmax

from benchmarks.common import DEFAULTS, load_rows
from benchmarks.peers import sglang as peer

CONFIGS = {"sglang": ns.NgramConfig(capacity=2_000_000),
           "recommended": ns.NgramConfig.recommended().replace(capacity=2_000_000)}
# Issue 35's goals for the ratio, by (config, batch).
GOALS = {("sglang", 1): 1.5, ("sglang", 48): 1.0, ("recommended", 1): 2.0,
         ("recommended", 48): 3.0}


def run_loop(rows, cfg: ns.NgramConfig, concurrency: int, form: str, forward_ms: float = 0.0,
             early: bool | None = None, reserve: bool = False):
    """The loop over ``rows`` at this concurrency; returns (propose, verify, accept seconds,
    request-steps, steps as (contexts, ids, lens) for the peer)."""
    # (early_insert only when asked: the benchmark also runs against earlier releases)
    drafter = ns.Drafter(config=cfg, **({} if early is None else {"early_insert": early}))
    if reserve and hasattr(drafter.cache, "reserve"):  # (earlier releases: no such call)
        drafter.cache.reserve()
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    depth = cfg.match_length
    done = [0] * len(rows)
    queue, running = list(range(len(rows))), []
    tp = tv = ta = 0.0
    req_steps = 0
    trace = []
    while queue or running:
        while queue and len(running) < concurrency:
            r = queue.pop(0)
            drafter.add_request(r, prompts[r], int(outputs[r][0]))
            done[r] = 1
            running.append(r)
        seqs = [drafter.sequence(r) for r in running]  # for the peer, untimed
        trace.append(([s[-depth:] for s in seqs], list(running), [s.size for s in seqs]))
        pred = None
        t0 = time.perf_counter()
        d = drafter.propose(running)
        t1 = time.perf_counter()
        pred = _recorded_argmax(d, running, outputs, [done[r] for r in running])
        # The teacher's argmax where the recording has ended: any token (the output is cut).
        pred[pred < 0] = 0
        left = np.array([outputs[r].size - done[r] for r in running], np.int32)
        if forward_ms:
            forward(forward_ms)
        t2 = time.perf_counter()
        if form == "fused":
            res = drafter.verify_and_accept(d, pred, max_tokens=left)
            t3 = t4 = time.perf_counter()
        else:
            res = ns.verify_greedy(d, pred)
            t3 = time.perf_counter()
            if form == "result":
                drafter.accept(res, max_tokens=left)
            else:
                drafter.accept({r: res.emitted[b][:left[b]] for b, r in enumerate(running)})
            t4 = time.perf_counter()
        tp += t1 - t0
        tv += t3 - t2
        ta += t4 - t3
        req_steps += len(running)
        lens = np.minimum(res.accept_lens, left)
        for b, r in enumerate(running):
            done[r] += int(lens[b])
        for r in [r for r in running if done[r] >= outputs[r].size]:
            drafter.finish(r)
        running = [r for r in running if done[r] < outputs[r].size]
    return tp, tv, ta, req_steps, trace


_A = np.random.default_rng(0).random((96, 96))


def forward(ms: float) -> None:
    """A stand-in for the target's forward between ``propose`` and verification: the host
    thread busy in a library call that frees the GIL (small matrix products, single-threaded
    BLAS), as a CPU forward or a host spinning on a GPU is.  Both loops get the same."""
    end = time.perf_counter() + ms / 1e3
    while time.perf_counter() < end:
        _A @ _A


def run_peer(trace, cfg: dict, forward_ms: float = 0.0) -> float:
    """SGLang's match over the same steps (its insert of the same windows and the forward
    between steps, untimed); seconds of match."""
    p = peer.SglangPeer(**cfg)
    packed = [(p.pack_match(c, i, n), p.pack_insert(c)) for c, i, n in trace]
    tm = 0.0
    for pm, pi in packed:
        t0 = time.perf_counter()
        p.match_packed(pm)
        tm += time.perf_counter() - t0
        p.insert_packed(pi)
        if forward_ms:
            forward(forward_ms)
    return tm


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 48])
    ap.add_argument("--config", choices=list(CONFIGS), nargs="+", default=list(CONFIGS))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--requests", type=int, default=None,
                    help="first N requests of the shipped streams (default: all 133)")
    ap.add_argument("--form", choices=["result", "mapping", "fused"], default="result")
    ap.add_argument("--forward-ms", type=float, default=2.0,
                    help="the target's forward between propose and verify (and between "
                         "SGLang's matches), as busy library calls that free the GIL "
                         "(default 2 ms, below a real model's step); the inserts queued at "
                         "propose run then")
    ap.add_argument("--grow", action="store_true",
                    help="let our trie grow as it fills instead of allocating its capacity "
                         "first as SGLang does (Drafter's default)")
    ap.add_argument("--no-early-insert", action="store_true",
                    help="insert the matched windows in accept (Drafter(early_insert=False))")
    args = ap.parse_args()
    rows = load_rows()[:args.requests]
    peer_cfg = dict(DEFAULTS, capacity=2_000_000)
    for cfg in CONFIGS.values():  # compile outside the timings
        ns.NgramCache(config=cfg).warmup()
        run_loop(rows[:2], cfg, 2, args.form)
    early = False if args.no_early_insert else None
    print(f"{len(rows)} requests; form {args.form!r}; forward {args.forward_ms} ms; early "
          f"insert {'off' if args.no_early_insert else 'default'}; trie "
          f"{'grown' if args.grow else 'reserved'}; medians of {args.repeats}; "
          "per request-step, microseconds")
    print(f"{'config':>12} {'batch':>5} {'propose':>8} {'verify':>7} {'accept':>7} "
          f"{'3 calls':>8} {'SGLang':>7} {'ratio':>6} {'goal':>5}")
    for name in args.config:
        for b in args.batch:
            ours, theirs, parts = [], [], []
            for _ in range(args.repeats):
                gc.collect()
                tp, tv, ta, n, trace = run_loop(rows, CONFIGS[name], b, args.form,
                                                args.forward_ms, early, not args.grow)
                gc.collect()
                tm = run_peer(trace, peer_cfg, args.forward_ms)
                ours.append((tp + tv + ta) / n * 1e6)
                theirs.append(tm / n * 1e6)
                parts.append((tp / n * 1e6, tv / n * 1e6, ta / n * 1e6))
            o, t = statistics.median(ours), statistics.median(theirs)
            p = [statistics.median(x) for x in zip(*parts)]
            goal = GOALS.get((name, b))
            print(f"{name:>12} {b:>5} {p[0]:>8.2f} {p[1]:>7.2f} {p[2]:>7.2f} {o:>8.2f} "
                  f"{t:>7.2f} {o / t:>6.2f} {'-' if goal is None else goal:>5}", flush=True)


if __name__ == "__main__":
    main()
