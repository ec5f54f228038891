"""Calibrated estimates and cost-optimal tree sizes (``ngramspec.config.acceptance_table``).

Engine and reference are equal, bit for bit, for ``calibrated_estimates`` and for
``min_expected_accept="auto"`` (the cap chosen over a batch, and the running rate across
calls); the compiled replay equals the ``Drafter`` replay per request and per step; "auto"
trees are the prefixes of the full trees; bad input gets a clear error.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.config.acceptance_table import calibration_array
from ngramspec.costs import CostTable, step_costs
from ngramspec.engine.serving.replay import replay
from ngramspec.measure.reliability import reliability
from ngramspec.simulate import _replay_stepwise
from ngramspec.streams import embedded_streams_path

BACKENDS = ["reference", "numba"]
COSTS = {
    "flat": ns.CostModel(decode_ms=12.2, verify_ms=30.0),
    "linear": ns.CostModel(step_ms=10.0, token_ms=0.7),
    "table": CostTable([(b, n, 12.0 + 0.05 * b + 1.1 * (n - 1) * (1 + b / 4))
                        for b in (1, 2, 4, 8) for n in (1, 2, 4, 8, 21)]),
}


@st.composite
def scenarios(draw):
    depth = draw(st.integers(2, 7))
    cfg = dict(max_trie_depth=depth, draft_token_num=draw(st.integers(1, 20)),
               match_type="ADAPTIVE",
               min_token_prob=draw(st.sampled_from([0.0, 0.05, 0.2])),
               max_spec_factor=draw(st.sampled_from([0.0, 1.0, 3.0])),
               calibrated_estimates=draw(st.booleans()),
               capacity=draw(st.one_of(st.integers(depth + 1, depth + 15),
                                       st.integers(depth + 16, 500))))
    auto = draw(st.sampled_from([None, "flat", "linear", "table"]))
    if auto is not None:
        cfg["min_expected_accept"] = "auto"
    else:
        cfg["min_expected_accept"] = draw(st.sampled_from([0.0, 1.5, 2.5]))
    tok = st.integers(-1, draw(st.integers(2, 6)))
    shared = draw(st.lists(st.lists(st.lists(tok, max_size=16), min_size=1, max_size=3),
                           min_size=1, max_size=4))
    own = draw(st.lists(tok, max_size=30))
    contexts = draw(st.lists(st.lists(st.lists(tok, min_size=1, max_size=depth + 3),
                                      min_size=1, max_size=4), min_size=1, max_size=3))
    return cfg, auto, shared, own, contexts


@given(scenarios())
def test_engine_equals_reference(scenario):
    """Several match calls in a row (the running rate of "auto" carries over), with and
    without a local cache: tokens, masks, counts and probabilities equal."""
    cfg, auto, shared, own, calls = scenario
    costs = COSTS[auto] if auto else None
    out = {}
    for backend in BACKENDS:
        cache = ns.NgramCache(backend=backend, **cfg)
        local = ns.NgramCache(backend=backend, **{**cfg, "min_expected_accept": 0.0})
        for batch in shared:
            cache.insert(batch)
        if own:
            local.insert([np.asarray(own, np.int32)])
        got = []
        for contexts in calls:
            got.append(cache.match(contexts, costs=costs))
            got.append(cache.match(contexts, local=[local] * len(contexts), costs=costs))
        out[backend] = got
    for ref, eng in zip(out["reference"], out["numba"]):
        assert_array_equal(eng.tokens, ref.tokens)
        assert_array_equal(eng.mask, ref.mask)
        assert_array_equal(eng.num_drafts, ref.num_drafts)
        assert_array_equal(eng.probs, ref.probs)


@given(scenarios())
def test_auto_trees_are_prefixes_of_the_full_trees(scenario):
    """An "auto" tree is the full tree cut to one cap for the whole call: the first k nodes
    in creation order, laid out as the construction had them then (same tokens and paths)."""
    cfg, auto, shared, _, calls = scenario
    if auto is None:
        return
    full_cfg = {**cfg, "min_expected_accept": 0.0}
    for backend in BACKENDS:
        cut = ns.NgramCache(backend=backend, **cfg)
        full = ns.NgramCache(backend=backend, **full_cfg)
        for batch in shared:
            cut.insert(batch)
            full.insert(batch)
        contexts = calls[0]
        d_cut = cut.match(contexts, costs=COSTS[auto])
        d_full = full.match(contexts)
        cap = int(d_cut.num_drafts.max())
        assert_array_equal(d_cut.num_drafts, np.minimum(d_full.num_drafts, cap))
        for b in range(len(contexts)):
            paths_cut = _paths(d_cut, b)
            paths_full = _paths(d_full, b)
            assert set(paths_cut) <= set(paths_full)
            for path, p in paths_cut.items():
                assert p == paths_full[path]
            # The nodes kept are the most probable ones in creation order: a kept node's
            # probability is never below a dropped node's parent chain allows.
            assert len(paths_cut) == int(d_cut.num_drafts[b])


def _paths(d: ns.DraftBatch, b: int) -> dict:
    """Every drafted node as its token path from the root, with its probability."""
    out, par = {}, d.parents[b]
    paths = {0: ()}
    for s in range(1, int(d.num_drafts[b]) + 1):
        paths[s] = paths[par[s]] + (int(d.tokens[b, s]),)
        out[paths[s]] = float(d.probs[b, s])
    return out


def test_auto_with_flat_costs_is_all_or_nothing_and_knows_the_batch_size():
    """Under flat costs a step drafts every node or none; a larger batch_size makes the
    same trees dearer under a cost that grows with the batch."""
    cfg = ns.NgramConfig(match_type="ADAPTIVE", min_expected_accept="auto", capacity=1000,
                         draft_token_num=6)
    cache = ns.NgramCache(config=cfg)
    cache.insert([[1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7]])
    d = cache.match([[1, 2, 3]], costs=COSTS["flat"])
    assert int(d.num_drafts[0]) == 5  # 1 + 5 expected >> 30 / 12.2
    steep = CostTable([(b, n, 10.0 + 0.1 * b + 2.0 * (n - 1) * b) for b in (1, 64)
                       for n in (1, 6)])
    one = ns.NgramCache(config=cfg)
    one.insert([[1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7]])
    alone = int(one.match([[1, 2, 3]], costs=steep).num_drafts[0])
    many = ns.NgramCache(config=cfg)
    many.insert([[1, 2, 3, 4, 5, 6, 7, 1, 2, 3, 4, 5, 6, 7]])
    crowded = int(many.match([[1, 2, 3]], costs=steep, batch_size=64).num_drafts[0])
    assert alone > crowded == 0


@pytest.fixture(scope="module")
def streams():
    rows = ns.read_streams(embedded_streams_path())
    rows = rows[::len(rows) // 6][:6]
    prompts = [np.asarray(r["prompt_ids"][-200:], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"][:150], np.int32) for r in rows]
    return prompts, outputs, [r["id"] for r in rows]


@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("costs", [None, "flat", "table"])
@pytest.mark.parametrize("calibrated", [False, True])
@pytest.mark.parametrize("capacity", [10_000_000, 400], ids=["big", "evicting"])
def test_compiled_replay_equals_drafter(streams, concurrency, costs, calibrated, capacity):
    """Per request and per step: tokens emitted and real draft nodes (recommended options,
    calibrated or not, "auto" under two cost settings or a fixed threshold)."""
    prompts, outputs, ids = streams
    cfg = ns.NgramConfig.preset("calibrated", capacity=capacity, calibrated_estimates=calibrated,
                                     min_expected_accept="auto" if costs else 2.0)
    cost = COSTS[costs] if costs else None
    got = replay(prompts, outputs, cfg, concurrency=concurrency, costs=cost)
    for backend in ("numba", "reference") if capacity == 400 and concurrency == 3 else \
            ("numba",):
        emitted, drafts, _, steps, _ = _replay_stepwise(prompts, outputs, cfg, concurrency,
                                                        backend, ids, None, None, cost)
        for r in range(len(prompts)):
            assert_array_equal(got.emitted[r], emitted[r])
            assert_array_equal(got.drafts[r], drafts[r])
        assert got.batch_steps == steps
    assert sum(int(d.sum()) for d in got.drafts) > 0
    if costs == "flat":  # a verify at 2.46 decodes: some steps draft nothing
        full = replay(prompts, outputs, cfg.replace(min_expected_accept=0.0),
                      concurrency=concurrency)
        assert sum(int(d.sum()) for d in got.drafts) < sum(int(d.sum()) for d in full.drafts)


def test_simulate_passes_costs_to_both_backends(streams):
    prompts, outputs, ids = streams
    rows = [{"id": i, "prompt_ids": p.tolist(), "output_ids": o.tolist()}
            for i, p, o in zip(ids, prompts, outputs)]
    cfg = ns.NgramConfig.preset("calibrated", min_expected_accept="auto")
    a = ns.simulate(rows, config=cfg, concurrency=2, costs=COSTS["linear"])
    b = ns.simulate(rows, config=cfg, concurrency=2, costs=COSTS["linear"], backend="reference")
    for x, y in zip(a.emitted + a.drafts, b.emitted + b.drafts):
        assert_array_equal(x, y)


def test_reliability_records_predicted_and_realised(streams):
    prompts, outputs, ids = streams
    rows = [{"id": i, "prompt_ids": p.tolist(), "output_ids": o.tolist()}
            for i, p, o in zip(ids, prompts, outputs)]
    cfg = ns.NgramConfig.preset("calibrated", calibrated_estimates=True)
    rel = reliability(rows, config=cfg)
    r = ns.simulate(rows, config=cfg)
    assert_array_equal(rel.realised, np.concatenate(r.emitted))
    assert rel.predicted.shape == rel.realised.shape and (rel.predicted >= 1).all()
    bins = rel.bins()
    assert sum(b["steps"] for b in bins) == rel.predicted.size
    assert rel.worst(min_share=0.0) == max(abs(b["ratio"] - 1) for b in bins)


@given(st.integers(0, 1), st.integers(1, 40), st.integers(0, 30), st.integers(1, 12),
       st.integers(0, 5), st.data())
def test_cell_lookup_engine_equals_reference(src, ctx_len, level, total, rank, data):
    """The calibrated conditional of one child, every feature's bins (the parent's level
    below the anchor included), is the same float in the kernel and the reference."""
    from ngramspec.engine.adaptive import cond_estimate
    from ngramspec.reference.adaptive import calibrated_conditional

    table = calibration_array(ns.NgramConfig.preset("calibrated"))
    freq = data.draw(st.integers(1, total))
    eng = cond_estimate(table, src, ctx_len, level, total, rank, freq)
    ref = calibrated_conditional(table.tolist(), src, ctx_len, level, total, rank, freq)
    assert_array_equal(np.float64(eng), np.float64(ref))
    assert 0.0 <= ref <= 1.0


def test_level_bins_change_the_estimate():
    """The parent's level below the anchor is read: in the request's own trie after a long
    match, the same count ratio gives different estimates at different levels."""
    from ngramspec.reference.adaptive import calibrated_conditional

    table = calibration_array(ns.NgramConfig.preset("calibrated")).tolist()
    by_level = {calibrated_conditional(table, 0, 12, level, 1, 0, 1) for level in range(10)}
    assert len(by_level) > 1


def test_default_behaviour_is_unchanged():
    """Off by default: the count-ratio estimates and no table."""
    cfg = ns.NgramConfig.recommended()
    assert not cfg.calibrated_estimates and cfg.min_expected_accept == 0.0
    assert calibration_array(cfg).size == 0


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(min_expected_accept="Auto"), ValueError, "number >= 0 or 'auto'"),
    (dict(min_expected_accept="auto", match_type="PROB", local_index=False),
     ValueError, "only apply to match_type='ADAPTIVE'"),
    (dict(calibrated_estimates=1), TypeError, "calibrated_estimates must be a bool"),
    (dict(calibrated_estimates=True, match_type="BFS", local_index=False), ValueError,
     "calibrated_estimates only apply"),
])
def test_bad_config(kwargs, error, match):
    with pytest.raises(error, match=match):
        ns.NgramConfig.preset("calibrated", **kwargs)


def test_calibrated_estimates_and_the_pseudo_count_are_alternatives():
    """Both replace the count ratios, so asking for both is refused, naming the way out."""
    with pytest.raises(ValueError, match="set shared_pseudo_count=0"):
        ns.NgramConfig.recommended(calibrated_estimates=True)
    cfg = ns.NgramConfig.recommended(calibrated_estimates=True, shared_pseudo_count=0)
    assert calibration_array(cfg).size > 0


def test_bad_costs():
    auto = ns.NgramConfig(match_type="ADAPTIVE", min_expected_accept="auto", capacity=100)
    fixed = ns.NgramConfig(match_type="ADAPTIVE", capacity=100)
    cache = ns.NgramCache(config=auto)
    with pytest.raises(ValueError, match="pass costs="):
        cache.match([[1, 2]])
    with pytest.raises(TypeError, match="costs must be a CostTable or a CostModel"):
        cache.match([[1, 2]], costs={"decode_ms": 12})
    with pytest.raises(ValueError, match="batch_size must be an int >= the 2 contexts"):
        cache.match([[1, 2], [3]], costs=COSTS["flat"], batch_size=1)
    with pytest.raises(ns.CostTableError, match="no point for batch=9"):
        cache.match([[1, 2]], costs=COSTS["table"], batch_size=9)
    with pytest.raises(ValueError, match="only applies with min_expected_accept='auto'"):
        ns.NgramCache(config=fixed).match([[1, 2]], costs=COSTS["flat"])
    with pytest.raises(ValueError, match="batch_size= goes with costs="):
        ns.NgramCache(config=fixed).match([[1, 2]], batch_size=3)
    with pytest.raises(ValueError, match="pass costs="):
        ns.Drafter(config=auto)
    with pytest.raises(ValueError, match="pass costs="):
        ns.simulate([{"id": 0, "prompt_ids": [1], "output_ids": [1, 2]}], config=auto)
    with pytest.raises(ValueError, match="batch_size must be an int >= 1"):
        step_costs(COSTS["flat"], 0, 4)


def test_auto_round_trips_through_toml():
    cfg = ns.NgramConfig.preset("calibrated", min_expected_accept="auto")
    assert ns.NgramConfig.from_toml(cfg.to_toml()) == cfg


def test_cli_auto(tmp_path, streams, capsys):
    """``--min-expected-accept auto`` simulates with the cost flags, and is refused without."""
    import io

    from ngramspec.cli import main
    from ngramspec.streams import write_streams

    prompts, outputs, ids = streams
    path = tmp_path / "few.jsonl"
    write_streams([{"id": i, "prompt_ids": p.tolist(), "output_ids": o.tolist()}
                   for i, p, o in zip(ids, prompts, outputs)], path)
    out = io.StringIO()
    argv = [str(path), "--preset", "calibrated", "--min-expected-accept", "auto"]
    assert main(["simulate", *argv, "--decode-ms", "12.2", "--verify-ms", "30"],
                stdout=out) == 0
    cfg = ns.NgramConfig.preset("calibrated", min_expected_accept="auto")
    rows = ns.read_streams(path)
    r = ns.simulate(rows, config=cfg, costs=COSTS["flat"])
    assert f"{r.tokens_per_step:.3f}" in out.getvalue()
    assert main(["simulate", *argv], stdout=io.StringIO()) == 2
    assert "--min-expected-accept auto chooses tree sizes from step costs" in \
        capsys.readouterr().err


def test_fitted_table_array_is_the_kernels_table():
    """``benchmarks.common.table_array`` (the tables cross-validation replays) lays a fit out
    as ``calibration_array`` does: the shipped coefficients give the shipped array."""
    from benchmarks import common as fit
    from ngramspec.config.acceptance_table import _fitted

    assert_array_equal(fit.table_array(np.asarray(_fitted()["coefficients"])),
                       calibration_array(ns.NgramConfig.preset("calibrated")))


def test_cross_validation_fits_halves_and_restores_the_table():
    """``benchmarks.common.cross_validate``: two folds per halving for every edge set, each a
    worst-bin error; the shipped table is in place afterwards."""
    import ngramspec.config.acceptance_table as acceptance
    from benchmarks import common as fit

    rows = [{"id": f"t/{i}", "task": "t", "prompt_ids": [1, 2, 3, 1, 2],
             "output_ids": [3, 1, 2, 3, 9, 1, 2, 3]} for i in range(4)]
    rng = np.random.default_rng(0)
    n = 200
    edges = np.stack([rng.integers(0, 2, n), rng.integers(1, 30, n), rng.integers(0, 9, n),
                      rng.integers(1, 6, n), rng.integers(0, 3, n), rng.random(n),
                      rng.integers(0, 2, n), rng.integers(0, 4, n)], 1).astype(np.float64)
    shipped = acceptance._TABLE
    before = shipped.copy()
    out = fit.cross_validate({"a": edges, "b": edges[::-1]}, rows, repeats=2, ridge=60.0)
    assert sorted(out) == ["a", "b"]
    assert all(len(v) == 4 and all(np.isfinite(w) and w >= 0 for w in v)
               for v in out.values())
    assert acceptance._TABLE is shipped
    assert_array_equal(calibration_array(ns.NgramConfig.preset("calibrated")), before)


@pytest.mark.parametrize("argv, match", [
    (["--thresholds", "3,x"], "--thresholds must be comma-separated numbers"),
    (["--costs", "steep"], "--costs must name flat and/or growing"),
    (["--estimates", "exact"], "--estimates must name counts and/or calibrated"),
])
def test_cost_optimal_trees_refuses_bad_options(monkeypatch, capsys, argv, match):
    import runpy

    monkeypatch.setattr("sys.argv", ["cost_optimal_trees.py", *argv])
    with pytest.raises(SystemExit) as exc:
        runpy.run_module("benchmarks.studies.cost_optimal_trees", run_name="__main__")
    assert exc.value.code == 2
    assert match in capsys.readouterr().err
