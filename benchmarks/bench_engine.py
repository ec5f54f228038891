"""asv benchmarks: the serving loop's match and insert on recorded streams, both backends'
engine (numba) at several concurrencies.  Run ``asv run`` from the repository root; for the
side-by-side ratio against SGLang's C++ core run ``python benchmarks/compare_sglang.py``."""

import gzip
import json
from importlib.resources import files

import numpy as np

import ngramspec as ns


def _steps(concurrency, depth=18, accept=3, limit=40):
    with gzip.open(files("ngramspec") / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f][:limit]
    queue, running, steps = list(rows), [], []
    while queue or running:
        while queue and len(running) < concurrency:
            r = queue.pop(0)
            running.append([r["id"], r["prompt_ids"] + r["output_ids"][:1], r["output_ids"][1:]])
        steps.append(([np.asarray(s[-depth:], np.int32) for _, s, _ in running],
                      [rid for rid, _, _ in running], [len(s) for _, s, _ in running]))
        for it in running:
            it[1] += it[2][:accept]
            it[2] = it[2][accept:]
        running = [it for it in running if it[2]]
    return steps


class ServingLoop:
    params = (["BFS", "PROB"], [1, 8, 32])
    param_names = ["match_type", "concurrency"]
    timeout = 300

    def setup(self, match_type, concurrency):
        self.steps = _steps(concurrency)
        ns.NgramCache(capacity=100, match_type=match_type).warmup()

    def time_match_and_insert(self, match_type, concurrency):
        cache = ns.NgramCache(match_type=match_type, capacity=1_000_000)
        for ctxs, ids, lens in self.steps:
            cache.match(ctxs, request_ids=ids, total_lens=lens)
            cache.insert(ctxs)

    def peakmem_trie(self, match_type, concurrency):
        cache = ns.NgramCache(match_type=match_type, capacity=10_000_000)
        for ctxs, _, _ in self.steps:
            cache.insert(ctxs)
