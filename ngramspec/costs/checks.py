"""Step costs as the drafting kernels read them, and the check of a ``costs=`` argument.

``min_expected_accept="auto"`` chooses each step's tree size from step costs; the kernels read
those as a matrix of ``t(batch, k + 1)`` (:func:`cost_matrix`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .model import CostModel
from .table import CostTable

__all__ = ["check_costs", "step_costs", "cost_matrix"]


def check_costs(config: Any, costs: Any) -> Any:
    """``costs`` checked against ``config`` (an :class:`~ngramspec.NgramConfig`): required
    with ``min_expected_accept="auto"`` (a :class:`~ngramspec.CostTable` or
    :class:`~ngramspec.CostModel`), refused otherwise."""
    auto = config.min_expected_accept == "auto"
    if costs is None:
        if auto:
            raise ValueError("min_expected_accept='auto' chooses tree sizes from step costs: "
                             "pass costs= (a CostTable, or a CostModel such as "
                             "CostModel(decode_ms=12.2, verify_ms=30))")
        return None
    if not isinstance(costs, (CostTable, CostModel)):
        raise TypeError(f"costs must be a CostTable or a CostModel, got "
                        f"{type(costs).__name__}")
    if not auto:
        raise ValueError(f"costs= only applies with min_expected_accept='auto' (this config "
                         f"has min_expected_accept={config.min_expected_accept!r})")
    return costs


def step_costs(costs: Any, batch_size: int, draft_token_num: int) -> np.ndarray:
    """``(draft_token_num,)`` float64: the time of a step of ``batch_size`` requests whose
    largest tree holds ``k`` drafts, ``t(batch_size, k + 1)``, for ``k = 0 .. n - 1``.

    Examples
    --------
    >>> import ngramspec as ns
    >>> step_costs(ns.CostModel(decode_ms=12.2, verify_ms=30.0), 4, 4).tolist()
    [12.2, 30.0, 30.0, 30.0]
    >>> step_costs(ns.CostModel(step_ms=10, token_ms=0.5), 2, 3).tolist()
    [11.0, 12.0, 13.0]
    """
    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or \
            batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1 (requests in the step's forward), "
                         f"got {batch_size!r}")
    n = int(draft_token_num)
    if isinstance(costs, CostModel):
        costs = CostTable.from_model(costs, max_batch=int(batch_size), max_tokens=max(n, 2))
    if not isinstance(costs, CostTable):
        raise TypeError(f"costs must be a CostTable or a CostModel, got "
                        f"{type(costs).__name__}")
    return costs.ms_array(np.full(n, int(batch_size)), np.arange(1, n + 1))


def cost_matrix(costs: Any, max_batch: int, draft_token_num: int) -> np.ndarray:
    """``(max_batch + 1, n)``: row ``b`` is :func:`step_costs` at batch ``b`` (row 0 unused)."""
    out = np.ones((max_batch + 1, draft_token_num), np.float64)
    for b in range(1, max_batch + 1):
        out[b] = step_costs(costs, b, draft_token_num)
    return out
