"""The calibrated acceptance table as the drafting kernels read it.

The coefficients are fitted data (``ngramspec/_acceptance_table.py``, written by
``benchmarks/studies/fit_acceptance.py``); this module only lays them out for the kernels.  What they
mean is described in :mod:`ngramspec.acceptance`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._acceptance_table import COEFFICIENTS, CONTEXT_EDGES, LEVEL_EDGES, TOTAL_EDGES

__all__ = ["calibration_array"]


def _table() -> np.ndarray:
    nc, nt, nl = len(CONTEXT_EDGES), len(TOTAL_EDGES), len(LEVEL_EDGES)
    coef = np.asarray(COEFFICIENTS, np.float64).reshape(-1)
    if coef.size != 2 * 2 * nc * nt * nl * 2:
        raise RuntimeError("the acceptance table does not match its bin edges")
    return np.concatenate([[nc, nt, nl], CONTEXT_EDGES, TOTAL_EDGES, LEVEL_EDGES,
                           coef]).astype(np.float64)


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
