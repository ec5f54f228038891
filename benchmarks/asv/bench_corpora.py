"""asv benchmarks of external corpora through the public API: building an automaton
(``add_corpus``) and matching with corpora loaded.

For the ratios against SGLang's C++ core, run ``python -m benchmarks.studies.compare_corpora``.
"""

import ngramspec as ns

from benchmarks.common import DEFAULTS as SGLANG, documents, load_rows, trace

DEFAULTS = dict(SGLANG, capacity=1_000_000)


class AddCorpus:
    """``add_corpus`` of the recorded streams (about 67k tokens, one document per request)."""

    timeout = 240  # setup compiles the corpus kernels on a fresh checkout (20-40 s)

    params = ["BFS", "PROB"]
    param_names = ["match_type"]

    def setup(self, match_type):
        self.docs = documents()
        self.cache = ns.NgramCache(**DEFAULTS, match_type=match_type, external_sam_budget=4)
        self.cache.warmup()
        self.n = 0

    def time_add_corpus(self, match_type):
        self.n += 1
        self.cache.add_corpus(f"c{self.n}", self.docs)
        self.cache.remove_corpus(f"c{self.n}")


class MatchWithCorpora:
    """Stateful match of one serving step with three corpora loaded (the streams by task)."""

    timeout = 240  # setup compiles the corpus kernels on a fresh checkout (20-40 s)

    params = (["BFS", "PROB"], [1, 48])
    param_names = ["match_type", "batch"]

    def setup(self, match_type, batch):
        rows = load_rows()
        self.cache = ns.NgramCache(**DEFAULTS, match_type=match_type, external_sam_budget=6)
        self.cache.warmup()
        by_task: dict = {}
        for r in rows:
            by_task.setdefault(r["task"], []).append(r["prompt_ids"] + r["output_ids"])
        for task, docs in sorted(by_task.items())[:3]:
            self.cache.add_corpus(task, docs)
        steps = trace(rows[:40], batch)
        for ctxs, ids, lens in steps[: len(steps) // 2]:
            self.cache.match(ctxs, request_ids=ids, total_lens=lens)
            self.cache.insert(ctxs)
        self.step = steps[len(steps) // 2]

    def time_match(self, match_type, batch):
        ctxs, ids, lens = self.step
        self.cache.match(ctxs)


class MatchChosenCorpora:
    """The same step with each request drawing from one of the three corpora
    (``match(..., corpora=)``, beyond SGLang)."""

    timeout = 240  # setup compiles the corpus kernels on a fresh checkout (20-40 s)

    params = [1, 48]
    param_names = ["batch"]

    def setup(self, batch):
        MatchWithCorpora.setup(self, "BFS", batch)
        names = list(self.cache.corpora())
        self.chosen = [[names[i % len(names)]] for i in range(len(self.step[0]))]

    def time_match(self, batch):
        self.cache.match(self.step[0], corpora=self.chosen)


class SimulateWithCorpus:
    """``ns.simulate`` (compiled) of 40 recorded requests with one corpus loaded."""

    timeout = 240  # setup compiles the corpus kernels on a fresh checkout (20-40 s)

    def setup(self):
        rows = load_rows()
        self.rows = rows[:40]
        self.corpora = {"prompts": [r["prompt_ids"] for r in rows]}
        self.cfg = ns.NgramConfig(**DEFAULTS, external_sam_budget=4)
        ns.simulate(self.rows[:2], config=self.cfg, corpora=self.corpora)

    def time_simulate(self):
        ns.simulate(self.rows, config=self.cfg, corpora=self.corpora)
