"""The fixed split of recorded streams into a tuning part and a hold-out part.

Anything tuned on recorded traffic (recommended settings, thresholds, calibration) is tuned on
the ``"tune"`` part only and reported on the ``"holdout"`` part, which no tuning step reads.

The rule, chosen once and never tuned:

1. A request's *group key* is its ``id`` without a trailing ``/turn<N>``, so that the turns of
   one conversation (turn 2 carries turn 1's answer in its prompt) land on the same side.
2. Within each ``task``, the distinct group keys are ordered by the SHA-256 of the key (a
   fixed shuffle that does not depend on file order or on Python's hash seed).
3. Alternate keys go to ``"tune"`` (even positions) and ``"holdout"`` (odd positions), so both
   parts hold every task in nearly equal shares.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any, Literal

__all__ = ["PARTS", "group_key", "split_of", "split_streams"]

PARTS = ("tune", "holdout")
Part = Literal["tune", "holdout"]

_TURN = re.compile(r"/turn\d+$")


def group_key(request_id: str) -> str:
    """The key that keeps a conversation's turns together.

    Examples
    --------
    >>> group_key("mtbench/121/turn2")
    'mtbench/121'
    >>> group_key("humaneval/16")
    'humaneval/16'
    """
    return _TURN.sub("", str(request_id))


def _order(key: str) -> str:
    return hashlib.sha256(key.encode("utf-8")).hexdigest()


def split_of(records: Iterable[Mapping[str, Any]]) -> dict[str, Part]:
    """Map every request id to its part, ``"tune"`` or ``"holdout"``.

    Parameters
    ----------
    records
        Stream records with ``id`` and ``task`` fields (as ``read_streams`` returns them); a
        record without ``task`` counts as task ``""``.

    Examples
    --------
    >>> recs = [{"id": f"t/{i}", "task": "t"} for i in range(4)]
    >>> sorted(split_of(recs).values())
    ['holdout', 'holdout', 'tune', 'tune']
    """
    keys_by_task: dict[str, set[str]] = {}
    records = list(records)
    for rec in records:
        keys_by_task.setdefault(str(rec.get("task", "")), set()).add(group_key(rec["id"]))
    part_of_key: dict[tuple[str, str], Part] = {}
    for task, keys in keys_by_task.items():
        for position, key in enumerate(sorted(keys, key=_order)):
            part_of_key[(task, key)] = PARTS[position % 2]  # type: ignore[assignment]
    return {
        str(rec["id"]): part_of_key[(str(rec.get("task", "")), group_key(rec["id"]))]
        for rec in records
    }


def split_streams(records: Iterable[Mapping[str, Any]], *, part: Part) -> list[dict]:
    """The records of one part, in their original order.

    Parameters
    ----------
    records
        Stream records (``read_streams``).
    part
        ``"tune"`` or ``"holdout"``.

    Examples
    --------
    >>> from ngramspec.streams import embedded_streams_path, read_streams
    >>> recs = read_streams(embedded_streams_path())
    >>> tune = split_streams(recs, part="tune")
    >>> held = split_streams(recs, part="holdout")
    >>> len(tune) + len(held) == len(recs)
    True
    """
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    records = list(records)
    parts = split_of(records)
    return [dict(rec) for rec in records if parts[str(rec["id"])] == part]
