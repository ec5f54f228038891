"""Exceptions of ngramspec beyond the built-in ``TypeError``/``ValueError`` of bad arguments."""

from __future__ import annotations

__all__ = ["IntegrityError", "CacheFileError", "BackgroundInsertError", "UnknownRequestError"]


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


class UnknownRequestError(KeyError):
    """A :class:`~ngramspec.Drafter` call named a request that is not in flight (never added,
    or already finished).  Every call that takes request ids raises it with the same words.
    ``request_id`` is the id given."""

    def __init__(self, request_id, in_flight: int, prepared: int | None = None) -> None:
        super().__init__(request_id)
        self.request_id = request_id
        if prepared is not None:  # (add_prepared)
            self.message = (f"unknown request {request_id!r}: not prepared (give its prompt "
                            "to prepare() first; an added or finished request is no longer "
                            f"prepared; {prepared} prepared, {in_flight} in flight)")
            return
        self.message = (f"unknown request {request_id!r}: not in flight (add it with "
                        f"add_request(); finished requests are forgotten; {in_flight} in "
                        "flight)")

    def __str__(self) -> str:
        return self.message
