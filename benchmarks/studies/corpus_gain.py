"""Does an external corpus help on the recorded streams, and where do accepted tokens come from?

Replays SGLang 0.5.23's serving loop (``ns.simulate``, compiled) on one task of the
recorded streams shipped with ngramspec, without and with external corpora, and reports where
every accepted draft token (bonus tokens excluded) came from, as the compiled replay counts it
(``SimulationResult.accepted_by_source``): the trie's part of the merged tree, or a corpus's (a
node two parts proposed counts for the first merged: the trie's tree, then the corpora in merge
order).  ``--check`` also replays the loop through a ``Drafter``, attributes each accepted token
by looking its path up in the trees of the merge's parts, and checks that both agree (the
tests do the same on a slice of the streams).

Corpora (``--corpus``):

- ``prompts``: the token ids of the task's own prompts, one document per request: for
  ``doc_grounded`` these hold the module docstrings the answers are grounded on (SGLang's
  worker only ever inserts the last ``max_trie_depth`` prompt tokens into its trie);
- ``others``: the prompts and outputs of the other tasks' requests (a distractor corpus);
- ``both``: the two together.

    python -m benchmarks.studies.corpus_gain                                  # doc_grounded, BFS
    python -m benchmarks.studies.corpus_gain --task code_edit --match-type PROB --budget 6
    python -m benchmarks.studies.corpus_gain --check     # and the Drafter's attribution, compared
    python -m benchmarks.studies.corpus_gain --speed     # simulation speed, compiled vs step by step

``--speed``: all recorded requests at concurrency 1 with the ``doc_grounded`` prompts as the
corpus, replayed by the compiled loop and step by step through a ``Drafter`` (the same
numbers, checked), best of ``--runs``; simulated output tokens per second of replay wall time
(the automaton's build excluded from both).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import ngramspec as ns

from benchmarks.common import load_rows


def corpora_for(kind: str, rows, task: str) -> dict[str, list]:
    own = [r["prompt_ids"] for r in rows if r["task"] == task]
    others = [r["prompt_ids"] + r["output_ids"] for r in rows if r["task"] != task]
    return {"prompts": {"prompts": own}, "others": {"others": others},
            "both": {"prompts": own, "others": others}}[kind]


def speed(runs: int) -> dict:
    """Compiled replay vs the step-by-step Drafter replay, with and without one corpus."""
    from ngramspec.simulate import _replay_stepwise

    rows = load_rows()
    cfg = ns.NgramConfig(external_sam_budget=4)
    corpus = corpora_for("prompts", rows, "doc_grounded")
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    tokens = int(sum(o.size for o in outputs))
    ns.simulate(rows[:2], config=cfg, corpora=corpus)  # compile or load the kernels
    out: dict = dict(requests=len(rows), output_tokens=tokens)
    for name, corpora in (("without", None), ("with_corpus", corpus)):
        best = [0.0, 0.0]
        for _ in range(runs):
            fast = ns.simulate(rows, config=cfg, corpora=corpora)
            best[0] = max(best[0], tokens / fast.wall_seconds)
            t0 = time.perf_counter()
            emitted, *_ = _replay_stepwise(prompts, outputs, cfg, 1, "numba",
                                           [r["id"] for r in rows], None, corpora)
            best[1] = max(best[1], tokens / (time.perf_counter() - t0))
            if any(not np.array_equal(a, b) for a, b in zip(emitted, fast.emitted)):
                raise AssertionError("the compiled and the step-by-step replay differ")
        out[name] = dict(compiled_tokens_per_s=round(best[0]),
                         stepwise_tokens_per_s=round(best[1]))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--task", default="doc_grounded")
    ap.add_argument("--corpus", default="prompts", choices=["prompts", "others", "both"])
    ap.add_argument("--match-type", default="BFS", choices=["BFS", "PROB"])
    ap.add_argument("--budget", type=int, default=4, help="external_sam_budget")
    ap.add_argument("--draft-token-num", type=int, default=12)
    ap.add_argument("--json", metavar="PATH")
    ap.add_argument("--check", action="store_true",
                    help="also attribute step by step through a Drafter and compare")
    ap.add_argument("--speed", action="store_true",
                    help="measure the simulation speed with a corpus instead")
    ap.add_argument("--runs", type=int, default=2, help="--speed: best of this many runs")
    args = ap.parse_args(argv)
    if args.speed:
        report = speed(args.runs)
        print(json.dumps(report, indent=1))
        if args.json:
            Path(args.json).write_text(json.dumps(report, indent=1))
        return 0
    all_rows = load_rows()
    rows = [r for r in all_rows if r["task"] == args.task]
    cfg = ns.NgramConfig(match_type=args.match_type, draft_token_num=args.draft_token_num,
                         external_sam_budget=args.budget)
    corpora = corpora_for(args.corpus, all_rows, args.task)
    plain = ns.simulate(rows, config=cfg)
    t0 = time.perf_counter()
    with_corpus = ns.simulate(rows, config=cfg, corpora=corpora)
    seconds = time.perf_counter() - t0
    counts = with_corpus.summary.accepted_by_source
    if args.check:  # the Drafter's step-by-step replay, attributing by the merge's parts
        from ngramspec.simulate import _replay_stepwise

        found: dict = {}
        emitted, *_ = _replay_stepwise([np.asarray(r["prompt_ids"], np.int32) for r in rows],
                                       [np.asarray(r["output_ids"], np.int32) for r in rows],
                                       cfg, 1, "numba", [r["id"] for r in rows], None, corpora,
                                       sources=found)
        for a, b in zip(emitted, with_corpus.emitted):
            if not np.array_equal(a, b):
                raise AssertionError("the Drafter replay diverged from ns.simulate")
        stepwise = {k: int(v.sum()) for k, v in found.items()}
        if stepwise != counts:
            raise AssertionError(f"attribution: compiled {counts}, Drafter {stepwise}")
    total = sum(counts.values())
    output_tokens = int(with_corpus.output_lens.sum())
    report = dict(task=args.task, requests=len(rows), corpus=args.corpus,
                  corpus_tokens={c: sum(len(d) + 1 for d in docs) - 1
                                 for c, docs in corpora.items()},
                  match_type=args.match_type, draft_token_num=args.draft_token_num,
                  external_sam_budget=args.budget,
                  tokens_per_step_without=round(plain.tokens_per_step, 3),
                  tokens_per_step_with=round(with_corpus.tokens_per_step, 3),
                  accepted_draft_tokens=counts,
                  accepted_share={k: round(v / total, 3) if total else None
                                  for k, v in counts.items()},
                  checked_against_drafter=args.check,
                  simulated_tokens_per_s=round(output_tokens / seconds))
    print(json.dumps(report, indent=1))
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
