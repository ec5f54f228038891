"""Parity with outputs recorded from SGLang's own C++ cores: 0.5.23 (598 match ops) and the
window-era 0.5.9 (1,880 match ops)."""

import pytest

from conftest import load_golden
from golden import replay


@pytest.fixture(scope="module")
def golden_059() -> dict:
    return load_golden("sglang-0.5.9-legacy-golden.json.gz")


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_golden_parity_all_matches(golden_0523, backend):
    total, failures = 0, []
    for i, scenario in enumerate(golden_0523["scenarios"]):
        checked, bad = replay(scenario, backend)
        total += checked
        failures += [f"scenario {i}: {f}" for f in bad]
    assert failures == []
    assert total == 598


def test_golden_file_covers_both_match_types(golden_0523):
    kinds = {s["params"]["match_type"] for s in golden_0523["scenarios"]}
    assert kinds == {"BFS", "PROB"}
    assert len(golden_0523["scenarios"]) == 110


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_legacy_golden_parity_all_matches(golden_059, backend):
    total, failures = 0, []
    for i, scenario in enumerate(golden_059["scenarios"]):
        checked, bad = replay(scenario, backend, profile="sglang-0.5.9")
        total += checked
        failures += [f"scenario {i} ({scenario['kind']}): {f}" for f in bad]
    assert failures == []
    assert total == 1880


def test_legacy_golden_file_coverage(golden_059):
    scenarios = golden_059["scenarios"]
    assert len(scenarios) == 100
    assert {s["params"]["match_type"] for s in scenarios} == {"BFS", "PROB"}
    defaults = dict(branch_length=18, min_match_window_size=1, max_match_window_size=12,
                    min_bfs_breadth=1, max_bfs_breadth=10, draft_token_num=12, capacity=10_000_000)
    at_defaults = [s for s in scenarios
                   if {k: s["params"][k] for k in defaults} == defaults]
    assert len(at_defaults) >= 10  # the "defaults_stream" scenarios, both match types
