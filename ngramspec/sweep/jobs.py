"""One sweep job: a grid point at one concurrency level on one part of the requests.

A :class:`Job` is what an executor ships to a worker; :func:`run_job` replays it and returns
its results record (the layout of :data:`~ngramspec.sweep.results.RESULT_FIELDS`).  A job's
:attr:`~Job.key` names it in a results file, so that a resumed sweep skips it.
"""

from __future__ import annotations

import dataclasses
import itertools
import json
import zlib
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ..config import NgramConfig
from ..costs import CostModel, CostTable, predict_serving
from ..integrations.timing import time_drafting
from ..costs.uncertainty import bootstrap, with_interval
from ..simulate import simulate
from .executors import versions
from .results import SCHEMA_VERSION

__all__ = ["Job", "run_job", "job_key", "expand_grid", "auto_costs", "cost_fingerprint",
           "streams_digest", "warm_kernels"]

Cost = CostTable | CostModel


@dataclass(frozen=True, kw_only=True)
class Job:
    """One setting of a sweep at one concurrency level on one part of the requests.

    Attributes
    ----------
    options : dict
        The grid point: NgramConfig fields over ``base``.
    concurrency : int
        The level asked for (reported and keyed under it).
    run_concurrency : int
        The level replayed: ``concurrency`` clamped to the part's number of requests.
    part : str
        Which part of the requests (``"all"``, or ``"tune"`` / ``"holdout"``).
    base : dict
        The options every job of the sweep starts from (preset, config file).
    backend : str
        ``"numba"`` or ``"reference"``.
    cost : CostTable or CostModel, optional
        With a cost, the record carries the serving prediction.
    draft_ms : float, optional
        Drafting time per serving step for the prediction (default: what the engine pays,
        measured).
    engine : str
        The serving engine the prediction prices (:mod:`ngramspec.costs.engines`).
    by : str, optional
        A metadata field whose per-value figures the record also carries.
    sweep : str
        Fingerprint of the whole sweep (see :func:`~ngramspec.sweep.results.fingerprint`).
    """

    options: dict[str, Any]
    concurrency: int = 1
    run_concurrency: int = 1
    part: str = "all"
    base: dict[str, Any] = field(default_factory=dict)
    backend: str = "numba"
    cost: Cost | None = None
    draft_ms: float | None = None
    engine: str = "custom"
    by: str | None = None
    sweep: str = ""

    @property
    def key(self) -> str:
        """The job's name in a results file (options, asked concurrency, part)."""
        return job_key(self.options, self.concurrency, self.part)

    def config(self) -> NgramConfig:
        """The job's configuration: ``base`` with ``options`` over it."""
        return NgramConfig(**{**self.base, **self.options})


def job_key(options: Mapping[str, Any], concurrency: int, part: str) -> str:
    """The key of the job with these options, asked concurrency and part."""
    return json.dumps({"options": options, "concurrency": concurrency, "part": part},
                      sort_keys=True, separators=(",", ":"))


def auto_costs(config: NgramConfig, cost: Cost | None) -> Cost | None:
    """The cost that ``min_expected_accept="auto"`` sizes trees from (None otherwise)."""
    if config.min_expected_accept != "auto":
        return None
    if cost is None:
        raise ValueError("--min-expected-accept auto chooses tree sizes from step costs: give "
                         "--cost-table, or --decode-ms and --verify-ms, or --step-ms and "
                         "--token-ms")
    return cost


def run_job(job: Job, parts: Mapping[str, list[dict]]) -> dict:
    """Replay one job on its part of the requests: its results record.

    Module-level so that executors can ship it by name: ``executor.run(run_job, jobs,
    shared=parts)``.  ``task_seconds`` and ``finished_at`` are left None (the caller stamps
    them when the record comes back).

    Parameters
    ----------
    job : Job
        The setting, level and part.
    parts : mapping of str to list of dict
        The sweep's requests by part (:attr:`SweepPlan.parts`).

    Returns
    -------
    dict
        A record with exactly the fields of ``RESULT_FIELDS``.
    """
    config = job.config()
    r = simulate(parts[job.part], config=config, concurrency=job.run_concurrency,
                 backend=job.backend, costs=auto_costs(config, job.cost))
    s = r.summary
    p = None
    if job.cost is None:
        iv = bootstrap(r)
    else:
        # Predicted in the worker: the per-request step counts need not travel back.
        if job.draft_ms is None and not getattr(job.cost, "drafting_included", False):
            time_drafting(r, job.engine)
        p = predict_serving(r, job.cost, draft_ms=job.draft_ms, engine=job.engine)
        iv = bootstrap(r, job.cost, engine=job.engine, draft_ms=p.draft_ms)
        p = with_interval(p, iv)
    out = dict(schema_version=SCHEMA_VERSION, **versions(), sweep=job.sweep, key=job.key,
               part=job.part, concurrency=job.concurrency, run_concurrency=r.concurrency,
               options=job.options, config=dataclasses.asdict(r.config),
               match_type=r.config.match_type, draft_token_num=r.config.draft_token_num,
               backend=job.backend, requests=s.requests, verify_steps=s.verify_steps,
               emitted_tokens=s.emitted_tokens, batch_steps=r.batch_steps,
               tokens_per_step=s.tokens_per_step, acceptance_by_depth=s.acceptance_by_depth,
               draft_nodes_per_step=s.draft_nodes_per_step,
               share_steps_with_draft=s.share_steps_with_draft, speedup=None,
               speculative_tokens_per_s=None, baseline_tokens_per_s=None, prediction=None,
               engine=job.engine if job.cost is not None else None, group_by=job.by,
               groups=None if job.by is None else
               {k: v.to_dict() for k, v in r.by(job.by).items()},
               tokens_per_step_low=iv.tokens_per_step[0],
               tokens_per_step_high=iv.tokens_per_step[1],
               draft_ms_per_step=r.draft_ms_per_step, wall_seconds=r.wall_seconds,
               task_seconds=None, finished_at=None)
    if p is not None:
        out.update(prediction=dict(p.to_dict(), concurrency=job.concurrency),
                   speedup=p.speed_up, speculative_tokens_per_s=p.speculative_tokens_per_s,
                   baseline_tokens_per_s=p.baseline_tokens_per_s)
    return out


def expand_grid(axes: Mapping[str, Sequence[Any]]) -> list[dict[str, Any]]:
    """Every combination of the axes' values, the last axis varying fastest.

    Examples
    --------
    >>> expand_grid({"draft_token_num": [4, 8], "match_type": ["BFS", "PROB"]})[:2]
    [{'draft_token_num': 4, 'match_type': 'BFS'}, {'draft_token_num': 4, 'match_type': 'PROB'}]
    >>> expand_grid({})
    [{}]
    """
    return [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]


def cost_fingerprint(cost: Cost | None) -> Any:
    """What identifies a cost in a sweep's fingerprint (JSON-serialisable)."""
    if cost is None:
        return None
    if isinstance(cost, CostTable):
        return cost.points()
    return dataclasses.asdict(cost)


def streams_digest(parts: Mapping[str, list[dict]]) -> str:
    """Identifies the requests of a sweep (ids and lengths) for its results file."""
    h = zlib.crc32(b"")
    for part, rows in parts.items():
        for r in rows:
            h = zlib.crc32(json.dumps([part, r["id"], len(r["prompt_ids"]),
                                      len(r["output_ids"])]).encode("utf-8"), h)
    return f"{h:08x}"


def warm_kernels(job: Job) -> None:
    """Load the compiled replay in this process, before local workers are forked from it:
    they inherit it instead of each loading it again (a second or so per worker)."""
    from ..integrations.warmup import warm_everything  # (the one warm-up: ngramspec warmup's)

    warm_everything(NgramConfig(**{**job.base, **job.options}), ("simulate",))
