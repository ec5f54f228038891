"""The calibrated acceptance table as the drafting kernels read it, and what the estimates mean.

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
The table was fitted on the tuning part of the shipped streams (:mod:`ngramspec.sweep.split`)
by ``benchmarks/studies/fit_acceptance.py``; the construction is otherwise unchanged (best
first by path probability, now the calibrated one).

``min_expected_accept="auto"`` chooses the tree size from step costs: after construction,
every tree of a step is cut to its first ``k`` nodes (creation order, so every cut is a tree),
``k`` chosen for the batch, possibly 0 (a plain decode), to maximise
``sum_b E_b(k) - lam * t(batch, k + 1)``: the expected emitted tokens less the step's time
valued at ``lam``, the expected tokens per unit of time the run has made so far (so that the
run's tokens per unit of time are the largest, not each step's).  The step costs are
:func:`~ngramspec.costs.step_costs` of a :class:`~ngramspec.CostTable` or
:class:`~ngramspec.CostModel`.

:func:`~ngramspec.measure.reliability.reliability` measures how well the estimates hold: per verify
step the predicted expected accept length beside the realised one, binned.

This module lays the table out for the kernels (:func:`calibration_array`); the coefficients
are fitted data (``ngramspec/data/acceptance_table.json``, written by
``benchmarks/studies/fit_acceptance.py``).  Step costs live in :mod:`ngramspec.costs`, the
reliability replay in :mod:`ngramspec.measure.reliability`.

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

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["calibration_array", "TABLE_FILE"]

#: The fitted table (data, not code: ``benchmarks/studies/fit_acceptance.py --write``).
TABLE_FILE = Path(__file__).parents[1] / "data" / "acceptance_table.json"


def _fitted() -> dict[str, Any]:
    with open(TABLE_FILE, encoding="utf-8") as f:
        return json.load(f)


def _table() -> np.ndarray:
    fitted = _fitted()
    edges = [fitted[k] for k in ("context_edges", "total_edges", "level_edges")]
    nc, nt, nl = (len(e) for e in edges)
    coef = np.asarray(fitted["coefficients"], np.float64).reshape(-1)
    if coef.size != 2 * 2 * nc * nt * nl * 2:
        raise RuntimeError("the acceptance table does not match its bin edges")
    return np.concatenate([[nc, nt, nl], *edges, coef]).astype(np.float64)


_TABLE = _table()
_OFF = np.zeros(0, np.float64)


def calibration_array(config: Any) -> np.ndarray:
    """The table as the kernels take it: ``[nc, nt, nl, context edges, total edges, level
    edges, (a, b) per cell]`` (float64), or an empty array when
    ``config.calibrated_estimates`` is off.

    Examples
    --------
    >>> import ngramspec as ns
    >>> calibration_array(ns.NgramConfig.recommended()).size
    0
    >>> t = calibration_array(ns.NgramConfig.preset("calibrated"))
    >>> int(t[0]), int(t[1]), int(t[2]), t.size
    (10, 4, 5, 1622)
    """
    return _TABLE if config.calibrated_estimates else _OFF
