"""Results files: one record per finished sweep job, appended as jobs finish, for resume.

:class:`ResultsFile` keeps one record per finished configuration (JSON Lines, or Parquet as a
directory of one part file per record) so that an interrupted sweep resumes where it stopped;
every record is written whole or not at all; one sweep at a time writes it (a lock held from
opening to :meth:`ResultsFile.close`).  :data:`RESULT_FIELDS` is the record layout.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

from .executors import versions

try:
    import fcntl
except ImportError:  # not POSIX: an exclusive lock file instead
    fcntl = None  # type: ignore[assignment]

__all__ = ["ResultsFile", "ResultsFileError", "RESULT_FIELDS", "TIMING_FIELDS", "SCHEMA_VERSION",
           "fingerprint"]

#: Version of the record layout below (2: ``engine``, the serving engine priced, and the 90%
#: bootstrap interval of tokens per step; the prediction carries its speed-up's).
SCHEMA_VERSION = 2

#: Every field of a record, with its kind: str, int, float, floats (list), json (nested).
RESULT_FIELDS: dict[str, str] = {
    "schema_version": "int", "ngramspec_version": "str", "numpy_version": "str",
    "numba_version": "str", "python_version": "str",
    "sweep": "str", "key": "str", "part": "str", "concurrency": "int",
    "run_concurrency": "int", "options": "json", "config": "json", "match_type": "str",
    "draft_token_num": "int", "backend": "str", "requests": "int", "verify_steps": "int",
    "emitted_tokens": "int", "batch_steps": "int", "tokens_per_step": "float",
    "tokens_per_step_low": "float", "tokens_per_step_high": "float",
    "acceptance_by_depth": "floats", "draft_nodes_per_step": "float",
    "share_steps_with_draft": "float", "speedup": "float",
    "speculative_tokens_per_s": "float", "baseline_tokens_per_s": "float",
    "prediction": "json", "engine": "str", "group_by": "str", "groups": "json",
    "draft_ms_per_step": "float", "wall_seconds": "float", "task_seconds": "float",
    "finished_at": "str",
}

#: Fields that change from run to run (timings); the others are the same for the same inputs.
TIMING_FIELDS = ("draft_ms_per_step", "wall_seconds", "task_seconds", "finished_at")

RESULTS_SUFFIXES = (".jsonl", ".parquet")


class ResultsFileError(ValueError):
    """A results file that cannot be used for this sweep; the message says why."""


class _WriterLock:
    """One writer per results file: an exclusive lock on ``PATH.lock`` beside it.

    POSIX: ``flock`` on that file (released by the system when the process ends, however it
    ends); the file holds the writer's pid and is removed on release.  Elsewhere: the file
    created exclusively (``O_CREAT | O_EXCL``) with the pid, removed on release; one left by
    a killed sweep is named in the error, to be deleted by hand.
    """

    def __init__(self, path: Path, shown: str) -> None:
        self.path = path.with_name(path.name + ".lock")
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd: int | None = None
        if fcntl is not None:
            self._flock(shown)
        else:
            self._exclusive(shown)
        os.write(self.fd, f"{os.getpid()}\n".encode())

    def _busy(self, shown: str, holder: str, stale_hint: bool) -> ResultsFileError:
        pid = f" (pid {holder})" if holder else ""
        hint = (f"; if no sweep is running, delete {self.path}" if stale_hint else "")
        return ResultsFileError(f"--out {shown}: another sweep is writing this results file"
                                f"{pid}; wait for it to finish, or give another --out{hint}")

    def _holder(self) -> str:
        try:
            return self.path.read_text(encoding="ascii", errors="replace").strip()
        except OSError:
            return ""

    def _flock(self, shown: str) -> None:
        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise self._busy(shown, self._holder(), False) from None
            # The previous writer removes the file as it lets go: lock the file that is there.
            try:
                st, now = os.fstat(fd), os.stat(self.path)
                same = (st.st_dev, st.st_ino) == (now.st_dev, now.st_ino)
            except FileNotFoundError:
                same = False
            if same:
                os.ftruncate(fd, 0)
                self.fd = fd
                return
            os.close(fd)

    def _exclusive(self, shown: str) -> None:
        try:
            self.fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            raise self._busy(shown, self._holder(), True) from None

    def release(self) -> None:
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        try:
            self.path.unlink()  # while still held: the next writer locks a fresh file
        except OSError:
            pass
        os.close(fd)


def _to_json_value(x: Any) -> Any:
    # NaN is not JSON: stored as null, read back as NaN for float fields.
    return None if isinstance(x, float) and math.isnan(x) else x


class ResultsFile(AbstractContextManager):
    """Finished sweep configurations, one record each, appended as they finish.

    ``PATH.jsonl``: one JSON object per line, each line written with one ``write`` and
    flushed to disk.  ``PATH.parquet``: a directory of part files, one per record, each
    written under a temporary name and renamed (pandas and polars read the directory as one
    table).  A sweep killed at any moment leaves whole records only (a torn last line of a
    JSON Lines file, possible only if the machine itself stopped mid-write, is dropped when
    the file is resumed).

    One writer at a time: opening it takes a lock (on ``PATH.lock`` beside it) held until
    :meth:`close` (or the end of a ``with`` block, or of the process); opening a file that
    another :class:`ResultsFile`, in this process or another, holds is a
    :class:`ResultsFileError`.

    Parameters
    ----------
    path : str or path
        Ending in ``.jsonl`` or ``.parquet``.
    sweep : str
        Fingerprint of the sweep (streams, base settings, backend, cost, hold-out): every
        record in the file must carry it.
    resume : bool
        Continue an existing file; without it, an existing non-empty file is an error.

    Examples
    --------
    >>> import tempfile, os
    >>> p = os.path.join(tempfile.mkdtemp(), "r.jsonl")
    >>> f = ResultsFile(p, sweep="s1", resume=False)
    >>> rec = {k: None for k in RESULT_FIELDS}
    >>> rec.update(key="a", sweep="s1", schema_version=SCHEMA_VERSION, **versions())
    >>> f.append(rec)
    >>> ResultsFile(p, sweep="s1", resume=True)
    Traceback (most recent call last):
    ...
    ngramspec.sweep.results.ResultsFileError: --out ...r.jsonl: another sweep is writing this ...
    >>> f.close()
    >>> with ResultsFile(p, sweep="s1", resume=True) as g:
    ...     g.keys()
    {'a'}
    >>> ResultsFile(p, sweep="s1", resume=False)
    Traceback (most recent call last):
    ...
    ngramspec.sweep.results.ResultsFileError: ...r.jsonl already holds 1 results; pass --resume ...
    """

    def __init__(self, path: str | os.PathLike[str], *, sweep: str, resume: bool) -> None:
        self.path = Path(path)
        name = self.path.name
        if not name.endswith(RESULTS_SUFFIXES):
            raise ResultsFileError(f"--out {str(path)!r}: the results file must end in .jsonl "
                                   "or .parquet")
        self.kind = "parquet" if name.endswith(".parquet") else "jsonl"
        self.sweep = sweep
        self._versions = versions()
        if self.kind == "parquet":
            try:
                import pyarrow  # noqa: F401
            except ImportError:
                raise ResultsFileError(f"--out {name}: Parquet results need pyarrow; install "
                                       "it with pip install 'ngramspec[parquet]', or use "
                                       ".jsonl") from None
        self._lock = _WriterLock(self.path, str(path))
        try:
            self._records = self._read(repair=resume)
            if self._records and not resume:
                raise ResultsFileError(f"{self.path} already holds {len(self._records)} "
                                       "results; pass --resume to continue it, or another "
                                       "--out")
            for i, rec in enumerate(self._records):
                self._check(rec, i)
        except BaseException:
            self._lock.release()
            raise

    def close(self) -> None:
        """Let go of the file (another sweep may then write it); records stay readable."""
        lock = getattr(self, "_lock", None)
        if lock is not None:
            lock.release()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()

    # reading
    def _read(self, *, repair: bool) -> list[dict]:
        if not self.path.exists():
            return []
        if self.kind == "jsonl":
            return self._read_jsonl(repair)
        return self._read_parquet(repair)

    def _read_jsonl(self, repair: bool) -> list[dict]:
        if self.path.is_dir():
            raise ResultsFileError(f"{self.path} is a directory, not a JSON Lines file")
        data = self.path.read_bytes()
        records = []
        end = data.rfind(b"\n") + 1
        if end < len(data) and repair:  # a torn last record: never acknowledged, dropped
            with open(self.path, "r+b") as f:
                f.truncate(end)
        for lineno, line in enumerate(data[:end].splitlines(), 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
            except (json.JSONDecodeError, UnicodeDecodeError) as e:
                raise ResultsFileError(f"{self.path}:{lineno}: not a results record ({e}); "
                                       "is this a results file of ngramspec sweep?") from None
            if not isinstance(rec, dict):
                raise ResultsFileError(f"{self.path}:{lineno}: not a results record (a JSON "
                                       f"{type(rec).__name__}, not an object)")
            records.append(self._decode(rec))
        return records

    def _read_parquet(self, repair: bool) -> list[dict]:
        import pyarrow.parquet as pq

        if not self.path.is_dir():
            raise ResultsFileError(f"{self.path} is a file; Parquet results are a directory of "
                                   "part files (one per configuration)")
        records = []
        for part in sorted(self.path.iterdir()):
            if part.name.startswith(".") and part.name.endswith(".tmp"):
                if repair:  # a part file a killed sweep did not finish writing
                    part.unlink()
                continue
            if not part.name.endswith(".parquet"):
                raise ResultsFileError(f"{part}: not a results part file (expected only "
                                       "part-*.parquet in the results directory)")
            try:
                rows = pq.read_table(part).to_pylist()
            except Exception as e:
                raise ResultsFileError(f"{part}: cannot be read as Parquet: {e}") from None
            records += [self._decode(r) for r in rows]
        return records

    @staticmethod
    def _decode(rec: dict) -> dict:
        out = dict(rec)
        for k, kind in RESULT_FIELDS.items():
            if k not in out:
                continue
            v = out[k]
            if kind == "json" and isinstance(v, str):
                try:
                    out[k] = json.loads(v)
                except json.JSONDecodeError:
                    pass
            elif kind == "float" and v is None:
                out[k] = float("nan")
        return out

    def _check(self, rec: dict, i: int) -> None:
        where = f"{self.path}: record {i + 1}"
        got, want = set(rec), set(RESULT_FIELDS)
        if got != want:
            extra, missing = sorted(got - want), sorted(want - got)
            raise ResultsFileError(
                f"{where}: not a results record of this ngramspec: "
                + (f"foreign columns {', '.join(extra)}" if extra else "")
                + ("; " if extra and missing else "")
                + (f"missing columns {', '.join(missing)}" if missing else ""))
        if rec["schema_version"] != SCHEMA_VERSION or \
                rec["ngramspec_version"] != self._versions["ngramspec_version"]:
            raise ResultsFileError(
                f"{where}: written by ngramspec {rec['ngramspec_version']} (results layout "
                f"{rec['schema_version']}); this is ngramspec "
                f"{self._versions['ngramspec_version']} (layout {SCHEMA_VERSION}): its figures "
                "may differ; start a new --out")
        if rec["sweep"] != self.sweep:
            raise ResultsFileError(
                f"{where}: written by a different sweep (other streams, --limit, base "
                "settings, backend, cost, hold-out or --by); resume it with the same "
                "command, or start a new --out")

    # writing
    def records(self) -> list[dict]:
        """Every record, in the order written."""
        return list(self._records)

    def keys(self) -> set[str]:
        """Keys of the configurations already in the file."""
        return {r["key"] for r in self._records}

    def append(self, record: dict) -> None:
        """Add one finished configuration, durably and whole."""
        if self._lock.fd is None:
            raise ValueError(f"{self.path}: closed; open it again (with resume=True) to add "
                             "records")
        missing = set(RESULT_FIELDS) ^ set(record)
        if missing:
            raise ValueError(f"a results record has exactly the fields RESULT_FIELDS; "
                             f"differs in {', '.join(sorted(missing))}")
        if self.kind == "jsonl":
            line = json.dumps({k: _to_json_value(record[k]) for k in RESULT_FIELDS},
                              separators=(",", ":"), default=_json_default) + "\n"
            self.path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, line.encode("utf-8"))  # one write: a record is whole or absent
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            self._append_parquet(record)
        self._records.append(dict(record))

    def _append_parquet(self, record: dict) -> None:
        import pyarrow as pa
        import pyarrow.parquet as pq

        types = {"int": pa.int64(), "str": pa.string(), "float": pa.float64(),
                 "floats": pa.list_(pa.float64()), "json": pa.string()}
        schema = pa.schema([(k, types[kind]) for k, kind in RESULT_FIELDS.items()])
        row = {}
        for k, kind in RESULT_FIELDS.items():
            v = record[k]
            if kind == "json":
                v = None if v is None else json.dumps(v, sort_keys=False, default=_json_default)
            row[k] = v
        table = pa.Table.from_pylist([row], schema=schema)
        self.path.mkdir(parents=True, exist_ok=True)
        digest = hashlib.sha256(record["key"].encode("utf-8")).hexdigest()[:16]
        final = self.path / f"part-{len(self._records):05d}-{digest}.parquet"
        tmp = self.path / f".{final.name}.tmp"
        pq.write_table(table, tmp)
        with open(tmp, "rb") as f:
            os.fsync(f.fileno())
        os.replace(tmp, final)  # a reader sees the whole part or none of it


def _json_default(x: Any) -> Any:
    if hasattr(x, "item"):
        return x.item()  # NumPy scalars
    if hasattr(x, "tolist"):
        return x.tolist()
    raise TypeError(f"{type(x).__name__} is not JSON serialisable")


def fingerprint(parts: dict) -> str:
    """A short stable hash of the sweep's inputs (JSON-serialisable)."""
    text = json.dumps(parts, sort_keys=True, default=str, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]
