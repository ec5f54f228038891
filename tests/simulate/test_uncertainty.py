"""How sure a prediction is (issue 37, item 1 and 3): the bootstrap over requests, honest
digits, the verdict's words, and the decoding line for configurations beyond SGLang."""

from __future__ import annotations

import json
import re
from types import SimpleNamespace

import numpy as np
import pytest

import ngramspec as ns
from cli_helpers import run
from ngramspec.costs import (CostModel, Interval, ServingPrediction, bootstrap, predict_serving,
                             speed_up_text, verdict)
from ngramspec.costs.uncertainty import LEVEL, MIN_REQUESTS, RESAMPLES, SEED
from ngramspec.streams import embedded_streams_path, write_streams

COST = CostModel(step_ms=12, token_ms=0.1)


@pytest.fixture(scope="module")
def rows():
    return ns.read_streams(embedded_streams_path())


def test_the_interval_is_the_percentiles_of_whole_requests_resampled(rows):
    """The tokens-per-step interval, recomputed by hand from the same seeded draws of whole
    requests: equal; the same run gives the same interval twice."""
    r = ns.simulate(rows[:50], concurrency=4)
    iv = bootstrap(r)
    keep = [e for e in r.emitted if e.size]
    draws = np.random.default_rng(SEED).integers(0, len(keep), size=(RESAMPLES, len(keep)))
    ratio = [sum(int(keep[i].sum()) for i in d) / sum(keep[i].size for i in d) for d in draws]
    tail = 100 * (1 - LEVEL) / 2
    assert iv.tokens_per_step == tuple(float(x) for x in
                                       np.percentile(ratio, [tail, 100 - tail]))
    assert iv.requests == len(keep) and iv.speed_up is None
    assert bootstrap(r) == iv
    lo, hi = bootstrap(r, COST, draft_ms=0.1).speed_up
    assert lo < predict_serving(r, COST, draft_ms=0.1).speed_up < hi


def test_the_interval_covers_the_truth_ninety_percent_of_the_time():
    """Synthetic requests with known accept lengths (steps ~ 1 + Poisson(20), emitted per step
    1 + Binomial(3, 0.3): true tokens per step 1.9): over 200 fixed-seed trials of 100
    requests, the 90% interval holds 1.9 in 165..193 of them (180 expected; a binomial
    (200, 0.9) falls outside that range with probability < 0.002)."""
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(200):
        emitted = [1 + rng.binomial(3, 0.3, size=1 + rng.poisson(20)) for _ in range(100)]
        lo, hi = bootstrap(SimpleNamespace(emitted=emitted)).tokens_per_step
        hits += lo <= 1.9 <= hi
    assert 165 <= hits <= 193


@pytest.mark.parametrize("x,text", [(0.995, "0.99x"), (0.996, "0.996x"), (1.004, "1.004x"),
                                    (1.0, "1.00x"), (1.2149, "1.21x"),
                                    (0.9999999, "0.99999x"), (1.0000001, "1.00001x")])
def test_printed_speed_ups_stay_on_their_side_of_one(x, text):
    assert speed_up_text(x) == text


def test_the_verdict_says_when_it_cannot_tell():
    def p(c, s, lo, hi, requests=133):
        return ServingPrediction(c, 1, 1, 1.0, s, s, 1, 0.0,
                                 interval=Interval((1.5, 1.7), (lo, hi), requests, 400))

    line = verdict([p(1, 1.3, 1.2, 1.4), p(16, 0.97, 0.9, 1.05)])
    assert line == ("pays off up to concurrency 1: disable above (0.97x at 16); not enough "
                    "requests to tell at concurrency 16 (the 90% interval straddles 1.0)")
    few = verdict([p(1, 1.3, 1.2, 1.4, requests=MIN_REQUESTS - 1)])
    assert few.endswith(f"only {MIN_REQUESTS - 1} requests: below {MIN_REQUESTS} the "
                        "intervals themselves are unreliable, record more")
    assert "record more" not in verdict([p(1, 1.3, 1.2, 1.4, requests=MIN_REQUESTS)])
    # Below 1 by less than a hundredth: never printed as 1.00x.
    assert "(best 0.996x at 1)" in verdict([p(1, 0.996, 0.9, 0.99)])


#: A speed-up printed with its interval: ``1.21x (1.15–1.27)``.
INTERVAL = r"\d+\.\d\d+x \(\d+\.\d\d–\d+\.\d\d\)"


def test_simulate_sweep_print_and_store_the_interval(rows, tmp_path):
    path = tmp_path / "s.jsonl.gz"
    write_streams(rows[:40], path)
    report = tmp_path / "r.json"
    code, text = run(["simulate", str(path), "--step-ms", "12", "--token-ms", "0.1",
                      "--concurrency", "1,4", "--json", str(report), "--no-progress"])
    assert code == 0
    assert len(re.findall(INTERVAL + r" (faster|SLOWER)", text)) == 2
    assert re.search(r"tokens/step \d\.\d{3} \(\d\.\d{3}–\d\.\d{3}\): 90% interval, bootstrap "
                     r"over 40 requests", text)
    data = json.loads(report.read_text())
    for pred in data["prediction"]:
        assert pred["speed_up_low"] <= pred["speed_up"] <= pred["speed_up_high"]
    s = data["summary"]
    assert s["tokens_per_step_low"] <= s["tokens_per_step"] <= s["tokens_per_step_high"]
    code, text = run(["sweep", str(path), "--step-ms", "12", "--token-ms", "0.1",
                      "--draft-token-num", "4,8", "--json", str(report), "--jobs", "1",
                      "--no-progress"])
    assert code == 0
    assert len(re.findall(INTERVAL, text)) == 2
    for rec in json.loads(report.read_text())["results"]:
        assert rec["tokens_per_step_low"] <= rec["tokens_per_step"] <= \
            rec["tokens_per_step_high"]
        assert rec["prediction"]["speed_up_low"] <= rec["speedup"] <= \
            rec["prediction"]["speed_up_high"]


def test_the_decoding_line_tells_the_truth(rows, tmp_path):
    path = tmp_path / "s.jsonl.gz"
    write_streams(rows[:5], path)
    code, text = run(["simulate", str(path), "--no-progress"])
    assert "the accept lengths are SGLang's, exactly" in text
    code, text = run(["simulate", str(path), "--preset", "recommended", "--no-progress"])
    assert code == 0
    assert "SGLang's, exactly" not in text
    assert "the exact accept lengths of this configuration, which goes beyond SGLang's" in text
