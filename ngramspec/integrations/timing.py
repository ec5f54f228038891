"""What each serving engine pays for drafting, timed on a simulation's own streams.

:func:`time_drafting` is the one call that times: it fills the result's fields, which are
plain values afterwards (reading a result never compiles or runs anything).  The serving
prediction (:func:`~ngramspec.costs.predict_serving`) adds the figure to each step, and
refuses a result that could be timed and was not, rather than price it with less.
"""

from __future__ import annotations

from typing import Any

from ..costs import Engine, engine_of
from ..simulate.stepwise import time_step_api

__all__ = ["time_drafting"]


def time_drafting(result: Any, engine: str | Engine = "custom") -> float | None:
    """Time the drafting ``engine`` pays per serving-loop iteration on ``result``'s streams,
    store it in the result, and return it in ms (already timed: the stored figure).

    Parameters
    ----------
    result : SimulationResult
        A :func:`~ngramspec.simulate` result; the first ``step_api_steps`` iterations of its
        streams are timed (``simulate(..., step_api_steps=...)``).
    engine : {"custom", "sglang", "vllm"}
        ``"custom"``: the step API a custom loop runs (fills
        :attr:`~ngramspec.SimulationResult.step_api_ms_per_step`; admission and finishing
        timed per request and spread over the run's iterations).  ``"sglang"``: SGLang's
        worker calls on the drop-in ``NgramCorpus`` (fills
        :attr:`~ngramspec.SimulationResult.sglang_ms_per_step`).  ``"vllm"``: ngramspec's
        chains run the step API (as ``"custom"``); vLLM's own proposer (profile
        ``vllm-0.33``) is the compiled replay's time, nothing to time.

    Returns
    -------
    float or None
        Milliseconds per iteration; None for a result that cannot be timed
        (``step_api_steps=0``, or a streamed result).

    Examples
    --------
    >>> import ngramspec as ns
    >>> r = ns.simulate(ns.read_streams(ns.streams.embedded_streams_path())[:4], step_api_steps=8)
    >>> r.step_api_ms_per_step is None                  # a result is values: nothing timed yet
    True
    >>> ms = ns.time_drafting(r)                        # the explicit call
    >>> ms == r.step_api_ms_per_step > 0
    True
    """
    rule = engine_of(engine)
    stored = getattr(result, rule.drafting, None) if hasattr(result, "timing_streams") \
        else None
    material = getattr(result, "timing_streams", None)
    if stored is not None or material is None:
        return stored
    prompts, outputs, costs, steps = material
    if rule.name == "sglang":
        from .sglang_timing import time_worker  # (loads the drop-in only when asked)

        per_step, taken = time_worker(result.config, prompts, outputs,
                                      concurrency=result.concurrency, steps=steps, costs=costs)
        result.sglang_seconds, result.sglang_steps = per_step * taken, taken
        return result.sglang_ms_per_step
    per_step, per_req, taken = time_step_api(prompts, outputs, result.config,
                                             result.concurrency, steps, costs, result.backend)
    # Admission and finishing, per request, spread over the whole run's iterations.
    n_run = sum(1 for o in outputs if o.size > 1)
    result.step_api_seconds = taken * (per_step + per_req * n_run / max(result.batch_steps, 1))
    result.step_api_steps = taken
    return result.step_api_ms_per_step
