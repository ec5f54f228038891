"""Cost tables from what SGLang's own tools write (``ngramspec costs import``).

A model too large for ``ngramspec calibrate`` (a large MoE over several GPUs, say) is timed by
SGLang itself; these readers turn its records into the points of a
:class:`~ngramspec.costs.CostTable`.  A file's format is recognised from its content, not its
name.  Read from SGLang 0.5.23's code:

- ``bench_one_batch``: the JSON Lines that ``python -m sglang.benchmark.one_batch`` (formerly
  ``sglang.bench_one_batch``) appends to ``--result-filename``, one object per run with
  ``batch_size`` and ``median_decode_latency`` (seconds: the median of its timed decode
  steps).  Each run is a decode point (``tokens = 1``) at its batch size.
- ``server_step_times``: the JSON of ``/get_server_info`` (or ``/server_info``) of a server
  started with ``SGLANG_RECORD_STEP_TIME=1``.  Each scheduler's
  ``internal_states[*]["step_time_dict"]`` maps a batch size (the running requests) to step
  times in seconds, each the mean wall time of a decode step over the last
  ``decode_log_interval`` (default 40) decode steps.  From a plain server they are decode
  points; from an NGRAM server (``speculative_algorithm`` in the same dump) they are verify
  points at its ``speculative_num_draft_tokens``, kept as recorded, drafting included.

Recognised and refused, because no step time can honestly be derived from them: the results
of ``sglang.benchmark.one_batch_server`` (whole-request latency and throughput of a batch)
and ``vllm bench latency --output-json`` (whole-batch latencies, prefill and every decode step
together, without the batch size or the output length).

Every value is converted to milliseconds; a point is the median of its values.  Files merge
by pooling: a point that several files give is the median of all their values, reported as
a duplicate when the files' own medians are equal and as a conflict (a warning naming the
files and their medians) when they differ.
"""

from __future__ import annotations

import json
import math
import os
import statistics
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping, Sequence

from .table import CostTable, csv_text

__all__ = ["RecordsError", "FileRecords", "ImportedCosts", "FORMATS", "parse_records",
           "read_records", "merge_records", "import_records"]

#: The formats read, and how a report names them.
FORMATS = {
    "bench_one_batch": "sglang.benchmark.one_batch result",
    "server_step_times": "SGLang server step times",
}

_REFUSED = {
    "bench_one_batch_server": (
        "a sglang.benchmark.one_batch_server result holds whole-request latency and "
        "throughput of a batch, not step times; use sglang.benchmark.one_batch, or a server's "
        "step times (SGLANG_RECORD_STEP_TIME=1, then /get_server_info)"),
    "vllm_latency": (
        "a 'vllm bench latency' result holds whole-batch latencies (prefill and every decode "
        "step together) without the batch size or output length: no step time can be "
        "derived from it"),
}

_EXPECTED = ("expected a sglang.benchmark.one_batch result (JSON Lines with batch_size, "
             "median_decode_latency) or a /get_server_info dump (internal_states[*]."
             "step_time_dict)")

Point = tuple[int, int]


class RecordsError(ValueError):
    """A file that cannot be imported; the message names the file and the field."""


@dataclass(frozen=True)
class FileRecords:
    """What one file holds.

    Attributes
    ----------
    path : str
        The file, as given.
    format : str
        A key of :data:`FORMATS`.
    values : dict
        ``(batch, tokens)``: the file's values for that point, in milliseconds.
    drafting_included : bool
        Its verify points (``tokens > 1``) are an NGRAM server's step times.
    detail : str
        What the file says about how it was measured, for the report.
    notes : tuple of str
        What the report should say about this file.
    """

    path: str
    format: str
    values: dict[Point, tuple[float, ...]]
    drafting_included: bool = False
    detail: str = ""
    notes: tuple[str, ...] = ()

    def summary(self) -> str:
        """One line: the file, its format, its points."""
        rows = defaultdict(list)
        for b, n in sorted(self.values):
            rows[n].append(str(b))
        kinds = "; ".join(f"{'decode' if n == 1 else 'verify'} (tokens={n}) at batch "
                          f"{', '.join(bs)}" for n, bs in sorted(rows.items()))
        count = sum(len(v) for v in self.values.values())
        unit = "run" if self.format == "bench_one_batch" else "step time"
        detail = f" ({self.detail})" if self.detail else ""
        return (f"{self.path}: {FORMATS[self.format]}{detail}: {kinds} "
                f"({count} {unit}{'s' if count != 1 else ''})")


@dataclass(frozen=True)
class ImportedCosts:
    """Several files merged into the points of a cost table.

    Attributes
    ----------
    files : tuple of FileRecords
        What each file gave, in the order given.
    points : tuple of (batch, tokens, ms)
        One per point, batch-major: the median of every value given for it.
    drafting_included : bool
        Verify points came from an NGRAM server's step times
        (:attr:`CostTable.drafting_included`).
    missing : tuple of (batch, tokens)
        The points a full grid over these batch sizes and token counts (``tokens = 1``
        always among them) lacks; :meth:`table` refuses to build while there are any.
    notes, warnings : tuple of str
        What a report should say (duplicates, the grid, drafting; conflicts).
    """

    files: tuple[FileRecords, ...]
    points: tuple[tuple[int, int, float], ...]
    drafting_included: bool
    missing: tuple[Point, ...]
    notes: tuple[str, ...] = field(default=())
    warnings: tuple[str, ...] = field(default=())

    def table(self, *, extrapolate: bool = False) -> CostTable:
        """The :class:`CostTable` (a :class:`CostTableError` names the holes of a grid that
        is not full)."""
        names = ", ".join(f.path for f in self.files)
        return CostTable(self.points, extrapolate=extrapolate, source=f"costs imported from "
                         f"{names}", drafting_included=self.drafting_included)

    def to_csv(self) -> str:
        """The points as a cost table's CSV, written even with holes (which
        ``CostTable.read`` and ``simulate --cost-table`` then refuse, naming them)."""
        return csv_text(self.points, drafting_included=self.drafting_included)


# --- reading one file ---------------------------------------------------------------------

def _kind(obj: Any) -> str | None:
    """The format a JSON object is written in, from the fields its writer always sets."""
    if not isinstance(obj, Mapping):
        return None
    if "internal_states" in obj:
        return "server_step_times"
    if "avg_latency" in obj and "latencies" in obj:
        return "vllm_latency"
    if "last_ttft" in obj or "acc_length" in obj:
        return "bench_one_batch_server"
    if obj.keys() & {"median_decode_latency", "prefill_latency", "total_latency"}:
        return "bench_one_batch"
    return None


def _documents(text: str, name: str) -> tuple[str, list[tuple[str, Any]]]:
    """The format and the JSON documents of a file, each with where it is (for messages)."""
    if not text.strip():
        raise RecordsError(f"{name}: empty file; {_EXPECTED}")
    docs: list[tuple[str, Any]] = []
    for i, line in enumerate(text.splitlines(), 1):  # JSON Lines first: errors name lines
        if not line.strip():
            continue
        try:
            docs.append((f"{name}: line {i}", json.loads(line)))
        except json.JSONDecodeError as e:
            broken = (i, e.msg)
            break
    else:
        broken = None
    if broken is not None:
        try:  # one document over several lines (indented JSON)
            docs = [(name, json.loads(text))]
        except json.JSONDecodeError as e:
            if not docs:
                raise RecordsError(f"{name}: unknown format: not JSON or JSON Lines ({e.msg} "
                                   f"at line {e.lineno}); {_EXPECTED}") from None
            raise RecordsError(f"{name}: line {broken[0]}: not valid JSON ({broken[1]})"
                               ) from None
    where, first = docs[0]
    kind = _kind(first)
    if kind is None:
        shown = (f"a JSON object with fields {', '.join(sorted(map(str, first))[:8])}"
                 if isinstance(first, Mapping) else f"JSON {type(first).__name__}")
        raise RecordsError(f"{where}: unknown format: {shown}; {_EXPECTED}")
    if kind in _REFUSED:
        raise RecordsError(f"{name}: {_REFUSED[kind]}")
    for where, doc in docs[1:]:
        if _kind(doc) != kind:
            raise RecordsError(f"{where}: not a {FORMATS[kind]} record like the first (one "
                               "format a file)")
    if kind == "server_step_times" and len(docs) > 1:
        raise RecordsError(f"{name}: one /get_server_info dump a file, got {len(docs)}")
    return kind, docs


def _seconds(value: Any, where: str) -> float:
    """A time in seconds, as SGLang writes it, in milliseconds."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RecordsError(f"{where}: not a number of seconds: {value!r}")
    if not math.isfinite(value) or value <= 0:
        raise RecordsError(f"{where}: must be a time > 0 seconds, got {value!r}")
    return float(value) * 1000.0


def _whole(value: Any, where: str, *, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise RecordsError(f"{where}: must be a whole number >= {least}, got {value!r}")
    return value


def _field(obj: Mapping, name: str, where: str) -> Any:
    if name not in obj:
        raise RecordsError(f"{where}: missing field {name}")
    return obj[name]


def _bench_one_batch(docs: list[tuple[str, Any]], name: str) -> FileRecords:
    values: dict[Point, list[float]] = defaultdict(list)
    inputs: dict[int, set] = defaultdict(set)
    notes, runs = [], set()
    for where, run in docs:
        batch = _whole(_field(run, "batch_size", where), f"{where}: field batch_size", least=1)
        if "median_decode_latency" not in run and run.get("output_len") == 1:
            notes.append(f"{where}: output_len 1 times no decode step: skipped")
            continue
        ms = _seconds(_field(run, "median_decode_latency", where),
                      f"{where}: field median_decode_latency")
        values[(batch, 1)].append(ms)
        inputs[batch].add((run.get("input_len"), run.get("output_len")))
        runs.add(str(run.get("run_name")))
    if not values:
        raise RecordsError(f"{name}: missing field median_decode_latency in every run (runs "
                           "with output_len 1 time no decode step)")
    for batch, lens in sorted(inputs.items()):
        if len(lens) > 1:  # one point from different context lengths: say so
            shown = ", ".join(f"{i}/{o}" for i, o in sorted(lens, key=str))
            notes.append(f"{name}: batch {batch} pools runs of input_len/output_len {shown}")
    if len(runs) > 1:
        notes.append(f"{name}: pools the runs named {', '.join(sorted(runs))}")
    return FileRecords(name, "bench_one_batch", {k: tuple(v) for k, v in values.items()},
                       notes=tuple(notes))


def _server_step_times(info: Any, name: str) -> FileRecords:
    states = info["internal_states"]
    if not isinstance(states, list) or not states:
        raise RecordsError(f"{name}: field internal_states must be a non-empty list, got "
                           f"{states!r}")
    algorithm = _field(info, "speculative_algorithm", name)
    plain = algorithm is None or str(algorithm).upper() == "NONE"
    if not plain and str(algorithm).upper() != "NGRAM":
        raise RecordsError(f"{name}: field speculative_algorithm is {algorithm!r}: only a "
                           "plain server's step times (decode) or an NGRAM server's (verify) "
                           "can be imported")
    tokens = 1 if plain else _whole(
        _field(info, "speculative_num_draft_tokens", name),
        f"{name}: field speculative_num_draft_tokens", least=2)
    values: dict[Point, list[float]] = defaultdict(list)
    notes, recorded = [], 0
    for r, state in enumerate(states):
        where = f"{name}: internal_states[{r}]"
        if not isinstance(state, Mapping):
            raise RecordsError(f"{where}: not an object")
        steps = state.get("step_time_dict")
        if steps is None:
            continue
        if not isinstance(steps, Mapping):
            raise RecordsError(f"{where}.step_time_dict: must map a batch size to a list of "
                               f"step times, got {type(steps).__name__}")
        recorded += 1
        for key, times in steps.items():
            at = f"{where}.step_time_dict[{key!r}]"
            text = str(key).strip()
            if not text.isdigit():
                raise RecordsError(f"{at}: the key must be a batch size (a whole number)")
            if int(text) == 0:  # no request ran: nothing a table prices
                notes.append(f"{at}: batch size 0: skipped")
                continue
            if not isinstance(times, list):
                raise RecordsError(f"{at}: must be a list of step times in seconds, got "
                                   f"{type(times).__name__}")
            values[(int(text), tokens)] += [_seconds(t, f"{at}[{j}]")
                                            for j, t in enumerate(times)]
    if not recorded:
        raise RecordsError(f"{name}: missing field internal_states[*].step_time_dict (start "
                           "the server with SGLANG_RECORD_STEP_TIME=1)")
    if not values:
        raise RecordsError(f"{name}: internal_states[*].step_time_dict holds no step time yet "
                           "(one is logged every decode_log_interval decode steps): send "
                           "traffic first")
    if recorded > 1:
        notes.append(f"{name}: pools the step times of {recorded} schedulers "
                     "(internal_states)")
    interval = info.get("decode_log_interval")
    detail = ", ".join(x for x in (
        f"SGLang {info['version']}" if isinstance(info.get("version"), str) else "",
        "plain decode" if plain else f"NGRAM, {tokens} draft tokens",
        f"each value the mean of {interval} steps" if isinstance(interval, int) else "") if x)
    return FileRecords(name, "server_step_times", {k: tuple(v) for k, v in values.items()},
                       drafting_included=not plain, detail=detail, notes=tuple(notes))


def parse_records(text: str, *, name: str = "records") -> FileRecords:
    """What one file's text holds, its format recognised from the content.

    Parameters
    ----------
    text : str
        The file's content: JSON or JSON Lines as SGLang writes it.
    name : str
        How messages name the file.

    Raises
    ------
    RecordsError
        An unknown or refused format, a missing field, a value that is not a time; the
        message names the file (and line) and the field.

    Examples
    --------
    >>> from ngramspec.costs.records import parse_records
    >>> run = ('{"run_name": "default", "batch_size": 4, "input_len": 1024, "output_len": 16, '
    ...        '"median_decode_latency": 0.0125}')
    >>> r = parse_records(run, name="result.jsonl")
    >>> r.values
    {(4, 1): (12.5,)}
    >>> print(r.summary())
    result.jsonl: sglang.benchmark.one_batch result: decode (tokens=1) at batch 4 (1 run)
    >>> parse_records('{"batch_size": 4}', name="result.jsonl")
    Traceback (most recent call last):
    ...
    ngramspec.costs.records.RecordsError: result.jsonl: line 1: unknown format: a JSON object ...
    """
    kind, docs = _documents(text, name)
    if kind == "bench_one_batch":
        return _bench_one_batch(docs, name)
    return _server_step_times(docs[0][1], name)


def read_records(path: str | os.PathLike[str]) -> FileRecords:
    """:func:`parse_records` of a file (UTF-8 JSON or JSON Lines)."""
    name = os.fspath(path)
    try:
        with open(name, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise RecordsError(f"{name}: cannot be read ({e.strerror or e})") from None
    except UnicodeDecodeError:
        raise RecordsError(f"{name}: not UTF-8 text; {_EXPECTED}") from None
    return parse_records(text, name=name)


# --- merging files ------------------------------------------------------------------------

def merge_records(records: Sequence[FileRecords]) -> ImportedCosts:
    """Several files' points as one table's: each point the median of all its values.

    A point given by several files pools their values (so equal medians stay that value):
    a note names a duplicate (the files' own medians are equal), a warning a conflict (they
    differ).  Points a full grid lacks are named in a note, not refused.

    Examples
    --------
    >>> import json
    >>> from ngramspec.costs.records import merge_records, parse_records
    >>> decode = parse_records('{"batch_size": 1, "median_decode_latency": 0.0125}')
    >>> info = {"speculative_algorithm": "NGRAM", "speculative_num_draft_tokens": 16,
    ...         "internal_states": [{"step_time_dict": {"1": [0.030, 0.031, 0.029]}}]}
    >>> costs = merge_records([decode, parse_records(json.dumps(info), name="info.json")])
    >>> costs.points, costs.drafting_included, costs.missing
    (((1, 1, 12.5), (1, 16, 30.0)), True, ())
    >>> costs.table()
    CostTable(batch=[1], tokens=[1, 16], extrapolate=False, drafting_included=True)
    """
    if not records:
        raise RecordsError("no files to import")
    given: dict[Point, list[FileRecords]] = defaultdict(list)
    for rec in records:
        for key in rec.values:
            given[key].append(rec)
    notes = [n for rec in records for n in rec.notes]
    warnings, points = [], []
    for (b, n), recs in sorted(given.items()):
        pooled = [v for rec in recs for v in rec.values[(b, n)]]
        ms = statistics.median(pooled)
        points.append((b, n, ms))
        if len(recs) > 1:
            medians = [statistics.median(rec.values[(b, n)]) for rec in recs]
            shown = " and ".join(f"{rec.path} ({m:.4g} ms)" for rec, m in zip(recs, medians))
            if len(set(medians)) == 1:
                notes.append(f"batch={b} tokens={n} given twice or more, equal: {shown}")
            else:
                warnings.append(f"batch={b} tokens={n} differs between {shown}: kept the "
                                f"median of all {len(pooled)} values, {ms:.4g} ms")
    batches = sorted({b for b, _ in given})
    tokens = sorted({1} | {n for _, n in given})
    missing = tuple((b, n) for b in batches for n in tokens if (b, n) not in given)
    included = any(rec.drafting_included for rec in records)
    notes += _grid_notes(missing, batches, tokens)
    if included:
        notes.append("drafting included: the verify rows are an NGRAM server's step times "
                     "(drafting in them); the table says so, and a prediction adds no "
                     "drafting time on top")
        if any(rec.format == "bench_one_batch" for rec in records):
            notes.append("decode rows from sglang.benchmark.one_batch (forwards without a "
                         "server) beside verify rows from a server (scheduling, drafting): "
                         "speculation is charged the server's overhead per step; a plain "
                         "server's step times give like-for-like decode rows")
    return ImportedCosts(tuple(records), tuple(points), included, missing, tuple(notes),
                         tuple(warnings))


def _grid_notes(missing: tuple[Point, ...], batches: list[int], tokens: list[int]
                ) -> list[str]:
    if not missing:
        return []
    notes = []
    if all((b, 1) in missing for b in batches):
        notes.append("no decode rows (tokens = 1): import a sglang.benchmark.one_batch result "
                     "or a plain server's step times too")
    shown = ", ".join(f"batch={b} tokens={n}" for b, n in missing)
    notes.append(f"not a full grid: missing {shown}; written as is, but simulate --cost-table "
                 f"refuses it until every batch {batches} has every tokens {tokens}")
    return notes


def import_records(paths: Iterable[str | os.PathLike[str]]) -> ImportedCosts:
    """:func:`merge_records` of the files at ``paths`` (each read with :func:`read_records`).

    Examples
    --------
    >>> from ngramspec.costs.records import import_records
    >>> import_records([])
    Traceback (most recent call last):
    ...
    ngramspec.costs.records.RecordsError: no files to import
    """
    return merge_records([read_records(p) for p in paths])
