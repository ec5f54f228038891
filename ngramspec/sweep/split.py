"""The two hold-out splits: the fixed one of recorded streams, and a sweep's own.

**The fixed split** (:func:`split_streams`, :func:`split_of`) divides recorded streams once
and for all into a ``"tune"`` part and a ``"holdout"`` part.  Anything tuned on recorded
traffic (recommended settings, thresholds, calibration) is tuned on the ``"tune"`` part only
and reported on the ``"holdout"`` part, which no tuning step reads.  The rule, chosen once and
never tuned:

1. A request's *group key* is its ``id`` without a trailing ``/turn<N>``, so that the turns of
   one conversation (turn 2 carries turn 1's answer in its prompt) land on the same side.
2. Within each ``task``, the distinct group keys are ordered by the SHA-256 of the key (a
   fixed shuffle that does not depend on file order or on Python's hash seed).
3. Alternate keys go to ``"tune"`` (even positions) and ``"holdout"`` (odd positions), so both
   parts hold every task in nearly equal shares.

**A sweep's hold-out** (:func:`sweep_holdout`, ``ngramspec sweep --holdout`` and
``--holdout-by``) is chosen by the user for one sweep: a share of the requests by a hash of
their ids, or the requests with given values of a metadata field.  The sweep ranks settings on
the rest and reports the winner on the held-out requests.
"""

from __future__ import annotations

import hashlib
import json
import re
import zlib
from collections.abc import Iterable, Mapping
from typing import Any, Literal

__all__ = ["PARTS", "group_key", "split_of", "split_streams", "sweep_holdout"]

# --- the fixed split of recorded streams (by conversation) ---------------------------------

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


# --- a sweep's hold-out (by a hash of the ids, or by a field's values) ---------------------


def sweep_holdout(rows: list[dict], *, fraction: float | None = None,
                  by: str | None = None) -> tuple[list[dict], list[dict], str]:
    """Split requests into a tuning part and a hold-out part, deterministically.

    ``fraction``: the ``round(fraction * n)`` requests with the smallest CRC-32 of their id
    (as JSON text; ties by position) are held out, so the split depends on the ids alone,
    not on the file order or on the other requests.  ``by="FIELD=V1,V2"``: the requests whose
    ``str(record[FIELD])`` is one of the values are held out (a split by tenant, day, ...).
    Both parts keep file order; each is replayed from an empty cache.

    Parameters
    ----------
    rows : list of dict
        Stream records (``read_streams``), each with an ``id``.
    fraction : float, optional
        Share of the requests held out, strictly between 0 and 1.
    by : str, optional
        ``"FIELD=VALUE[,VALUE...]"``.  Exactly one of ``fraction`` and ``by`` is given.

    Returns
    -------
    tune, holdout : list of dict
        The two parts, in file order.
    description : str
        What was held out, for a report.

    Examples
    --------
    >>> rows = [{"id": i, "day": "mon" if i < 3 else "tue"} for i in range(5)]
    >>> tune, hold, what = sweep_holdout(rows, by="day=tue")
    >>> [r["id"] for r in tune], [r["id"] for r in hold], what
    ([0, 1, 2], [3, 4], 'day in {tue}: 2 of 5 requests')
    """
    n = len(rows)
    if (fraction is None) == (by is None):
        raise ValueError("give one of --holdout FRACTION and --holdout-by FIELD=VALUE")
    if fraction is not None:
        if not 0 < fraction < 1:
            raise ValueError(f"--holdout must be a fraction strictly between 0 and 1, got "
                             f"{fraction}")
        k = round(fraction * n)
        if not 1 <= k <= n - 1:
            left = "no" if k < 1 else "every"
            raise ValueError(f"--holdout {fraction} of {n} requests leaves {left} request held "
                             "out; both parts need at least one")
        order = sorted(range(n), key=lambda i: (zlib.crc32(
            json.dumps(rows[i]["id"]).encode("utf-8")), i))
        held = set(order[:k])
        what = f"{fraction:g} of the requests by a hash of their id: {k} of {n}"
    else:
        assert by is not None
        field, sep, values = by.partition("=")
        field = field.strip()
        wanted = {v.strip() for v in values.split(",")}
        if not sep or not field or "" in wanted:
            raise ValueError(f"--holdout-by must be FIELD=VALUE[,VALUE...], got {by!r}")
        if not any(field in r for r in rows):
            raise ValueError(f"--holdout-by: no request has the field {field!r}")
        held = {i for i, r in enumerate(rows) if field in r and str(r[field]) in wanted}
        if not held:
            seen = sorted({str(r[field]) for r in rows if field in r})
            raise ValueError(f"--holdout-by: no request has {field} in "
                             f"{{{', '.join(sorted(wanted))}}}; its values: "
                             f"{', '.join(seen[:10])}{' ...' if len(seen) > 10 else ''}")
        if len(held) == n:
            raise ValueError(f"--holdout-by {by}: every request would be held out; nothing is "
                             "left to rank on")
        what = f"{field} in {{{', '.join(sorted(wanted))}}}: {len(held)} of {n} requests"
    tune = [r for i, r in enumerate(rows) if i not in held]
    hold = [r for i, r in enumerate(rows) if i in held]
    return tune, hold, what
