"""Speed of the offline simulator (the engine's compiled serving-loop replay).

As an asv suite: the shipped corpus through the serving loop, per configuration and
concurrency.  As a script, the simulator's speed goals, one line each, medians of ``--runs``:

    python benchmarks/bench_simulate.py              # the four goal figures
    python benchmarks/bench_simulate.py --runs 7 --repeat 10 --concurrency 1

prints simulated output tokens per second (wall time of the replay, compiling or loading the
kernel excluded) for SGLang 0.5.23 BFS and PROB (server defaults), ``NgramConfig.recommended()``
and the ``sglang-0.5.9`` profile (its defaults), on the shipped corpus repeated ``--repeat``
times (default 10), at concurrency 1.  ``python benchmarks/compare_simulate.py`` prints the
SGLang figures beside SGLang's C++ core.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import time

import ngramspec as ns
from ngramspec.streams import embedded_streams_path

#: The configurations of the speed goals, by name.
CONFIGS = {
    "SGLang BFS": lambda: ns.NgramConfig(),
    "SGLang PROB": lambda: ns.NgramConfig(match_type="PROB"),
    "recommended()": lambda: ns.NgramConfig.recommended(),
    "sglang-0.5.9": lambda: ns.NgramConfig(profile="sglang-0.5.9"),
}


def corpus(repeat: int) -> list[dict]:
    """The shipped corpus, ``repeat`` times in a row (ids made unique)."""
    rows = ns.read_streams(embedded_streams_path())
    return [dict(r, id=f"{k}:{r['id']}") for k in range(repeat) for r in rows]


class Simulate:
    """All 133 recorded streams through the serving loop."""

    params = (list(CONFIGS), [1, 8])
    param_names = ["config", "concurrency"]
    timeout = 120

    def setup(self, config, concurrency):
        self.rows = ns.read_streams(embedded_streams_path())
        self.config = CONFIGS[config]()
        ns.simulate(self.rows[:2], config=self.config)  # compile or load the kernel outside the timing

    def time_simulate(self, config, concurrency):
        ns.simulate(self.rows, config=self.config, concurrency=concurrency)

    def track_output_tokens_per_second(self, config, concurrency):
        return ns.simulate(self.rows, config=self.config,
                           concurrency=concurrency).output_tokens_per_second

    track_output_tokens_per_second.unit = "tokens/s"


class ReadStreams:
    """Reading and checking the shipped corpus (gzipped JSON Lines, 133 requests)."""

    def time_read_streams(self):
        ns.read_streams(embedded_streams_path())


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
          f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
          f"{time.strftime('%Y-%m-%d')}")
    for name, make in CONFIGS.items():
        cfg = make()
        ns.simulate(rows[:2], config=cfg)  # compile or load the kernel
        runs = [ns.simulate(rows, config=cfg, concurrency=args.concurrency) for _ in range(args.runs)]
        wall = statistics.median(tokens / r.wall_seconds for r in runs)
        cpu = statistics.median(tokens / r.draft_seconds for r in runs)
        print(f"{name:>14}: {wall:>9,.0f} tokens/s  ({cpu:,.0f} CPU)  "
              f"tokens/step {runs[0].tokens_per_step:.3f}")


if __name__ == "__main__":
    main()
