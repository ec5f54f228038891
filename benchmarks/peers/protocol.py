"""The evaluation protocol: a drafter on the tuning part and on the hold-out part apart, and
ngramspec against Arctic's curve at the same draft tokens per step.

The parts are ``ngramspec.sweep.split``'s fixed split of the 133 shipped streams (by conversation,
per task): ``"tune"`` (68 requests) and ``"holdout"`` (65).  Each part is replayed on its own,
in file order, at concurrency 1, from empty caches: the hold-out replay never sees a token of
the tuning part, and anything tuned (``recommended()``, ``benchmarks.studies.tune_recommended``)
reads the tuning part only.  ``fresh`` adds the second recording shipped with the package as a
third part.

Arctic trades tokens for drafts through ``max_spec_tokens``; its curve (draft tokens per step ->
tokens per verify step, per task group and overall) is measured at :data:`ARCTIC_WIDTHS`, plus
the point (0 drafts, 1 token) of drafting nothing.  ngramspec is compared with Arctic *at its
own draft tokens per step* by linear interpolation on that curve, never past its widest
measured point (a point beyond it gets no ratio).

The ngramspec figures come from ``ns.simulate`` (the compiled replay; equal, step by step, to a
``Drafter`` replay sending only real drafts, as tested); Arctic's from
:mod:`benchmarks.peers.replay`.  The report: ``python -m benchmarks.studies.holdout``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

import ngramspec as ns
from ngramspec.sweep.split import PARTS, split_streams

from benchmarks.common import fresh_rows, load_rows

from . import replay as dr


#: Arctic's ``max_spec_tokens`` values measured for its curve.
ARCTIC_WIDTHS = (1, 2, 3, 5, 7, 9, 11, 15, 23, 32, 48, 64)

Point = tuple[float, float]  # (draft tokens per step, tokens per verify step)


def load_parts(rows: Sequence[dict] | None = None, *, fresh: bool = False
               ) -> dict[str, list[dict]]:
    """The shipped streams (or ``rows``) split into ``{"tune": [...], "holdout": [...]}``;
    with ``fresh``, the second recording as a third part ``"fresh"``."""
    rows = load_rows() if rows is None else list(rows)
    parts = {p: split_streams(rows, part=p) for p in PARTS}
    if fresh:
        parts["fresh"] = fresh_rows()
    return parts


def groups_of(rows: Sequence[dict]) -> list[str]:
    """Task groups in sorted order, then ``"overall"``."""
    return sorted({str(r.get("task", "")) for r in rows}) + ["overall"]


def pooled(rows: Sequence[dict], emitted: Sequence[np.ndarray], drafts: Sequence[np.ndarray]
           ) -> dict[str, dict[str, float]]:
    """Per group: tokens per verify step and real drafts per step, pooled over all steps."""
    out = {}
    for g in groups_of(rows):
        idx = [i for i, r in enumerate(rows) if g == "overall" or r.get("task", "") == g]
        em = np.concatenate([np.asarray(emitted[i], np.int64) for i in idx])
        dd = np.concatenate([np.asarray(drafts[i], np.int64) for i in idx])
        out[g] = {"tokens_per_step": float(em.sum() / em.size),
                  "drafts_per_step": float(dd.sum() / em.size),
                  "share_steps_with_draft": float(np.count_nonzero(dd) / em.size),
                  "steps": int(em.size)}
    return out


def ngramspec_figures(rows: Sequence[dict], config: ns.NgramConfig) -> dict[str, dict]:
    """``pooled`` figures of an ngramspec configuration (compiled replay, concurrency 1)."""
    sim = ns.simulate(list(rows), config=config)
    return pooled(rows, sim.emitted, sim.drafts)


def arctic_figures(rows: Sequence[dict], **settings: Any) -> dict[str, dict]:
    """``pooled`` figures of Arctic's suffix decoding with these ``speculate`` settings."""
    stats = dr.replay(dr.make_proposer("arctic", **settings), rows)
    return pooled(rows, [s.emitted for s in stats], [s.real for s in stats])


def arctic_curve(rows: Sequence[dict], widths: Sequence[int] = ARCTIC_WIDTHS
                 ) -> dict[str, list[Point]]:
    """Per group, Arctic's points ``(drafts/step, tokens/step)`` over ``max_spec_tokens``,
    with ``(0, 1)`` (nothing drafted), sorted by drafts."""
    curve: dict[str, list[Point]] = {g: [(0.0, 1.0)] for g in groups_of(rows)}
    for w in widths:
        for g, f in arctic_figures(rows, max_spec_tokens=int(w)).items():
            curve[g].append((f["drafts_per_step"], f["tokens_per_step"]))
    return {g: sorted(pts) for g, pts in curve.items()}


def at_width(curve: Sequence[Point], drafts: float) -> float:
    """Tokens per step on ``curve`` at ``drafts`` draft tokens per step, by linear
    interpolation between the measured points; NaN past the widest one (never extrapolated).

    The curve is made monotone first (each point's tokens at least those of every narrower
    point): a wider setting could always send the narrower one's drafts.

    Examples
    --------
    >>> at_width([(0.0, 1.0), (4.0, 3.0), (6.0, 4.0)], 5.0)
    3.5
    >>> at_width([(0.0, 1.0), (4.0, 3.0)], 4.5)
    nan
    """
    xs, ys, best = [], [], -np.inf
    for x, y in sorted(curve):
        best = max(best, y)
        if xs and x == xs[-1]:
            ys[-1] = best
            continue
        xs.append(x)
        ys.append(best)
    if drafts > xs[-1] or drafts < xs[0]:
        return float("nan")
    return float(np.interp(drafts, xs, ys))


def ratios(figures: dict[str, dict], curve: dict[str, list[Point]]) -> dict[str, float]:
    """Per group: tokens/step over Arctic's tokens/step at the same drafts/step."""
    out = {}
    for g, f in figures.items():
        ref = at_width(curve[g], f["drafts_per_step"])
        out[g] = f["tokens_per_step"] / ref if ref == ref else float("nan")
    return out


def curve_table(curves: dict[str, dict[str, list[Point]]], widths: Sequence[int]) -> str:
    """Arctic's curve per part and group as a markdown table."""
    lines = ["| part | group | " + " | ".join(f"{w}" for w in widths) + " |",
             "|---|---|" + "---:|" * len(widths)]
    for part, curve in curves.items():
        for g, pts in curve.items():
            # the measured points in width order: drop (0, 1), keep measurement order by width
            cells = [f"{y:.2f}@{x:.1f}" for x, y in pts if x > 0]
            lines.append(f"| {part} | {g} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def speedup(f: dict) -> float:
    """Predicted speed-up under the seed cost (decode 12.2 ms, verify 30 ms whatever the tree
    size, drafting time left out), steps without drafts run as plain decodes."""
    model = ns.CostModel(decode_ms=12.2, verify_ms=30.0)
    return model.predict(f["tokens_per_step"], verify_share=f["share_steps_with_draft"]).speedup


def comparison_table(label: str, per_part: dict[str, dict[str, dict]],
                     curves: dict[str, dict[str, list[Point]]]) -> str:
    """One drafter against Arctic at the same width, per part and group."""
    lines = [f"#### {label}", "",
             "| part | group | tokens/step | drafts/step | Arctic at that width | ratio "
             "| speed-up (seed cost) |", "|---|---|---:|---:|---:|---:|---:|"]
    for part, figs in per_part.items():
        r = ratios(figs, curves[part])
        for g, f in figs.items():
            ref = at_width(curves[part][g], f["drafts_per_step"])
            lines.append(f"| {part} | {g} | {f['tokens_per_step']:.3f} | "
                         f"{f['drafts_per_step']:.2f} | {ref:.3f} | {r[g]:.3f} | "
                         f"{speedup(f):.2f} |")
    return "\n".join(lines)
