"""Every drafter on the tuning part and on the hold-out part apart, and ngramspec against
Arctic's curve at the same draft tokens per step (the protocol:
:mod:`benchmarks.peers.protocol`).

    python -m benchmarks.studies.holdout                  # recommended() and Arctic, both parts
    python -m benchmarks.studies.holdout --fresh          # and the second recording
    python -m benchmarks.studies.holdout --json out.json

``--fresh`` adds a third part, ``"fresh"``: the second recording shipped with the package
(``ngramspec.streams.fresh_streams_path()``, prompts the first recording does not contain,
recorded after every setting here was tuned), replayed alone like the others.

Drafting CPU per step is measured by ``python -m benchmarks.studies.compare_drafters`` (a
``Drafter`` driven through the Python API).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import ngramspec as ns

from benchmarks.peers.protocol import (ARCTIC_WIDTHS, arctic_curve, comparison_table,
                                       curve_table, load_parts, ngramspec_figures, ratios)


#: ngramspec configurations reported by ``main`` (label, config).
def configs() -> list[tuple[str, ns.NgramConfig]]:
    return [
        ("ngramspec recommended()", ns.NgramConfig.recommended()),
        ("ngramspec recommended(min_expected_accept=4)",
         ns.NgramConfig.recommended(min_expected_accept=4.0)),
        ("ngramspec recommended(max_spec_factor=4): wider, for a verify cost flat in tree size",
         ns.NgramConfig.recommended(max_spec_factor=4.0)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--widths", default=",".join(map(str, ARCTIC_WIDTHS)),
                        help="Arctic max_spec_tokens values of its curve (comma-separated)")
    parser.add_argument("--json", metavar="PATH", help="also write the figures as JSON")
    parser.add_argument("--fresh", action="store_true",
                        help="also report the second recording (part 'fresh')")
    args = parser.parse_args()
    widths = [int(w) for w in args.widths.split(",")]
    parts = load_parts(fresh=args.fresh)
    curves = {p: arctic_curve(rows, widths) for p, rows in parts.items()}
    print(f"# Tuning part ({len(parts['tune'])} requests) and hold-out part "
          f"({len(parts['holdout'])} requests)"
          + (f", fresh recording ({len(parts['fresh'])} requests)" if args.fresh else "")
          + ", each replayed alone | concurrency 1\n")
    print("### Arctic's curve: tokens/step @ drafts/step per max_spec_tokens\n")
    print(curve_table(curves, widths) + "\n")
    out: dict[str, Any] = {"arctic_widths": widths, "arctic_curve": curves, "drafters": {}}
    for label, cfg in configs():
        per_part = {p: ngramspec_figures(rows, cfg) for p, rows in parts.items()}
        print(comparison_table(label, per_part, curves) + "\n")
        out["drafters"][label] = {"config": cfg.to_toml(), "parts": per_part,
                                  "ratios": {p: ratios(per_part[p], curves[p]) for p in parts}}
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
