"""How many tokens of each proposed chain to send to a verifier of chains (vLLM's) so that the
expected tokens emitted per millisecond are highest, from a cost table: the cost-aware choice of
:class:`ngramspec.integrations.vllm.Proposer`."""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = ["choose_counts", "step_ms_row"]


def step_ms_row(table: Any, batch: int, max_tokens: int) -> np.ndarray:
    """``t(batch, n)`` for n = 1 .. max_tokens (the batch clipped into the table's measured
    batches unless the table extrapolates)."""
    if not table.extrapolate:
        batch = int(np.clip(batch, table.batches[0], table.batches[-1]))
    n = np.arange(1, max_tokens + 1)
    return table.ms_array(np.full(n.size, batch), n)


def choose_counts(lengths: np.ndarray, probs: np.ndarray | None, batch: int, step_ms: np.ndarray,
                  *, accept_rate: float = 0.5) -> np.ndarray:
    """How many tokens of each chain to send so that expected emitted tokens per ms is highest.

    A verify step of ``batch`` requests sending ``c`` drafts in all costs ``t(batch, 1 +
    c / batch)`` (vLLM schedules each request's last token and its drafts; the mean tokens per
    request, between measured integer counts, is interpolated linearly) and emits ``batch +``
    the sum of the sent tokens' path probabilities.  Path probabilities do not rise along a
    chain, so sending tokens in order of decreasing probability and scanning the count is
    exact; ties go to fewer tokens.  Without ``probs`` it is all or nothing, each draft
    expected to be accepted with ``accept_rate``.

    Parameters
    ----------
    lengths : (R,) int array
        Tokens available in each proposed chain.
    probs : (R, >= max(lengths)) float array or None
        Row ``r``'s path probability of its ``j``-th chain token at column ``j - 1``.
    batch : int
        Requests in the verify step (those not proposed emit one token each).
    step_ms : 1-D float array
        ``t(batch, n)`` for ``n = 1, 2, ...`` (at least ``1 + max(lengths)`` values).

    Returns
    -------
    (R,) int64 array: the tokens to send per chain (0 for none).

    Examples
    --------
    >>> import numpy as np
    >>> flat = np.array([10.0, 10.5, 11.0, 11.5])          # a verify token is cheap
    >>> choose_counts(np.array([3]), np.array([[0.9, 0.5, 0.01]]), 1, flat).tolist()
    [2]
    >>> steep = np.array([10.0, 20.0, 30.0, 40.0])         # a verify token costs a decode
    >>> choose_counts(np.array([3]), np.array([[0.9, 0.5, 0.01]]), 1, steep).tolist()
    [0]
    """
    lengths = np.asarray(lengths, np.int64)
    r = lengths.size
    total = int(lengths.sum())
    out = np.zeros(r, np.int64)
    if total == 0:
        return out
    grid = np.arange(1, step_ms.size + 1, dtype=np.float64)
    if probs is None:
        t0 = float(step_ms[0])
        t1 = float(np.interp(1.0 + total / batch, grid, step_ms))
        if (batch + accept_rate * total) / t1 > batch / t0:
            out[:] = lengths
        return out
    width = int(lengths.max())
    p = np.asarray(probs, np.float64)[:, :width]
    depth = np.broadcast_to(np.arange(width), (r, width))
    p = np.minimum.accumulate(np.where(depth < lengths[:, None], p, -1.0), axis=1)
    valid = depth < lengths[:, None]
    pv, dv = p[valid], depth[valid]
    rows = np.broadcast_to(np.arange(r)[:, None], (r, width))[valid]
    order = np.lexsort((dv, -pv))  # decreasing probability, shallower first on ties
    gain = np.concatenate(([0.0], np.cumsum(np.maximum(pv[order], 0.0))))
    counts = np.arange(total + 1, dtype=np.float64)
    cost = np.interp(1.0 + counts / batch, grid, step_ms)
    best = int(np.argmax((batch + gain) / cost))
    if best:
        out += np.bincount(rows[order[:best]], minlength=r)
    return out
