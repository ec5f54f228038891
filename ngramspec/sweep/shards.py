"""Shards of a corpus too big for memory: one value of a metadata field each, replayed apart.

``ngramspec simulate --shard-by FIELD`` replays each value of ``FIELD`` as an independent
shard (its own cache), in parallel on an executor, and pools the figures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Sequence

from ..config import NgramConfig
from ..simulate import StreamResult, simulate_stream
from ..streams import iter_streams

__all__ = ["ShardJob", "shard_values", "plan_shards", "run_shard"]


@dataclass(frozen=True)
class ShardJob:
    """One shard (``field == value``) of the streams at one concurrency level."""

    sources: list[str]
    config: NgramConfig
    concurrency: int
    field: str
    value: str
    by: str | None = None


def shard_values(sources: Sequence[str], field: str) -> dict[str, int]:
    """Each value of ``field`` (``"(missing)"`` where a request lacks it) with its number of
    requests, in order of first appearance; one pass over the streams."""
    values: dict[str, int] = {}
    for rec in iter_streams(list(sources)):  # clashing ids are refused on the way
        v = str(rec.get(field, "(missing)"))
        values[v] = values.get(v, 0) + 1
    if set(values) == {"(missing)"}:
        raise ValueError(f"--shard-by {field}: no request has that field")
    return values


def plan_shards(sources: Sequence[str], values: Sequence[str], *, config: NgramConfig,
                concurrency: Sequence[int], field: str, by: str | None = None
                ) -> list[ShardJob]:
    """One job per level and value, level by level."""
    return [ShardJob(list(sources), config, c, field, v, by)
            for c in concurrency for v in values]


def run_shard(job: ShardJob, shared: Any = None) -> StreamResult:
    """One shard at one concurrency level (module-level: executors ship it by name)."""
    return simulate_stream(job.sources, config=job.config, concurrency=job.concurrency,
                           by=job.by, where=(job.field, job.value))
