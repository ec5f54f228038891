import os
import gzip
import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

DATA = Path(__file__).parent / "data"

settings.register_profile("default", deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, max_examples=120,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


def load_golden(name: str) -> dict:
    with gzip.open(DATA / name, "rt") as f:
        return json.load(f)


@pytest.fixture(scope="session")
def golden_0523() -> dict:
    return load_golden("sglang-0.5.23-golden.json.gz")

import sys
sys.path.insert(0, str(Path(__file__).parent))
