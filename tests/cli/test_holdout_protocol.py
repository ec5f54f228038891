"""The evaluation protocol of ``benchmarks.peers.protocol``: parts, pooling, and the comparison
with a peer's curve at the same draft tokens per step (interpolated, never extrapolated)."""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import ngramspec as ns
from benchmarks.peers import protocol as H
from ngramspec.sweep.split import split_of


def test_parts_are_the_fixed_split_and_replayed_alone():
    parts = H.load_parts()
    rows = H.dr.load_rows()
    part_of = split_of(rows)
    assert [len(parts["tune"]), len(parts["holdout"])] == [68, 65]
    for name, rows_ in parts.items():
        assert {part_of[r["id"]] for r in rows_} == {name}
    # ngramspec_figures replays the part alone: equal to simulate on that part's records.
    rows_ = parts["holdout"][:6]
    cfg = ns.NgramConfig.recommended(capacity=200_000)
    sim = ns.simulate(rows_, config=cfg)
    figs = H.ngramspec_figures(rows_, cfg)
    em = np.concatenate(sim.emitted)
    assert figs["overall"]["tokens_per_step"] == em.sum() / em.size
    assert figs["overall"]["drafts_per_step"] == np.concatenate(sim.drafts).sum() / em.size


def test_pooled_groups():
    rows = [{"task": "b"}, {"task": "a"}, {"task": "b"}]
    emitted = [np.array([1, 3]), np.array([2]), np.array([4])]
    drafts = [np.array([0, 4]), np.array([1]), np.array([5])]
    out = H.pooled(rows, emitted, drafts)
    assert list(out) == ["a", "b", "overall"]
    assert out["b"]["tokens_per_step"] == 8 / 3
    assert out["b"]["drafts_per_step"] == 9 / 3
    assert out["b"]["share_steps_with_draft"] == 2 / 3
    assert out["overall"]["tokens_per_step"] == 10 / 4


curves = st.lists(st.tuples(st.floats(0.1, 20), st.floats(1, 20)), min_size=1, max_size=8)


@given(curves, st.floats(0, 25))
def test_at_width_interpolates_within_and_never_beyond(points, x):
    curve = [(0.0, 1.0)] + points
    widest = max(p[0] for p in curve)
    y = H.at_width(curve, x)
    if x > widest:
        assert math.isnan(y)
        return
    # within: between the best tokens of the narrower points and of all points up to the
    # next wider one (the curve is made monotone: a wider setting can send fewer drafts)
    below = max(b for a, b in curve if a <= x)
    above = max(b for a, b in curve if a <= min(a2 for a2, _ in curve if a2 >= x))
    assert below <= y <= above
    for a, b in curve:
        if a == x:
            assert y == max(b2 for a2, b2 in curve if a2 <= x)


def test_ratios_against_a_known_curve():
    curve = {"g": [(0.0, 1.0), (2.0, 2.0), (4.0, 3.0)], "overall": [(0.0, 1.0), (4.0, 3.0)]}
    figs = {"g": {"tokens_per_step": 3.0, "drafts_per_step": 3.0},
            "overall": {"tokens_per_step": 3.0, "drafts_per_step": 5.0}}
    r = H.ratios(figs, curve)
    assert r["g"] == 3.0 / 2.5
    assert math.isnan(r["overall"])  # wider than the peer's widest point: no ratio
