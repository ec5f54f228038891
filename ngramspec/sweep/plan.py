"""A whole sweep: the jobs of a grid over parts and levels, run on an executor, resumable.

:func:`plan_sweep` turns requests and a grid into a :class:`SweepPlan` (parts, jobs, the
sweep's fingerprint); :func:`run_sweep` runs the jobs a results file does not hold yet and
yields each as it finishes (appending it to the file); :func:`pair_holdout` and :func:`rank`
turn the records into a ranking.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Iterable, Iterator, Mapping, Sequence

from ..costs import engine_of
from .executors import Executor, LocalExecutor
from .jobs import Cost, Job, cost_fingerprint, job_key, run_job, streams_digest, warm_kernels
from .results import ResultsFile, fingerprint
from .split import sweep_holdout

__all__ = ["SweepPlan", "Finished", "plan_sweep", "run_sweep", "pair_holdout", "rank"]


@dataclass(frozen=True)
class SweepPlan:
    """The jobs of a sweep and what they share.

    Attributes
    ----------
    parts : dict of str to list of dict
        The requests by part: ``{"all": rows}``, or ``{"tune": ..., "holdout": ...}``;
        shipped to every worker once.
    jobs : list of Job
        Part by part, grid point by grid point, level by level.
    fingerprint : str
        Identifies the sweep's inputs in its results file.
    holdout : str
        What was held out (empty without a hold-out).
    """

    parts: dict[str, list[dict]]
    jobs: list[Job]
    fingerprint: str
    holdout: str = ""

    @property
    def keys(self) -> list[str]:
        """The jobs' keys, in order."""
        return [job.key for job in self.jobs]

    def pending(self, done: Iterable[str] = ()) -> list[int]:
        """Indices of the jobs whose keys are not in ``done``."""
        have = set(done)
        return [i for i, key in enumerate(self.keys) if key not in have]


@dataclass(frozen=True)
class Finished:
    """One job back from its worker.

    Attributes
    ----------
    index : int
        Its position in :attr:`SweepPlan.jobs`.
    record : dict or None
        Its results record (timings stamped), None when it failed.
    error : str or None
        Why it failed.
    done, total : int
        Jobs finished so far (those already in the results file included), of all.
    """

    index: int
    record: dict | None
    error: str | None
    done: int
    total: int


def plan_sweep(rows: Sequence[dict], grid: Sequence[Mapping[str, Any]], *,
               concurrency: Sequence[int] = (1,), base: Mapping[str, Any] | None = None,
               backend: str = "numba", cost: Cost | None = None,
               draft_ms: float | None = None, engine: str = "custom", by: str | None = None,
               holdout: float | str | None = None) -> SweepPlan:
    """Plan a sweep of ``grid`` over ``rows``.

    Parameters
    ----------
    rows : list of dict
        Stream records (``read_streams``).
    grid : list of dict
        Grid points (NgramConfig fields), e.g. from :func:`expand_grid`.
    concurrency : list of int
        Levels; a level above a part's number of requests runs at that number.
    base : dict, optional
        Options under every grid point (a preset, a config file).
    backend : str
        ``"numba"`` or ``"reference"``.
    cost : CostTable or CostModel, optional
        Predict the serving speed-up of every job.
    draft_ms : float, optional
        Drafting time per step for the prediction (default: what the engine pays, measured).
    engine : {"custom", "sglang"}
        The serving engine the predictions price (:mod:`ngramspec.costs.engines`).
    by : str, optional
        Also record figures per value of this metadata field.
    holdout : float or str, optional
        Hold out this share of the requests (a float, by a hash of their ids) or those whose
        field has one of the values (``"FIELD=V1,V2"``): see :func:`sweep_holdout`.

    Returns
    -------
    SweepPlan

    Examples
    --------
    >>> from ngramspec.sweep import LocalExecutor, expand_grid, plan_sweep, rank, run_sweep
    >>> from ngramspec.streams import embedded_streams_path, read_streams
    >>> rows = read_streams(embedded_streams_path())[:8]
    >>> plan = plan_sweep(rows, expand_grid({"draft_token_num": [4, 8]}))
    >>> len(plan.jobs), plan.jobs[0].options
    (2, {'draft_token_num': 4})
    >>> with LocalExecutor(jobs=1) as ex:
    ...     records = [f.record for f in run_sweep(plan, ex)]
    >>> [r["options"]["draft_token_num"] for r in rank(records, key="tokens_per_step")]
    [8, 4]
    """
    base = dict(base or {})
    engine = engine_of(engine).name
    rows = list(rows)
    if holdout is not None:
        tune, held, split = sweep_holdout(
            rows, **({"by": holdout} if isinstance(holdout, str) else {"fraction": holdout}))
        parts = {"tune": tune, "holdout": held}
    else:
        split = ""
        parts = {"all": rows}
    sweep = fingerprint({"streams": streams_digest(parts), "base": base, "backend": backend,
                         "draft_ms": draft_ms, "by": by, "cost": cost_fingerprint(cost),
                         "holdout": split, "engine": engine})
    jobs = [Job(options=dict(options), concurrency=asked,
                run_concurrency=min(asked, len(part_rows)), part=part, base=base,
                backend=backend, cost=cost, draft_ms=draft_ms, engine=engine, by=by,
                sweep=sweep)
            for part, part_rows in parts.items() for options in grid for asked in concurrency]
    return SweepPlan(parts, jobs, sweep, split)


def run_sweep(plan: SweepPlan, executor: Executor, *, results: ResultsFile | None = None,
              todo: Sequence[int] | None = None) -> Iterator[Finished]:
    """Run the plan's jobs on ``executor``; yield each as it finishes.

    Jobs whose keys ``results`` already holds are skipped (resume); every finished record is
    stamped (``task_seconds``, ``finished_at``) and appended to ``results`` before it is
    yielded.  A failed job is yielded with its error and the others go on.

    Parameters
    ----------
    plan : SweepPlan
        From :func:`plan_sweep`.
    executor : Executor
        Where the jobs run (``make_executor``).
    results : ResultsFile, optional
        The results file to continue and append to.
    todo : list of int, optional
        Indices of the jobs to run (default: those not in ``results``).
    """
    if todo is None:
        todo = plan.pending(results.keys() if results is not None else ())
    total = len(plan.jobs)
    finished = total - len(todo)
    if not todo:
        return
    first = plan.jobs[todo[0]]
    if isinstance(executor, LocalExecutor) and executor.jobs > 1 and len(todo) > 1 and \
            first.backend == "numba":
        warm_kernels(first)
    for oc in executor.run(run_job, [plan.jobs[i] for i in todo], shared=plan.parts):
        finished += 1
        i = todo[oc.index]
        if oc.error is not None:
            yield Finished(i, None, oc.error, finished, total)
            continue
        rec = dict(oc.value, task_seconds=oc.seconds,
                   finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()))
        if results is not None:
            results.append(rec)
        yield Finished(i, rec, None, finished, total)


def pair_holdout(plan: SweepPlan, records: Mapping[str, dict]) -> list[dict]:
    """The tuning (or only) part's records in plan order; with a hold-out, each carries the
    same setting's hold-out figures under ``"holdout"`` (NaN figures where that job failed).

    ``records`` maps keys to records (the finished ones); the records are updated in place.
    """
    ordered = [records[k] for k in plan.keys if k in records]
    results = [r for r in ordered if r["part"] != "holdout"]
    if "holdout" in plan.parts:
        for r in results:
            h = records.get(job_key(r["options"], r["concurrency"], "holdout"))
            r["holdout"] = ({k: v for k, v in h.items() if k not in ("options", "concurrency")}
                            if h is not None else {"tokens_per_step": float("nan"),
                                                   "speedup": float("nan")})
    return results


def rank(records: Iterable[dict], *, key: str) -> list[dict]:
    """The records best first by ``key`` (``"speedup"`` or ``"tokens_per_step"``); ties keep
    their order."""
    return sorted(records, key=lambda r: -r[key])
