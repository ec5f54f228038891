"""Exceptions of ngramspec beyond the built-in ``TypeError``/``ValueError`` of bad arguments."""

from __future__ import annotations

__all__ = ["IntegrityError", "CacheFileError", "BackgroundInsertError"]


class IntegrityError(AssertionError):
    """A cache's internal structure broke one of its invariants (a bug, never bad input).

    Raised by :meth:`~ngramspec.NgramCache.check_integrity`; the message names the invariant
    and the node or request state that breaks it.
    """


class CacheFileError(ValueError):
    """A saved cache file cannot be loaded: truncated, corrupted, of another format version,
    or of another configuration than the one asked for.  The message says which and where."""


class BackgroundInsertError(RuntimeError):
    """An insert queued with ``wait=False`` failed in the background thread.

    Raised once, by the next call that waits for the queue (:meth:`~ngramspec.NgramCache.
    synchronize` or any call that reads or changes the cache); the original exception is its
    ``__cause__``.
    """
