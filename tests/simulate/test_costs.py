"""Cost tables, the per-step schedule of a simulated run, and the serving prediction."""

from __future__ import annotations

import doctest
import importlib
import io
import json
import math
import re
from types import SimpleNamespace

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.simulate import admit
from ngramspec.cli import main
from ngramspec.costs import (CostTable, CostTableError, Interval, ServingPrediction,
                             parse_concurrency,
                             predict_serving, schedule, verdict)
from ngramspec.streams import embedded_streams_path


def run(argv):
    out = io.StringIO()
    code = main(argv, stdout=out)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def corpus():
    return ns.read_streams(embedded_streams_path())


@pytest.fixture(scope="module")
def few(corpus):
    """Every 7th shipped stream, plus requests with a single output token in between (they
    are admitted and leave without a step)."""
    rows = [dict(r) for r in corpus[::7]]
    for i in (0, 5, 6, 11):
        rows.insert(i, {"id": f"one-{i}", "prompt_ids": [1, 2, 3], "output_ids": [7]})
    return rows


@pytest.mark.parametrize("name", ["table", "serving", "checks", "engines"])
def test_docstring_examples(name):
    costs_module = importlib.import_module(f"ngramspec.costs.{name}")
    result = doctest.testmod(costs_module, optionflags=doctest.ELLIPSIS |
                             doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


# --- the table ----------------------------------------------------------------------------

GRID = "batch,tokens,ms,note\n1,1,10,a\n1,8,14,\n4,1,12,\n4,8,22,\n"


def test_reads_csv_and_json_and_interpolates(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text(GRID)
    t = CostTable.read(p)
    assert t.batches.tolist() == [1, 4] and t.tokens.tolist() == [1, 8]
    for b, n, ms in [(1, 1, 10), (1, 8, 14), (4, 1, 12), (4, 8, 22)]:
        assert t.ms(b, n) == ms  # measured points come back exactly
    # Inside a cell: linear in each axis (written out by hand).
    wb, wt = (3 - 1) / 3, (5 - 1) / 7
    want = (1 - wb) * (1 - wt) * 10 + wb * (1 - wt) * 12 + (1 - wb) * wt * 14 + wb * wt * 22
    assert t.ms(3, 5) == pytest.approx(want, rel=1e-14)
    assert t.ms(2, 1) == pytest.approx(10 + (12 - 10) / 3, rel=1e-14)  # along the batch axis
    j = tmp_path / "t.json"
    j.write_text(json.dumps({"points": [{"batch": b, "tokens": n, "ms": ms}
                                        for b, n, ms in t.points()]}))
    assert CostTable.read(j).points() == t.points()
    assert CostTable.parse(t.to_csv()).points() == t.points()


@pytest.mark.parametrize("text,message", [
    ("batch,ms\n1,3\n", "missing column(s) tokens"),
    ("batch,tokens,ms\n1,1,nan\n", "ms must be a finite number of milliseconds > 0, got nan"),
    ("batch,tokens,ms\n1,1,-2\n", "line 2: ms must be a finite number of milliseconds > 0"),
    ("batch,tokens,ms\n1,1,0\n", "> 0, got 0.0"),
    ("batch,tokens,ms\n1,1,fast\n", "line 2: ms must be a number of milliseconds, got 'fast'"),
    ("batch,tokens,ms\n1,1,inf\n", "finite"),
    ("batch,tokens,ms\nx,1,3\n", "line 2: batch must be an integer >= 1, got 'x'"),
    ("batch,tokens,ms\n0,1,3\n", "batch must be an integer >= 1, got 0"),
    ("batch,tokens,ms\n1,2.5,3\n", "tokens must be an integer >= 1, got '2.5'"),
    ("batch,tokens,ms\n1,1,3\n1,1,4\n", "line 3: duplicate point batch=1, tokens=1 (also line 2)"),
    ("batch,tokens,ms\n1,4,3\n1,8,4\n", "no tokens=1 rows"),
    ("batch,tokens,ms\n1,1,3\n1,8,4\n4,1,5\n", "not a full grid: missing batch=4 tokens=8"),
    ("batch,tokens,ms\n", "no points"),
    ("batch,tokens,ms\n1,1,\n", "line 2: empty ms"),
    ("batch,tokens,ms\n1,1,3,9\n", "more cells than columns"),
    ("[1, 2]", "list of objects"),
    ("[{\"batch\": 1, \"tokens\": 1}]", "point 0: missing ms"),
    ("{\"rows\": []}", "'points' list"),
    ("[{\"batch\": 1, \"tokens\": 1, \"ms\": true}]", "ms must be a number"),
    ("{not json", "not valid JSON"),
])
def test_bad_tables_are_named(text, message):
    with pytest.raises(CostTableError) as e:
        CostTable.parse(text, source="cost table t.csv")
    assert message in str(e.value)
    assert str(e.value).startswith("cost table t.csv")


def test_outside_the_grid_is_an_error_unless_extrapolating():
    t = CostTable.parse(GRID)
    with pytest.raises(CostTableError, match=r"no point for batch=8 \(measured batch 1..4\)"):
        t.ms(8, 1)
    with pytest.raises(CostTableError, match=r"no point for tokens=12 \(measured tokens 1..8\)"):
        t.ms(1, 12)
    x = CostTable.parse(GRID, extrapolate=True)
    assert x.ms(7, 1) == pytest.approx(12 + (12 - 10) / 3 * 3)  # the edge cell, continued
    one = CostTable([(1, 1, 5.0), (1, 12, 9.0)])  # a single batch size
    with pytest.raises(CostTableError, match="measured batch 1 only"):
        one.ms(2, 1)
    assert CostTable(one.points(), extrapolate=True).ms(64, 12) == 9.0  # constant along batch
    steep = CostTable([(2, 1, 1.0), (3, 1, 10.0)], extrapolate=True)
    with pytest.raises(CostTableError, match=r"batch=1, tokens=1 gives -8 ms \(not > 0\)"):
        steep.ms(1, 1)


def test_models_are_special_cases_of_a_table():
    flat = CostTable.from_model(ns.CostModel(decode_ms=12.2, verify_ms=30), max_batch=16,
                                max_tokens=12)
    for b in (1, 5, 16):
        assert flat.ms(b, 1) == 12.2
        for n in (2, 7, 12):
            assert flat.ms(b, n) == 30.0
    lin = CostTable.from_model(ns.CostModel(step_ms=8, token_ms=0.5), max_batch=16,
                               max_tokens=12)
    for b in (1, 3, 16):
        for n in (1, 5, 12):
            assert lin.ms(b, n) == pytest.approx(8 + 0.5 * b * n, rel=1e-14)


# --- the schedule -------------------------------------------------------------------------


def _accepted(d: ns.DraftBatch, b: int, rec) -> int:
    """Greedy acceptance against the recorded continuation, walked slot by slot."""
    par, tok = d.parents[b], d.tokens[b]
    cur, k = 0, 0
    while k < len(rec):
        kids = [i for i in range(1, d.draft_token_num) if par[i] == cur and tok[i] == rec[k]]
        if not kids:
            break
        cur, k = kids[0], k + 1
    return min(k + 1, len(rec))


def drafter_loop(rows, cfg: ns.NgramConfig, concurrency: int):
    """The serving loop through ns.Drafter, recording each step's batch and largest tree."""
    drafter = ns.Drafter(config=cfg)
    outs = [r["output_ids"] for r in rows]
    done = [0] * len(rows)
    emitted = [[] for _ in rows]
    batch, sent, nxt, running = [], [], 0, []
    while nxt < len(rows) or running:
        nxt = admit(nxt, running, concurrency, [len(o) for o in outs],
                    lambda r: drafter.add_request(rows[r]["id"], rows[r]["prompt_ids"],
                                                  outs[r][0]), done)
        if not running:
            continue
        d = drafter.propose([rows[r]["id"] for r in running])
        batch.append(len(running))
        sent.append(int(d.num_drafts.max()) + 1 if cfg.match_type == "ADAPTIVE"
                    else d.draft_token_num)
        acc = {}
        for b, r in enumerate(running):
            e = _accepted(d, b, outs[r][done[r]:])
            emitted[r].append(e)
            acc[rows[r]["id"]] = outs[r][done[r]:done[r] + e]
            done[r] += e
        drafter.accept(acc)
        for r in running:
            if done[r] == len(outs[r]):
                drafter.finish(rows[r]["id"])
        running = [r for r in running if done[r] < len(outs[r])]
    return batch, sent, emitted


@pytest.mark.parametrize("match_type,concurrency", [("BFS", 1), ("BFS", 3), ("PROB", 8),
                                                    ("ADAPTIVE", 1), ("ADAPTIVE", 5)])
def test_schedule_equals_the_batches_of_a_stepwise_loop(few, match_type, concurrency):
    cfg = ns.NgramConfig(match_type=match_type, draft_token_num=8)
    batch, sent, emitted = drafter_loop(few, cfg, concurrency)
    r = ns.simulate(few, config=cfg, concurrency=concurrency)
    for got, want in zip(r.emitted, emitted):
        assert_array_equal(got, np.asarray(want, np.int32))
    s = schedule(r)
    assert_array_equal(s.batch, batch)
    assert_array_equal(s.tokens, sent)
    assert s.batch.size == r.batch_steps
    if match_type == "ADAPTIVE":
        assert 1 in sent and max(sent) > 1  # steps without any draft are plain decodes


def test_baseline_schedule(few):
    """Without speculation every request needs len(output) - 1 one-token steps."""
    r = ns.simulate(few, config=ns.NgramConfig(), concurrency=4)
    s = schedule(r)
    need = [len(x["output_ids"]) - 1 for x in few]
    assert s.baseline_steps.tolist() == need
    assert int(s.baseline_batch.sum()) == sum(need)
    # A single step-by-step loop of the admission rule, written out.
    batch, left, nxt, running = [], list(need), 0, []
    while nxt < len(few) or running:
        nxt = admit(nxt, running, 4, [n + 1 for n in need], lambda r: None)
        if not running:
            continue
        batch.append(len(running))
        for i in running:
            left[i] -= 1
        running = [i for i in running if left[i]]
    assert_array_equal(s.baseline_batch, batch)


# --- the prediction -----------------------------------------------------------------------


def test_flat_table_gives_the_seed_figure_at_concurrency_1(corpus, tmp_path):
    """Decode 12.2 ms and verify 30 ms at every batch: 0.70x for SGLang's defaults."""
    p = tmp_path / "flat.csv"
    p.write_text("batch,tokens,ms\n1,1,12.2\n1,12,30\n256,1,12.2\n256,12,30\n")
    r = ns.simulate(corpus, config=ns.NgramConfig())
    ns.time_drafting(r)
    pred = predict_serving(r, CostTable.read(p))
    legacy = ns.CostModel(decode_ms=12.2, verify_ms=30).predict(
        r.tokens_per_step, draft_ms=r.step_api_ms_per_step)  # the step API's time per step
    assert pred.speed_up == pytest.approx(legacy.speedup, rel=1e-12)
    assert pred.draft_ms == r.step_api_ms_per_step > r.draft_ms_per_step
    # The seed figure is the forwards' alone (drafting time, measured, moves with the machine).
    bare = predict_serving(r, CostTable.read(p), draft_ms=0)
    assert f"{bare.speed_up:.2f}" == "0.70" and pred.speed_up < bare.speed_up
    assert pred.steps == r.summary.verify_steps and pred.tokens == r.summary.emitted_tokens
    code, text = run(["simulate", "--cost-table", str(p), "--draft-ms", "0", "--no-progress"])
    assert code == 0
    assert re.search(r"0\.70x \(0\.\d\d–0\.\d\d\) SLOWER", text)
    assert "verdict: does not pay off at any concurrency tested" in text


def _written_out(requests, c, n_tree, adaptive=False):
    """The schedule of a run written out step by step from its per-request step counts."""
    steps = [len(q["emitted"]) for q in requests]
    rows, k, nxt, running = [], [0] * len(steps), 0, []
    while nxt < len(steps) or running:
        nxt = admit(nxt, running, c, [n + 1 for n in steps], lambda r: None)
        if not running:
            continue
        n = max(requests[i]["drafts"][k[i]] + 1 for i in running) if adaptive else n_tree
        rows.append((list(running), n))
        for i in running:
            k[i] += 1
        running = [i for i in running if k[i] < steps[i]]
    return rows


@pytest.mark.parametrize("engine", ["custom", "sglang"])
@pytest.mark.parametrize("match_type", ["BFS", "ADAPTIVE"])
def test_printed_speed_up_is_the_formula_on_the_written_out_schedule(few, tmp_path, match_type,
                                                                       engine):
    """The JSON's per-request steps written out by hand and priced by each engine's rule:
    a custom loop sends ADAPTIVE's real trees, SGLang's worker 8 slots at every step."""
    from ngramspec.streams import write_streams
    streams = tmp_path / "s.jsonl"
    write_streams(few, streams)
    table = {(1, 1): 10.0, (1, 8): 21.0, (4, 1): 11.0, (4, 8): 40.0}
    (tmp_path / "t.csv").write_text("batch,tokens,ms\n" + "".join(
        f"{b},{n},{ms}\n" for (b, n), ms in table.items()))
    report = tmp_path / "r.json"
    code, text = run(["simulate", str(streams), "--cost-table", str(tmp_path / "t.csv"),
                      "--concurrency", "4", "--draft-token-num", "8", "--match-type",
                      match_type, "--draft-ms", "0.5", "--json", str(report), "--no-progress",
                      "--engine", engine])
    assert code == 0
    data = json.loads(report.read_text())
    reqs = data["requests"]
    rows = _written_out(reqs, 4, 8, adaptive=match_type == "ADAPTIVE" and engine == "custom")

    def t(b, n):  # the table, interpolated by hand between its two token counts
        lo, hi = table[(1, 1)], table[(1, 8)]
        if b == 4:
            lo, hi = table[(4, 1)], table[(4, 8)]
        elif b != 1:
            w = (b - 1) / 3
            lo = (1 - w) * table[(1, 1)] + w * table[(4, 1)]
            hi = (1 - w) * table[(1, 8)] + w * table[(4, 8)]
        return lo + (hi - lo) * (n - 1) / 7

    spec = sum(t(len(run_), n) + 0.5 for run_, n in rows)
    need = [q["output_tokens"] - 1 for q in reqs]
    base_rows = _written_out([{"emitted": [0] * k} for k in need], 4, 1)
    base = sum(t(len(run_), 1) for run_, _ in base_rows)
    (pred,) = data["prediction"]
    assert set(pred) == {"concurrency", "steps", "baseline_steps", "speculative_ms",
                         "baseline_ms", "speed_up", "tokens", "tpot_ms", "engine", "draft_ms",
                         "draft_source", "speed_up_low", "speed_up_high", "tokens_per_step_low",
                         "tokens_per_step_high", "interval_requests"}
    assert pred["speed_up_low"] <= pred["speed_up"] <= pred["speed_up_high"]
    assert pred["engine"] == data["engine"] == engine and pred["draft_ms"] == 0.5
    assert set(pred["tpot_ms"]) == {"mean", "p50", "p90"}
    assert pred["steps"] == len(rows) and pred["baseline_steps"] == len(base_rows)
    assert pred["speculative_ms"] == pytest.approx(spec, rel=1e-12)
    assert pred["baseline_ms"] == pytest.approx(base, rel=1e-12)
    assert pred["speed_up"] == pytest.approx(base / spec, rel=1e-12)
    assert pred["tokens"] == sum(need)
    assert f"{base / spec:.2f}x" in text
    # Per-request time per output token, from the same written-out schedule.
    per = [0.0] * len(reqs)
    for run_, n in rows:
        for i in run_:
            per[i] += t(len(run_), n) + 0.5
    tpot = [per[i] / need[i] for i in range(len(reqs)) if need[i]]
    assert pred["tpot_ms"]["mean"] == pytest.approx(np.mean(tpot), rel=1e-12)
    assert pred["tpot_ms"]["p90"] == pytest.approx(np.percentile(tpot, 90), rel=1e-12)


def test_several_levels_rows_verdict_json_and_plot(few, tmp_path):
    from ngramspec.streams import write_streams
    streams = tmp_path / "s.jsonl"
    write_streams(few, streams)
    report, png = tmp_path / "r.json", tmp_path / "p.png"
    argv = ["simulate", str(streams), "--step-ms", "12", "--token-ms", "0.1",
            "--concurrency", "1,4,16,1000000000000", "--json", str(report), "--no-progress"]
    has_mpl = True
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        has_mpl = False
    if has_mpl:
        argv += ["--plot", str(png)]
    code, text = run(argv)
    assert code == 0
    data = json.loads(report.read_text())
    assert [p["concurrency"] for p in data["prediction"]] == [1, 4, 16, 10**12]
    assert [lv["run_at"] for lv in data["levels"]] == [1, 4, 16, len(few)]
    assert "1,000,000,000,000*" in text and "clamped to the number of requests" in text
    preds = [ServingPrediction(p["concurrency"], p["steps"], p["baseline_steps"],
                               p["speculative_ms"], p["baseline_ms"], p["speed_up"],
                               p["tokens"], 0.0, interval=Interval(
                                   (p["tokens_per_step_low"], p["tokens_per_step_high"]),
                                   (p["speed_up_low"], p["speed_up_high"]),
                                   p["interval_requests"], 400))
             for p in data["prediction"]]
    assert data["verdict"] == verdict(preds)
    assert "verdict: " + data["verdict"] in text
    for p in data["prediction"]:
        assert f"{p['speed_up']:.2f}x" in text
    if has_mpl:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_verdicts():
    def ps(*pairs):
        return [ServingPrediction(c, 1, 1, 1.0, s, s, 1, 0.0) for c, s in pairs]
    assert verdict(ps((1, 1.2), (4, 1.1))) == \
        "pays off at every concurrency tested, up to 4 (1.10x there)"
    assert verdict(ps((16, 0.8), (1, 1.2), (4, 1.05))) == \
        "pays off up to concurrency 4: disable above (0.80x at 16)"
    assert verdict(ps((1, 0.7), (4, 0.9))).startswith(
        "does not pay off at any concurrency tested (best 0.90x at 4)")
    assert "not monotonic" in verdict(ps((1, 1.2), (4, 0.9), (16, 1.1)))
    with pytest.raises(ValueError, match="no predictions"):
        verdict([])


@pytest.mark.parametrize("text,message", [
    ("", "empty"), ("1,,4", "empty item"), ("0", "0 is not >= 1"), ("-3", "-3 is not >= 1"),
    ("1.5", "'1.5' is not an integer"), ("a,b", "'a' is not an integer"),
    ("4,1,4", "4 is listed twice"),
])
def test_junk_concurrency_lists(text, message):
    with pytest.raises(ValueError, match="--concurrency: .*" + message.replace(".", r"\.")
                       .replace("(", r"\(")):
        parse_concurrency(text)


@pytest.mark.parametrize("argv,message", [
    (["--concurrency", "1,x"], "--concurrency: 'x' is not an integer"),
    (["--concurrency", "0"], "--concurrency: 0 is not >= 1"),
    (["--cost-table", "missing.csv"], "cost table 'missing.csv': cannot be read"),
    (["--cost-table", "T", "--decode-ms", "3"], "either --cost-table or a model"),
    (["--extrapolate"], "--extrapolate applies to --cost-table only"),
    (["--decode-ms", "1", "--verify-ms", "2", "--draft-ms", "-1"], "--draft-ms must be"),
    (["--plot", "x.png"], "--plot draws the predicted speed-up"),
    (["--cost-table", "T", "--concurrency", "8"], "has no point for batch=8"),
    (["--cost-table", "BAD"], "line 3: ms must be a finite number of milliseconds > 0"),
])
def test_cli_errors_are_one_line(tmp_path, capsys, argv, message):
    (tmp_path / "t.csv").write_text("batch,tokens,ms\n1,1,10\n1,12,20\n")
    (tmp_path / "bad.csv").write_text("batch,tokens,ms\n1,1,10\n1,12,-20\n")
    argv = [str(tmp_path / "t.csv") if a == "T" else str(tmp_path / "bad.csv") if a == "BAD"
            else a for a in argv]
    code, _ = run(["simulate", "--limit", "12", "--no-progress"] + argv)
    err = capsys.readouterr().err
    assert code == 2
    assert message in err
    assert err.startswith("ngramspec: error: ") and err.count("\n") == 1
    assert "Traceback" not in err


def test_cli_errors_name_flags_not_python_keywords(tmp_path, capsys):
    (tmp_path / "t.csv").write_text("batch,tokens,ms\n1,1,10\n1,12,20\n")
    code, _ = run(["simulate", "--limit", "12", "--no-progress", "--cost-table",
                   str(tmp_path / "t.csv"), "--concurrency", "8"])
    err = capsys.readouterr().err
    assert code == 2 and "allow extrapolation (--extrapolate)" in err
    assert "extrapolate=True" not in err
    with pytest.raises(CostTableError, match=r"allow extrapolation \(extrapolate=True\)"):
        CostTable.parse("batch,tokens,ms\n1,1,10\n1,12,20\n").ms(8, 1)  # the API's own words


def test_unexpected_errors_are_one_line_too(monkeypatch, capsys):
    import ngramspec.cli.simulate as cli

    def boom(*a, **k):
        raise RuntimeError("something broke\nsecond line")
    monkeypatch.setattr(cli, "simulate", boom)
    monkeypatch.delenv("NGRAMSPEC_DEBUG", raising=False)
    code, _ = run(["simulate", "--limit", "2"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert "RuntimeError: something broke" in err and "NGRAMSPEC_DEBUG=1" in err


def test_huge_concurrency_is_clamped_not_allocated(few):
    r = ns.simulate(few, config=ns.NgramConfig(), concurrency=len(few))
    ns.time_drafting(r)
    s = schedule(r, concurrency=10**12)  # slots: at most one per request with steps
    assert_array_equal(s.batch, schedule(r).batch)
    p = predict_serving(r, ns.CostModel(decode_ms=10, verify_ms=20))
    assert math.isfinite(p.speed_up)


def test_sweep_over_concurrency(few, tmp_path):
    from ngramspec.streams import write_streams
    streams = tmp_path / "s.jsonl"
    write_streams(few, streams)
    report = tmp_path / "sw.json"
    code, text = run(["sweep", str(streams), "--draft-token-num", "4,12", "--concurrency",
                      "1,8", "--jobs", "1", "--decode-ms", "12.2", "--verify-ms", "30",
                      "--json", str(report), "--no-progress"])
    assert code == 0
    res = json.loads(report.read_text())["results"]
    assert len(res) == 4 and {r["concurrency"] for r in res} == {1, 8}
    for r in res:
        one = ns.simulate(few, config=ns.NgramConfig(**r["options"]), concurrency=r["concurrency"])
        ns.time_drafting(one)
        want = predict_serving(one, ns.CostModel(decode_ms=12.2, verify_ms=30))
        assert r["prediction"]["steps"] == want.steps
        assert r["prediction"]["baseline_ms"] == want.baseline_ms
    assert "verdicts" in text and "draft_token_num=4" in text


# --- the schedule on arbitrary step counts ------------------------------------------------

@st.composite
def runs(draw):
    """Per-request step counts (0: a single output token), ADAPTIVE draft counts per step,
    baseline lengths >= step counts, and a concurrency."""
    steps = draw(st.lists(st.integers(0, 6), min_size=1, max_size=12))
    drafts = [draw(st.lists(st.integers(0, 7), min_size=k, max_size=k)) for k in steps]
    extra = draw(st.lists(st.integers(0, 5), min_size=len(steps), max_size=len(steps)))
    c = draw(st.integers(1, 15))
    return steps, drafts, [k + 1 + (e if k else 0) for k, e in zip(steps, extra)], c


@given(runs(), st.sampled_from(["BFS", "ADAPTIVE"]))
def test_schedule_equals_a_naive_loop_on_any_step_counts(run_, match_type):
    steps, drafts, out_lens, c = run_
    result = SimpleNamespace(
        emitted=[np.ones(k, np.int32) for k in steps],
        drafts=[np.asarray(d, np.int32) for d in drafts],
        output_lens=np.asarray(out_lens, np.int64), concurrency=c,
        config=ns.NgramConfig(match_type=match_type, draft_token_num=8))
    s = schedule(result)
    reqs = [{"emitted": [1] * k, "drafts": d} for k, d in zip(steps, drafts)]
    rows = _written_out(reqs, c, 8, adaptive=match_type == "ADAPTIVE")
    assert s.batch.tolist() == [len(r) for r, _ in rows]
    assert s.tokens.tolist() == [n for _, n in rows]
    base = _written_out([{"emitted": [1] * (n - 1)} for n in out_lens], c, 1)
    assert s.baseline_batch.tolist() == [len(r) for r, _ in base]
    # Every request's steps are consecutive from its start, in both runs.
    for r, k in enumerate(steps):
        if k:
            held = [i for i, (run_r, _) in enumerate(rows) if r in run_r]
            assert held == list(range(s.start[r], s.start[r] + k))
