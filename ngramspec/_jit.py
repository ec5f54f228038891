"""The one place where Numba options live.

Kernels are decorated lazily with :func:`jit`; importing :mod:`ngramspec` imports no Numba.
With ``NUMBA_DISABLE_JIT=1`` Numba returns the plain Python functions, which the tests use.

Compiled kernels are cached on disk (``cache=True``; ``NGRAMSPEC_NUMBA_CACHE=0`` turns that off),
keyed on the content of every kernel source file (Numba alone checks only a kernel's own file,
and kernels inline helpers of other files): an edit anywhere in the engine recompiles.

Compiling is what a first run waits for, so it is announced on stderr as it starts (once per
process; ``NGRAMSPEC_COMPILE_NOTICE=0`` silences it), and each kernel given ``what=`` (the entry
points, which compile everything they call) says what it is and how long it took.  Loading a
kernel from the disk cache says nothing.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Hashable, Iterator

__all__ = ["jit", "jit_inline", "entry_point", "EntryPoints", "compile_free_clock", "OPTIONS"]

# Serial kernels: cached on disk, and free of the GIL so that caches in other threads run.
OPTIONS = dict(cache=os.environ.get("NGRAMSPEC_NUMBA_CACHE", "1") != "0", nogil=True,
               boundscheck=False, fastmath=False)

# What an entry-point kernel is, in words, by its code object (see :func:`jit`).
_WHAT: dict[Any, str] = {}
_notice: list[Any] = []  # the compile listener, once registered


def jit(fn: Callable | None = None, *, what: str | None = None) -> Any:
    """Compile ``fn`` with the project's Numba options; ``fn.py_func`` stays the plain one.

    ``what``: for kernels called from Python, what they are in words (the compile notice)."""
    if fn is None:
        return lambda f: jit(f, what=what)
    import numba

    if what is not None:
        _WHAT[fn.__code__] = what
    _listen()
    _stamp_sources()
    return _compiled(numba, fn)


def _say(line: str) -> None:
    if os.environ.get("NGRAMSPEC_COMPILE_NOTICE", "1") == "0":
        return
    sys.stderr.write(f"ngramspec: {line}\n")
    sys.stderr.flush()


def _listen() -> None:
    """Register the compile notice with Numba's event system (once)."""
    if _notice:
        return
    from numba.core import event

    class CompileNotice(event.Listener):
        # Numba compiles under one global lock, so one depth counter tells the outermost
        # compile (the one a caller waits for) from those it triggers.
        def __init__(self) -> None:
            self.depth = 0
            self.started = 0.0
            self.what: str | None = None
            self.announced = False

        def on_start(self, ev: Any) -> None:
            self.depth += 1
            if self.depth != 1:
                return
            fn = getattr(ev.data["dispatcher"], "py_func", None)
            if fn is None or not fn.__module__.startswith("ngramspec."):
                return
            if not self.announced:
                self.announced = True
                _say("compiling kernels on first use (cached on disk: later runs skip this)")
            self.what = _WHAT.get(fn.__code__)
            self.started = time.perf_counter()
            if self.what is not None:
                _say(f"compiling {self.what} ...")

        def on_end(self, ev: Any) -> None:
            self.depth -= 1
            failed = (getattr(ev, "exc_details", None) or (None,))[0] is not None
            if self.depth == 0 and self.what is not None and not failed:
                _say(f"compiled {self.what} in {time.perf_counter() - self.started:.1f} s")
            if self.depth == 0:
                self.what = None

    _notice.append(CompileNotice())
    event.register("numba:compile", _notice[0])


def jit_inline(fn):
    """:func:`jit`, inlined into its callers at Numba's IR level: for helpers on hot paths that
    take bundles (LLVM alone does not inline them, and a call costs the bundle's unpacking)."""
    import numba

    _stamp_sources()
    return _compiled(numba, fn, inline="always")


_DISPATCHER: list[Any] = []


def _compiled(numba: Any, fn: Callable, **extra: Any) -> Any:
    """``numba.njit(**OPTIONS, **extra)(fn)``, with a dispatcher that compiles a kernel called
    from other kernels for its arguments' plain types: Numba types a constant argument as
    its literal value (``Literal[int](0)``) and compiles a specialisation per literal, which
    compiled the largest tree builder three times where two differ."""
    if numba.config.DISABLE_JIT:
        return fn
    if not _DISPATCHER:
        from numba.core import registry, types

        class PlainArguments(registry.CPUDispatcher):
            def get_call_template(self, args: Any, kws: Any) -> Any:
                return super().get_call_template(
                    tuple(types.unliteral(a) for a in args),
                    {k: types.unliteral(t) for k, t in kws.items()})

        _DISPATCHER.append(PlainArguments)
    options = {k: v for k, v in OPTIONS.items() if k != "cache"}
    disp = _DISPATCHER[0](py_func=fn, locals={},
                          targetoptions=dict(nopython=True, **options, **extra))
    if OPTIONS["cache"]:
        disp.enable_caching()
    return disp


# What compiled kernels are made of: the engine's files and the modules they take code or
# constants from (Numba freezes globals into the machine code).
_KERNEL_SOURCES = ("engine", "_jit.py", "stdorder.py", "_canonical.py", "config", "errors.py")
_stamped: list[bool] = []


def _sources_stamp(root: str | None = None) -> bytes:
    """A digest of every kernel source file's content under the package directory ``root``
    (this package's by default; see :func:`_stamp_sources`)."""
    import hashlib

    root = root or os.path.dirname(os.path.abspath(__file__))
    digest = hashlib.sha256()
    for name in _KERNEL_SOURCES:
        path = os.path.join(root, name)
        files = (sorted(os.path.join(d, f) for d, _, names in os.walk(path) for f in names
                        if f.endswith(".py"))
                 if os.path.isdir(path) else [path])
        for f in files:
            digest.update(os.path.relpath(f, root).encode())
            with open(f, "rb") as fh:
                digest.update(hashlib.sha256(fh.read()).digest())
    return digest.digest()


def _stamp_sources() -> None:
    """Key the disk cache of ngramspec's kernels on all kernel sources, not only each kernel's
    own file (Numba's rule): a kernel inlines and calls helpers of other files, and an edit
    there must not load stale machine code.  Numba's locators are kept (the same cache
    directories); only the stamp its index checks is ours, computed once per process."""
    if _stamped:
        return
    _stamped.append(True)
    from numba.core import caching

    package = os.path.dirname(os.path.abspath(__file__)) + os.sep
    stamp: list[bytes] = []

    class Stamped:
        @classmethod
        def from_function(cls, py_func: Any, py_file: str) -> Any:
            if not os.path.abspath(py_file).startswith(package):
                return None
            return super().from_function(py_func, py_file)  # type: ignore[misc]

        def get_source_stamp(self) -> bytes:
            if not stamp:
                stamp.append(_sources_stamp())
            return stamp[0]

    bases = (caching.UserProvidedCacheLocator, caching.InTreeCacheLocator,
             caching.UserWideCacheLocator)
    caching.CacheImpl._locator_classes[:0] = [
        type(f"Ngramspec{base.__name__}", (Stamped, base), {}) for base in bases]

    load = caching.IndexDataCacheFile._load_index

    def load_index(self: Any) -> Any:
        if not stamp or self._source_stamp is not stamp[0]:
            return load(self)  # not one of ngramspec's kernels: Numba's own rule
        try:
            return load(self)
        except Exception:  # noqa: BLE001
            # An index written before a module moved (its types pickled by their old module
            # path) fails to unpickle before its stamp is read: a miss, rewritten on save.
            return {}

    caching.IndexDataCacheFile._load_index = load_index


def entry_point(kernel, *args):
    """The compiled entry point of ``kernel`` for the Numba types of ``args`` (compiled now if
    need be); ``kernel`` itself without the JIT.

    Calling the entry point skips the dispatcher's per-call typing of the arguments (measured:
    about 1 µs of 2.2 µs for a kernel taking a dozen arguments, two of them bundles).  Only for
    callers whose arguments always have the same types (dtype, dimensions, layout, writeable,
    aligned): the entry point unboxes what it gets as the types it was compiled for.
    """
    overloads = getattr(kernel, "overloads", None)
    if overloads is None:  # NUMBA_DISABLE_JIT=1: a plain function
        return kernel
    sig = tuple(kernel.typeof_pyval(a) for a in args)
    if sig not in overloads:
        kernel.compile(sig)
    return overloads[sig].entry_point


class EntryPoints:
    """The one cache of compiled entry points (:func:`entry_point`): an owner keeps one and
    asks it for ``(name, kernel, args)``; the first ask compiles or looks up the kernel for
    the types of ``args``, later asks return that entry point with no typing at all.

    For callers whose argument types never vary: an entry point reads what it gets as the
    types it was compiled for (a strided view, say, would be misread).  Where arrays come from
    a user, the caller checks first that they are of the usual kind (dtype, rank, C order)
    and calls the kernel itself, typed per call, for anything else (``verify_greedy`` does).

    Examples
    --------
    >>> import numba, numpy as np
    >>> from ngramspec._jit import EntryPoints
    >>> total = numba.njit(lambda a: a.sum())
    >>> points = EntryPoints()
    >>> a = np.arange(6, dtype=np.int64)
    >>> int(points("total", total, (a,))(a))
    15
    >>> len(points)
    1
    """

    __slots__ = ("_got",)

    def __init__(self) -> None:
        self._got: dict[Hashable, Any] = {}

    def __len__(self) -> int:
        return len(self._got)

    def __call__(self, name: Hashable, kernel: Any, args: tuple) -> Any:
        entry = self._got.get(name)
        if entry is None:
            entry = self._got[name] = entry_point(kernel, *args)
        return entry

    def forget(self, name: Hashable) -> None:
        """Forget ``name``'s entry point (its arguments' types may change)."""
        self._got.pop(name, None)


class CompileFreeClock:
    """The calling thread's wall and CPU clocks, stopped while Numba compiles or loads a kernel
    in that thread (its compiler lock): what a first run spends compiling is not counted as
    what the timed code costs.  See :func:`compile_free_clock`."""

    def __init__(self) -> None:
        self._thread = threading.get_ident()
        self._depth = 0
        self._at = (0.0, 0.0)
        self.compile_wall = self.compile_cpu = 0.0

    def now(self) -> tuple[float, float]:
        """(wall, CPU) seconds, less the compiling so far."""
        return (time.perf_counter() - self.compile_wall, time.thread_time() - self.compile_cpu)

    def since(self, then: tuple[float, float]) -> tuple[float, float]:
        """(wall, CPU) seconds from ``then`` (a :meth:`now`), compiling excluded."""
        w, c = self.now()
        return w - then[0], c - then[1]

    def _start(self) -> None:
        if threading.get_ident() == self._thread:
            if self._depth == 0:  # (the lock is reentrant: the outermost hold counts)
                self._at = (time.perf_counter(), time.thread_time())
            self._depth += 1

    def _end(self) -> None:
        if threading.get_ident() == self._thread:
            self._depth -= 1
            if self._depth == 0:
                self.compile_wall += time.perf_counter() - self._at[0]
                self.compile_cpu += time.thread_time() - self._at[1]


@contextmanager
def compile_free_clock() -> Iterator[CompileFreeClock]:
    """A :class:`CompileFreeClock` for the block.

    >>> with compile_free_clock() as clock:
    ...     t = clock.now()
    ...     wall, cpu = clock.since(t)
    >>> wall >= 0.0 and cpu >= 0.0
    True
    """
    from numba.core import event

    clock = CompileFreeClock()

    class Forward(event.Listener):
        def on_start(self, ev: Any) -> None:
            clock._start()

        def on_end(self, ev: Any) -> None:
            clock._end()

    with event.install_listener("numba:compiler_lock", Forward()):
        yield clock
