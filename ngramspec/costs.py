"""Will it pay off at my load?  Cost tables and the concurrency-aware prediction.

A :class:`CostTable` holds measured forward times ``t(batch, tokens)``: one forward of the
target model for ``batch`` requests, each bringing ``tokens`` query tokens (a plain decode
step is ``tokens = 1``; SGLang's verify step is ``tokens = draft_token_num``, padding
included).  Between measured points it interpolates piecewise-linearly in each axis
(bilinearly in each cell of the grid); outside the grid it raises an error naming the
missing point unless extrapolation was asked for.  The per-request models of
:class:`~ngramspec.CostModel` are special cases (:meth:`CostTable.from_model`).

:func:`predict_serving` turns a :class:`~ngramspec.SimulationResult` and a cost table into
predicted serving times, exactly as follows (so that anyone can recompute it):

- **speculative run**: the simulated serving loop at concurrency ``c``.  Requests are
  admitted in file order whenever fewer than ``c`` run; a request with a single output token
  is admitted and leaves without a verify step.  Request ``r`` runs ``len(emitted[r])``
  consecutive steps from its admission, so the batch of every step follows from the step
  counts alone (:func:`schedule`).  Step ``s`` runs ``b_s`` requests and costs
  ``t(b_s, n_s) + draft_ms``, where ``n_s`` is the largest tree sent in the step: SGLang's
  BFS and PROB send ``draft_token_num`` slots for every request (padding included);
  ADAPTIVE sends its real drafts + the root, so a step where no request has a draft is a
  plain decode, ``n_s = 1``.
- **baseline**: the same requests, admission order and ``c`` without speculation: request
  ``r`` needs ``len(output_ids) - 1`` decode steps of one token; a step costs ``t(b_s, 1)``.
- **reported**: total time of each run, decode throughput (decode tokens / total time),
  ``speed_up = baseline time / speculative time``, and per request the time per output
  token (its steps' costs over its ``len(output_ids) - 1`` decode tokens; mean, p50, p90
  over requests with at least one).  Prefill is not modelled: the first output token of
  every request comes from a prefill that both runs pay alike, and is counted by neither.
"""

from __future__ import annotations

import csv
import heapq
import io
import json
import math
import os
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np

from .costmodel import CostModel

__all__ = ["CostTable", "CostTableError", "Schedule", "ServingPrediction", "schedule",
           "predict_serving", "verdict", "parse_concurrency"]

COLUMNS = ("batch", "tokens", "ms")

Cost = Union["CostTable", CostModel]


class CostTableError(ValueError):
    """A cost table that cannot be used, or a point it does not cover; the message says which."""


def _as_int(value: Any, name: str, where: str) -> int:
    if isinstance(value, bool):
        raise CostTableError(f"{where}: {name} must be an integer >= 1, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            value = int(text)
        except ValueError:
            try:
                f = float(text)
            except ValueError:
                f = math.nan
            if not (math.isfinite(f) and f == int(f)):  # "4.0" is 4; "2.5" and "x" are not
                raise CostTableError(f"{where}: {name} must be an integer >= 1, got {text!r}"
                                     ) from None
            value = int(f)
    elif isinstance(value, (float, np.floating)):
        if not (math.isfinite(value) and value == int(value)):
            raise CostTableError(f"{where}: {name} must be an integer >= 1, got {value!r}")
        value = int(value)
    elif not isinstance(value, (int, np.integer)):
        raise CostTableError(f"{where}: {name} must be an integer >= 1, got "
                             f"{type(value).__name__} {value!r}")
    if value < 1:
        raise CostTableError(f"{where}: {name} must be an integer >= 1, got {value}")
    return int(value)


def _as_ms(value: Any, where: str) -> float:
    if isinstance(value, bool):
        raise CostTableError(f"{where}: ms must be a number of milliseconds, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            value = float(text)
        except ValueError:
            raise CostTableError(f"{where}: ms must be a number of milliseconds, got {text!r}"
                                 ) from None
    elif not isinstance(value, (int, float, np.integer, np.floating)):
        raise CostTableError(f"{where}: ms must be a number of milliseconds, got "
                             f"{type(value).__name__} {value!r}")
    value = float(value)
    if not math.isfinite(value) or value <= 0:
        raise CostTableError(f"{where}: ms must be a finite number of milliseconds > 0, got "
                             f"{value}")
    return value


class CostTable:
    """Measured forward times ``t(batch, tokens)`` in milliseconds, on a full grid.

    Parameters
    ----------
    points : iterable of mappings or of (batch, tokens, ms) triples
        One per measured forward: ``batch`` requests with ``tokens`` query tokens each took
        ``ms`` milliseconds.  Every combination of the batch sizes and token counts listed
        must be present exactly once (a full grid), and ``tokens = 1`` (plain decode) must be
        among them.  Extra keys of a mapping are ignored.
    extrapolate : bool
        Outside the grid, extend the edge cells linearly (constant along an axis with a
        single measured value) instead of raising :class:`CostTableError`.
    source : str
        Where the points came from (named in error messages).

    Examples
    --------
    >>> from ngramspec.costs import CostTable
    >>> t = CostTable([(1, 1, 10.0), (1, 8, 14.0), (4, 1, 12.0), (4, 8, 22.0)])
    >>> t.ms(1, 8), t.ms(4, 1)
    (14.0, 12.0)
    >>> round(t.ms(2, 4), 4)   # piecewise-linear in each axis: 278 / 21
    13.2381
    >>> t.ms(8, 8)
    Traceback (most recent call last):
    ...
    ngramspec.costs.CostTableError: cost table has no point for batch=8 (measured batch 1..4); ...
    >>> round(CostTable(t.points(), extrapolate=True).ms(8, 8), 4)
    32.6667
    """

    def __init__(self, points: Iterable[Any], *, extrapolate: bool = False,
                 source: str = "cost table") -> None:
        if not isinstance(extrapolate, bool):
            raise TypeError(f"extrapolate must be a bool, got {type(extrapolate).__name__}")
        if isinstance(points, (str, bytes, Mapping)):
            raise TypeError("points must be an iterable of (batch, tokens, ms) triples or of "
                            "mappings with keys batch, tokens, ms; to read a file use "
                            "CostTable.read(path)")
        seen: dict[tuple[int, int], str] = {}
        values: dict[tuple[int, int], float] = {}
        for i, p in enumerate(points):
            where = f"{source}: point {i}" if not isinstance(p, _Row) else f"{source}: {p.where}"
            if isinstance(p, Mapping):
                missing = [c for c in COLUMNS if c not in p]
                if missing:
                    raise CostTableError(f"{where}: missing {', '.join(missing)} (a point needs "
                                         f"{', '.join(COLUMNS)})")
                b, n, ms = p["batch"], p["tokens"], p["ms"]
            else:
                try:
                    b, n, ms = p
                except (TypeError, ValueError):
                    raise CostTableError(f"{where}: a point is (batch, tokens, ms), got {p!r}"
                                         ) from None
            key = (_as_int(b, "batch", where), _as_int(n, "tokens", where))
            t = _as_ms(ms, where)
            if key in seen:
                raise CostTableError(f"{where}: duplicate point batch={key[0]}, tokens={key[1]} "
                                     f"(also {seen[key].rsplit(': ', 1)[-1]}); give each point "
                                     "once (a median of repeats, not the repeats)")
            seen[key] = where
            values[key] = t
        if not values:
            raise CostTableError(f"{source}: no points; a cost table needs rows "
                                 f"{', '.join(COLUMNS)}")
        batches = np.array(sorted({k[0] for k in values}), np.int64)
        tokens = np.array(sorted({k[1] for k in values}), np.int64)
        if tokens[0] != 1:
            raise CostTableError(f"{source}: no tokens=1 rows; the plain decode step "
                                 "(tokens = 1) is what speculation is compared with, measure it "
                                 "at every batch size")
        missing = [(int(b), int(n)) for b in batches for n in tokens if (b, n) not in values]
        if missing:
            shown = ", ".join(f"batch={b} tokens={n}" for b, n in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise CostTableError(f"{source}: not a full grid: missing {shown}{more} (every "
                                 f"batch {batches.tolist()} needs every tokens "
                                 f"{tokens.tolist()})")
        grid = np.array([[values[(int(b), int(n))] for n in tokens] for b in batches])
        self.batches, self.tokens, self.grid = batches, tokens, grid
        self.extrapolate = extrapolate
        self.source = source
        for a in (batches, tokens, grid):
            a.setflags(write=False)

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def read(cls, path: str | os.PathLike[str], *, extrapolate: bool = False) -> "CostTable":
        """Read a table from CSV (header ``batch,tokens,ms``; other columns ignored) or JSON
        (a list of ``{"batch", "tokens", "ms"}`` objects, or ``{"points": [...]}``)."""
        name = os.fspath(path)
        try:
            with open(name, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise CostTableError(f"cost table {name!r}: cannot be read ({e.strerror or e})"
                                 ) from None
        except UnicodeDecodeError:
            raise CostTableError(f"cost table {name!r}: not UTF-8 text (CSV or JSON)") from None
        return cls.parse(text, extrapolate=extrapolate, source=f"cost table {name}",
                         json_format=name.lower().endswith(".json"))

    @classmethod
    def parse(cls, text: str, *, extrapolate: bool = False, source: str = "cost table",
              json_format: bool | None = None) -> "CostTable":
        """A table from CSV or JSON text (JSON when ``json_format`` or when the text starts
        with ``[`` or ``{``)."""
        stripped = text.lstrip()
        if json_format or (json_format is None and stripped[:1] in ("[", "{")):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise CostTableError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})"
                                     ) from None
            if isinstance(data, Mapping):
                if "points" not in data:
                    raise CostTableError(f"{source}: a JSON table is a list of points or an "
                                         "object with a 'points' list")
                data = data["points"]
            if not isinstance(data, list) or not all(isinstance(p, Mapping) for p in data):
                raise CostTableError(f"{source}: the JSON points must be a list of objects "
                                     f"with keys {', '.join(COLUMNS)}")
            rows = [_Row(p, f"point {i}") for i, p in enumerate(data)]
            return cls(rows, extrapolate=extrapolate, source=source)
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise CostTableError(f"{source}: missing column(s) {', '.join(missing)} in the "
                                 f"header {header} (a cost table has columns "
                                 f"{', '.join(COLUMNS)})")
        reader.fieldnames = header
        rows = []
        for row in reader:
            line = reader.line_num
            if all(v is None or not str(v).strip() for v in row.values()):
                continue
            if None in row:
                raise CostTableError(f"{source}: line {line}: more cells than columns")
            for c in COLUMNS:
                if row[c] is None or not str(row[c]).strip():
                    raise CostTableError(f"{source}: line {line}: empty {c}")
            rows.append(_Row(row, f"line {line}"))
        return cls(rows, extrapolate=extrapolate, source=source)

    @classmethod
    def from_model(cls, model: CostModel, *, max_batch: int = 1,
                   max_tokens: int = 12) -> "CostTable":
        """The table a :class:`~ngramspec.CostModel` stands for, up to these sizes.

        Measured (``decode_ms``, ``verify_ms``): ``decode_ms`` for ``tokens = 1`` and
        ``verify_ms`` for every larger tree, at every batch size.  Linear (``step_ms``,
        ``token_ms``): ``step_ms + token_ms * batch * tokens``, which bilinear
        interpolation between the grid's corners reproduces exactly.

        Examples
        --------
        >>> from ngramspec import CostModel
        >>> from ngramspec.costs import CostTable
        >>> t = CostTable.from_model(CostModel(decode_ms=12.2, verify_ms=30), max_batch=8)
        >>> t.ms(5, 1), t.ms(5, 3), t.ms(5, 12)
        (12.2, 30.0, 30.0)
        """
        if not isinstance(model, CostModel):
            raise TypeError(f"model must be a CostModel, got {type(model).__name__}")
        max_batch = _as_int(max_batch, "max_batch", "from_model")
        max_tokens = _as_int(max_tokens, "max_tokens", "from_model")
        batches = sorted({1, max_batch})
        if model.kind == "measured":
            tokens = sorted({1, min(2, max_tokens), max_tokens})
            pts = [(b, n, model.decode_ms if n == 1 else model.verify_ms)
                   for b in batches for n in tokens]
            desc = f"decode {model.decode_ms:g} ms, verify {model.verify_ms:g} ms at every size"
        else:
            tokens = sorted({1, max_tokens})
            pts = [(b, n, model.step_ms + model.token_ms * b * n) for b in batches for n in tokens]
            desc = f"{model.step_ms:g} ms + {model.token_ms:g} ms per token"
        return cls(pts, source=desc)

    # --- use ------------------------------------------------------------------------------

    def points(self) -> list[tuple[int, int, float]]:
        """The measured points as ``(batch, tokens, ms)``, batch-major."""
        return [(int(b), int(n), float(self.grid[i, j])) for i, b in enumerate(self.batches)
                for j, n in enumerate(self.tokens)]

    def to_csv(self) -> str:
        """The table as CSV text (header ``batch,tokens,ms``)."""
        return "batch,tokens,ms\n" + "".join(f"{b},{n},{ms:.6g}\n" for b, n, ms in self.points())

    def __repr__(self) -> str:
        return (f"CostTable(batch={self.batches.tolist()}, tokens={self.tokens.tolist()}, "
                f"extrapolate={self.extrapolate})")

    def _axis(self, axis: np.ndarray, x: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Left grid index and weight of the right neighbour, per value."""
        if not self.extrapolate:
            bad = (x < axis[0]) | (x > axis[-1])
            if axis.size == 1:
                bad = x != axis[0]
            if bad.any():
                v = int(x[np.argmax(bad)])
                span = f"{axis[0]}..{axis[-1]}" if axis.size > 1 else f"{axis[0]} only"
                raise CostTableError(
                    f"{self.source} has no point for {name}={v} (measured {name} {span}); "
                    "measure it, or allow extrapolation (extrapolate=True, --extrapolate)")
        if axis.size == 1:
            return np.zeros(x.shape, np.int64), np.zeros(x.shape)
        i = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, axis.size - 2)
        w = (x - axis[i]) / (axis[i + 1] - axis[i])
        return i, w

    def ms_array(self, batch: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`ms` (float64 array of the broadcast shape)."""
        b, n = np.broadcast_arrays(np.asarray(batch, np.int64), np.asarray(tokens, np.int64))
        if b.size and (b.min() < 1 or n.min() < 1):
            raise CostTableError("batch and tokens must be >= 1")
        i, wb = self._axis(self.batches, b, "batch")
        j, wt = self._axis(self.tokens, n, "tokens")
        g = self.grid
        i1 = np.minimum(i + 1, self.batches.size - 1)
        j1 = np.minimum(j + 1, self.tokens.size - 1)
        out = ((1 - wb) * (1 - wt) * g[i, j] + wb * (1 - wt) * g[i1, j]
               + (1 - wb) * wt * g[i, j1] + wb * wt * g[i1, j1])
        if out.size and not (out > 0).all():
            k = int(np.argmin(out))
            raise CostTableError(f"{self.source}: extrapolating to batch={int(b.flat[k])}, "
                                 f"tokens={int(n.flat[k])} gives {out.flat[k]:.4g} ms (not > 0); "
                                 "measure that point")
        return out

    def ms(self, batch: int, tokens: int) -> float:
        """Time of one forward of ``batch`` requests with ``tokens`` query tokens each."""
        b = _as_int(batch, "batch", "ms")
        n = _as_int(tokens, "tokens", "ms")
        return float(self.ms_array(np.array([b]), np.array([n]))[0])


class _Row(dict):
    """A point read from a file, remembering where (for error messages)."""

    def __init__(self, data: Mapping, where: str) -> None:
        super().__init__(data)
        self.where = where


# --- the schedule -------------------------------------------------------------------------


@dataclass(frozen=True)
class Schedule:
    """Per-step batch composition of a simulated run and of its baseline.

    Attributes
    ----------
    concurrency : int
    batch, tokens : np.ndarray
        (S,) int64 per speculative step: requests in it (``b_s``) and the largest tree sent
        (``n_s``, 1 for a plain decode).
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


def schedule(result: Any, *, concurrency: int | None = None) -> Schedule:
    """The per-step batch composition of a :class:`~ngramspec.SimulationResult`.

    It follows from the per-request step counts and the admission rule alone (see the module
    docstring).  ``concurrency`` defaults to the result's.

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
    """
    c = result.concurrency if concurrency is None else concurrency
    if isinstance(c, bool) or not isinstance(c, (int, np.integer)) or c < 1:
        raise ValueError(f"concurrency must be an int >= 1, got {c!r}")
    steps = np.array([e.size for e in result.emitted], np.int64)
    start = _starts(steps, int(c))
    batch = _occupancy(start, steps)
    cfg = result.config
    if cfg.match_type == "ADAPTIVE":
        # ADAPTIVE sends its real drafts + the root; the step's forward is its largest tree.
        idx = np.repeat(start, steps) + (np.arange(int(steps.sum()))
                                         - np.repeat(np.cumsum(steps) - steps, steps))
        tokens = np.ones(batch.size, np.int64)
        sent = np.concatenate(result.drafts).astype(np.int64) + 1 if steps.sum() else \
            np.zeros(0, np.int64)
        np.maximum.at(tokens, idx, sent)
    else:
        tokens = np.full(batch.size, cfg.draft_token_num, np.int64)
    base_steps = np.maximum(np.asarray(result.output_lens, np.int64) - 1, 0)
    base_start = _starts(base_steps, int(c))
    return Schedule(int(c), batch, tokens, start, steps, _occupancy(base_start, base_steps),
                    base_start, base_steps)


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
                "tokens": self.tokens, "tpot_ms": dict(self.tpot_ms)}


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
                                    max_tokens=int(sched.tokens.max(initial=1)))
    raise TypeError(f"cost must be a CostTable or a CostModel, got {type(cost).__name__}")


def predict_serving(result: Any, cost: Cost, *, draft_ms: float | None = None,
                    sched: Schedule | None = None) -> ServingPrediction:
    """Predicted serving time with and without speculation (module docstring: the rule).

    Parameters
    ----------
    result : SimulationResult
        A simulated run; its concurrency is the one predicted for.
    cost : CostTable or CostModel
        Forward times.
    draft_ms : float, optional
        Drafting time per step; default ``result.step_api_ms_per_step`` (the step API a custom
        loop runs, timed by :func:`~ngramspec.simulate`), else ``result.draft_ms_per_step``
        (the compiled replay's own CPU time, a low estimate); 0 excludes drafting.
    sched : Schedule, optional
        ``schedule(result)``, if already computed.

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
    """
    sched = schedule(result) if sched is None else sched
    if draft_ms is None:
        api = getattr(result, "step_api_ms_per_step", None)
        draft_ms = float(result.draft_ms_per_step if api is None else api)
    if isinstance(draft_ms, bool) or not isinstance(draft_ms, (int, float)) or \
            not math.isfinite(draft_ms) or draft_ms < 0:
        raise ValueError(f"draft_ms must be a finite number of milliseconds >= 0, got "
                         f"{draft_ms!r}")
    table = _table_for(cost, sched)
    spec = table.ms_array(sched.batch, sched.tokens) + draft_ms
    base = table.ms_array(sched.baseline_batch, np.ones_like(sched.baseline_batch))
    tokens = sched.baseline_steps
    spec_ms, base_ms = float(spec.sum()), float(base.sum())
    return ServingPrediction(
        concurrency=sched.concurrency, steps=int(sched.batch.size),
        baseline_steps=int(sched.baseline_batch.size), speculative_ms=spec_ms,
        baseline_ms=base_ms, speed_up=base_ms / spec_ms if spec_ms else math.nan,
        tokens=int(tokens.sum()), draft_ms=float(draft_ms),
        tpot_ms=_tpot(spec, sched.start, sched.steps, tokens),
        baseline_tpot_ms=_tpot(base, sched.baseline_start, sched.baseline_steps, tokens))


def verdict(predictions: Sequence[ServingPrediction]) -> str:
    """One line: up to which concurrency speculation pays off among the levels predicted.

    Examples
    --------
    >>> from ngramspec.costs import ServingPrediction, verdict
    >>> ps = [ServingPrediction(c, 1, 1, 1.0, s, s, 1, 0.0) for c, s in [(1, 1.3), (4, 1.1),
    ...                                                                     (16, 0.9)]]
    >>> verdict(ps)
    'pays off up to concurrency 4: disable above (0.90x at 16)'
    """
    if not predictions:
        raise ValueError("no predictions to judge")
    ps = sorted(predictions, key=lambda p: p.concurrency)
    good = [p for p in ps if p.speed_up > 1]
    if not good:
        best = max(ps, key=lambda p: p.speed_up)
        return (f"does not pay off at any concurrency tested (best {best.speed_up:.2f}x at "
                f"{best.concurrency}): keep it disabled")
    if len(good) == len(ps):
        return (f"pays off at every concurrency tested, up to {ps[-1].concurrency} "
                f"({ps[-1].speed_up:.2f}x there)")
    first_bad = next(i for i, p in enumerate(ps) if p.speed_up <= 1)
    if all(p.speed_up <= 1 for p in ps[first_bad:]) and first_bad > 0:
        bad = ps[first_bad]
        return (f"pays off up to concurrency {ps[first_bad - 1].concurrency}: disable above "
                f"({bad.speed_up:.2f}x at {bad.concurrency})")
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
