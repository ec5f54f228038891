"""How sure a prediction is: a bootstrap over requests.

A simulated run's figures rest on the requests that happened to be recorded; other requests
of the same traffic would give other figures.  :func:`bootstrap` resamples whole requests
(with replacement, as many as there are, a fixed seed) and recomputes, for every resample,
tokens per verify step and, with a cost, the predicted speed-up (:func:`~ngramspec.costs.
predict_serving`'s rule on the resampled requests in their drawn order, the drafting time
per step held at the run's).  The 5th and 95th percentiles of the resamples give a 90%
interval (:data:`LEVEL`).

What it treats as fixed: each request's accept lengths as simulated in the full run (a
request drafts from a trie the others filled, so resampling requests does not resimulate that
sharing), and the cost.  Below :data:`MIN_REQUESTS` requests the intervals cover the figure of
other traffic too seldom to be trusted (``benchmarks/studies/bootstrap_coverage.py``), and the
verdict says so.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from .engines import engine_of
from .serving import predict_serving, schedule, step_ms

__all__ = ["Interval", "bootstrap", "with_interval", "LEVEL", "RESAMPLES", "MIN_REQUESTS",
           "SEED"]

#: The interval's coverage: 90%, the 5th to the 95th percentile of the resamples.
LEVEL = 0.90
#: Resamples drawn by default.
RESAMPLES = 400
#: The seed of the resampling (the same requests give the same interval).
SEED = 0
#: Fewer requests than this: the intervals are not trustworthy, and the verdict says so
#: (``benchmarks/studies/bootstrap_coverage.py`` measured their coverage by size).
MIN_REQUESTS = 30


@dataclass(frozen=True)
class Interval:
    """90% bootstrap intervals of one run's figures.

    Attributes
    ----------
    tokens_per_step : tuple of float
        ``(low, high)`` of tokens per verify step.
    speed_up : tuple of float, or None
        ``(low, high)`` of the predicted speed-up (None without a cost).
    requests : int
        Requests resampled (those with at least one verify step).
    resamples : int
    """

    tokens_per_step: tuple[float, float]
    speed_up: tuple[float, float] | None
    requests: int
    resamples: int

    @property
    def min_requests(self) -> int:
        """:data:`MIN_REQUESTS`: below it the intervals are not trustworthy."""
        return MIN_REQUESTS

    @property
    def few(self) -> bool:
        """Fewer requests than :data:`MIN_REQUESTS`."""
        return self.requests < MIN_REQUESTS


@dataclass(frozen=True)
class _Resampled:
    """The attributes :func:`~ngramspec.costs.schedule` reads, for drawn requests."""

    config: Any
    concurrency: int
    emitted: list
    drafts: list
    output_lens: np.ndarray


def _bounds(values: np.ndarray) -> tuple[float, float]:
    tail = 100 * (1 - LEVEL) / 2
    lo, hi = np.percentile(values, [tail, 100 - tail])
    return float(lo), float(hi)


def bootstrap(result: Any, cost: Any = None, *, engine: str = "custom",
              draft_ms: float | None = None, resamples: int = RESAMPLES,
              seed: int = SEED) -> Interval:
    """90% intervals of tokens per step and (with ``cost``) of the predicted speed-up.

    Parameters
    ----------
    result : SimulationResult
        The simulated run.
    cost : CostTable or CostModel, optional
        Prices the resampled runs (as :func:`~ngramspec.costs.predict_serving`).
    engine : {"custom", "sglang"}
        The engine priced.
    draft_ms : float, optional
        Drafting time per step, held fixed (default: what ``predict_serving`` adds for this
        engine on ``result``).
    resamples : int
        Resamples drawn (with replacement, whole requests).
    seed : int
        Seed of the draws.

    Examples
    --------
    >>> import ngramspec as ns
    >>> from ngramspec.costs import CostModel
    >>> from ngramspec.streams import embedded_streams_path
    >>> r = ns.simulate(embedded_streams_path(), concurrency=4)
    >>> iv = bootstrap(r, CostModel(step_ms=12, token_ms=0.1), draft_ms=0, resamples=200)
    >>> lo, hi = iv.tokens_per_step
    >>> lo < r.tokens_per_step < hi, iv.requests
    (True, 133)
    """
    if isinstance(resamples, bool) or not isinstance(resamples, int) or resamples < 2:
        raise ValueError(f"resamples must be an integer >= 2, got {resamples!r}")
    keep = [i for i, e in enumerate(result.emitted) if e.size]
    if not keep:
        raise ValueError("no request has a verify step: nothing to resample")
    rng = np.random.default_rng(seed)
    draws = rng.integers(0, len(keep), size=(resamples, len(keep)))
    emitted = np.array([result.emitted[i].sum() for i in keep], np.float64)
    steps = np.array([result.emitted[i].size for i in keep], np.float64)
    tps = emitted[draws].sum(axis=1) / steps[draws].sum(axis=1)
    speed = None
    if cost is not None:
        rule = engine_of(engine)
        if draft_ms is None:
            draft_ms = predict_serving(result, cost, engine=rule).draft_ms
        picks = np.asarray(keep)[draws]
        ups = np.empty(resamples)
        for k, pick in enumerate(picks):
            run = _Resampled(result.config, result.concurrency,
                             [result.emitted[i] for i in pick], [result.drafts[i] for i in pick],
                             np.asarray(result.output_lens)[pick])
            # The prediction's own step times, without its per-request figures (TPOT).
            spec, base = step_ms(schedule(run, engine=rule), cost, draft_ms)
            ups[k] = float(base.sum()) / float(spec.sum())
        speed = _bounds(ups)
    return Interval(_bounds(tps), speed, len(keep), resamples)


def with_interval(prediction: Any, interval: Interval) -> Any:
    """``prediction`` (a :class:`~ngramspec.costs.ServingPrediction`) carrying ``interval``."""
    return replace(prediction, interval=interval)
