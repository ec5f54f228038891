"""Fit the calibrated acceptance estimates (``NgramConfig(calibrated_estimates=True)``) on the
tuning part of the shipped streams, and write ``ngramspec/data/acceptance_table.json``.

What is fitted: for every drafted node whose parent was accepted (the root counts as
accepted), whether the target accepted it too: the conditional acceptance of one edge of the
tree.  Every edge falls in a cell: its source (the request's own trie or the shared one), the
length of the matched context it continues (bins ``CONTEXT_EDGES``), its parent's count total
(bins ``TOTAL_EDGES``), its parent's level below the anchor (bins ``LEVEL_EDGES``: the
drafted tokens of the path it continues) and whether it is its parent's first candidate.  Per cell the estimate
is ``a + b * freq / total``, fitted by least squares with a ridge pull (``--ridge`` pseudo-
edges) towards the fit of the coarser cell (source and context only; source only; the
uncalibrated ``0 + 1 * ratio`` at the top), so that sparse cells borrow from their neighbours.

The trees are drafted by ``NgramConfig.preset("calibrated")`` (wide trees) on the reference backend, through
:class:`ngramspec.Drafter` at concurrency 1, with the construction recording each node's cell
(``reference.adaptive.build_adaptive(..., record=)``); ``--calibrated`` drafts
with the current table (one refinement round: its trees are the ones it will score).
Only the ``"tune"`` part (``ngramspec.sweep.split``) is read.

``--save``/``--load`` keep the collected edges (each with its request's index) for
re-fitting without drafting again.

``--cv R`` compares fits by cross-validation inside the tuning part (the hold-out part is not
read): the tuning requests are cut ``R`` times into two random halves by conversation
(:func:`ngramspec.sweep.split.group_key`); each half's edges are fitted and the other half is
replayed (concurrency 1) with that table; printed per edge set (each ``--load`` file, e.g.
the edges of the trees of two tables): the worst bin holding at least 1% of the steps, per
fold and on average.

    python -m benchmarks.studies.fit_acceptance [--calibrated] [--ridge R] [--write] [--save F.npy]
    python -m benchmarks.studies.fit_acceptance --cv 8 --load A.npy,B.npy [--seed S]
    python -m benchmarks.studies.fit_acceptance --refit-fresh

``--refit-fresh`` asks whether refitting on a new model's traffic helps: the second recording
(``ngramspec.streams.fresh_streams_path()``) is split by the same rule (``ngramspec.sweep.split``),
a table is fitted on its tuning half (round 1 from count-ratio trees, round 2 on round 1's
trees, the same recipe as the shipped table) and every table's worst bin is printed on both
halves, the shipped one first.  It writes nothing.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

import ngramspec as ns
import ngramspec.reference.backend as ref_backend
from ngramspec.sweep.split import split_streams
from ngramspec.reference.tree import level_order
from ngramspec.streams import embedded_streams_path, read_streams

from benchmarks.common import (CONTEXT_EDGES, LEVEL_EDGES, TOTAL_EDGES, cross_validate, fit,
                               table_array)

_CELLS: list = [None]  # per slot of the last tree built: its node's calibration cell
_LAST_TREE: list = [None]  # the last tree built


def collect(config: ns.NgramConfig, rows: list[dict]) -> np.ndarray:
    """One row per drafted node whose parent was accepted: source, context length, the
    parent's level below the anchor, total, rank, count ratio, accepted (0/1), the request's
    index in ``rows``.  ``build_adaptive`` must record the cells (see ``_edges``)."""
    drafter = ns.Drafter(config=config, backend="reference")
    out = []
    for i, r in enumerate(rows):
        output = r["output_ids"]
        if len(output) < 2:
            continue
        drafter.add_request(r["id"], r["prompt_ids"], output[0])
        done = 1
        while done < len(output):
            d = drafter.propose([r["id"]])
            # The tree in slot order: the nodes' tokens and parents, and the recorded path.
            tokens, parents = d.tokens[0], d.parents[0]
            k = int(d.num_drafts[0])
            nodes = level_order_cells(k)
            rec = output[done:]
            on_path = np.zeros(k + 1, bool)
            on_path[0] = True
            depth = np.zeros(k + 1, int)
            for s in range(1, k + 1):
                p = parents[s]
                depth[s] = depth[p] + 1
                on_path[s] = on_path[p] and depth[p] < len(rec) and tokens[s] == rec[depth[p]]
                if on_path[p]:
                    out.append(nodes[s] + (float(on_path[s]), i))
            accepted = int(on_path.sum())  # the root and the accepted drafts
            e = min(accepted, len(rec))
            drafter.accept({r["id"]: output[done:done + e]})
            done += e
        drafter.finish(r["id"])
    return np.asarray(out, np.float64)


def level_order_cells(k: int) -> list:
    """The recorded cells in slot order (the last tree built is the one just proposed)."""
    tree = _LAST_TREE[0]
    return [None] + [_CELLS[idx] for _, idx, _ in level_order(tree)][:k]


def table_json(coef: np.ndarray, note: str) -> str:
    """The fitted table as ``ngramspec/data/acceptance_table.json`` holds it: the bin edges,
    then one ``[a, b]`` pair per line (4 decimals) in the order ``calibration_table`` reads."""
    pairs = [f"[{a:.4f}, {b:.4f}]" for s in range(2) for c in range(len(CONTEXT_EDGES))
             for a, b in coef[s, c].reshape(-1, 2)]
    head = {"about": ABOUT, "fitted": note, "context_edges": list(CONTEXT_EDGES),
            "total_edges": list(TOTAL_EDGES), "level_edges": list(LEVEL_EDGES)}
    body = ",\n".join(f" {json.dumps(k)}: {json.dumps(v)}" for k, v in head.items())
    return ("{\n" + body + ',\n "coefficients": [\n  ' + ",\n  ".join(pairs) + "\n ]\n}\n")


#: What the written file says of itself.
ABOUT = ("The fitted table of the calibrated acceptance estimates, generated by "
         "benchmarks/studies/fit_acceptance.py --write; do not edit by hand. coefficients: "
         "(a, b) per source (own trie, shared), context bin, total bin, level bin (the "
         "parent's level below the anchor), rank (first, other).")


def _edges(config: ns.NgramConfig, rows: list[dict]) -> np.ndarray:
    """The edges of ``collect``, the reference construction recording each node's cell."""
    orig = ref_backend.build_adaptive

    def keep_tree(sources, params, source_ids=None):
        cells: list = []
        tree, probs, used = orig(sources, params, source_ids, record=cells)
        _LAST_TREE[0] = tree
        _CELLS[:] = [None] + cells if used else [None]
        return tree, probs, used

    ref_backend.build_adaptive = keep_tree
    try:
        return collect(config, rows)
    finally:
        ref_backend.build_adaptive = orig


def refit_fresh(ridge: float) -> None:
    """Worst bins on the second recording's halves: the shipped table, then tables refitted
    on its tuning half (see ``--refit-fresh``)."""
    import ngramspec.config.acceptance_table as calibration
    from ngramspec.measure.reliability import reliability
    from ngramspec.streams import fresh_streams_path

    rows = read_streams(fresh_streams_path())
    parts = {p: split_streams(rows, part=p) for p in ("tune", "holdout")}
    config = ns.NgramConfig.preset("calibrated")
    shipped = calibration._TABLE

    def report(label: str) -> None:
        worst = {p: reliability(r, config=config).worst() for p, r in parts.items()}
        print(f"{label}: worst bin {100 * worst['tune']:.1f}% on the tuning half "
              f"({len(parts['tune'])} requests), {100 * worst['holdout']:.1f}% on the hold-out "
              f"half ({len(parts['holdout'])})")

    try:
        report("shipped table")
        edges = _edges(ns.NgramConfig.preset("calibrated", calibrated_estimates=False),
                       parts["tune"])
        calibration._TABLE = table_array(fit(edges, ridge))
        report(f"refit, round 1 ({len(edges)} edges)")
        edges = _edges(config, parts["tune"])
        calibration._TABLE = table_array(fit(edges, ridge))
        report(f"refit, round 2 ({len(edges)} edges)")
    finally:
        calibration._TABLE = shipped


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calibrated", action="store_true",
                    help="draft with the current table (a refinement round)")
    ap.add_argument("--ridge", type=float, default=60.0)
    ap.add_argument("--write", action="store_true", help="write ngramspec/data/acceptance_table.json")
    ap.add_argument("--save", help="also save the collected edges here (.npy)")
    ap.add_argument("--load", help="fit on edges saved by --save instead of collecting "
                    "(with --cv: a comma-separated list of such files)")
    ap.add_argument("--cv", type=int, default=0, metavar="R",
                    help="cross-validate the fits of the --load edge sets on R random halvings "
                    "of the tuning part")
    ap.add_argument("--seed", type=int, default=0, help="of the --cv halvings")
    ap.add_argument("--refit-fresh", action="store_true",
                    help="refit on half of the second recording and judge on the other half")
    args = ap.parse_args()
    if args.refit_fresh:
        refit_fresh(args.ridge)
        return
    rows = split_streams(read_streams(embedded_streams_path()), part="tune")
    if args.cv:
        if not args.load:
            ap.error("--cv needs --load (edge sets saved by --save)")
        sets = {f: np.load(f) for f in args.load.split(",")}
        for name, worst in cross_validate(sets, rows, args.cv, args.ridge, args.seed).items():
            print(f"{name}: worst bin mean {100 * np.mean(worst):.1f}% over {len(worst)} folds "
                  f"({' '.join(f'{100 * w:.1f}' for w in worst)})")
        return
    config = ns.NgramConfig.preset("calibrated", calibrated_estimates=args.calibrated)
    t0 = time.perf_counter()
    edges = np.load(args.load) if args.load else _edges(config, rows)
    if args.save:
        np.save(args.save, edges)
    coef = fit(edges, args.ridge)
    print(f"{len(edges)} edges from {len(rows)} tuning requests in "
          f"{time.perf_counter() - t0:.1f} s; mean accepted {edges[:, 6].mean():.3f}")
    if args.write:
        note = (f"Fitted on the {len(rows)} tuning requests (ngramspec.sweep.split), "
                f"{len(edges)} edges, ridge {args.ridge:g}, trees drafted "
                f"{'with the previous table' if args.calibrated else 'from count ratios'}.")
        path = (Path(__file__).resolve().parents[2] / "ngramspec" / "data" /
                "acceptance_table.json")
        path.write_text(table_json(coef, note))
        print(f"wrote {path}")


if __name__ == "__main__":
    main()
