"""The slots per request ``ngramspec sglang-launch --preset recommended`` sends to SGLang
without a cost table: tuned on the tuning part, reported on the hold-out part.

SGLang's NGRAM worker verifies ``draft_token_num`` slots per request at every step, whatever
the trees hold, so ``recommended()``'s 16 (a custom loop's setting, where ADAPTIVE sends only
its real trees) is not necessarily what SGLang should get.  For each illustrative cost and
concurrency this runs :func:`ngramspec.sweep.budget.best_budget` for ``recommended()`` over
:data:`~ngramspec.sweep.budget.BUDGETS` on the tuning part of the shipped streams
(``ngramspec.sweep.split``), then the same on the hold-out part.

The rule that picks the default, on the tuning part only: among the budgets, the one whose
worst ratio of predicted speed-up to the best budget's, over the (cost, concurrency) cells
where the best budget pays (speed-up above 1), is highest; ties go to the smaller budget.
Cells where nothing pays do not vote: there the advice is to keep speculation off.

Drafting time is SGLang's worker calls on the drop-in ``NgramCorpus``, timed on the streams
(``ns.time_drafting(result, "sglang")``), once per budget; each part and concurrency then
uses the median over the budgets for every budget (``best_budget(..., draft_ms=)``).  One
timing varies by up to three times at concurrency 48 on a shared 2-core machine, more than
the budgets differ, and would decide close cells by noise; the medians are printed.

    python -m benchmarks.studies.sglang_budget                  # the tables of docs/sglang.md
    python -m benchmarks.studies.sglang_budget --json out.json
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

import numpy as np

import ngramspec as ns
from ngramspec.sweep.budget import BUDGETS, SGLANG_SLOTS, BudgetChoice, best_budget

from benchmarks.peers.protocol import load_parts

#: The illustrative costs (label, model): a forward's fixed time plus a time per token, the
#: same with a token-heavier forward, and a flat verify step against a plain decode step.
COSTS = (
    ("12 ms + 0.1 ms/token", ns.CostModel(step_ms=12, token_ms=0.1)),
    ("12 ms + 0.5 ms/token", ns.CostModel(step_ms=12, token_ms=0.5)),
    ("decode 12.2 ms, verify 30 ms", ns.CostModel(decode_ms=12.2, verify_ms=30)),
)
CONCURRENCY = (1, 4, 16, 48)


def drafting(rows: list[dict], config: ns.NgramConfig) -> dict[int, list[float]]:
    """Per concurrency: SGLang's worker calls timed (ms per step) with every budget."""
    return {c: [ns.time_drafting(ns.simulate(rows, config=config.replace(draft_token_num=n),
                                             concurrency=c), "sglang") for n in BUDGETS]
            for c in CONCURRENCY}


def choices(rows: list[dict], config: ns.NgramConfig, draft: dict[int, float]
            ) -> dict[tuple[str, int], BudgetChoice]:
    """``best_budget`` of ``config`` on ``rows`` for every cost and concurrency, with the
    drafting time ``draft[concurrency]``."""
    return {(label, c): best_budget(config, rows, cost, concurrency=c, draft_ms=draft[c])
            for label, cost in COSTS for c in CONCURRENCY}


def ratios(chs: dict[tuple[str, int], BudgetChoice]) -> dict[int, tuple[float, float]]:
    """Per budget: its (worst, mean) ratio of speed-up to the best budget's, over the cells
    where the best budget pays."""
    paying = [ch for ch in chs.values() if ch.pays]
    if not paying:
        raise ValueError("no (cost, concurrency) cell pays: nothing to compare")
    score = {}
    for n in BUDGETS:
        r = [ch.predictions[n].speed_up / ch.speed_up for ch in paying]
        score[n] = (min(r), sum(r) / len(r))
    return score


def robust_budget(tuned: dict[tuple[str, int], BudgetChoice]
                  ) -> tuple[int, dict[int, tuple[float, float]]]:
    """The budget with the highest worst ratio to the best over the cells that pay (ties:
    the smaller), and :func:`ratios`."""
    score = ratios(tuned)
    best = BUDGETS[0]
    for n in BUDGETS[1:]:
        if score[n][0] > score[best][0]:
            best = n
    return best, score


def _x(value: float) -> str:
    return f"{value:.2f}x" if math.isfinite(value) else "-"


def tuning_table(tuned: dict[tuple[str, int], BudgetChoice]) -> str:
    lines = ["| cost | concurrency | chosen draft_token_num | its speed-up | 16 slots |",
             "|---|---:|---:|---:|---:|"]
    for (label, c), ch in tuned.items():
        lines.append(f"| {label} | {c} | {ch.draft_token_num} | {_x(ch.speed_up)} | "
                     f"{_x(ch.predictions[16].speed_up)} |")
    return "\n".join(lines)


def robust_table(score: dict[int, tuple[float, float]]) -> str:
    lines = ["| draft_token_num | worst ratio to the best | mean ratio |", "|---:|---:|---:|"]
    lines += [f"| {n} | {w:.3f} | {m:.3f} |" for n, (w, m) in score.items()]
    return "\n".join(lines)


def holdout_table(tuned: dict[tuple[str, int], BudgetChoice],
                  held: dict[tuple[str, int], BudgetChoice], default: int) -> str:
    lines = ["| cost | concurrency | tuned budget | 16 slots | "
             f"default {default} | hold-out's own best |",
             "|---|---:|---:|---:|---:|---:|"]
    for key, ch in held.items():
        label, c = key
        n = tuned[key].draft_token_num
        lines.append(f"| {label} | {c} | {n}: {_x(ch.predictions[n].speed_up)} | "
                     f"{_x(ch.predictions[16].speed_up)} | "
                     f"{_x(ch.predictions[default].speed_up)} | "
                     f"{ch.draft_token_num}: {_x(ch.speed_up)} |")
    return "\n".join(lines)


def _json(chs: dict[tuple[str, int], BudgetChoice]) -> list[dict[str, Any]]:
    return [{"cost": label, "concurrency": c, "chosen": ch.draft_token_num,
             "speed_up": {n: p.speed_up for n, p in ch.predictions.items()},
             "tokens_per_step": dict(ch.tokens_per_step)} for (label, c), ch in chs.items()]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="also write every prediction as JSON")
    args = parser.parse_args()
    parts = load_parts()
    config = ns.NgramConfig.recommended()
    timed = {p: drafting(parts[p], config) for p in ("tune", "holdout")}
    median = {p: {c: float(np.median(ms)) for c, ms in t.items()} for p, t in timed.items()}
    tuned = choices(parts["tune"], config, median["tune"])
    default, score = robust_budget(tuned)
    held = choices(parts["holdout"], config, median["holdout"])
    print(f"# recommended() in SGLang's server: draft_token_num from {BUDGETS}, priced "
          f"with engine='sglang'\n")
    print("Drafting, ms per step (median over the budgets; each budget's own timing in "
          "brackets):\n")
    for p, t in timed.items():
        for c, ms in t.items():
            print(f"- {p}, concurrency {c}: {median[p][c]:.2f} "
                  f"[{', '.join(f'{m:.2f}' for m in ms)}]")
    print()
    print(f"### Tuning part ({len(parts['tune'])} requests): best_budget per cost and "
          "concurrency\n")
    print(tuning_table(tuned) + "\n")
    print("### Tuning part: each budget against the best, over the cells that pay\n")
    print(robust_table(score) + "\n")
    print(f"Most robust budget on the tuning part: {default} (the package sends "
          f"SGLANG_SLOTS = {SGLANG_SLOTS})\n")
    print(f"### Hold-out part ({len(parts['holdout'])} requests): speed-up of each choice\n")
    print(holdout_table(tuned, held, SGLANG_SLOTS) + "\n")
    print("### Hold-out part: each budget against the hold-out's own best, over the cells "
          "that pay there\n")
    print(robust_table(ratios(held)))
    if args.json:
        Path(args.json).write_text(json.dumps({"tune": _json(tuned), "holdout": _json(held),
                                               "drafting_ms": timed, "robust": default},
                                              indent=1))


if __name__ == "__main__":
    main()
