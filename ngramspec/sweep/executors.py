"""Where a sweep's jobs run: local processes or a Ray cluster.

An :class:`Executor` runs one function over many tasks (one sweep configuration each) with a
payload shared by all of them (the corpus), shipped to every worker once: to each local
process when it starts, or into Ray's object store once and fetched by each Ray worker the
first time it needs it.  Outcomes come back as they finish (:class:`Outcome`): a task whose
function raised is reported with its error and the others go on; a task whose worker process
died is run again, at most ``retries`` more times.
"""

from __future__ import annotations

import abc
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

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "Outcome", "make_executor", "EXECUTORS",
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

    from .._version import __version__

    return {"ngramspec_version": __version__, "numpy_version": numpy.__version__,
            "numba_version": numba.__version__, "python_version": platform.python_version()}


def _timed(fn: TaskFn, task: Any, shared: Any) -> tuple[bool, Any, float, str]:
    """Run ``fn`` in a worker: (ok, value or error text, seconds, worker's ngramspec version).
    An exception is caught here so that it never takes the worker or the pool down."""
    from .._version import __version__

    t0 = time.perf_counter()
    try:
        value = fn(task, shared)
        return True, value, time.perf_counter() - t0, __version__
    except Exception as e:  # reported with the configuration; the sweep goes on
        where = traceback.extract_tb(e.__traceback__)[-1]
        text = f"{type(e).__name__}: {e} (at {os.path.basename(where.filename)}:{where.lineno})"
        return False, text, time.perf_counter() - t0, __version__


def _outcome(index: int, res: tuple[bool, Any, float, str]) -> Outcome:
    from .._version import __version__

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
    >>> from ngramspec.sweep import LocalExecutor
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
        root = str(Path(__file__).resolve().parents[2])
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
