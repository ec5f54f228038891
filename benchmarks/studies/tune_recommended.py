"""The sweep behind ``NgramConfig.recommended()``: tuning part only.

Replays ``recommended()`` with other ``draft_token_num``, ``min_token_prob``,
``max_spec_factor``, ``shared_pseudo_count`` and ``max_trie_depth`` on the tuning part of the
shipped streams (``ngramspec.sweep.split``; the hold-out part is never read here) and ranks every
setting by its worst ratio, over the task groups and overall, of tokens per verify step to
Arctic's at the same draft tokens per step (:mod:`benchmarks.peers.protocol`: Arctic's curve over
``max_spec_tokens``, interpolated, never extrapolated; a setting wider than Arctic's widest
point in some group has no ratio there).

The rule that chose ``recommended()``: among the settings whose worst ratio reaches the goal
(``--goal``, 1.05), the one with the most tokens per verify step overall (narrower settings
reach higher ratios with fewer tokens per step; the goal is the ratio, the tie-break is what a
verify pass emits).  The first table lists those settings in that order, the second the best
worst ratios.

    python -m benchmarks.studies.tune_recommended                  # the grid below
    python -m benchmarks.studies.tune_recommended --top 40 --json sweep.json
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
from pathlib import Path

import ngramspec as ns

from benchmarks.peers import protocol as H

GRID = dict(draft_token_num=(12, 16),
            min_token_prob=(0.18, 0.3, 0.4, 0.5),
            max_spec_factor=(0.6, 0.75, 1.0, 1.25, 1.5, 2.0, 4.0),
            shared_pseudo_count=(0.0, 2.0, 4.0, 8.0),
            max_trie_depth=(24,))


def sweep(grid: dict = GRID) -> list[dict]:
    rows = H.load_parts()["tune"]
    curve = H.arctic_curve(rows)
    out = []
    names = list(grid)
    for values in itertools.product(*(grid[n] for n in names)):
        options = dict(zip(names, values))
        figs = H.ngramspec_figures(rows, ns.NgramConfig.recommended(**options))
        r = H.ratios(figs, curve)
        worst = min((v if not math.isnan(v) else -math.inf) for v in r.values())
        out.append({"options": options, "ratios": r, "worst": worst,
                    "figures": {g: (f["tokens_per_step"], f["drafts_per_step"])
                                for g, f in figs.items()}})
    out.sort(key=lambda e: -e["worst"])
    return out


def _table(results: list[dict], top: int) -> str:
    groups = list(results[0]["ratios"]) if results else []
    lines = ["| " + " | ".join(GRID) + " | " + " | ".join(groups)
             + " | worst | tokens/step | drafts/step |",
             "|" + "---:|" * (len(GRID) + len(groups) + 3)]
    for e in results[:top]:
        tps, dps = e["figures"]["overall"]
        lines.append("| " + " | ".join(str(v) for v in e["options"].values()) + " | "
                     + " | ".join(f"{e['ratios'][g]:.3f}" for g in groups)
                     + f" | {e['worst']:.3f} | {tps:.3f} | {dps:.2f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--top", type=int, default=15)
    parser.add_argument("--goal", type=float, default=1.05)
    parser.add_argument("--json", metavar="PATH")
    args = parser.parse_args()
    results = sweep()
    meeting = sorted((e for e in results if e["worst"] >= args.goal),
                     key=lambda e: -e["figures"]["overall"][0])
    print(f"### Tuning part: settings whose worst ratio is at least {args.goal}, most tokens "
          "per step first\n")
    print(_table(meeting, args.top) + "\n")
    print("### Tuning part: best worst ratios\n")
    print(_table(results, args.top))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
