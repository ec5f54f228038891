"""Parity with outputs recorded from SGLang 0.5.23's own C++ core (598 match ops)."""

import numpy as np
import pytest

from golden import replay


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
