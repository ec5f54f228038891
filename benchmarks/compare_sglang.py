"""ngramspec's engine against SGLang's C++ core, side by side in one run.

Workload: SGLang's serving loop replayed on the recorded streams shipped with ngramspec, at a
given concurrency: every step one batched ``match`` (stateful, the last ``max_trie_depth``
tokens per request) and one batched ``insert`` of the same windows, for both drafters on the
same operation sequence (precomputed, so that only drafter time is measured).  Both sides are
also checked to produce identical drafts.  Prints per-phase medians over repeats and the ratio
SGLang time / ngramspec time (> 1 means ngramspec is faster), plus resident trie memory.

    python benchmarks/compare_sglang.py --concurrency 1 8 32 --repeats 5
"""

from __future__ import annotations

import argparse
import gzip
import json
import statistics
import sys
import time
from importlib.resources import files
from pathlib import Path

import numpy as np

import ngramspec as ns

sys.path.insert(0, str(Path(__file__).parent))
import sglang_peer  # noqa: E402

NODE_BYTES_SGLANG = 176  # sizeof(TrieNode) with g++ 12, preallocated for the whole capacity


def load_rows(limit: int | None) -> list[dict]:
    with gzip.open(files("ngramspec") / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    return rows[:limit] if limit else rows


def trace(rows, concurrency, depth, accept=3):
    """The operation sequence: per step (contexts, ids, total_lens).  Requests advance by up to
    ``accept`` recorded tokens a step (a typical accept length), so that traces do not depend on
    the drafter being timed."""
    queue = list(rows)
    running: list[list] = []
    steps = []
    while queue or running:
        while queue and len(running) < concurrency:
            r = queue.pop(0)
            running.append([r["id"], r["prompt_ids"] + r["output_ids"][:1], r["output_ids"][1:]])
        ctxs = [seq[-depth:] for _, seq, _ in running]
        steps.append(([np.asarray(c, np.int32) for c in ctxs], [rid for rid, _, _ in running],
                      [len(seq) for _, seq, _ in running]))
        for item in running:
            item[1] += item[2][:accept]
            item[2] = item[2][accept:]
        running = [it for it in running if it[2]]
    return steps


def run(drafter, steps, check=None):
    t_match = t_insert = 0.0
    outputs = []
    for ctxs, ids, lens in steps:
        t0 = time.perf_counter()
        out = drafter.match(ctxs, request_ids=ids, total_lens=lens)
        t1 = time.perf_counter()
        drafter.insert(ctxs)
        t2 = time.perf_counter()
        t_match += t1 - t0
        t_insert += t2 - t1
        if check is not None:
            outputs.append(out.tokens if hasattr(out, "tokens") else out[0])
    return t_match, t_insert, outputs


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, nargs="+", default=[1, 8, 32])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--requests", type=int, default=None, help="limit the streams used")
    ap.add_argument("--match-type", choices=["BFS", "PROB"], nargs="+", default=["BFS", "PROB"])
    ap.add_argument("--capacity", type=int, default=1_000_000)
    args = ap.parse_args()

    rows = load_rows(args.requests)
    cfg = dict(max_trie_depth=18, min_bfs_breadth=1, max_bfs_breadth=10, draft_token_num=12,
               capacity=args.capacity)
    ns.NgramCache(capacity=100).match([[1]])  # compile (or load cached kernels) outside timing
    print(f"{len(rows)} recorded requests, SGLang {sglang_peer.SGLANG_VERSION} defaults, "
          f"capacity {args.capacity:,}; medians of {args.repeats} repeats\n")
    print(f"{'type':5} {'conc':>4} {'steps':>6} | {'match ms (ns / sgl)':>22} {'ratio':>6} | "
          f"{'insert ms (ns / sgl)':>22} {'ratio':>6} | {'total ratio':>11}")
    for match_type in args.match_type:
        for conc in args.concurrency:
            steps = trace(rows, conc, 18)
            res = {"ns": [], "sgl": []}
            for rep in range(args.repeats):
                for name in ("ns", "sgl"):
                    d = (ns.NgramCache(**cfg, match_type=match_type) if name == "ns"
                         else sglang_peer.SglangPeer(**cfg, match_type=match_type))
                    m, i, outs = run(d, steps, check=rep == 0)
                    res[name].append((m, i))
                    if rep == 0:
                        res[name + "_out"] = outs
            for a, b in zip(res["ns_out"], res["sgl_out"]):
                np.testing.assert_array_equal(a, b)
            med = {k: (statistics.median(x[0] for x in v), statistics.median(x[1] for x in v))
                   for k, v in res.items() if not k.endswith("_out")}
            (nm, ni), (sm, si) = med["ns"], med["sgl"]
            print(f"{match_type:5} {conc:4d} {len(steps):6d} | {nm*1e3:9.1f} / {sm*1e3:9.1f} "
                  f"{sm/nm:6.2f} | {ni*1e3:9.1f} / {si*1e3:9.1f} {si/ni:6.2f} | "
                  f"{(sm+si)/(nm+ni):11.2f}")
    cache = ns.NgramCache(**cfg)
    for ctxs, _, _ in trace(rows, 8, 18):
        cache.insert(ctxs)
    mine = cache._backend.trie.nbytes
    print(f"\ntrie memory after the whole corpus ({len(cache):,} nodes): ngramspec "
          f"{mine/2**20:.1f} MiB; SGLang preallocates {args.capacity * NODE_BYTES_SGLANG / 2**20:.1f}"
          f" MiB of nodes at capacity {args.capacity:,} (about "
          f"{10_000_000 * NODE_BYTES_SGLANG / 2**30:.2f} GiB at its default 10M), before child "
          "containers")


if __name__ == "__main__":
    main()
