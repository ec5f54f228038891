"""The cost model: formulas, the seed case, and argument errors."""

from __future__ import annotations

import pytest

from ngramspec import CostModel


def test_seed_case_is_a_slowdown_below_about_2_5():
    """Decode 12.2 ms, verify 30 ms: n-gram speculation only pays above ~2.46 tokens/step."""
    m = CostModel(decode_ms=12.2, verify_ms=30.0)
    assert m.predict(1.72).speedup < 1
    assert m.predict(2.4).speedup < 1
    assert m.predict(2.5).speedup > 1
    p = m.predict(1.0)
    assert p.break_even_tokens_per_step == pytest.approx(30 / 12.2)
    assert p.baseline_tokens_per_s == pytest.approx(1000 / 12.2)
    # The team's measurement: 41 tok/s with speculation against 82 without.
    assert m.predict(1.23).speculative_tokens_per_s == pytest.approx(41, abs=0.1)


def test_formulas_and_drafting_time():
    m = CostModel(decode_ms=10, verify_ms=15)
    p = m.predict(2.0, draft_ms=5)
    assert p.verify_step_ms == 15 and p.draft_ms == 5
    assert p.speculative_tokens_per_s == pytest.approx(2000 / 20)
    assert p.speedup == pytest.approx(2.0 * 10 / 20)
    assert p.break_even_tokens_per_step == pytest.approx(2.0)
    lin = CostModel(step_ms=8, token_ms=0.5)
    q = lin.predict(1.5, draft_token_num=4, concurrency=2)
    assert q.decode_step_ms == 8 + 0.5 * 2 and q.verify_step_ms == 8 + 0.5 * 8
    assert q.speedup == pytest.approx(1.5 * 9 / 12)
    assert lin.kind == "linear" and m.kind == "measured"


@pytest.mark.parametrize("kwargs,message", [
    ({}, "give decode_ms and verify_ms"),
    ({"decode_ms": 10}, "needs both decode_ms and verify_ms"),
    ({"step_ms": 1}, "needs both step_ms and token_ms"),
    ({"decode_ms": 1, "verify_ms": 2, "step_ms": 1, "token_ms": 1}, "not both"),
    ({"decode_ms": -1, "verify_ms": 2}, "decode_ms must be a finite number"),
    ({"decode_ms": 0, "verify_ms": 2}, "more than 0 ms"),
])
def test_bad_models(kwargs, message):
    with pytest.raises(ValueError, match=message):
        CostModel(**kwargs)


def test_bad_predict_arguments():
    m = CostModel(decode_ms=10, verify_ms=15)
    with pytest.raises(ValueError, match="tokens_per_step must be >= 1"):
        m.predict(0.5)
    with pytest.raises(TypeError, match="tokens_per_step must be a number"):
        m.predict("2")
    with pytest.raises(ValueError, match="draft_token_num must be an int >= 1"):
        m.predict(2.0, draft_token_num=0)
    with pytest.raises(TypeError, match="decode_ms must be a number"):
        CostModel(decode_ms="10", verify_ms=1)
