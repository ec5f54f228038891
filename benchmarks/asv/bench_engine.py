"""asv benchmarks of the engine through the public API, one class per operation.

Run ``asv run --quick`` (or ``asv run -E existing``) from the repository root.  For the ratio
against SGLang's C++ core, run ``python -m benchmarks.studies.compare_sglang``.
"""

import ngramspec as ns

from benchmarks.common import DEFAULTS, bulk_sequence, load_rows, nbytes, trace


def _steps(concurrency):
    return trace(load_rows()[:40], concurrency)


class Match:
    """Stateful match of one serving step, on a trie built by replaying the first half of the
    streams: each call matches the next step of the second half with its request ids and
    total lengths, so every request's state advances incrementally, as in serving (the trie is
    not updated between these matches; inserts are timed by ``StepInsert``)."""

    params = (["BFS", "PROB"], [1, 8, 48, 64])
    param_names = ["match_type", "batch"]

    def setup(self, match_type, batch):
        self.cache = ns.NgramCache(**DEFAULTS, match_type=match_type, capacity=1_000_000)
        self.cache.warmup()
        steps = _steps(batch)
        half = len(steps) // 2
        for ctxs, ids, lens in steps[:half]:
            self.cache.match(ctxs, request_ids=ids, total_lens=lens)
            self.cache.insert(ctxs)
        self.steps = steps[half:]
        self.ids = sorted({i for _, ids, _ in self.steps for i in ids}, key=str)
        self.next = 0

    def time_match(self, match_type, batch):
        if self.next == len(self.steps):
            # Back to the first step: its total lengths would go backwards; start afresh.
            self.cache.erase(self.ids)
            self.next = 0
        ctxs, ids, lens = self.steps[self.next]
        self.next += 1
        self.cache.match(ctxs, request_ids=ids, total_lens=lens)


class StepInsert:
    """Insert of one step's windows into a built trie."""

    params = [1, 8, 64]
    param_names = ["batch"]

    def setup(self, batch):
        self.cache = ns.NgramCache(**DEFAULTS, capacity=1_000_000)
        self.cache.warmup()
        steps = _steps(batch)
        for ctxs, _, _ in steps:
            self.cache.insert(ctxs)
        self.windows = steps[len(steps) // 2][0]

    def time_insert(self, batch):
        self.cache.insert(self.windows)


class BulkInsert:
    """One long sequence inserted into an empty trie."""

    def setup(self):
        self.seq = bulk_sequence(load_rows(), 20_000)
        ns.NgramCache(capacity=100).warmup()

    def time_bulk_insert(self):
        ns.NgramCache(**DEFAULTS, capacity=1_000_000).insert([self.seq])

    def peakmem_bulk_insert(self):
        ns.NgramCache(**DEFAULTS, capacity=1_000_000).insert([self.seq])


class Memory:
    """Bytes per trie node after a bulk insert of 100,000 tokens (the figure ``compare_sglang``
    sets beside SGLang's)."""

    def setup(self):
        self.seq = bulk_sequence(load_rows(), 100_000)

    def track_bytes_per_node(self):
        cache = ns.NgramCache(**DEFAULTS, capacity=2_000_000)
        cache.insert([self.seq])
        return nbytes(cache) / len(cache)

    track_bytes_per_node.unit = "bytes"


class StepAPI:
    """One decode step of a custom loop through the step API: ``Drafter.propose``,
    ``verify_greedy`` and ``Drafter.accept(result)`` for ``batch`` requests admitted from the
    shipped streams (the target's argmax is a fixed array, so each step emits a padding token
    and a bonus).  For the ratio against SGLang's C++ match on recorded traffic, run
    ``python -m benchmarks.studies.step_api``."""

    params = (["sglang", "recommended"], [1, 48])
    param_names = ["config", "batch"]
    timeout = 240  # a fresh checkout compiles the kernels in setup

    def setup(self, config, batch):
        import numpy as np

        cfg = ns.NgramConfig() if config == "sglang" else ns.NgramConfig.recommended()
        self.drafter = ns.Drafter(config=cfg.replace(capacity=1_000_000))
        rows = load_rows()[:batch]
        for r in rows:
            self.drafter.add_request(r["id"], r["prompt_ids"], r["output_ids"][0])
        self.ids = [r["id"] for r in rows]
        self.pred = np.zeros((batch, cfg.draft_token_num), np.int64)
        for _ in range(3):
            self.time_step(config, batch)

    def time_step(self, config, batch):
        d = self.drafter.propose(self.ids)
        self.drafter.accept(ns.verify_greedy(d, self.pred))
