"""The one place where Numba options live.

Kernels are decorated lazily with :func:`jit`; importing :mod:`ngramspec` imports no Numba.
With ``NUMBA_DISABLE_JIT=1`` Numba returns the plain Python functions, which the tests use.

Compiled kernels are cached on disk (``cache=True``; ``NGRAMSPEC_NUMBA_CACHE=0`` turns that off).
Numba checks only the timestamp of a kernel's own file, so when editing a kernel that others in
other files call, delete the ``__pycache__/*.nbi``/``*.nbc`` files (an install always does).
"""

from __future__ import annotations

import os

__all__ = ["jit", "jit_inline", "entry_point", "OPTIONS"]

# Serial kernels: cached on disk, and free of the GIL so that caches in other threads run.
OPTIONS = dict(cache=os.environ.get("NGRAMSPEC_NUMBA_CACHE", "1") != "0", nogil=True,
               boundscheck=False, fastmath=False)


def jit(fn):
    """Compile ``fn`` with the project's Numba options; ``fn.py_func`` stays the plain one."""
    import numba

    return numba.njit(**OPTIONS)(fn)


def jit_inline(fn):
    """:func:`jit`, inlined into its callers at Numba's IR level: for helpers on hot paths that
    take bundles (LLVM alone does not inline them, and a call costs the bundle's unpacking)."""
    import numba

    return numba.njit(inline="always", **OPTIONS)(fn)


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
