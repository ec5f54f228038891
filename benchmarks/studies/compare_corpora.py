"""External corpora: ngramspec against SGLang 0.5.23's C++ core, side by side in one run.

SGLang's core is built from its PyPI wheel (``benchmarks/peers/sglang_sam.py``).  Measured:

- **build**: seconds per million corpus tokens to build one automaton (ngramspec: the Numba
  build of ``FlatAutomaton`` after a warm-up; SGLang: ``appendTokens`` in 4,096-token chunks +
  ``finalize``), medians over repeats, and the ratio ngramspec / SGLang (< 1: faster);
- **memory**: the resident-memory growth of a fresh process that builds one automaton, per
  corpus token (both), its peak during the build, and ngramspec's array bytes per token;
- **match**: the serving-loop trace of ``compare_sglang.py`` (recorded streams, stateful match +
  insert per step) with corpora loaded, time per request of ``match`` (ngramspec through its
  public API; SGLang at its C entry point, inputs packed beforehand), drafts checked equal at
  every step.

Corpora: ``zipf`` (tokens drawn from a Zipf(1.1) law over a 50,000-token vocabulary, documents
of 200-2,000 tokens, fixed seed) and ``streams`` (the prompts and outputs of the recorded
streams shipped with ngramspec, one document per request).

    python -m benchmarks.studies.compare_corpora                      # 1M-token zipf, 5 repeats
    python -m benchmarks.studies.compare_corpora --tokens 200000 --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

import ngramspec as ns
from ngramspec.cache.corpora import corpus_stream
from ngramspec.engine.corpora.sam import FlatAutomaton

from benchmarks.common import DEFAULTS, documents, load_rows, run_python, trace
from benchmarks.peers import sglang_sam


def zipf_documents(tokens: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    docs, total = [], 0
    while total < tokens:
        n = int(rng.integers(200, 2001))
        n = min(n, tokens - total)
        docs.append((rng.zipf(1.1, n) % 50_000).astype(np.int32))
        total += n + 1
    return docs


def stream_documents() -> list[np.ndarray]:
    return [np.asarray(d, np.int32) for d in documents()]


def measure_build(stream: np.ndarray, repeats: int) -> dict:
    FlatAutomaton.build(stream[:1000], prob=False)  # compile (or load) the kernel
    ours, theirs = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        FlatAutomaton.build(stream, prob=False)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        h = sglang_sam.SamHandle(stream)
        theirs.append(time.perf_counter() - t0)
        h.close()
    mo, mt = statistics.median(ours), statistics.median(theirs)
    per_m = 1e6 / stream.size
    return dict(tokens=int(stream.size), ngramspec_s_per_M=mo * per_m,
                sglang_s_per_M=mt * per_m, ratio=mo / mt)


_MEM_CHILD = r"""
import sys, numpy as np
def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096
def peak():
    with open("/proc/self/status") as f:
        return next(int(l.split()[1]) * 1024 for l in f if l.startswith("VmHWM:"))
def reset_peak():  # Linux: writing 5 to clear_refs resets the peak resident size
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
stream = np.load(sys.argv[2])
if sys.argv[1] == "ngramspec":
    from ngramspec.engine.corpora.sam import FlatAutomaton
    FlatAutomaton.build(stream[:1000], prob=False)
    reset_peak()
    before = rss()
    sam = FlatAutomaton.build(stream, prob=False)
    extra = sam.nbytes()
else:
    from benchmarks.peers import sglang_sam
    sglang_sam.SamHandle(stream[:1000]).close()
    reset_peak()
    before = rss()
    sam = sglang_sam.SamHandle(stream)
    extra = 0
print(rss() - before, extra, peak() - before)
"""


def measure_memory(stream: np.ndarray, tmp: Path) -> dict:
    path = tmp / "stream.npy"
    np.save(path, stream)
    out = {}
    for who in ("ngramspec", "sglang"):
        # A fresh process from the repository's root, where ``benchmarks`` imports.
        grown, nbytes, peak = map(int, run_python(_MEM_CHILD, who, str(path)).split())
        out[f"{who}_rss_B_per_token"] = grown / stream.size
        out[f"{who}_peak_B_per_token"] = peak / stream.size
        if who == "ngramspec":
            out["ngramspec_arrays_B_per_token"] = nbytes / stream.size
    out["rss_ratio"] = out["ngramspec_rss_B_per_token"] / out["sglang_rss_B_per_token"]
    return out


def measure_match(corpora: dict[str, list], steps, cfg: dict, repeats: int) -> dict:
    ours_t, theirs_t = [], []
    requests = sum(len(c) for c, _, _ in steps)
    for _ in range(repeats):
        cache = ns.NgramCache(**cfg)
        peer = sglang_sam.SglangSamPeer(**cfg)
        for cid, docs in corpora.items():
            cache.add_corpus(cid, docs)
            peer.add_corpus(cid, docs)
        cache.warmup()
        packed = [(peer.pack_match(c, i, l), peer.pack_insert(c)) for c, i, l in steps]
        tm = tp = 0.0
        for (ctxs, ids, lens), (pm, pi) in zip(steps, packed):
            t0 = time.perf_counter()
            d = cache.match(ctxs, request_ids=ids, total_lens=lens)
            t1 = time.perf_counter()
            peer.match_packed(pm)
            t2 = time.perf_counter()
            tm += t1 - t0
            tp += t2 - t1
            if not np.array_equal(d.tokens, pm[5]):
                raise AssertionError("ngramspec and SGLang drafted differently")
            cache.insert(ctxs)
            peer.insert_packed(pi)
        ours_t.append(tm)
        theirs_t.append(tp)
    mo, mt = statistics.median(ours_t), statistics.median(theirs_t)
    return dict(requests=requests, ngramspec_us_per_request=mo / requests * 1e6,
                sglang_us_per_request=mt / requests * 1e6, ratio=mo / mt)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=1_000_000, help="zipf corpus size")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--batch", type=int, nargs="+", default=[1, 48])
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--match-only", action="store_true",
                    help="skip the build and memory measurements")
    args = ap.parse_args(argv)
    sglang_sam.build()
    report: dict = dict(machine=platform.processor() or platform.machine(),
                        cpus=os.cpu_count(), build={}, memory={}, match={})
    import tempfile
    with tempfile.TemporaryDirectory() as tmp:
        sizes = () if args.match_only else (
            ("zipf", corpus_stream(zipf_documents(args.tokens))),
            ("streams", corpus_stream(stream_documents())))
        for name, stream in sizes:
            report["build"][name] = measure_build(stream, args.repeats)
            report["memory"][name] = measure_memory(stream, Path(tmp))
            print(name, "build", json.dumps(report["build"][name]), flush=True)
            print(name, "memory", json.dumps(report["memory"][name]), flush=True)
    # Matching with three corpora (the recorded streams split by task) loaded.
    rows = load_rows()
    by_task: dict[str, list] = {}
    for r, doc in zip(rows, documents(rows)):
        by_task.setdefault(r["task"], []).append(doc)
    corpora = {task: docs for task, docs in sorted(by_task.items())[:3]}
    for match_type in ("BFS", "PROB"):
        cfg = dict(DEFAULTS, match_type=match_type, capacity=1_000_000,
                   external_sam_budget=6)
        for b in args.batch:
            steps = trace(rows, b)
            key = f"{match_type}-batch{b}"
            report["match"][key] = measure_match(corpora, steps, cfg, max(1, args.repeats // 2))
            print(key, json.dumps(report["match"][key]), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
