"""Cost-optimal tree sizes (``min_expected_accept="auto"``) against fixed thresholds, on the
hold-out part of the shipped streams.

For each cost setting and concurrency, ``NgramConfig.preset("calibrated")`` (wide trees) is replayed (the compiled
serving loop, :func:`ngramspec.simulate`) on the 65 hold-out requests (``ngramspec.sweep.split``)
with ``min_expected_accept`` at each fixed threshold and at ``"auto"``, with the count-ratio
estimates and with ``calibrated_estimates=True``, and the serving time is predicted with
:func:`ngramspec.predict_serving` (drafting time excluded, ``draft_ms=0``, so that the figures
do not depend on the machine).  A speed-up below 1.0 means speculation slows decoding down.

Cost settings:

- ``flat``: the seed's measurement, a decode step 12.2 ms and a verify step 30 ms at every
  batch and tree size (``CostModel(decode_ms=12.2, verify_ms=30)``);
- ``growing``: an illustrative table (made up, not measured) whose verify cost grows with
  batch and tree size: ``t(b, n) = 12.2 + 0.04 b + 1.2 (n - 1) (1 + b / 8)`` ms on the grid
  ``b`` in 1, 2, 4, 8, 16, 32 and ``n`` in 1, 2, 3, 4, 6, 8, 12 (a forward of one decode token
  per request costs little more at larger batches; each extra query token per request costs
  1.2 ms at batch 1 and more as the batch grows).

    python -m benchmarks.studies.cost_optimal_trees [--part holdout] [--concurrency 1,4,16] [--json F]

``--part fresh``: the second recording shipped with the package
(``ngramspec.streams.fresh_streams_path()``, recorded after everything here was tuned).

``--thresholds``, ``--costs`` and ``--estimates`` narrow the grid (e.g. a finer sweep of the
thresholds at concurrency 1 under the flat costs: ``--thresholds 2,2.25,2.5,...,5 --costs
flat --estimates calibrated --concurrency 1``).
"""

from __future__ import annotations

import argparse
import json

import ngramspec as ns
from ngramspec.costs import CostTable, predict_serving

from benchmarks.peers import protocol as H

THRESHOLDS = (0.0, 1.5, 2.46, 3.0, 4.0, 5.0)
GROW_BATCH = (1, 2, 4, 8, 16, 32)
GROW_TOKENS = (1, 2, 3, 4, 6, 8, 12)


def growing_table() -> CostTable:
    """The illustrative table whose verify cost grows with batch and tree size."""
    return CostTable([(b, n, 12.2 + 0.04 * b + 1.2 * (n - 1) * (1 + b / 8))
                      for b in GROW_BATCH for n in GROW_TOKENS], source="growing table")


def settings() -> dict:
    return {"flat": ns.CostModel(decode_ms=12.2, verify_ms=30.0), "growing": growing_table()}


def run(rows, cost, concurrency: int, calibrated: bool, threshold) -> dict:
    config = ns.NgramConfig.preset("calibrated", calibrated_estimates=calibrated,
                                        min_expected_accept=threshold)
    r = ns.simulate(rows, config=config, concurrency=concurrency,
                    costs=cost if threshold == "auto" else None)
    p = predict_serving(r, cost, draft_ms=0)
    return dict(threshold=threshold, calibrated=calibrated, concurrency=concurrency,
                tokens_per_step=r.tokens_per_step, drafts_per_step=r.summary.draft_nodes_per_step,
                share_with_draft=r.summary.share_steps_with_draft, speed_up=p.speed_up)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", default="holdout", choices=("tune", "holdout", "fresh"))
    ap.add_argument("--concurrency", default="1,4,16")
    ap.add_argument("--json", help="write every result here")
    ap.add_argument("--thresholds", help="comma-separated fixed thresholds (default "
                    + ",".join(f"{t:g}" for t in THRESHOLDS) + ")")
    ap.add_argument("--costs", default="flat,growing", help="cost settings: flat, growing")
    ap.add_argument("--estimates", default="counts,calibrated",
                    help="counts, calibrated or both")
    args = ap.parse_args()
    try:
        thresholds = (tuple(float(t) for t in args.thresholds.split(","))
                      if args.thresholds else THRESHOLDS)
    except ValueError:
        ap.error(f"--thresholds must be comma-separated numbers, got {args.thresholds!r}")
    names = args.costs.split(",")
    estimates = args.estimates.split(",")
    if not set(names) <= set(settings()) or not names:
        ap.error(f"--costs must name flat and/or growing, got {args.costs!r}")
    if not set(estimates) <= {"counts", "calibrated"} or not estimates:
        ap.error(f"--estimates must name counts and/or calibrated, got {args.estimates!r}")
    chosen = {n: c for n, c in settings().items() if n in names}
    flags = [e == "calibrated" for e in ("counts", "calibrated") if e in estimates]
    rows = H.load_parts(fresh=args.part == "fresh")[args.part]
    levels = [int(c) for c in args.concurrency.split(",")]
    results = []
    for name, cost in chosen.items():
        print(f"\n{name} costs, {args.part} part ({len(rows)} requests): predicted speed-up "
              "(tokens/step, drafts/step)")
        head = ["estimates", "min_expected_accept"] + [f"c={c}" for c in levels]
        print(" | ".join(head))
        print(" | ".join("---" for _ in head))
        for calibrated in flags:
            for threshold in thresholds + ("auto",):
                cells = []
                for c in levels:
                    res = run(rows, cost, c, calibrated, threshold)
                    res["costs"] = name
                    results.append(res)
                    cells.append(f"{res['speed_up']:.3f} ({res['tokens_per_step']:.2f}, "
                                 f"{res['drafts_per_step']:.1f})")
                label = "calibrated" if calibrated else "counts"
                th = threshold if threshold == "auto" else f"{threshold:g}"
                print(" | ".join([label, th] + cells))
    # The goal: auto at or above every fixed threshold (same estimates), and >= 1.0.
    print()
    for name in chosen:
        for calibrated in flags:
            for c in levels:
                sel = [r for r in results if r["costs"] == name and r["calibrated"] == calibrated
                       and r["concurrency"] == c]
                auto = next(r for r in sel if r["threshold"] == "auto")
                best = max((r for r in sel if r["threshold"] != "auto"),
                           key=lambda r: r["speed_up"])
                ok = auto["speed_up"] >= best["speed_up"] - 1e-12 and auto["speed_up"] >= 1.0
                print(f"{name:8s} {'calibrated' if calibrated else 'counts':10s} c={c:<3d} auto "
                      f"{auto['speed_up']:.3f}  best fixed {best['speed_up']:.3f} "
                      f"(threshold {best['threshold']:g})  {'ok' if ok else 'BELOW'}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()
