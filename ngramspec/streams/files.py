"""Recorded token streams: reading and writing JSON Lines (optionally gzipped) and Parquet.

A stream is one request as the target model served it under greedy decoding: its ``id``, the
``prompt_ids`` the model saw and the ``output_ids`` it produced, in order.  Any other field
(``task``, ``model``, texts, ...) is kept as metadata and can be used to group reports.

Records are plain dicts; ``prompt_ids`` and ``output_ids`` are returned as lists of ints
exactly as stored.  :func:`read_streams` is all or nothing: a malformed line raises
:class:`StreamError` naming the file and the line, and nothing is returned.
:func:`iter_streams` yields the same records one at a time (one file after the other, Parquet
by row batches), so a corpus larger than memory can be replayed; a path may also be a
directory of shards or a glob pattern.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
import os
from importlib.resources import as_file, files
from pathlib import Path
from typing import Any, Iterable, Iterator, Mapping, Sequence, Union

__all__ = ["StreamError", "read_streams", "iter_streams", "stream_paths", "write_streams",
           "check_streams",
           "embedded_streams_path", "fresh_streams_path",
           "validate_record", "REQUIRED_FIELDS", "SAMPLING_FIELDS", "decoding_of",
           "describe_decoding"]

#: Fields every record must have.
REQUIRED_FIELDS = ("id", "prompt_ids", "output_ids")

#: Optional fields recording how the outputs were sampled (absent or null: greedy).
SAMPLING_FIELDS = ("temperature", "top_p", "top_k")

#: The corpus shipped with the package (see ``ngramspec/data/NOTICE.md``).
EMBEDDED = "qwen2.5-coder-0.5b-greedy.jsonl.gz"

#: A second, later recording, by another model on prompts the first does not contain: a
#: hold-out that nothing was tuned on (``benchmarks/studies/record_streams.py``; see
#: ``ngramspec/data/NOTICE.md``).
FRESH = "smollm2-135m-greedy-fresh.jsonl.gz"

_INT32_MIN, _INT32_MAX = -(2**31), 2**31 - 1

StreamSource = Union[str, "os.PathLike[str]", Iterable[Any]]


class StreamError(ValueError):
    """A recorded stream that cannot be used; the message names where and what."""


StreamError.__module__ = "ngramspec.streams"  # its public home, as tracebacks name it


def embedded_streams_path() -> Path:
    """Path of the recorded streams shipped inside the package (133 requests of
    Qwen2.5-Coder-0.5B-Instruct, greedy; the default corpus of ``ngramspec simulate``).

    Examples
    --------
    >>> from ngramspec.streams import embedded_streams_path, read_streams
    >>> rows = read_streams(embedded_streams_path())
    >>> len(rows), sorted(rows[0])[:4]
    (133, ['backend', 'decoding', 'finish_reason', 'id'])
    """
    return _packaged(EMBEDDED)


def fresh_streams_path() -> Path:
    """Path of the second recording shipped inside the package (81 requests of
    SmolLM2-135M-Instruct, greedy): the same four tasks on prompts the first recording does
    not contain, by another model (another tokenizer), recorded after everything in ngramspec
    was tuned.  The benchmarks of the evaluation protocol report it as a second hold-out,
    ``"fresh"``.  A 135M-parameter model often repeats itself under greedy decoding (10 of 16
    code edits and all 12 documentation summaries run to the token limit), which makes this
    traffic easier to draft than the first recording's.

    Examples
    --------
    >>> from ngramspec.streams import embedded_streams_path, fresh_streams_path, read_streams
    >>> fresh = read_streams(fresh_streams_path())
    >>> shipped = {r["id"] for r in read_streams(embedded_streams_path())}
    >>> len(fresh) > 0 and not shipped & {r["id"] for r in fresh}
    True
    """
    return _packaged(FRESH)


def _packaged(name: str) -> Path:
    with as_file(files("ngramspec") / "data" / name) as p:
        return Path(p)


def _check_ids(value: Any, field: str, where: str, *, allow_empty: bool,
               vocab: int | None = None) -> list[int]:
    if not isinstance(value, list):
        raise StreamError(f"{where}: field {field!r} must be a list of integer token ids, "
                          f"got {type(value).__name__}")
    if not allow_empty and not value:
        raise StreamError(f"{where}: field {field!r} is empty; a recorded output needs at least "
                          "one token (the one the prefill emitted)")
    for i, t in enumerate(value):
        if isinstance(t, bool) or not isinstance(t, int):
            raise StreamError(f"{where}: {field}[{i}] must be an integer token id, got "
                              f"{type(t).__name__} {t!r}")
        if not 0 <= t <= _INT32_MAX:
            raise StreamError(f"{where}: {field}[{i}] = {t} is not a token id (ids are "
                              f"integers in [0, {_INT32_MAX}], int32 and not negative: no "
                              "tokenizer makes a negative one; a -1 is often padding)")
        if vocab is not None and t >= vocab:
            raise StreamError(f"{where}: {field}[{i}] = {t} is outside the record's "
                              f"vocabulary (vocab_size {vocab}: ids 0..{vocab - 1})")
    return value


def validate_record(record: Any, where: str = "record") -> dict:
    """Check one record and return it as a dict (token lists as lists of ints).

    Raises :class:`StreamError` naming ``where`` and the offending field.
    """
    if not isinstance(record, Mapping):
        raise StreamError(f"{where}: a record must be a JSON object (a mapping) with fields "
                          f"{', '.join(REQUIRED_FIELDS)}, got {type(record).__name__}")
    missing = [f for f in REQUIRED_FIELDS if f not in record]
    if missing:
        raise StreamError(f"{where}: missing required field(s) {', '.join(map(repr, missing))} "
                          f"(required: {', '.join(REQUIRED_FIELDS)})")
    rid = record["id"]
    if isinstance(rid, bool) or not isinstance(rid, (str, int)):
        raise StreamError(f"{where}: field 'id' must be a str or an int, got "
                          f"{type(rid).__name__} {rid!r}")
    out = dict(record)
    vocab = out.get("vocab_size")
    if vocab is not None and (isinstance(vocab, bool) or not isinstance(vocab, int)
                              or vocab < 1):
        raise StreamError(f"{where}: field 'vocab_size' (optional) must be an integer >= 1, "
                          f"the number of token ids of the model, got {vocab!r}")
    for field, empty in (("prompt_ids", True), ("output_ids", False)):
        value = out[field]
        if not isinstance(value, list) and hasattr(value, "tolist") and not isinstance(
                value, (str, bytes)):
            value = value.tolist()  # NumPy or Arrow arrays from a Parquet reader
        out[field] = _check_ids(value, field, where, allow_empty=empty, vocab=vocab)
    _check_sampling(out, where)
    return out


def _check_sampling(record: Mapping, where: str) -> None:
    def number(name: str) -> float | None:
        v = record.get(name)
        if v is None:
            return None
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v != v or \
                v in (float("inf"), float("-inf")):
            raise StreamError(f"{where}: field {name!r} must be a finite number or null, got "
                              f"{type(v).__name__} {v!r}")
        return float(v)

    t = number("temperature")
    if t is not None and t < 0:
        raise StreamError(f"{where}: field 'temperature' must be >= 0 (0 = greedy), got {t}")
    p = number("top_p")
    if p is not None and not 0 < p <= 1:
        raise StreamError(f"{where}: field 'top_p' must be in (0, 1], got {p}")
    k = record.get("top_k")
    if k is not None and (isinstance(k, bool) or not isinstance(k, int) or k < -1):
        raise StreamError(f"{where}: field 'top_k' must be an integer >= 1, or -1 or 0 for "
                          f"no limit, got {k!r}")


def decoding_of(record: Mapping) -> str:
    """``"sampled"`` when a record says it was sampled (``temperature > 0`` and not
    ``top_k = 1``), else ``"greedy"`` (the format's default: no sampling fields).

    Examples
    --------
    >>> from ngramspec.streams import decoding_of
    >>> decoding_of({"temperature": 0.7, "top_p": 0.9}), decoding_of({}), \\
    ...     decoding_of({"temperature": 0.7, "top_k": 1})
    ('sampled', 'greedy', 'greedy')
    """
    t = record.get("temperature")
    if t is None or t == 0 or record.get("top_k") == 1:
        return "greedy"
    return "sampled"


def describe_decoding(records: Iterable[Mapping]) -> dict[str, Any]:
    """How a set of requests was decoded: ``{"kind": "greedy" | "sampled" | "mixed",
    "greedy": n, "sampled": m, "settings": [distinct (temperature, top_p, top_k) of the
    sampled ones, as dicts]}``."""
    greedy, sampled, settings = 0, 0, []
    for r in records:
        if decoding_of(r) == "greedy":
            greedy += 1
            continue
        sampled += 1
        s = {k: r.get(k) for k in SAMPLING_FIELDS}
        if s not in settings:
            settings.append(s)
    kind = "mixed" if greedy and sampled else "sampled" if sampled else "greedy"
    return {"kind": kind, "greedy": greedy, "sampled": sampled, "settings": settings}


def _open_text(path: Path) -> io.TextIOBase:
    with open(path, "rb") as f:
        magic = f.read(2)
    if magic == b"\x1f\x8b":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, "rt", encoding="utf-8")


def _read_jsonl(path: Path) -> Iterator[dict]:
    for where, obj in _raw_jsonl(path):
        if isinstance(obj, StreamError):
            raise obj
        yield validate_record(obj, where)


def _raw_jsonl(path: Path) -> Iterator[tuple[str, Any]]:
    """(where, the line's JSON value or the StreamError that line is) per non-blank line;
    raises StreamError where the file stops being readable."""
    with _open_text(path) as f:
        try:
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                where = f"{path}:{lineno}"
                try:
                    yield where, json.loads(line)
                except json.JSONDecodeError as e:
                    yield where, StreamError(f"{where}: not valid JSON ({e.msg} at column "
                                             f"{e.colno})")
        except (OSError, EOFError, UnicodeDecodeError) as e:
            raise StreamError(f"{path}: cannot be read as (gzipped) UTF-8 JSON Lines: {e}"
                              ) from None


def check_streams(source: str | os.PathLike[str] | Sequence[str | os.PathLike[str]]
                  ) -> tuple[int, list[str]]:
    """Every problem of stream files at once: ``(good records, problems)``, each problem one
    line naming the file, the line (or row) and the field, as :func:`read_streams` would
    raise it; a file that stops being readable (a truncated gzip) gives its last problem there.

    Examples
    --------
    >>> import os, tempfile
    >>> from ngramspec.streams import check_streams
    >>> path = os.path.join(tempfile.mkdtemp(), "s.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write('{"id": 1, "prompt_ids": [4, -5], "output_ids": [6]}\\n'
    ...                 '{"id": 2, "prompt_ids": [4], "output_ids": []}\\n'
    ...                 '{"id": 3, "prompt_ids": [4], "output_ids": [7]}\\n')
    >>> good, problems = check_streams(path)
    >>> good, [p.split(": ")[0].rsplit(":", 1)[1] for p in problems]   # the lines at fault
    (1, ['1', '2'])
    >>> print(problems[0].split(": ", 1)[1].split(" (")[0])
    prompt_ids[1] = -5 is not a token id
    """
    items = [source] if isinstance(source, (str, os.PathLike)) else list(source)
    paths = [p for item in items for p in stream_paths(item)]
    problems: list[str] = []
    seen: dict[Any, str] = {}
    good = 0
    for path in paths:
        before, found = len(problems), 0
        try:
            if not path.is_file():
                raise StreamError(f"streams: no such file {str(path)!r}")
            rows = (((f"{path}: row {i}", row) for i, row in enumerate(_parquet_rows(path)))
                    if path.suffix == ".parquet" else _raw_jsonl(path))
            for where, obj in rows:
                found += 1
                try:
                    if isinstance(obj, StreamError):
                        raise obj
                    row = validate_record(obj, where)
                    if row["id"] in seen:
                        raise StreamError(f"{where}: duplicate id {row['id']!r} (first at "
                                          f"{seen[row['id']]})")
                    seen[row["id"]] = where
                    good += 1
                except StreamError as e:
                    problems.append(str(e))
        except StreamError as e:
            problems.append(str(e))
        if not found and len(problems) == before:
            problems.append(f"{path}: holds no records (an empty stream file)")
    return good, problems


def _read_parquet(path: Path) -> Iterator[dict]:
    for i, row in enumerate(_parquet_rows(path)):
        yield validate_record(row, f"{path}: row {i}")


def _parquet_rows(path: Path) -> Iterator[Any]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise StreamError(f"{path}: reading Parquet needs pyarrow; install it with "
                          "pip install 'ngramspec[parquet]'") from None
    try:
        pf = pq.ParquetFile(path)
    except Exception as e:  # pyarrow raises several types for unreadable files
        raise StreamError(f"{path}: cannot be read as Parquet: {e}") from None
    batches = pf.iter_batches(batch_size=1024)  # a few rows at a time, not the whole file
    while True:
        try:
            batch = next(batches, None)
        except Exception as e:
            raise StreamError(f"{path}: cannot be read as Parquet: {e}") from None
        if batch is None:
            return
        yield from batch.to_pylist()


#: File names taken from a directory of shards.
SHARD_SUFFIXES = (".jsonl", ".jsonl.gz", ".gz", ".parquet")

_GLOB_CHARS = frozenset("*?[")


def stream_paths(source: str | os.PathLike[str]) -> list[Path]:
    """The stream files a path names: the file itself, the stream files of a directory
    (``.jsonl``, ``.jsonl.gz``, ``.gz``, ``.parquet``, sorted by name), or the files a glob
    pattern matches (sorted).

    Examples
    --------
    >>> import tempfile, os
    >>> from ngramspec.streams import stream_paths
    >>> d = tempfile.mkdtemp()
    >>> for name in ("b.jsonl", "a.jsonl.gz", "notes.txt"):
    ...     open(os.path.join(d, name), "w").close()
    >>> [p.name for p in stream_paths(d)]
    ['a.jsonl.gz', 'b.jsonl']
    >>> stream_paths(os.path.join(d, "*.parquet"))
    Traceback (most recent call last):
    ...
    ngramspec.streams.StreamError: streams: the pattern '...*.parquet' matches no file
    """
    text = os.fspath(source)
    path = Path(text)
    if not path.exists() and _GLOB_CHARS & set(text):
        found = sorted(Path(p) for p in glob.glob(text, recursive=True) if os.path.isfile(p))
        if not found:
            raise StreamError(f"streams: the pattern {text!r} matches no file")
        return found
    if path.is_dir():
        found = sorted(p for p in path.iterdir()
                       if p.is_file() and p.name.endswith(SHARD_SUFFIXES)
                       and not p.name.startswith("."))
        if not found:
            raise StreamError(f"streams: {text!r} is a directory holding no stream files "
                              f"({', '.join(SHARD_SUFFIXES)})")
        return found
    if not path.exists():
        raise StreamError(f"streams: no such file {text!r}")
    return [path]


def _sources(source: StreamSource) -> Iterable[Any]:
    if isinstance(source, (str, os.PathLike)):
        return [source]
    if isinstance(source, (bytes, Mapping)):
        raise TypeError(f"streams must be a path, a list of paths or an iterable of records, "
                        f"got {type(source).__name__}")
    try:
        iter(source)
    except TypeError:
        raise TypeError(f"streams must be a path, a list of paths or an iterable of "
                        f"records, got {type(source).__name__}") from None
    return source


def iter_streams(source: StreamSource) -> Iterator[dict]:
    """Recorded streams one at a time, in order, checked: :func:`read_streams` without
    holding the corpus.

    Parameters
    ----------
    source : path, glob, directory, list of those, or iterable of records
        As :func:`read_streams`; a directory stands for its stream files (sorted by name), a
        pattern with ``*``, ``?`` or ``[`` for the files it matches (sorted).

    Yields
    ------
    dict
        One record per request.  Only the ids seen so far are remembered (to refuse a
        duplicate, also across files: shards with clashing ids).

    Raises
    ------
    StreamError
        As :func:`read_streams`, when the bad record is reached (the records before it have
        been yielded); a missing file, a pattern matching no file or a directory without
        stream files before anything is yielded.

    Examples
    --------
    >>> from ngramspec.streams import iter_streams
    >>> it = iter_streams([{"id": 1, "prompt_ids": [], "output_ids": [5]},
    ...                    {"id": 2, "prompt_ids": [5], "output_ids": [6, 7]}])
    >>> [r["id"] for r in it]
    [1, 2]
    """
    items = _sources(source)
    if isinstance(items, (list, tuple)):  # paths: resolve patterns and directories up front
        items = [p for item in items for p in (
            stream_paths(item) if isinstance(item, (str, os.PathLike)) else [item])]
    return _iter_items(items)


def _iter_items(items: Iterable[Any]) -> Iterator[dict]:
    seen: dict[Any, tuple[int, str]] = {}
    i = 0
    for k, item in enumerate(items):
        if isinstance(item, (str, os.PathLike)):
            path = Path(item)
            records: Iterable[dict] = _read_path(path)
            where = str(path)
        else:
            records = [validate_record(item, f"record {k}")]
            where = ""
        for row in records:
            first = seen.setdefault(row["id"], (i, where))
            if first[0] != i:
                files = (f" in {first[1]} and {where}" if first[1] != where else "")
                raise StreamError(f"streams: duplicate id {row['id']!r} (requests {first[0]} "
                                  f"and {i}{files}); every request needs its own id (shards "
                                  "of one corpus must not share ids)")
            i += 1
            yield row


def _read_path(path: Path) -> Iterator[dict]:
    if not path.exists():
        raise StreamError(f"streams: no such file {str(path)!r}")
    if path.is_dir():
        raise StreamError(f"streams: {str(path)!r} is a directory; pass the stream files "
                          "(.jsonl, .jsonl.gz or .parquet)")
    rows = _read_parquet(path) if path.suffix == ".parquet" else _read_jsonl(path)
    empty = True
    for row in rows:
        empty = False
        yield row
    if empty:
        raise StreamError(f"streams: {str(path)!r} holds no records (an empty stream file: "
                          "one JSON object per line, with id, prompt_ids and output_ids)")


def read_streams(source: StreamSource) -> list[dict]:
    """Read recorded streams from files or from records, in order, checked.

    Parameters
    ----------
    source : path, list of paths, or iterable of dicts
        JSON Lines files (``.jsonl``; gzip is detected from the content, ``.gz`` or not) or
        Parquet files (``.parquet``, needs ``pyarrow``), read in the order given (a directory
        stands for its stream files, a glob pattern for the files it matches); or records
        already in memory.  Each record has ``id`` (str or int, unique), ``prompt_ids``
        (list of int, may be empty) and ``output_ids`` (list of int, at least one token),
        token ids in ``[0, 2**31 - 1]``; an optional ``vocab_size`` (int) bounds the ids
        below it; other fields are kept as they are.  A file without records is refused.

    Returns
    -------
    list of dict
        One dict per request, in file order (copies: the caller's records are not modified).

    Raises
    ------
    StreamError
        A malformed record, with the file and line (or record index) and the field at fault;
        also for duplicate ids.  Nothing is returned half-read.

    Examples
    --------
    >>> from ngramspec import read_streams
    >>> rows = read_streams([{"id": "a", "prompt_ids": [1, 2], "output_ids": [3, 4],
    ...                       "task": "demo"}])
    >>> rows[0]["task"], rows[0]["output_ids"]
    ('demo', [3, 4])
    >>> read_streams([{"id": "a", "prompt_ids": [1], "output_ids": []}])
    Traceback (most recent call last):
    ...
    ngramspec.streams.StreamError: record 0: field 'output_ids' is empty; ...
    """
    return list(iter_streams(source))


def write_streams(records: Iterable[Mapping[str, Any]], path: str | os.PathLike[str]) -> int:
    """Write records as JSON Lines (gzipped when ``path`` ends in ``.gz``); returns the count.

    Each record is checked as :func:`read_streams` would check it, before anything is written.

    Examples
    --------
    >>> import tempfile, os
    >>> from ngramspec.streams import write_streams, read_streams
    >>> d = tempfile.mkdtemp()
    >>> write_streams([{"id": 1, "prompt_ids": [5], "output_ids": [6, 7]}],
    ...               os.path.join(d, "s.jsonl.gz"))
    1
    >>> read_streams(os.path.join(d, "s.jsonl.gz"))[0]["output_ids"]
    [6, 7]
    """
    rows = read_streams(list(records))
    p = Path(path)
    opener = gzip.open if p.name.endswith(".gz") else open
    with opener(p, "wt", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False, separators=(",", ":")) + "\n")
    return len(rows)
