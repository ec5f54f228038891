"""The request store of :class:`~ngramspec.Drafter`: each request's tokens in one row of flat
arrays, which the step kernels (:mod:`.steps`, :mod:`.remembered`) read and append to."""

from __future__ import annotations

import threading

import numpy as np

__all__ = ["RequestStore"]


class RequestStore:
    """Every request's token ids (prompt + output) in one row of a 2-D int32 array, with its
    size, prompt length and the tokens emitted at each step; rows are reused after
    ``finish``.  Both dimensions grow by doubling.

    A row may be claimed ahead (:meth:`claim`) and its prompt written by another thread
    (:meth:`fill`, the drafter's indexing thread during the prefill: the copy and its page
    faults off the serving thread); ``lock`` keeps that write and a growth apart."""

    def __init__(self, rows: int = 8, width: int = 256) -> None:
        self.lock = threading.Lock()
        self.buf = np.zeros((rows, width), np.int32)
        self.steps = np.zeros((rows, width), np.int32)
        self.size = np.zeros(rows, np.int64)
        self.nsteps = np.zeros(rows, np.int64)
        self.plen = np.zeros(rows, np.int64)
        self.free = list(range(rows - 1, -1, -1))

    def take(self, prompt: np.ndarray, first: int) -> int:
        if not self.free:
            self._grow(2 * self.size.size, self.buf.shape[1])
        slot = self.free.pop()
        self.reserve(self.room_for(prompt.size))
        self.buf[slot, :prompt.size] = prompt
        self.buf[slot, prompt.size] = first
        self.size[slot] = prompt.size + 1
        self.plen[slot] = prompt.size
        self.nsteps[slot] = 0
        return slot

    def claim(self) -> int:
        """A row for a prompt that :meth:`fill` writes and :meth:`take_filled` starts (or
        :meth:`release` gives back)."""
        if not self.free:
            self._grow(2 * self.size.size, self.buf.shape[1])
        slot = self.free.pop()
        self.size[slot] = 0
        return slot

    def fill(self, slot: int, prompt: np.ndarray) -> None:
        """Write ``prompt`` into the claimed row ``slot`` (any thread; its width reserved)."""
        with self.lock:
            self.buf[slot, :prompt.size] = prompt
            self.size[slot] = prompt.size

    def take_filled(self, slot: int, prompt_len: int, first: int) -> int:
        """Start the claimed row ``slot``, which :meth:`fill` wrote: its first token after."""
        self.reserve(self.room_for(prompt_len))
        self.buf[slot, prompt_len] = first
        self.size[slot] = prompt_len + 1
        self.plen[slot] = prompt_len
        self.nsteps[slot] = 0
        return slot

    def release(self, slot: int) -> None:
        """A claimed row never started, free again (any thread)."""
        self.free.append(slot)

    @staticmethod
    def room_for(prompt_len: int) -> int:
        """The width a request of this prompt length takes at admission: its prompt, the first
        token and room for its decode (a quarter of the prompt more, at least 256 tokens), so
        that its first steps' appends do not grow every row."""
        return prompt_len + 1 + max(256, prompt_len // 4)

    def reserve_rows(self, rows: int) -> None:
        """Rows for ``rows`` requests at once (one growth, not a doubling per request)."""
        if rows > self.size.size:
            self._grow(max(rows, 2 * self.size.size), self.buf.shape[1])

    def reserve(self, width: int) -> None:
        if width > self.buf.shape[1]:
            self._grow(self.size.size, max(width, 2 * self.buf.shape[1]))

    def _grow(self, rows: int, width: int) -> None:
        with self.lock:  # (a fill in flight writes the old arrays or the new, never between)
            self._grow_locked(rows, width)

    def _grow_locked(self, rows: int, width: int) -> None:
        old_rows = self.buf.shape[0]
        for name, used in (("buf", self.size), ("steps", self.nsteps)):
            # Uninitialised beyond what rows use: a row is read only up to its size (buf) or
            # its step count (steps), both written first (no zero fill, no page touched, and
            # only the used columns copied: a free row's size is 0 or its last request's).
            grown = np.empty((rows, width), np.int32)
            top = int(used.max()) if used.size else 0
            grown[:old_rows, :top] = getattr(self, name)[:, :top]
            setattr(self, name, grown)
        for name in ("size", "nsteps", "plen"):
            grown = np.zeros(rows, np.int64)
            grown[:old_rows] = getattr(self, name)
            setattr(self, name, grown)
        self.free[:0] = range(rows - 1, old_rows - 1, -1)

    def tokens(self, slot: int) -> np.ndarray:
        return self.buf[slot, :self.size[slot]]
