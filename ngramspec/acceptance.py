"""Acceptance estimates: calibrated probabilities, cost-optimal tree sizes, reliability.

ADAPTIVE scores a draft node by the probability that the target produces its whole path.
From counts alone (``freq(child) / total``) that estimate is optimistic where counts are small
or the matched context is short (a continuation seen once after a one-token match is far
from certain) and pessimistic on long matches in the request's own text (copying).  With
``NgramConfig(calibrated_estimates=True)`` each child's conditional probability is instead

    a + b * freq(child) / total        (clipped to [0, 1])

with ``(a, b)`` looked up by the child's *cell*: its source (the request's own trie or the
shared one), the length of the matched context it continues (bins ``CONTEXT_EDGES``), its
parent's count total (bins ``TOTAL_EDGES``), its parent's level below its anchor (bins
``LEVEL_EDGES``: how many drafted tokens of the path the child continues; once a long copy
has started, the next token is likelier than after one token) and whether it is its
parent's first candidate.
The table was fitted on the tuning part of the shipped streams (:mod:`ngramspec.holdout`) by
``benchmarks/studies/fit_acceptance.py``; the construction is otherwise unchanged (best first by path
probability, now the calibrated one).

``min_expected_accept="auto"`` chooses the tree size from step costs: after construction,
every tree of a step is cut to its first ``k`` nodes (creation order, so every cut is a tree),
``k`` chosen for the batch, possibly 0 (a plain decode), to maximise
``sum_b E_b(k) - lam * t(batch, k + 1)``: the expected emitted tokens less the step's time
valued at ``lam``, the expected tokens per unit of time the run has made so far (so that the
run's tokens per unit of time are the largest, not each step's).  The step costs are
:func:`step_costs` of a :class:`~ngramspec.CostTable` or :class:`~ngramspec.CostModel`.

:func:`reliability` measures how well the estimates hold: per verify step the predicted
expected accept length beside the realised one, binned.

This module is the guide to those estimates; the code lives in its rooms: the table the
kernels read in :mod:`ngramspec.calibration_table`, step costs in :mod:`ngramspec.costs`,
the reliability replay in :mod:`ngramspec.reliability`.  Nothing in the package imports this
module.

Examples
--------
Under the seed's flat costs (a verify step 2.46 decode steps), a weak tree alone is not worth
a verify; in a batch whose other tree makes the step a verify anyway, it rides along:

>>> import ngramspec as ns
>>> cfg = ns.NgramConfig(match_type="ADAPTIVE", min_expected_accept="auto", capacity=1000,
...                      draft_token_num=6)
>>> flat = ns.CostModel(decode_ms=12.2, verify_ms=30.0)
>>> cache = ns.NgramCache(config=cfg)
>>> cache.insert([[1, 2, 3, 4, 5, 6], [7, 8], [7, 9], [7, 10]])
>>> cache.match([[7]], costs=flat).num_drafts          # 3 guesses of 1/3 each: no draft
array([0], dtype=int32)
>>> cache.match([[7], [1]], costs=flat).num_drafts
array([3, 5], dtype=int32)
"""

from .calibration_table import calibration_array
from .costs import check_costs, cost_matrix, step_costs
from .reliability import DEFAULT_BINS, Reliability, reliability

__all__ = ["calibration_array", "step_costs", "check_costs", "cost_matrix", "Reliability",
           "reliability", "DEFAULT_BINS"]
