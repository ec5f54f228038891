"""The docstring examples of the public modules run and print what they show."""

import doctest
import importlib

import pytest

MODULES = ["ngramspec", "ngramspec.config.settings", "ngramspec.config.toml",
           "ngramspec.stdorder", "ngramspec.cache.facade", "ngramspec.cache.corpus_calls",
           "ngramspec.cache.saving", "ngramspec.drafts.batch",
           "ngramspec.drafts.verify", "ngramspec.drafter.step_api", "ngramspec.streams.files",
           "ngramspec.simulate.results", "ngramspec.simulate.runs", "ngramspec.simulate.stepwise",
           "ngramspec.costs.model", "ngramspec.costs.records", "ngramspec.costs.engines",
           "ngramspec.sweep.budget", "ngramspec.measure.reliability",
           "ngramspec.integrations.timing",
           "ngramspec.config.acceptance_table", "ngramspec.testing", "ngramspec.testing.strategies",
           "ngramspec.testing._compare", "ngramspec.testing._machine", "ngramspec.testing._golden"]


@pytest.mark.parametrize("name", MODULES)
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name),
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0
