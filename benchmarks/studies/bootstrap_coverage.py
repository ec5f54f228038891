"""How often the 90% bootstrap interval covers the figure of other traffic, by the number of
requests recorded: the basis of ``ngramspec.costs.uncertainty.MIN_REQUESTS``, and of the
tuning-half interval against the hold-out half's figure (docs/simulate.md, "How sure").

Coverage: draw ``--draws`` random subsets of ``n`` requests from the tuning part of the
shipped streams (``ngramspec.sweep.split``), simulate each subset alone, take its 90% interval
(``ngramspec.costs.bootstrap``) of tokens per step and of the predicted speed-up (12 ms + 0.1
ms per token, drafting excluded), and count how often it holds the figure of the whole
hold-out part (other requests of the same traffic).  Then the whole tuning part's interval
beside the hold-out part's figure.

    python -m benchmarks.studies.bootstrap_coverage [--draws 60] [--sizes 10,20,30,45]
"""

from __future__ import annotations

import argparse

import numpy as np

import ngramspec as ns
from ngramspec.costs import CostModel, bootstrap, predict_serving
from ngramspec.streams import embedded_streams_path
from ngramspec.sweep.split import split_streams

COST = CostModel(step_ms=12, token_ms=0.1)


def configs() -> list[tuple[str, ns.NgramConfig]]:
    return [("SGLang's defaults", ns.NgramConfig()),
            ("recommended", ns.NgramConfig.recommended())]


def figures(rows: list[dict], cfg: ns.NgramConfig, c: int, *, interval: bool):
    r = ns.simulate(rows, config=cfg, concurrency=c)
    p = predict_serving(r, COST, draft_ms=0)
    iv = bootstrap(r, COST, draft_ms=0, resamples=200) if interval else None
    return r.tokens_per_step, p.speed_up, iv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--draws", type=int, default=60)
    ap.add_argument("--sizes", default="10,20,30,45")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    rows = ns.read_streams(embedded_streams_path())
    tune, held = split_streams(rows, part="tune"), split_streams(rows, part="holdout")
    rng = np.random.default_rng(args.seed)
    c = args.concurrency
    print(f"tuning part {len(tune)} requests, hold-out part {len(held)}; concurrency {c}; "
          f"{args.draws} subsets per size\n")
    print("| settings | requests | covers tokens/step | covers speed-up | median width "
          "(speed-up) |\n|---|---:|---:|---:|---:|")
    for name, cfg in configs():
        truth_tps, truth_up, _ = figures(held, cfg, c, interval=False)
        for n in (int(x) for x in args.sizes.split(",")):
            hit_t = hit_u = 0
            widths = []
            for _ in range(args.draws):
                pick = sorted(rng.choice(len(tune), size=n, replace=False))
                _, _, iv = figures([tune[i] for i in pick], cfg, c, interval=True)
                hit_t += iv.tokens_per_step[0] <= truth_tps <= iv.tokens_per_step[1]
                hit_u += iv.speed_up[0] <= truth_up <= iv.speed_up[1]
                widths.append(iv.speed_up[1] - iv.speed_up[0])
            print(f"| {name} | {n} | {hit_t / args.draws:.0%} | {hit_u / args.draws:.0%} | "
                  f"{np.median(widths):.2f} |")
    print("\n| settings | concurrency | tuning part: speed-up (90% interval) | hold-out part "
          "figure | inside |\n|---|---:|---:|---:|:---:|")
    for name, cfg in configs():
        for level in (1, 4, 16, 48):
            _, up, iv = figures(tune, cfg, level, interval=True)
            _, truth, _ = figures(held, cfg, level, interval=False)
            lo, hi = iv.speed_up
            print(f"| {name} | {level} | {up:.2f}x ({lo:.2f}–{hi:.2f}) | {truth:.2f}x | "
                  f"{'yes' if lo <= truth <= hi else 'no'} |")


if __name__ == "__main__":
    main()
