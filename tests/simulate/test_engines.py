"""Engine pricing: each serving engine's rule (ngramspec.costs.engines) recomputed by hand on
recorded streams, and the sweep that chooses SGLang's slots under it."""

from __future__ import annotations

import json
import math

import pytest

import ngramspec as ns
from cli_helpers import run
from ngramspec.costs import CostModel, CostTable, predict_serving, schedule
from ngramspec.simulate import admit
from ngramspec.streams import embedded_streams_path, write_streams

STEP_MS, TOKEN_MS = 12.0, 0.1  # the README's illustrative linear cost


@pytest.fixture(scope="module")
def streams():
    return ns.read_streams(embedded_streams_path())[:60]


def _walk(steps, c, price):
    """Sum ``price(batch)`` over the steps of requests needing ``steps[r]`` steps each, admitted
    in order into ``c`` slots (ngramspec.simulate.admit)."""
    total, done, nxt, running = 0.0, [0] * len(steps), 0, []
    while nxt < len(steps) or running:
        nxt = admit(nxt, running, c, [k + 1 for k in steps], lambda r: None)
        if not running:
            continue
        total += price(len(running))
        for r in running:
            done[r] += 1
        running = [r for r in running if done[r] < steps[r]]
    return total


def _by_hand(result, c, t, draft_ms):
    """Speculative and baseline totals written out from the per-request step counts, every
    speculative step priced t(b, draft_token_num) + draft_ms (SGLang's worker)."""
    n = result.config.draft_token_num
    spec = _walk([e.size for e in result.emitted], c, lambda b: t(b, n) + draft_ms)
    base = _walk([int(k) - 1 for k in result.output_lens], c, lambda b: t(b, 1))
    return spec, base


@pytest.mark.parametrize("preset", ["BFS", "PROB", "recommended"])
def test_sglang_pricing_equals_a_recomputation_by_hand(streams, preset):
    """Every step t(b_s, draft_token_num) + the drafting figure, whatever the trees, at
    concurrency 1, 4, 16 and 48: the prediction equals the sum written out by hand."""
    cfg = (ns.NgramConfig.recommended() if preset == "recommended"
           else ns.NgramConfig(match_type=preset))
    model = CostModel(step_ms=STEP_MS, token_ms=TOKEN_MS)

    def t(b, n):
        return STEP_MS + TOKEN_MS * b * n

    for c in (1, 4, 16, 48):
        r = ns.simulate(streams, config=cfg, concurrency=c)
        ns.time_drafting(r, "sglang")
        p = predict_serving(r, model, engine="sglang")
        assert p.engine == "sglang" and p.draft_ms == r.sglang_ms_per_step > 0
        spec, base = _by_hand(r, r.concurrency, t, p.draft_ms)
        assert p.speculative_ms == pytest.approx(spec, rel=1e-12)
        assert p.baseline_ms == pytest.approx(base, rel=1e-12)
        assert p.speed_up == pytest.approx(base / spec, rel=1e-12)
        assert set(schedule(r, engine="sglang").tokens.tolist()) == {cfg.draft_token_num}


def test_padding_makes_adaptive_dearer_under_sglang(streams):
    """ADAPTIVE's trees are padded to draft_token_num by SGLang's worker and no step is a
    plain decode: with drafting excluded, SGLang's price is never below a custom loop's."""
    r = ns.simulate(streams, config=ns.NgramConfig.recommended(), concurrency=4)
    model = CostModel(step_ms=STEP_MS, token_ms=TOKEN_MS)
    custom = predict_serving(r, model, draft_ms=0)
    sglang = predict_serving(r, model, draft_ms=0, engine="sglang")
    assert min(schedule(r).tokens) == 1  # a custom loop decodes plainly without drafts
    assert sglang.speculative_ms > custom.speculative_ms
    assert sglang.baseline_ms == custom.baseline_ms


def test_a_table_with_drafting_included_adds_none(streams):
    r = ns.simulate(streams, config=ns.NgramConfig(), concurrency=4)
    table = CostTable([(1, 1, 10.0), (1, 12, 20.0), (4, 1, 11.0), (4, 12, 30.0)])
    table.drafting_included = True
    for engine in ("sglang", "custom"):
        p = predict_serving(r, table, engine=engine)
        assert p.draft_ms == 0.0 and "included" in p.draft_source
    table.drafting_included = False
    ns.time_drafting(r, "sglang")
    assert predict_serving(r, table, engine="sglang").draft_ms == r.sglang_ms_per_step > 0


def test_bad_engine_and_mismatched_schedule_are_refused(streams):
    r = ns.simulate(streams[:5], config=ns.NgramConfig())
    model = CostModel(step_ms=STEP_MS, token_ms=TOKEN_MS)
    with pytest.raises(ValueError, match="engine must be one of custom, sglang, vllm, got 'trt'"):
        predict_serving(r, model, engine="trt")
    with pytest.raises(ValueError, match="engine 'vllm' verifies chains only"):
        predict_serving(r, model, engine="vllm")
    with pytest.raises(ValueError, match="sched was computed for engine 'custom'"):
        predict_serving(r, model, engine="sglang", sched=schedule(r))


# --- the sweep ------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def stream_file(tmp_path_factory, streams):
    path = tmp_path_factory.mktemp("s") / "s.jsonl.gz"
    write_streams(streams[:30], path)
    return path


def test_sweep_sglang_returns_the_best_budget_and_prints_its_flags(stream_file, tmp_path):
    """sweep --engine sglang over draft_token_num ranks by SGLang's pricing: its winner is the
    argmax of predict_serving(engine="sglang") computed here for each budget, and --best-as
    sglang prints that budget's server flags."""
    report = tmp_path / "r.json"
    code, text = run(["sweep", str(stream_file), "--step-ms", "12", "--token-ms", "0.5",
                      "--concurrency", "4", "--engine", "sglang", "--draft-ms", "0",
                      "--best-as", "sglang", "--json", str(report), "--jobs", "1",
                      "--no-progress"])
    assert code == 0, text
    assert "searched for SGLang's slots: --draft-token-num 2,3,4,6,8,10,12,16" in text
    data = json.loads(report.read_text())
    assert data["engine"] == "sglang"
    assert {r["engine"] for r in data["results"]} == {"sglang"}
    rows = ns.read_streams(stream_file)
    model = CostModel(step_ms=12, token_ms=0.5)
    by_hand = {}
    for n in (2, 3, 4, 6, 8, 10, 12, 16):
        r = ns.simulate(rows, config=ns.NgramConfig(draft_token_num=n), concurrency=4)
        by_hand[n] = predict_serving(r, model, draft_ms=0, engine="sglang").speed_up
    best = max(by_hand, key=lambda n: by_hand[n])
    assert data["results"][0]["draft_token_num"] == best
    assert {r["draft_token_num"]: r["speedup"] for r in data["results"]} == by_hand
    flags = ns.NgramConfig(draft_token_num=best).to_sglang_args()
    assert f"--speculative-num-draft-tokens {best} " in text
    assert " ".join(f"--{k.replace('_', '-')} {v}" for k, v in flags.items()) in text


def test_best_as_sglang_needs_the_sglang_pricing(stream_file):
    for extra in (["--step-ms", "12", "--token-ms", "0.1"], []):
        code, text = run(["sweep", str(stream_file), *extra, "--best-as", "sglang",
                          "--no-progress"])
        assert code == 2


def test_best_as_sglang_refusal_names_the_flag(stream_file, capsys):
    code, _ = run(["sweep", str(stream_file), "--step-ms", "12", "--token-ms", "0.1",
                   "--best-as", "sglang", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "add --engine sglang" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_engine_needs_a_cost(stream_file, capsys):
    code, _ = run(["simulate", str(stream_file), "--engine", "sglang", "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and "--engine sglang prices the steps" in err


def test_beyond_sglang_winner_gets_the_plugin_line_and_a_ranked_toml(stream_file, tmp_path):
    best = tmp_path / "best.toml"
    code, text = run(["sweep", str(stream_file), "--preset", "recommended", "--step-ms", "12",
                      "--token-ms", "0.1", "--concurrency", "4", "--engine", "sglang",
                      "--draft-token-num", "4,8", "--best-as", "sglang", "--best-out",
                      str(best), "--jobs", "1", "--no-progress"])
    assert code == 0, text
    assert f"ngramspec sglang-launch --config {best} -- --model-path MODEL" in text
    from ngramspec.config.toml import read_ranking
    ranking = read_ranking(best)
    assert ranking["engine"] == "sglang" and ranking["concurrency"] == 4
    cfg = ns.NgramConfig.from_toml(best)
    assert cfg.match_type == "ADAPTIVE" and cfg.draft_token_num in (4, 8)
    assert math.isclose(ranking["speed_up"], float(
        text.split("speed_up = ")[1].split()[0]))


def test_a_winner_slower_than_no_speculation_is_warned(stream_file):
    # Verify steps 20x a decode: nothing pays.
    code, text = run(["sweep", str(stream_file), "--decode-ms", "10", "--verify-ms", "200",
                      "--concurrency", "4", "--engine", "sglang", "--draft-token-num", "4,8",
                      "--best-as", "sglang", "--jobs", "1", "--no-progress"])
    assert code == 0
    assert "warning: the best setting is predicted 0." in text
    assert "do not enable speculation at this load" in text


def test_a_cost_gate_is_named_useless_under_sglang(stream_file):
    code, text = run(["simulate", str(stream_file), "--preset", "recommended-cost-aware",
                      "--step-ms", "12", "--token-ms", "0.1", "--engine", "sglang",
                      "--draft-ms", "0", "--no-progress"])
    assert code == 0
    assert "note: min_expected_accept=4.0 empties trees" in text
    assert "predicted serving on SGLang's NGRAM worker" in text


def test_an_error_timing_the_drafting_is_raised_not_swapped_for_another_figure(streams):
    """A failure inside the engine's timed figure propagates: the prediction never silently
    falls back to the compiled replay's own time (a low estimate)."""
    from ngramspec.costs.engines import ENGINES, drafting_ms

    class Broken:
        draft_ms_per_step = 0.01

        @property
        def step_api_ms_per_step(self):
            raise AttributeError("a bug inside the timing")

    with pytest.raises(AttributeError, match="a bug inside the timing"):
        drafting_ms(ENGINES["custom"], Broken(), None)

    class Untimed:  # a result type without the figure: the replay's own time, said so
        draft_ms_per_step = 0.01

    assert drafting_ms(ENGINES["custom"], Untimed(), None) == (
        0.01, "the compiled replay's own time (a low estimate)")
