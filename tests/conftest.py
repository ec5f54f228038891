import gzip
import json
import os
from pathlib import Path

from hypothesis import HealthCheck, settings

DATA = Path(__file__).parent / "data"

settings.register_profile("default", deadline=None, max_examples=60,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("ci", deadline=None, max_examples=120,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Whether a test's process compiles a kernel first depends on the tests before it, so the
# first-run compile notice is off for the tests that read stderr (tests/cli/
# test_compile_notice.py turns it on where it is the subject).
os.environ["NGRAMSPEC_COMPILE_NOTICE"] = "0"


def load_golden(name: str) -> dict:
    """A gzipped JSON file of tests/data (SGLang's own golden files live in the package:
    ngramspec.testing.golden_scenarios)."""
    with gzip.open(DATA / name, "rt") as f:
        return json.load(f)
