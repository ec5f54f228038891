"""The docstring examples of the public modules run and print what they show."""

import doctest
import importlib

import pytest

MODULES = ["ngramspec", "ngramspec.config", "ngramspec.config_toml", "ngramspec.stdorder",
           "ngramspec.cache", "ngramspec.drafts", "ngramspec.verify", "ngramspec.drafter",
           "ngramspec.streams", "ngramspec.simulate.results", "ngramspec.simulate.runs",
           "ngramspec.simulate.stepwise", "ngramspec.costs.model", "ngramspec.costs.records",
           "ngramspec.costs.engines", "ngramspec.sweep.budget", "ngramspec.reliability",
           "ngramspec.calibration_table", "ngramspec.testing", "ngramspec.testing.strategies",
           "ngramspec.testing._compare", "ngramspec.testing._machine",
           "ngramspec.testing._golden"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name),
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0
