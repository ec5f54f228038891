"""The offline simulator's speed goals, one line each, medians of ``--runs``.

    python -m benchmarks.studies.simulate_speed              # the four goal figures
    python -m benchmarks.studies.simulate_speed --runs 7 --repeat 10 --concurrency 1

prints simulated output tokens per second (wall time of the replay, compiling or loading the
kernel excluded) for SGLang 0.5.23 BFS and PROB (server defaults), ``NgramConfig.recommended()``
and the ``sglang-0.5.9`` profile (its defaults), on the shipped corpus repeated ``--repeat``
times (default 10), at concurrency 1.  ``python -m benchmarks.studies.compare_simulate``
prints the SGLang figures beside SGLang's C++ core; the asv suite
``benchmarks/asv/bench_simulate.py`` times the same configurations.
"""

from __future__ import annotations

import argparse
import statistics

import ngramspec as ns

from benchmarks.common import SPEED_CONFIGS, corpus, machine


def main() -> None:
    ap = argparse.ArgumentParser(description="The simulator's speed goals: simulated output "
                                             "tokens per second, medians of several runs.")
    ap.add_argument("--runs", type=int, default=5, help="runs per configuration (median)")
    ap.add_argument("--repeat", type=int, default=10, help="copies of the shipped corpus")
    ap.add_argument("--concurrency", type=int, default=1)
    args = ap.parse_args()
    rows = corpus(args.repeat)
    tokens = sum(len(r["output_ids"]) for r in rows)
    print(f"# simulated output tokens/s | shipped corpus x{args.repeat} ({len(rows)} requests, "
          f"{tokens:,} output tokens) | concurrency {args.concurrency} | medians of "
          f"{args.runs} runs (wall; CPU in brackets) | ngramspec {ns.__version__} | "
          f"{machine()}")
    for name, make in SPEED_CONFIGS.items():
        cfg = make()
        ns.simulate(rows[:2], config=cfg)  # compile or load the kernel
        runs = [ns.simulate(rows, config=cfg, concurrency=args.concurrency) for _ in range(args.runs)]
        wall = statistics.median(tokens / r.wall_seconds for r in runs)
        cpu = statistics.median(tokens / r.draft_seconds for r in runs)
        print(f"{name:>14}: {wall:>9,.0f} tokens/s  ({cpu:,.0f} CPU)  "
              f"tokens/step {runs[0].tokens_per_step:.3f}")


if __name__ == "__main__":
    main()
