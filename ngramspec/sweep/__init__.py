"""Sweeps as a library: grids of settings replayed in parallel, resumable, ranked.

A sweep replays every point of a grid of :class:`~ngramspec.NgramConfig` settings at every
concurrency level on recorded streams (optionally on a tuning part, each figure reported on a
hold-out part as well), on local processes or a Ray cluster, and keeps one record per finished
job in a results file so that an interrupted sweep resumes where it stopped.
``ngramspec sweep`` is this package behind a command line.

- :mod:`~ngramspec.sweep.jobs`: :class:`Job`, :func:`run_job`, :func:`expand_grid`;
- :mod:`~ngramspec.sweep.plan`: :func:`plan_sweep`, :func:`run_sweep`, :func:`pair_holdout`,
  :func:`rank`;
- :mod:`~ngramspec.sweep.split`: the fixed tuning / hold-out split of recorded streams
  (``split_streams``) and a sweep's own
  (:func:`sweep_holdout`);
- :mod:`~ngramspec.sweep.executors`: :class:`LocalExecutor`, :class:`RayExecutor`,
  :func:`make_executor`;
- :mod:`~ngramspec.sweep.results`: :class:`ResultsFile` and the record layout;
- :mod:`~ngramspec.sweep.shards`: shards of a corpus by a metadata field.

Examples
--------
>>> from ngramspec.sweep import LocalExecutor, expand_grid, plan_sweep, rank, run_sweep
>>> from ngramspec.streams import embedded_streams_path, read_streams
>>> rows = read_streams(embedded_streams_path())[:10]
>>> grid = expand_grid({"draft_token_num": [4, 8], "match_type": ["BFS", "PROB"]})
>>> plan = plan_sweep(rows, grid, holdout=0.3)
>>> len(plan.jobs), [len(p) for p in plan.parts.values()]
(8, [7, 3])
>>> with LocalExecutor(jobs=1) as ex:
...     done = {f.record["key"]: f.record for f in run_sweep(plan, ex)}
>>> best = rank(pair_holdout(plan, done), key="tokens_per_step")[0]
>>> sorted(best["options"]), best["holdout"]["part"]
(['draft_token_num', 'match_type'], 'holdout')
"""

from .executors import (EXECUTORS, Executor, LocalExecutor, Outcome, RayExecutor, make_executor,
                        versions)
from .jobs import Job, expand_grid, job_key, run_job
from .plan import Finished, SweepPlan, pair_holdout, plan_sweep, rank, run_sweep
from .results import (RESULT_FIELDS, SCHEMA_VERSION, TIMING_FIELDS, ResultsFile,
                      ResultsFileError, fingerprint)
from .shards import ShardJob, plan_shards, run_shard, shard_values
from .split import PARTS, group_key, split_of, split_streams, sweep_holdout

__all__ = ["Job", "run_job", "job_key", "expand_grid", "SweepPlan", "Finished", "plan_sweep",
           "run_sweep", "pair_holdout", "rank", "Executor", "LocalExecutor", "RayExecutor",
           "Outcome", "make_executor", "EXECUTORS", "versions", "ResultsFile",
           "ResultsFileError", "RESULT_FIELDS", "TIMING_FIELDS", "SCHEMA_VERSION", "fingerprint",
           "ShardJob", "shard_values", "plan_shards", "run_shard", "PARTS", "group_key",
           "split_of", "split_streams", "sweep_holdout"]
