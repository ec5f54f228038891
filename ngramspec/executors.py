"""Running many simulations: local processes or a Ray cluster; results files and resume.

An :class:`Executor` runs one function over many tasks (one sweep configuration each) with a
payload shared by all of them (the corpus), shipped to every worker once: to each local
process when it starts, or into Ray's object store once and fetched by each Ray worker the
first time it needs it.  Outcomes come back as they finish (:class:`Outcome`): a task whose
function raised is reported with its error and the others go on; a task whose worker process
died is run again, at most ``retries`` more times.

:class:`ResultsFile` keeps one record per finished configuration (JSON Lines, or Parquet as a
directory of one part file per record) so that an interrupted sweep resumes where it stopped;
every record is written whole or not at all.
"""

from __future__ import annotations

import abc
import hashlib
import json
import math
import os
import platform
import socket
import time
import traceback
from collections import deque
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "Outcome", "make_executor",
           "ResultsFile", "ResultsFileError", "EXECUTORS", "RESULT_FIELDS", "TIMING_FIELDS",
           "versions"]

#: Executor names accepted by :func:`make_executor` (``--executor``).
EXECUTORS = ("local", "ray")

TaskFn = Callable[[Any, Any], Any]


@dataclass(frozen=True)
class Outcome:
    """One finished task.

    Attributes
    ----------
    index : int
        The task's position in the list given to :meth:`Executor.run`.
    value : any
        What the function returned (None on error).
    error : str or None
        ``"ExceptionType: message"`` when the function raised or its worker kept dying.
    seconds : float
        Wall time of the function in its worker (shipping excluded).
    """

    index: int
    value: Any = None
    error: str | None = None
    seconds: float = 0.0


def versions() -> dict[str, str]:
    """The versions a result depends on (recorded with every result)."""
    import numba
    import numpy

    from . import __version__

    return {"ngramspec_version": __version__, "numpy_version": numpy.__version__,
            "numba_version": numba.__version__, "python_version": platform.python_version()}


def _timed(fn: TaskFn, task: Any, shared: Any) -> tuple[bool, Any, float, str]:
    """Run ``fn`` in a worker: (ok, value or error text, seconds, worker's ngramspec version).
    An exception is caught here so that it never takes the worker or the pool down."""
    from . import __version__

    t0 = time.perf_counter()
    try:
        value = fn(task, shared)
        return True, value, time.perf_counter() - t0, __version__
    except Exception as e:  # reported with the configuration; the sweep goes on
        where = traceback.extract_tb(e.__traceback__)[-1]
        text = f"{type(e).__name__}: {e} (at {os.path.basename(where.filename)}:{where.lineno})"
        return False, text, time.perf_counter() - t0, __version__


def _outcome(index: int, res: tuple[bool, Any, float, str]) -> Outcome:
    from . import __version__

    ok, value, seconds, worker_version = res
    if worker_version != __version__:
        return Outcome(index, error=f"the worker runs ngramspec {worker_version}, this is "
                                    f"{__version__}: install the same version on the cluster",
                       seconds=seconds)
    return Outcome(index, value, None, seconds) if ok else Outcome(index, None, value, seconds)


class Executor(abc.ABC):
    """Runs ``fn(task, shared)`` for every task; a context manager (close releases workers).

    Examples
    --------
    >>> from ngramspec.executors import LocalExecutor
    >>> with LocalExecutor(jobs=1) as ex:
    ...     sorted((o.index, o.value) for o in ex.run(pow, [2, 3], shared=10))
    [(0, 1024), (1, 59049)]
    """

    name = ""

    @abc.abstractmethod
    def run(self, fn: TaskFn, tasks: Sequence[Any], *, shared: Any = None) -> Iterator[Outcome]:
        """Outcomes of ``fn(task, shared)`` for every task, in the order they finish.

        ``fn`` must be a module-level function (it is pickled by name); ``shared`` is shipped
        to each worker once.
        """

    def close(self) -> None:
        """Release the workers (and a Ray cluster this executor started)."""

    def __enter__(self) -> "Executor":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


_SHARED: list[Any] = [None]


def _init_local(shared: Any) -> None:
    _SHARED[0] = shared


def _local_call(fn: TaskFn, task: Any) -> tuple[bool, Any, float, str]:
    return _timed(fn, task, _SHARED[0])


class LocalExecutor(Executor):
    """Local processes (``jobs`` of them; ``jobs=1`` runs in this process).

    Parameters
    ----------
    jobs : int
        Worker processes, >= 1.
    retries : int
        How many more times a task runs after its worker process died (>= 0).
    """

    name = "local"

    def __init__(self, *, jobs: int = 1, retries: int = 2) -> None:
        _check_count(jobs, "jobs", 1)
        _check_count(retries, "retries", 0)
        self.jobs, self.retries = int(jobs), int(retries)

    def run(self, fn: TaskFn, tasks: Sequence[Any], *, shared: Any = None) -> Iterator[Outcome]:
        tasks = list(tasks)
        if self.jobs == 1 or len(tasks) <= 1:
            for i, task in enumerate(tasks):
                yield _outcome(i, _timed(fn, task, shared))
            return
        workers = min(self.jobs, len(tasks))
        pending = deque(range(len(tasks)))
        # A dying worker breaks the whole pool and every task in flight with it: those run
        # again one at a time (suspects), so that only a task that dies alone is charged.
        suspects: deque[int] = deque()
        deaths = [0] * len(tasks)
        running: dict[Any, int] = {}
        pool = ProcessPoolExecutor(workers, initializer=_init_local, initargs=(shared,))
        try:
            while pending or suspects or running:
                broken = False
                while not broken and (suspects and not running or not suspects and pending
                                      and len(running) < workers):
                    queue = suspects if suspects else pending
                    i = queue.popleft()
                    try:
                        running[pool.submit(_local_call, fn, tasks[i])] = i
                    except BrokenProcessPool:  # a worker died since the last results
                        queue.appendleft(i)
                        broken = True
                finished = set()
                if not broken:
                    finished, _ = wait(list(running), return_when=FIRST_COMPLETED)
                died = []
                for fut in finished:
                    i = running.pop(fut)
                    try:
                        res = fut.result()
                    except BrokenProcessPool:
                        died.append(i)
                        continue
                    except Exception as e:  # e.g. a task or a result that cannot be pickled
                        yield Outcome(i, error=f"{type(e).__name__}: {e}")
                        continue
                    yield _outcome(i, res)
                if died or broken:
                    lost = sorted(died + list(running.values()))
                    running.clear()
                    pool.shutdown(wait=False, cancel_futures=True)
                    pool = ProcessPoolExecutor(workers, initializer=_init_local,
                                               initargs=(shared,))
                    if not lost:
                        continue
                    if len(lost) > 1:
                        suspects.extend(lost)
                        continue
                    i = lost[0]
                    deaths[i] += 1
                    if deaths[i] > self.retries:
                        yield Outcome(i, error=f"WorkerDied: its worker process died "
                                               f"{deaths[i]} times")
                    else:
                        suspects.appendleft(i)
        except BaseException:  # interrupted (Ctrl-C, generator closed): do not wait
            pool.shutdown(wait=False, cancel_futures=True)
            raise
        pool.shutdown(wait=True)


_RAY_SHARED: dict[str, Any] = {}


def _ray_call(fn: TaskFn, task: Any, box: list) -> tuple[bool, Any, float, str]:
    """A Ray task: the shared payload comes by reference (in a list, so that Ray does not
    resolve it for every task) and is fetched once per worker process."""
    import ray

    key = box[0].hex()
    if key not in _RAY_SHARED:
        _RAY_SHARED.clear()
        _RAY_SHARED[key] = ray.get(box[0])
    return _timed(fn, task, _RAY_SHARED[key])


def _check_address(address: str) -> None:
    """Fail fast and clearly when nothing listens at ``host:port`` (Ray itself would keep
    retrying for a long while)."""
    if address in ("auto", "local"):
        return
    rest = address.split("://", 1)[1] if "://" in address else address
    host, sep, port = rest.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise ValueError(f"--address must be HOST:PORT of a Ray cluster's head (or "
                         f"ray://HOST:PORT, or auto), got {address!r}")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=3):
            pass
    except OSError as e:
        raise ValueError(f"--address {address}: no Ray cluster reachable there "
                         f"({e.strerror or e}); start one with 'ray start --head' or leave "
                         "--address out to start a local one") from None


class RayExecutor(Executor):
    """One Ray task per configuration, on an existing cluster or a local one started here.

    Parameters
    ----------
    address : str, optional
        ``HOST:PORT`` (or ``ray://HOST:PORT``, or ``auto``) of a running cluster; None starts
        a local cluster (stopped again by :meth:`close`).  When Ray is already initialised in
        this process, that connection is used and left open.
    jobs : int, optional
        CPUs of the local cluster started here (default: all).  Ignored with ``address``.
    retries : int
        How many more times Ray runs a task whose worker process died.
    """

    name = "ray"

    def __init__(self, *, address: str | None = None, jobs: int | None = None,
                 retries: int = 2) -> None:
        _check_count(retries, "retries", 0)
        if jobs is not None:
            _check_count(jobs, "jobs", 1)
        try:
            import ray
        except ImportError:
            raise ValueError("--executor ray needs Ray: pip install 'ngramspec[ray]'") from None
        self._ray = ray
        self.retries = int(retries)
        self._owned = False
        if address is not None:
            _check_address(address)
        if ray.is_initialized():
            return
        # Workers of a local cluster import this very copy of ngramspec.
        root = str(Path(__file__).resolve().parent.parent)
        path = os.pathsep.join([root] + [p for p in [os.environ.get("PYTHONPATH")] if p])
        kwargs: dict[str, Any] = dict(include_dashboard=False, log_to_driver=False,
                                      configure_logging=False)
        if address is None:
            kwargs.update(num_cpus=jobs, runtime_env={"env_vars": {"PYTHONPATH": path}})
        try:
            ray.init(address=address, **kwargs)
        except Exception as e:  # Ray raises ConnectionError, RuntimeError, ... here
            raise ValueError(f"Ray could not {'connect to ' + address if address else 'start'}"
                             f": {str(e).splitlines()[0] if str(e) else type(e).__name__}"
                             ) from None
        self._owned = True

    def run(self, fn: TaskFn, tasks: Sequence[Any], *, shared: Any = None) -> Iterator[Outcome]:
        ray = self._ray
        box = [ray.put(shared)]  # shipped once; each worker fetches it once
        remote = ray.remote(max_retries=self.retries, retry_exceptions=False)(_ray_call)
        refs = {remote.remote(fn, task, box): i for i, task in enumerate(tasks)}
        try:
            while refs:
                ready, _ = ray.wait(list(refs), num_returns=1)
                for ref in ready:
                    i = refs.pop(ref)
                    try:
                        res = ray.get(ref)
                    except ray.exceptions.WorkerCrashedError:
                        yield Outcome(i, error=f"WorkerDied: its worker process died "
                                               f"{self.retries + 1} times")
                        continue
                    except ray.exceptions.RayError as e:
                        first = str(e).strip().splitlines()
                        yield Outcome(i, error=f"{type(e).__name__}: "
                                               f"{first[0] if first else ''}")
                        continue
                    yield _outcome(i, res)
        finally:
            for ref in refs:  # an interrupted sweep leaves nothing running
                ray.cancel(ref, force=True)

    def close(self) -> None:
        if self._owned:
            self._ray.shutdown()
            self._owned = False


def make_executor(kind: str, *, jobs: int | None = None, address: str | None = None,
                  retries: int = 2) -> Executor:
    """The executor named ``kind`` (``"local"`` or ``"ray"``).

    Examples
    --------
    >>> make_executor("local", jobs=2).jobs
    2
    >>> make_executor("dask")
    Traceback (most recent call last):
    ...
    ValueError: --executor must be one of local, ray, got 'dask'
    """
    if kind not in EXECUTORS:
        raise ValueError(f"--executor must be one of {', '.join(EXECUTORS)}, got {kind!r}")
    if kind == "local":
        if address is not None:
            raise ValueError("--address names a Ray cluster: it needs --executor ray")
        return LocalExecutor(jobs=jobs or 1, retries=retries)
    return RayExecutor(address=address, jobs=jobs, retries=retries)


def _check_count(value: Any, name: str, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"--{name} must be an integer >= {low}, got {value!r}")


# --- results files ------------------------------------------------------------------------

#: Version of the record layout below.
SCHEMA_VERSION = 1

#: Every field of a record, with its kind: str, int, float, floats (list), json (nested).
RESULT_FIELDS: dict[str, str] = {
    "schema_version": "int", "ngramspec_version": "str", "numpy_version": "str",
    "numba_version": "str", "python_version": "str",
    "sweep": "str", "key": "str", "part": "str", "concurrency": "int",
    "run_concurrency": "int", "options": "json", "config": "json", "match_type": "str",
    "draft_token_num": "int", "backend": "str", "requests": "int", "verify_steps": "int",
    "emitted_tokens": "int", "batch_steps": "int", "tokens_per_step": "float",
    "acceptance_by_depth": "floats", "draft_nodes_per_step": "float",
    "share_steps_with_draft": "float", "speedup": "float",
    "speculative_tokens_per_s": "float", "baseline_tokens_per_s": "float",
    "prediction": "json", "group_by": "str", "groups": "json",
    "draft_ms_per_step": "float", "wall_seconds": "float", "task_seconds": "float",
    "finished_at": "str",
}

#: Fields that change from run to run (timings); the others are the same for the same inputs.
TIMING_FIELDS = ("draft_ms_per_step", "wall_seconds", "task_seconds", "finished_at")

RESULTS_SUFFIXES = (".jsonl", ".parquet")


class ResultsFileError(ValueError):
    """A results file that cannot be used for this sweep; the message says why."""


def _to_json_value(x: Any) -> Any:
    # NaN is not JSON: stored as null, read back as NaN for float fields.
    return None if isinstance(x, float) and math.isnan(x) else x


class ResultsFile:
    """Finished sweep configurations, one record each, appended as they finish.

    ``PATH.jsonl``: one JSON object per line, each line written with one ``write`` and
    flushed to disk.  ``PATH.parquet``: a directory of part files, one per record, each
    written under a temporary name and renamed (pandas and polars read the directory as one
    table).  A sweep killed at any moment leaves whole records only (a torn last line of a
    JSON Lines file, possible only if the machine itself stopped mid-write, is dropped when
    the file is resumed).

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
    >>> ResultsFile(p, sweep="s1", resume=True).keys()
    {'a'}
    >>> ResultsFile(p, sweep="s1", resume=False)
    Traceback (most recent call last):
    ...
    ngramspec.executors.ResultsFileError: ...r.jsonl already holds 1 results; pass --resume ...
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
        self._records = self._read(repair=resume)
        if self._records and not resume:
            raise ResultsFileError(f"{self.path} already holds {len(self._records)} results; "
                                   "pass --resume to continue it, or another --out")
        for i, rec in enumerate(self._records):
            self._check(rec, i)

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
