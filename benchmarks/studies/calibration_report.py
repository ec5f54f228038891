"""Reliability of the ADAPTIVE accept-length estimates on the tuning and hold-out parts of the
shipped streams (``ngramspec.sweep.split``): per verify step, the predicted expected accept length
(``DraftBatch.expected_accept_lens``) beside the realised one (tokens emitted), binned by the
predicted value, for ``NgramConfig.preset("calibrated")`` (wide trees) with count-ratio estimates and with
``calibrated_estimates=True``, at concurrency 1.

The goal (issue 18): in every bin holding at least 1% of the steps, the mean predicted value
within 10% of the mean realised one.  ``--plot`` writes the reliability plot of the hold-out
part (needs matplotlib).

    python -m benchmarks.studies.calibration_report [--plot docs/img/calibration-reliability.png]
    python -m benchmarks.studies.calibration_report --fresh     # and the second recording
    python -m benchmarks.studies.calibration_report --fresh --plot-fresh docs/img/calibration-fresh.png

``--fresh`` adds the second recording shipped with the package
(``ngramspec.streams.fresh_streams_path()``, recorded after the table was fitted) as a third
part.
"""

from __future__ import annotations

import argparse

import ngramspec as ns
from ngramspec.measure.reliability import reliability

from benchmarks.peers import protocol as H


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plot", help="write the hold-out reliability plot here (PNG)")
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--fresh", action="store_true",
                    help="also report the second recording (part 'fresh')")
    ap.add_argument("--plot-fresh", help="with --fresh: write its reliability plot here (PNG)")
    args = ap.parse_args()
    held = {}
    for part, rows in H.load_parts(fresh=args.fresh).items():
        for calibrated in (False, True):
            cfg = ns.NgramConfig.preset("calibrated", calibrated_estimates=calibrated)
            rel = reliability(rows, config=cfg, concurrency=args.concurrency)
            label = "calibrated" if calibrated else "counts"
            if part in ("holdout", "fresh"):
                held[part, label] = rel
            print(f"\n{part}, {label}: {rel.predicted.size} steps, tokens/step "
                  f"{rel.realised.mean():.3f}, worst bin (>= 1% of steps) "
                  f"{100 * rel.worst():.1f}% off")
            print("predicted bin | share of steps | mean predicted | mean realised | "
                  "predicted / realised")
            print("---|---:|---:|---:|---:")
            for b in rel.bins():
                hi = "inf" if b["hi"] == float("inf") else f"{b['hi']:.2f}"
                flag = "" if b["share"] >= 0.01 else " (< 1%)"
                print(f"[{b['lo']:.2f}, {hi}) | {100 * b['share']:.1f}%{flag} | "
                      f"{b['predicted']:.3f} | {b['realised']:.3f} | {b['ratio']:.3f}")
    plots = [("holdout", args.plot, "hold-out part"),
             ("fresh", args.plot_fresh if args.fresh else None,
              "SmolLM2 recording")]
    for part, path, what in plots:
        if path:
            held[part, "calibrated"].plot(path, other=held[part, "counts"],
                                          labels=("calibrated_estimates=True", "count ratios"),
                                          title=f"preset calibrated, {what}, per verify step")
            print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
