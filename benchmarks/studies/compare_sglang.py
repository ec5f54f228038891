"""ngramspec against SGLang 0.5.23's C++ core, side by side in one run.

SGLang's core is built from its PyPI wheel (``benchmarks/peers/sglang.py``).  ngramspec is timed
through its public API as a user calls it (NumPy int32 inputs, validation and packing
included); SGLang at its C entry point with every input packed beforehand.  Workloads replay
the recorded streams shipped with ngramspec through SGLang's serving loop (each step: one
stateful ``match`` of the batch's last-18-token windows, then one ``insert`` of the same
windows; requests advance by 3 recorded tokens a step so that the trace is the same for both).
Both drafters are checked to produce identical drafts at every step.

Ratios are ngramspec time / SGLang time (< 1 means ngramspec is faster), medians over repeats.

    python -m benchmarks.studies.compare_sglang                 # all workloads, 5 repeats
    python -m benchmarks.studies.compare_sglang --repeats 3 --batch 1 8
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

import numpy as np

import ngramspec as ns

from benchmarks.common import DEFAULTS, bulk_sequence, load_rows, machine, nbytes, rss, trace
from benchmarks.peers import sglang as peer


def serve_ngramspec(cfg, steps, keep=False):
    cache = ns.NgramCache(**cfg)
    tm = ti = 0.0
    outs = []
    for ctxs, ids, lens in steps:
        t0 = time.perf_counter()
        d = cache.match(ctxs, request_ids=ids, total_lens=lens)
        t1 = time.perf_counter()
        cache.insert(ctxs)
        ti += time.perf_counter() - t1
        tm += t1 - t0
        if keep:
            outs.append(d.tokens)
    return tm, ti, outs


def serve_sglang(cfg, steps, keep=False):
    p = peer.SglangPeer(**cfg)
    packed = [(p.pack_match(c, i, l), p.pack_insert(c)) for c, i, l in steps]
    tm = ti = 0.0
    outs = []
    for pm, pi in packed:
        t0 = time.perf_counter()
        p.match_packed(pm)
        t1 = time.perf_counter()
        p.insert_packed(pi)
        ti += time.perf_counter() - t1
        tm += t1 - t0
        if keep:
            outs.append(pm[5].copy())
    return tm, ti, outs


def fresh_process_latency() -> tuple[float, float]:
    code = ("import time; t0 = time.perf_counter(); import ngramspec as ns; t1 = time.perf_counter();"
            "c = ns.NgramCache(capacity=1000); c.insert([[1, 2, 3, 1, 2, 4]]);"
            "c.match([[3, 1, 2]], request_ids=['r'], total_lens=[3]); t2 = time.perf_counter();"
            "print(t1 - t0, t2 - t1)")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True)  # warm cache
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    imp, first = map(float, out.stdout.split())
    return imp, first


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 8, 64])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--match-type", choices=["BFS", "PROB"], nargs="+", default=["BFS", "PROB"])
    args = ap.parse_args()

    rows = load_rows()
    ns.NgramCache(capacity=100).warmup()
    peer.build()
    print(f"# ngramspec {ns.__version__} vs SGLang {peer.SGLANG_VERSION} C++ core | "
          f"{machine()} | medians of {args.repeats} | ratio = ngramspec / SGLang\n")
    print("| workload | ngramspec | SGLang | ratio |\n|---|---:|---:|---:|")
    for mt in args.match_type:
        cfg = dict(DEFAULTS, match_type=mt, capacity=1_000_000)
        for b in args.batch:
            steps = trace(rows, b)
            reqs = sum(len(s[1]) for s in steps)
            _, _, mine = serve_ngramspec(cfg, steps, keep=True)
            _, _, theirs = serve_sglang(cfg, steps, keep=True)
            for x, y in zip(mine, theirs):
                np.testing.assert_array_equal(x, y)
            r_ns, r_sg = [], []
            for _ in range(args.repeats):  # interleaved: load from elsewhere hits both alike
                r_ns.append(serve_ngramspec(cfg, steps)[:2])
                r_sg.append(serve_sglang(cfg, steps)[:2])
            m_ns = statistics.median(r[0] for r in r_ns) / reqs * 1e6
            m_sg = statistics.median(r[0] for r in r_sg) / reqs * 1e6
            i_ns = statistics.median(r[1] for r in r_ns) / len(steps) * 1e6
            i_sg = statistics.median(r[1] for r in r_sg) / len(steps) * 1e6
            print(f"| match {mt}, batch {b}, per request | {m_ns:.1f} µs | {m_sg:.1f} µs | "
                  f"{m_ns / m_sg:.2f} |")
            print(f"| insert of the step's windows {mt}, batch {b}, per step | {i_ns:.1f} µs | "
                  f"{i_sg:.1f} µs | {i_ns / i_sg:.2f} |")

    seq = bulk_sequence(rows)
    cfg = dict(DEFAULTS, capacity=2_000_000)
    t_ns, t_sg = [], []
    for _ in range(args.repeats):
        c = ns.NgramCache(**cfg)
        t0 = time.perf_counter()
        c.insert([seq])
        t_ns.append(time.perf_counter() - t0)
        p = peer.SglangPeer(**cfg)
        packed = p.pack_insert([seq])
        t0 = time.perf_counter()
        p.insert_packed(packed)
        t_sg.append(time.perf_counter() - t0)
        del p
    a, b = statistics.median(t_ns), statistics.median(t_sg)
    print(f"| bulk insert of one 100,000-token sequence | {a * 1e3:.0f} ms | {b * 1e3:.0f} ms | "
          f"{a / b:.2f} |")

    nodes = len(c)
    mine = nbytes(c) / nodes
    before = rss()
    p = peer.SglangPeer(**dict(DEFAULTS, capacity=nodes + 1))
    p.insert([seq])
    theirs = (rss() - before) / nodes
    del p
    print(f"| bytes per trie node at {nodes:,} nodes (SGLang: RSS growth, capacity = nodes) | "
          f"{mine:.0f} B | {theirs:.0f} B | {mine / theirs:.2f} |")
    imp, first = fresh_process_latency()
    print(f"| `import ngramspec` in a fresh process | {imp * 1e3:.0f} ms | | |")
    print(f"| first insert + match in a fresh process (numba cache warm) | {first * 1e3:.0f} ms "
          "| | |")


if __name__ == "__main__":
    main()
