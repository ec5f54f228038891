"""Property-testing toolkit for n-gram drafters: test your own port or variant of SGLang's
NGRAM drafter against ngramspec's reference model and SGLang's recorded outputs.

Needs Hypothesis (``pip install "ngramspec[testing]"``), imported here and nowhere else in
ngramspec.

- :mod:`ngramspec.testing.strategies`: ``configs``, ``token_sequences``, ``operations``.
- :func:`assert_drafts_equal`: exact comparison with both trees drawn on a difference.
- :func:`check_drafter`: a state machine driving your cache beside the reference; a shrunk
  counterexample is printed as a replay script.
- :func:`golden_scenarios`, :func:`replay_golden`: SGLang's own outputs, both releases.

Examples
--------
>>> import ngramspec as ns
>>> from ngramspec.testing import check_drafter, replay_golden
>>> make = lambda config: ns.NgramCache(config=config)   # or an adapter around your drafter
>>> bool(replay_golden(make, "sglang-0.5.9"))
True
>>> check_drafter(make, max_examples=5)                   # raises DrafterMismatch on a bug
"""

from __future__ import annotations

try:
    import hypothesis  # noqa: F401
except ImportError as e:  # pragma: no cover - depends on the environment
    raise ImportError("ngramspec.testing needs Hypothesis: pip install \"ngramspec[testing]\""
                      ) from e

from . import strategies
from ._compare import DraftsDiffer, assert_drafts_equal, draw_tree
from ._golden import GoldenReport, golden_scenarios, replay_golden, scenario_config
from ._machine import DrafterMismatch, check_drafter, replay_script

__all__ = ["strategies", "assert_drafts_equal", "draw_tree", "DraftsDiffer", "check_drafter",
           "DrafterMismatch", "replay_script", "golden_scenarios", "replay_golden",
           "GoldenReport", "scenario_config"]
