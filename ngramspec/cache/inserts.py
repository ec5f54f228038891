"""The insert thread of :class:`~ngramspec.NgramCache`: ``insert(wait=False)`` queues a batch
and returns; one worker thread inserts the queue in order under the cache's lock, and
``synchronize`` waits for what was queued before it.

A mixin, so that the cache's hot paths read the counters as plain attributes of the cache.
The cache provides ``_lock``, ``_insert(batch, counts)`` and ``_insert_flat(flat, offsets)``.
"""

from __future__ import annotations

import queue
import threading
import weakref
from typing import Any

import numpy as np

from ..errors import BackgroundInsertError

__all__ = ["BackgroundInserts"]

# How long an idle insert thread waits for the next queued batch before it exits: longer than
# the gaps between a server's finishing requests, whose counts are queued as they finish.
_WORKER_LINGER_S = 10.0


class BackgroundInserts:
    """FIFO queue, one worker thread at a time, counters of batches queued and finished,
    errors kept for the next caller."""

    def _init_inserts(self) -> None:
        # A C-level queue: queueing a step's windows from the serving thread runs no Python of
        # threading's (a Condition's notify cost ~20 us per step there, caches cold).
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._push_lock = threading.Lock()  # the count, the queue and the worker's start
        self._done_cond = threading.Condition()  # the worker's finished batches, errors
        self._queued = self._done = 0
        # A Drafter's finished requests: held from the next propose's drafts (``_held``), then
        # due (``_due``: every read waits for them) and queued at once, or (``_defer``) at
        # the owner's next ``_release_due`` (the SGLang drop-in's batch_put); any read of the
        # cache through synchronize queues both first.
        self._held: list[tuple] = []
        self._due: list[tuple] = []
        self._defer = False
        self._worker_running = False
        self._errors: list[BaseException] = []

    def _enqueue(self, batch: list[np.ndarray], counts: list[int] | None) -> None:
        # Copy: the caller may reuse its arrays once we return (int32 input is not copied).
        self._push(([np.array(s, dtype=np.int32, copy=True) for s in batch], counts))

    def _push(self, item: tuple) -> None:
        """Queue ``(batch, counts)`` (or ``(None, (flat, offsets, count_from))``) for the
        insert thread, started if it is not running."""
        with self._push_lock:
            self._queued += 1
            self._queue.put(item)
            if not self._worker_running:
                self._worker_running = True
                threading.Thread(target=_work, args=(weakref.ref(self), self._queue,
                                                     self._push_lock),
                                 name="ngramspec-insert", daemon=True).start()

    def _hold(self, flat: np.ndarray, offsets: np.ndarray, count_from: np.ndarray) -> None:
        """Hold a packed insert (as :meth:`_push` takes it) from the next propose's drafts
        (:meth:`_drafted`); a read through :meth:`synchronize` queues it first."""
        self._held.append((None, (flat, offsets, count_from)))

    def _drafted(self) -> None:
        """A propose has drafted: the held inserts are due, queued now unless ``_defer``."""
        self._due += self._held
        self._held = []
        if not self._defer:
            self._release_due()

    def _release_due(self) -> None:
        """Queue the due inserts, in the order they were held."""
        due, self._due = self._due, []
        for item in due:
            self._push(item)

    def _insert_queued(self, batch: list[np.ndarray] | None, counts: Any) -> None:
        """One queued batch, in the insert thread; its failure kept for the caller."""
        error = None
        try:
            with self._lock:
                if batch is None:  # packed by a Drafter: (flat, offsets, count_from)
                    self._insert_flat(*counts)
                else:
                    self._insert(batch, counts)
        except BaseException as e:  # kept for the caller, never lost
            error = e
        with self._done_cond:
            if error is not None:
                self._errors.append(error)
            self._done += 1  # only now is this batch FINISHED
            self._done_cond.notify_all()

    def synchronize(self) -> None:
        """Wait until every insert queued (``wait=False``) or held (a :class:`Drafter`'s
        finished requests) before this call has finished.

        Unlike SGLang 0.5.9's ``synchronize``, which returned once the queue was empty while
        the last insert could still be running, this waits for the inserts themselves.  If
        a background insert failed, raises :class:`~ngramspec.errors.BackgroundInsertError`
        (once) with the first failure as its cause; the batches queued after it were still
        inserted.
        """
        if self._held:
            self._due += self._held
            self._held = []
        if self._due:
            self._release_due()
        self._wait_queued()

    def _wait_queued(self) -> None:
        """:meth:`synchronize` of the queued inserts alone (held and due ones stay)."""
        if self._done == self._queued and not self._errors:
            return  # nothing queued: the common case, no lock taken
        with self._done_cond:
            target = self._queued
            while self._done < target:
                self._done_cond.wait()
            errors, self._errors = self._errors, []
        if errors:
            raise BackgroundInsertError(
                f"{len(errors)} background insert(s) failed; the first: "
                f"{type(errors[0]).__name__}: {errors[0]}") from errors[0]


def _work(ref: "weakref.ref[Any]", q: queue.SimpleQueue, push_lock: threading.Lock) -> None:
    """The insert thread: drains the queue in order, waits a while for more (starting a
    thread costs the serving thread 0.1-4 ms, busy machine: more than a step's match), then
    exits (restarted on demand).  It holds its cache only while inserting (a weak reference
    between batches), so that a cache nobody uses any more is freed while its thread waits."""
    while True:
        try:
            batch, counts = q.get(timeout=_WORKER_LINGER_S)
        except queue.Empty:
            with push_lock:  # (nothing can be queued meanwhile)
                if q.empty():
                    cache = ref()
                    if cache is not None:
                        cache._worker_running = False
                    return
            continue
        cache = ref()
        if cache is None:  # gone with what it had queued
            return
        cache._insert_queued(batch, counts)
        del cache
