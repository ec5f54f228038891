"""Will it pay off at my load?  The concurrency-aware serving prediction.

:func:`predict_serving` turns a :class:`~ngramspec.SimulationResult` and a cost table into
predicted serving times, exactly as follows (so that anyone can recompute it):

- **speculative run**: the simulated serving loop at concurrency ``c``.  Requests are
  admitted in file order whenever fewer than ``c`` run; a request with a single output token
  is admitted and leaves without a verify step.  Request ``r`` runs ``len(emitted[r])``
  consecutive steps from its admission, so the batch of every step follows from the step
  counts alone (:func:`schedule`).  Step ``s`` runs ``b_s`` requests and costs
  ``t(b_s, n_s) + draft_ms``, where the **engine** that serves the drafts sets ``n_s`` and
  ``draft_ms`` (:mod:`ngramspec.costs.engines`, one rule each): in a custom loop
  (``engine="custom"``) SGLang's BFS and PROB send ``draft_token_num`` slots for every
  request (padding included) and ADAPTIVE its real drafts + the root (the largest tree of
  the step), so a step where no request has a draft is a plain decode, ``n_s = 1``; SGLang's
  worker (``engine="sglang"``) verifies ``draft_token_num`` slots per request at every step
  whatever the trees, ``n_s = draft_token_num``.
- **baseline**: the same requests, admission order and ``c`` without speculation: request
  ``r`` needs ``len(output_ids) - 1`` decode steps of one token; a step costs ``t(b_s, 1)``.
- **reported**: total time of each run, decode throughput (decode tokens / total time),
  ``speed_up = baseline time / speculative time``, and per request the time per output
  token (its steps' costs over its ``len(output_ids) - 1`` decode tokens; mean, p50, p90
  over requests with at least one).  Prefill is not modelled: the first output token of
  every request comes from a prefill that both runs pay alike, and is counted by neither.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from .engines import Engine, check_engine_config, drafting_ms, engine_of, step_tokens
from .model import CostModel
from .table import Cost, CostTable

__all__ = ["Schedule", "ServingPrediction", "schedule", "predict_serving", "verdict",
           "parse_concurrency", "speed_up_text"]


# --- the schedule -------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """Per-step batch composition of a simulated run and of its baseline.

    Attributes
    ----------
    concurrency : int
    batch, tokens : np.ndarray
        (S,) int64 per speculative step: requests in it (``b_s``) and the query tokens per
        request of its forward (``n_s``, 1 for a plain decode), by the engine's rule.
    start, steps : np.ndarray
        (R,) int64 per request: its first speculative step and its number of steps.
    baseline_batch : np.ndarray
        (S',) int64 per baseline step: requests in it.
    baseline_start, baseline_steps : np.ndarray
        (R,) int64: the same for the baseline (``baseline_steps = len(output_ids) - 1``).
    """

    concurrency: int
    batch: np.ndarray
    tokens: np.ndarray
    start: np.ndarray
    steps: np.ndarray
    baseline_batch: np.ndarray
    baseline_start: np.ndarray
    baseline_steps: np.ndarray
    engine: str = "custom"

    def rows(self) -> list[dict[str, int]]:
        """The speculative schedule written out: ``{"step", "batch", "tokens"}`` per step."""
        return [{"step": s, "batch": int(b), "tokens": int(n)}
                for s, (b, n) in enumerate(zip(self.batch, self.tokens))]


def _starts(lengths: np.ndarray, concurrency: int) -> np.ndarray:
    """First step of each request under in-order admission into ``concurrency`` slots.

    A slot frees at the end of its request's last step and the next request in order takes
    the earliest free slot; a request without steps takes none."""
    slots = [0] * min(concurrency, max(int(np.count_nonzero(lengths)), 1))
    start = np.zeros(lengths.size, np.int64)
    for r, n in enumerate(lengths.tolist()):
        if n == 0:
            start[r] = slots[0]  # admitted and gone at once
            continue
        t = heapq.heappop(slots)
        start[r] = t
        heapq.heappush(slots, t + n)
    return start


def _occupancy(start: np.ndarray, steps: np.ndarray) -> np.ndarray:
    total = int((start + steps).max()) if steps.size else 0
    diff = np.zeros(total + 1, np.int64)
    busy = (steps > 0).astype(np.int64)
    np.add.at(diff, start, busy)
    np.add.at(diff, start + steps, -busy)
    return np.cumsum(diff)[:total]


def schedule(result: Any, *, concurrency: int | None = None,
             engine: str | Engine = "custom") -> Schedule:
    """The per-step batch composition of a :class:`~ngramspec.SimulationResult`.

    It follows from the per-request step counts and the admission rule alone (see the module
    docstring).  ``concurrency`` defaults to the result's; ``engine`` (``"custom"`` or
    ``"sglang"``) sets the tokens per request of each step.

    Examples
    --------
    >>> import ngramspec as ns
    >>> from ngramspec.costs import schedule
    >>> rows = [{"id": i, "prompt_ids": [1, 2], "output_ids": [1, 2, 1, 2, 1][:k]}
    ...         for i, k in enumerate([5, 1, 3, 4])]
    >>> r = ns.simulate(rows, config=ns.NgramConfig(draft_token_num=4, capacity=1000),
    ...                 concurrency=2)
    >>> [e.tolist() for e in r.emitted]     # request 1 has one output token: no step
    [[1, 2, 1], [], [1, 1], [3]]
    >>> s = schedule(r)
    >>> s.batch.tolist(), s.start.tolist(), s.baseline_batch.tolist()
    ([2, 2, 2], [0, 0, 0, 2], [2, 2, 2, 2, 1])

    ADAPTIVE in a custom loop sends its real trees; SGLang's worker sends every slot:

    >>> a = ns.simulate(rows, config=ns.NgramConfig.recommended(draft_token_num=4,
    ...                 capacity=1000), concurrency=2)
    >>> schedule(a).tokens.tolist(), schedule(a, engine="sglang").tokens.tolist()
    ([2, 3, 3], [4, 4, 4])
    """
    rule = engine_of(engine)
    cfg = result.config
    check_engine_config(rule, cfg)
    c = result.concurrency if concurrency is None else concurrency
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {c!r}")
    steps = np.array([e.size for e in result.emitted], np.int64)
    start = _starts(steps, int(c))
    batch = _occupancy(start, steps)
    # Per request-step: the run's step it falls in, and its real drafts + the root.
    step_of = np.repeat(start, steps) + (np.arange(int(steps.sum()))
                                         - np.repeat(np.cumsum(steps) - steps, steps))
    sent = np.concatenate(result.drafts).astype(np.int64) + 1 if steps.sum() else \
        np.zeros(0, np.int64)
    tokens = step_tokens(rule, draft_token_num=cfg.draft_token_num, padded=cfg.mode.padded,
                         steps=batch.size, step_of=step_of, sent=sent)
    base_steps = np.maximum(np.asarray(result.output_lens, np.int64) - 1, 0)
    base_start = _starts(base_steps, int(c))
    return Schedule(int(c), batch, tokens, start, steps, _occupancy(base_start, base_steps),
                    base_start, base_steps, rule.name)


# --- prediction ---------------------------------------------------------------------------


@dataclass(frozen=True)
class ServingPrediction:
    """Predicted serving times of one simulated run (see the module docstring).

    Attributes
    ----------
    concurrency, steps, baseline_steps, tokens : int
        Concurrency, speculative steps, baseline steps and decode tokens (both runs).
    speculative_ms, baseline_ms : float
        Total time of each run.
    speed_up : float
        ``baseline_ms / speculative_ms``.
    draft_ms : float
        Drafting time added to every speculative step.
    tpot_ms, baseline_tpot_ms : dict
        Per-request time per output token, ``{"mean", "p50", "p90"}``.
    engine : str
        The engine priced (``"custom"`` or ``"sglang"``, :mod:`ngramspec.costs.engines`).
    draft_source : str
        Where ``draft_ms`` comes from (given, timed, included in the cost table).
    interval : Interval, optional
        90% bootstrap intervals over requests (:class:`~ngramspec.costs.Interval`, from
        :func:`~ngramspec.costs.bootstrap`), where asked for.
    """

    concurrency: int
    steps: int
    baseline_steps: int
    speculative_ms: float
    baseline_ms: float
    speed_up: float
    tokens: int
    draft_ms: float
    tpot_ms: dict[str, float] = field(default_factory=dict)
    baseline_tpot_ms: dict[str, float] = field(default_factory=dict)
    engine: str = "custom"
    draft_source: str = ""
    interval: Any = None  # an ngramspec.costs.Interval (bootstrap sits above this module)

    @property
    def speculative_tokens_per_s(self) -> float:
        return 1e3 * self.tokens / self.speculative_ms if self.speculative_ms else math.inf

    @property
    def baseline_tokens_per_s(self) -> float:
        return 1e3 * self.tokens / self.baseline_ms if self.baseline_ms else math.inf

    def to_dict(self) -> dict[str, Any]:
        """The ``"prediction"`` entry of the JSON report."""
        return {"concurrency": self.concurrency, "steps": self.steps,
                "baseline_steps": self.baseline_steps, "speculative_ms": self.speculative_ms,
                "baseline_ms": self.baseline_ms, "speed_up": self.speed_up,
                "tokens": self.tokens, "tpot_ms": dict(self.tpot_ms), "engine": self.engine,
                "draft_ms": self.draft_ms, "draft_source": self.draft_source,
                **_interval_dict(self.interval)}


def _interval_dict(iv: Any) -> dict[str, Any]:
    """``low``/``high`` beside each figure, as the JSON reports carry them."""
    if iv is None:
        return {}
    out: dict[str, Any] = {"tokens_per_step_low": iv.tokens_per_step[0],
                           "tokens_per_step_high": iv.tokens_per_step[1],
                           "interval_requests": iv.requests}
    if iv.speed_up is not None:
        out.update(speed_up_low=iv.speed_up[0], speed_up_high=iv.speed_up[1])
    return out


def _tpot(step_ms: np.ndarray, start: np.ndarray, steps: np.ndarray,
          tokens: np.ndarray) -> dict[str, float]:
    cum = np.concatenate([[0.0], np.cumsum(step_ms)])
    has = tokens > 0
    if not has.any():
        return {"mean": math.nan, "p50": math.nan, "p90": math.nan}
    per = (cum[(start + steps)[has]] - cum[start[has]]) / tokens[has]
    return {"mean": float(per.mean()), "p50": float(np.percentile(per, 50)),
            "p90": float(np.percentile(per, 90))}


def _table_for(cost: Any, sched: Schedule) -> "CostTable":
    if isinstance(cost, CostTable):
        return cost
    if isinstance(cost, CostModel):
        mb = max(int(sched.batch.max(initial=1)), int(sched.baseline_batch.max(initial=1)))
        return CostTable.from_model(cost, max_batch=mb,
                                    max_tokens=int(math.ceil(sched.tokens.max(initial=1))))
    raise TypeError(f"cost must be a CostTable or a CostModel, got {type(cost).__name__}")


def step_ms(sched: Schedule, cost: Cost, draft_ms: float) -> tuple[np.ndarray, np.ndarray]:
    """The time of every step of a schedule: ``(speculative, baseline)``, ms (the rule of the
    module docstring; ``draft_ms`` checked by the caller)."""
    table = _table_for(cost, sched)
    spec = table.ms_array(sched.batch, sched.tokens) + draft_ms
    base = table.ms_array(sched.baseline_batch, np.ones_like(sched.baseline_batch))
    return spec, base


def predict_serving(result: Any, cost: Cost, *, draft_ms: float | None = None,
                    sched: Schedule | None = None,
                    engine: str | Engine = "custom") -> ServingPrediction:
    """Predicted serving time with and without speculation (module docstring: the rule).

    Parameters
    ----------
    result : SimulationResult
        A simulated run; its concurrency is the one predicted for.
    cost : CostTable or CostModel
        Forward times.
    draft_ms : float, optional
        Drafting time per step; by default what the engine pays, timed on the result's
        streams: ``"custom"``, ``result.step_api_ms_per_step`` (the step API a custom loop
        runs); ``"sglang"``, ``result.sglang_ms_per_step`` (SGLang's worker calls on the
        drop-in ``NgramCorpus``), or 0 with a cost table whose verify rows include drafting;
        where the result has no such figure (streamed results), ``result.draft_ms_per_step``
        (the compiled replay's own CPU time, a low estimate).  0 excludes drafting.
    sched : Schedule, optional
        ``schedule(result, engine=engine)``, if already computed.
    engine : {"custom", "sglang"}
        The serving engine priced (:mod:`ngramspec.costs.engines`): a custom loop, or
        SGLang's NGRAM worker, which verifies ``draft_token_num`` slots per request at every
        step.

    Examples
    --------
    >>> import ngramspec as ns
    >>> from ngramspec.costs import CostTable, predict_serving
    >>> rows = [{"id": i, "prompt_ids": [1, 2], "output_ids": [1, 2, 1, 2, 1, 2, 1]}
    ...         for i in range(3)]
    >>> r = ns.simulate(rows, config=ns.NgramConfig(draft_token_num=4, capacity=1000),
    ...                 concurrency=2)
    >>> [e.tolist() for e in r.emitted]
    [[1, 2, 3], [1, 2, 3], [4, 2]]
    >>> t = CostTable([(1, 1, 10), (1, 4, 20), (2, 1, 12), (2, 4, 30)])
    >>> p = predict_serving(r, t, draft_ms=0)
    >>> p.steps, p.speculative_ms       # 3 steps of 2 requests, then 2 of 1: 3*30 + 2*20
    (5, 130.0)
    >>> p.baseline_steps, p.baseline_ms  # 6 decode steps of 2, then 6 of 1: 6*12 + 6*10
    (12, 132.0)
    >>> round(p.speed_up, 4), p.tpot_ms["p50"]
    (1.0154, 15.0)

    Priced as SGLang's worker runs it (the same steps here: BFS sends every slot anyway):

    >>> predict_serving(r, t, draft_ms=0, engine="sglang").speculative_ms
    130.0
    """
    rule = engine_of(engine)
    if sched is None:
        sched = schedule(result, engine=rule)
    elif sched.engine != rule.name:
        raise ValueError(f"sched was computed for engine {sched.engine!r}, not {rule.name!r}: "
                         f"pass schedule(result, engine={rule.name!r})")
    if draft_ms is None:
        draft_ms, source = drafting_ms(rule, result, cost)
    else:
        source = "given"
    if isinstance(draft_ms, bool) or not isinstance(draft_ms, (int, float)) or \
            not math.isfinite(draft_ms) or draft_ms < 0:
        raise ValueError(f"draft_ms must be a finite number of milliseconds >= 0, got "
                         f"{draft_ms!r}")
    spec, base = step_ms(sched, cost, draft_ms)
    tokens = sched.baseline_steps
    spec_ms, base_ms = float(spec.sum()), float(base.sum())
    return ServingPrediction(
        concurrency=sched.concurrency, steps=int(sched.batch.size),
        baseline_steps=int(sched.baseline_batch.size), speculative_ms=spec_ms,
        baseline_ms=base_ms, speed_up=base_ms / spec_ms if spec_ms else math.nan,
        tokens=int(tokens.sum()), draft_ms=float(draft_ms),
        tpot_ms=_tpot(spec, sched.start, sched.steps, tokens),
        baseline_tpot_ms=_tpot(base, sched.baseline_start, sched.baseline_steps, tokens),
        engine=rule.name, draft_source=source)


def verdict(predictions: Sequence[ServingPrediction]) -> str:
    """One line: up to which concurrency speculation pays off among the levels predicted.

    Examples
    --------
    >>> from ngramspec.costs import ServingPrediction, verdict
    >>> ps = [ServingPrediction(c, 1, 1, 1.0, s, s, 1, 0.0) for c, s in [(1, 1.3), (4, 1.1),
    ...                                                                     (16, 0.9)]]
    >>> verdict(ps)
    'pays off up to concurrency 4: disable above (0.90x at 16)'

    SGLang 0.5.23 has no per-batch-size switch for NGRAM, so the verdict says what to do:

    >>> import dataclasses
    >>> print(verdict([dataclasses.replace(p, engine="sglang") for p in ps]))
    pays off up to concurrency 4: disable above (0.90x at 16); SGLang cannot switch NGRAM off by batch size: serve it only where the load stays at or below 4 requests (e.g. --max-running-requests 4 on a pool of its own)

    With intervals (:func:`~ngramspec.costs.bootstrap`), a level whose interval straddles 1.0
    is named, and so are too few requests:

    >>> from ngramspec.costs import Interval
    >>> iv = Interval((1.5, 1.7), (0.8, 1.05), requests=12, resamples=400)
    >>> print(verdict([dataclasses.replace(ps[2], interval=iv)]))
    does not pay off at any concurrency tested (best 0.90x at 16): keep it disabled; not enough requests to tell at concurrency 16 (the 90% interval straddles 1.0); only 12 requests: below 30 the intervals themselves are unreliable, record more
    """
    if not predictions:
        raise ValueError("no predictions to judge")
    ps = sorted(predictions, key=lambda p: p.concurrency)
    line = _point_verdict(ps)
    unsure = [p.concurrency for p in ps if p.interval is not None and
              p.interval.speed_up is not None and p.interval.speed_up[0] <= 1 <=
              p.interval.speed_up[1]]
    if unsure:
        line += (f"; not enough requests to tell at concurrency "
                 f"{', '.join(map(str, unsure))} (the 90% interval straddles 1.0)")
    few = next((p.interval for p in ps if p.interval is not None and p.interval.few), None)
    if few is not None:
        line += (f"; only {few.requests} requests: below {few.min_requests} the intervals "
                 "themselves are unreliable, record more")
    return line


def _point_verdict(ps: list[ServingPrediction]) -> str:
    """The verdict from the predicted figures alone (levels in increasing order)."""
    good = [p for p in ps if p.speed_up > 1]
    if not good:
        best = max(ps, key=lambda p: p.speed_up)
        return (f"does not pay off at any concurrency tested (best "
                f"{speed_up_text(best.speed_up)} at {best.concurrency}): keep it disabled")
    if len(good) == len(ps):
        return (f"pays off at every concurrency tested, up to {ps[-1].concurrency} "
                f"({speed_up_text(ps[-1].speed_up)} there)")
    first_bad = next(i for i, p in enumerate(ps) if p.speed_up <= 1)
    if all(p.speed_up <= 1 for p in ps[first_bad:]) and first_bad > 0:
        bad, top = ps[first_bad], ps[first_bad - 1].concurrency
        line = (f"pays off up to concurrency {top}: disable above "
                f"({speed_up_text(bad.speed_up)} at {bad.concurrency})")
        if ps[0].engine == "sglang":
            line += (f"; SGLang cannot switch NGRAM off by batch size: serve it only where "
                     f"the load stays at or below {top} requests (e.g. --max-running-requests "
                     f"{top} on a pool of its own)")
        return line
    return ("pays off only at concurrency " + ", ".join(str(p.concurrency) for p in good)
            + ": not monotonic, measure between these levels")


def parse_concurrency(text: str, *, flag: str = "--concurrency") -> list[int]:
    """Concurrency levels from a comma list (``"1,4,16,48"``): distinct integers >= 1.

    Examples
    --------
    >>> from ngramspec.costs import parse_concurrency
    >>> parse_concurrency("1, 4,16")
    [1, 4, 16]
    >>> parse_concurrency("4,x")
    Traceback (most recent call last):
    ...
    ValueError: --concurrency: 'x' is not an integer (a comma list of integers >= 1, e.g. 1,4,16)
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{flag}: empty; give a comma list of integers >= 1, e.g. 1,4,16")
    out: list[int] = []
    for item in text.split(","):
        item = item.strip()
        if not item:
            raise ValueError(f"{flag}: empty item in {text!r} (a comma list of integers >= 1)")
        try:
            c = int(item)
        except ValueError:
            raise ValueError(f"{flag}: {item!r} is not an integer (a comma list of integers "
                             ">= 1, e.g. 1,4,16)") from None
        if c < 1:
            raise ValueError(f"{flag}: {c} is not >= 1 (requests decoded together)")
        if c in out:
            raise ValueError(f"{flag}: {c} is listed twice")
        out.append(c)
    return out


def speed_up_text(x: float, digits: int = 2) -> str:
    """A speed-up with the digits that keep it on its side of 1.0 (``0.995`` is ``0.995x``,
    not ``1.00x``).

    Examples
    --------
    >>> speed_up_text(1.2149), speed_up_text(0.996), speed_up_text(1.0)
    ('1.21x', '0.996x', '1.00x')
    >>> speed_up_text(0.9999999), speed_up_text(1.0000001)
    ('0.99999x', '1.00001x')
    """
    if not math.isfinite(x):
        return f"{x}x"
    for d in range(digits, 6):
        text = f"{x:.{d}f}"
        shown = float(text)
        if x == 1.0 or (shown > 1) == (x > 1) and (shown < 1) == (x < 1):
            return text + "x"
    # Closer to 1 than five digits show: rounded away from 1, so it stays on its side.
    step = 1e-5
    return f"{(math.floor(x / step) if x < 1 else math.ceil(x / step)) * step:.5f}x"
