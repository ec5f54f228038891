"""Parity with outputs recorded from SGLang's own C++ cores: 0.5.23 (598 match ops) and the
window-era 0.5.9 (1,880 match ops), replayed with ngramspec.testing.replay_golden."""

import pytest

import ngramspec as ns
from ngramspec.testing import golden_scenarios, replay_golden


@pytest.mark.parametrize("version,matches", [("sglang-0.5.23", 598), ("sglang-0.5.9", 1880)])
@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_golden_parity_all_matches(backend, version, matches):
    report = replay_golden(lambda config: ns.NgramCache(config=config, backend=backend), version)
    assert report, str(report)
    assert report.matches == matches and report.mismatched_matches == 0


def test_golden_file_covers_both_match_types():
    scenarios = golden_scenarios("sglang-0.5.23")
    assert {s["params"]["match_type"] for s in scenarios} == {"BFS", "PROB"}
    assert len(scenarios) == 110


def test_legacy_golden_file_coverage():
    scenarios = golden_scenarios("sglang-0.5.9")
    assert len(scenarios) == 100
    assert {s["params"]["match_type"] for s in scenarios} == {"BFS", "PROB"}
    defaults = dict(branch_length=18, min_match_window_size=1, max_match_window_size=12,
                    min_bfs_breadth=1, max_bfs_breadth=10, draft_token_num=12, capacity=10_000_000)
    at_defaults = [s for s in scenarios
                   if {k: s["params"][k] for k in defaults} == defaults]
    assert len(at_defaults) >= 10  # the "defaults_stream" scenarios, both match types
