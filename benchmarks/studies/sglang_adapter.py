"""ngramspec's NgramCorpus (ngramspec.integrations.sglang) against SGLang 0.5.23's own
NgramCorpus class (the wheel's Python over the wheel's C++ core: peers.sglang_corpus), as the
NGRAM worker calls them: the time of each ``batch_get`` per request, at batch 1 and at batch
48, and the time ``batch_put`` takes to return (SGLang inserts in a background thread; so
does the adapter on the SGLang-exact path; beyond SGLang its ``batch_put`` has nothing to do).

Both run the worker's call sequence (ngramspec.integrations.sglang_replay) on the same
recorded streams in the same process, alternately, several rounds; medians over the calls of
every round.  SGLang's class runs the server defaults in both rows (what the server runs
without ngramspec); the adapter runs the server defaults, then ``recommended()``.  The goal
column is issue 35's for the ``batch_get`` ratio (<= 1.0 with SGLang's defaults, <= 2.0 with
``recommended()``, at batch 1 and 48).

    python -m benchmarks.studies.sglang_adapter [--streams 96] [--rounds 3]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

import ngramspec as ns
from benchmarks.peers import sglang_corpus
from ngramspec.integrations.sglang import NgramCorpus
from ngramspec.integrations.sglang_replay import replay_worker

DATA = Path(ns.__file__).parent / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz"


class Timed:
    """Wraps a corpus; records (batch size, seconds) of every batch_get and batch_put."""

    def __init__(self, corpus) -> None:
        self.corpus = corpus
        self.get: list[tuple[int, float]] = []
        self.put: list[tuple[int, float]] = []

    def batch_get(self, req_ids, batch_tokens, total_lens):
        t0 = time.perf_counter()
        out = self.corpus.batch_get(req_ids, batch_tokens, total_lens)
        self.get.append((len(req_ids), time.perf_counter() - t0))
        return out

    def batch_put(self, batch_tokens):
        t0 = time.perf_counter()
        self.corpus.batch_put(batch_tokens)
        self.put.append((len(batch_tokens), time.perf_counter() - t0))

    def __getattr__(self, name):
        return getattr(self.corpus, name)


def _server_kw(cfg: ns.NgramConfig) -> dict:
    a = cfg.to_sglang_args(plugin=True)
    return {"max_trie_depth": a["speculative_ngram_max_trie_depth"],
            "min_bfs_breadth": a["speculative_ngram_min_bfs_breadth"],
            "max_bfs_breadth": a["speculative_ngram_max_bfs_breadth"],
            "draft_token_num": a["speculative_num_draft_tokens"],
            "match_type": a["speculative_ngram_match_type"],
            "capacity": a["speculative_ngram_capacity"]}


def run(make, rows, concurrency: int, cfg: ns.NgramConfig) -> Timed:
    corpus = Timed(make())
    replay_worker(corpus, [r["prompt_ids"] for r in rows], [r["output_ids"] for r in rows],
                  concurrency=concurrency, max_trie_depth=cfg.max_trie_depth,
                  draft_token_num=cfg.draft_token_num, hooks=hasattr(corpus, "note_prompts"))
    return corpus


def _median_us(calls: list[tuple[int, float]], batch: int, per_request: bool) -> float:
    xs = [t / (b if per_request else 1) for b, t in calls if b == batch]
    return float(np.median(xs)) * 1e6 if xs else float("nan")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--streams", type=int, default=96)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    rows = ns.read_streams(DATA)
    rows = rows[::max(1, len(rows) // args.streams)][:args.streams]
    sglang_cls = sglang_corpus.corpus_class()
    server = ns.NgramConfig()
    rec = ns.NgramConfig.recommended()
    cases = [("SGLang defaults", server, 1.0), ("recommended()", rec, 2.0)]
    print(f"{len(rows)} streams, {args.rounds} rounds, medians; SGLang's class runs the server "
          "defaults in every row")
    print(f"{'config':16} {'batch':>5} {'get us/req ours':>16} {'SGLang':>8} {'ratio':>6} "
          f"{'goal':>5} {'put us ours':>12} {'SGLang':>8} {'ratio':>6} {'calls':>6}")
    for label, cfg, goal in cases:
        for batch in (1, 48):
            ours, theirs = [], []
            for _ in range(args.rounds):  # alternate, so that drift hits both
                theirs.append(run(lambda: sglang_cls(**_server_kw(server)), rows, batch, server))
                ours.append(run(lambda cfg=cfg: NgramCorpus(**_server_kw(cfg), config=cfg), rows,
                                batch, cfg))
            og = [c for t in ours for c in t.get]
            tg = [c for t in theirs for c in t.get]
            op = [c for t in ours for c in t.put]
            tp = [c for t in theirs for c in t.put]
            g_o, g_t = _median_us(og, batch, True), _median_us(tg, batch, True)
            p_o, p_t = _median_us(op, batch, False), _median_us(tp, batch, False)
            n = sum(1 for b, _ in og if b == batch)
            print(f"{label:16} {batch:5d} {g_o:16.1f} {g_t:8.1f} {g_o / g_t:6.2f} {goal:5.1f} "
                  f"{p_o:12.1f} {p_t:8.1f} {p_o / p_t:6.2f} {n:6d}", flush=True)


if __name__ == "__main__":
    main()
