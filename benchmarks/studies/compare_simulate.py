"""Simulated output tokens per second: ngramspec's compiled replay vs the same loop on SGLang.

The loop is SGLang 0.5.23's serving loop with greedy verification against the recorded streams
shipped with ngramspec (see ``docs/simulate.md``).  ngramspec runs it as one compiled kernel
(``ns.simulate``).  SGLang's C++ core (built from its PyPI wheel by ``peers/sglang.py``) can only
be driven step by step from Python: per step one ``match`` and one ``insert`` call at its C entry
points, and the verification in Python.  Two SGLang figures are printed: the whole Python-driven
loop, and the time spent inside SGLang's C calls alone (inputs packed beforehand), a lower bound
for any loop around it.  Both drafters are checked to give identical per-step counts.

    python -m benchmarks.studies.compare_simulate                   # all 133 streams, 3 repeats
    python -m benchmarks.studies.compare_simulate --concurrency 1 8 --repeats 5
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import numpy as np

import ngramspec as ns
from ngramspec.simulate import admit
from ngramspec.streams import embedded_streams_path

from benchmarks.peers import sglang as peer


def parents_of(mask: np.ndarray) -> np.ndarray:
    """(B, n) parent slot of every slot from an ancestor mask (-1 for the root)."""
    n = mask.shape[1]
    strict = mask & np.tri(n, n, -1, dtype=bool)
    last = n - 1 - np.argmax(strict[:, :, ::-1], axis=2)
    return np.where(strict.any(axis=2), last, -1)


def sglang_loop(rows, cfg: ns.NgramConfig, concurrency: int):
    """The serving loop around SGLang's core; returns (per-request emitted counts, wall s,
    seconds inside SGLang's C calls)."""
    p = peer.SglangPeer(max_trie_depth=cfg.max_trie_depth, min_bfs_breadth=cfg.min_bfs_breadth,
                        max_bfs_breadth=cfg.max_bfs_breadth, draft_token_num=cfg.draft_token_num,
                        match_type=cfg.match_type, capacity=cfg.capacity)
    depth = cfg.max_trie_depth
    full = [np.asarray(r["prompt_ids"] + r["output_ids"], np.int32) for r in rows]
    plen = [len(r["prompt_ids"]) for r in rows]
    olen = [len(r["output_ids"]) for r in rows]
    out = [0] * len(rows)
    steps: list[list[int]] = [[] for _ in rows]
    queue, running = 0, []
    c_time = 0.0
    t0 = time.perf_counter()
    while queue < len(rows) or running:
        queue = admit(queue, running, concurrency, olen, lambda r: None, out)
        if not running:
            continue
        lens = [plen[r] + out[r] for r in running]
        ctxs = [full[r][max(0, n - depth):n] for r, n in zip(running, lens)]
        packed = p.pack_match(ctxs, [rows[r]["id"] for r in running], lens)
        ins = p.pack_insert(ctxs)
        c0 = time.perf_counter()
        p.match_packed(packed)
        c_time += time.perf_counter() - c0
        tokens, mask = packed[5], packed[6].astype(bool)
        par = parents_of(mask)
        for b, r in enumerate(running):
            rec = full[r][plen[r] + out[r]:]
            last, k = 0, 0
            while k < rec.size:
                kids = np.flatnonzero((par[b] == last) & (tokens[b] == rec[k]))
                if kids.size == 0:
                    break
                last, k = int(kids[0]), k + 1
            steps[r].append(min(k + 1, int(rec.size)))
        c0 = time.perf_counter()
        p.insert_packed(ins)
        c_time += time.perf_counter() - c0
        for r in running:
            out[r] += steps[r][-1]
        done = [rows[r]["id"] for r in running if out[r] == olen[r]]
        if done:
            p.erase(done)
            running = [r for r in running if out[r] < olen[r]]
    return steps, time.perf_counter() - t0, c_time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--match-type", choices=["BFS", "PROB"], nargs="+", default=["BFS", "PROB"])
    args = ap.parse_args()

    rows = ns.read_streams(embedded_streams_path())
    tokens = sum(len(r["output_ids"]) for r in rows)
    ns.simulate(rows[:2])  # compile or load the kernels
    try:
        peer.build()
        have_peer = True
    except peer.PeerUnavailable as e:
        print(f"(SGLang peer unavailable, its columns are skipped: {e})\n")
        have_peer = False
    print(f"# simulated output tokens/s, {len(rows)} streams ({tokens:,} output tokens), server "
          f"defaults | ngramspec {ns.__version__}, SGLang {peer.SGLANG_VERSION} | "
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d')} | medians of {args.repeats}\n")
    print("| match type | concurrency | tokens/step | ngramspec compiled loop | SGLang loop "
          "(Python-driven) | SGLang C calls alone | speed ratio (ngramspec / SGLang C calls; "
          "> 1: ngramspec faster) |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mt in args.match_type:
        cfg = ns.NgramConfig(match_type=mt)
        for c in args.concurrency:
            runs = [ns.simulate(rows, config=cfg, concurrency=c) for _ in range(args.repeats)]
            ours = statistics.median(tokens / r.wall_seconds for r in runs)
            cells = ["-", "-", "-"]
            if have_peer:
                sg = [sglang_loop(rows, cfg, c) for _ in range(args.repeats)]
                for got, want in zip(runs[0].emitted, sg[0][0]):
                    np.testing.assert_array_equal(got, np.asarray(want, np.int32))
                loop = statistics.median(tokens / s[1] for s in sg)
                calls = statistics.median(tokens / s[2] for s in sg)
                cells = [f"{loop:,.0f}", f"{calls:,.0f}", f"{ours / calls:.2f}x"]
            print(f"| {mt} | {c} | {runs[0].tokens_per_step:.3f} | {ours:,.0f} | "
                  + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
