"""What a replay's sizes cost in memory, checked before anything is allocated.

The compiled replay keeps, per request decoded at once, the draft tree's mask (``n x n``
bytes for ``draft_token_num = n``, twice: the kernel's and the step record's) and the paths of
its counted inserts (``12 x depth x (depth - 1 + n)`` bytes, and ``12 x depth x depth`` for
the windows); the tree builder's heap holds ``max_bfs_breadth x depth x (n + 1)`` entries of
20 bytes.  A size that cannot fit is refused with the option, its value, the estimate and
the largest value that fits, instead of a ``MemoryError`` after minutes of work.
"""

from __future__ import annotations

import os

from ..config import NgramConfig

__all__ = ["available_bytes", "check_fits", "replay_bytes"]

# A run may use at most this share of the memory available when it starts.
_SHARE = 0.5
_GIB = 2**30


def replay_bytes(depth: int, n: int, concurrency: int) -> tuple[int, int]:
    """(draft-tree bytes, insert-path bytes) the replay holds for ``concurrency`` requests."""
    return (concurrency * 2 * n * n,
            concurrency * 12 * depth * ((depth - 1 + n) + depth))


def available_bytes() -> int | None:
    """The memory available to a new allocation (Linux ``MemAvailable``, else the physical
    memory), None where neither can be read."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return int(os.sysconf("SC_PHYS_PAGES")) * int(os.sysconf("SC_PAGE_SIZE"))
    except (ValueError, OSError, AttributeError):
        return None


def replay_seconds(n: int, request_steps: int) -> float:
    """A rough lower bound on the replay's time: per request-step about 50 ns per draft slot
    and 0.02 ns per mask byte (measured on a 2-core x86-64 machine at ``n`` = 64-2048)."""
    return request_steps * (50e-9 * n + 0.02e-9 * n * n)


def check_fits(config: NgramConfig, concurrency: int, available: int | None = None,
               request_steps: int | None = None) -> None:
    """Raise ValueError when ``config`` at ``concurrency`` needs more than half the memory
    available (``available``: bytes, default :func:`available_bytes`); the message names
    ``draft_token_num``, ``max_trie_depth`` or ``max_bfs_breadth``, whichever needs the
    most, and what fits (with
    ``request_steps``, a bound on the run's verify steps: what also replays within an hour)."""
    if config.vllm:
        return
    avail = available_bytes() if available is None else available
    if avail is None:
        return
    depth, n, breadth = config.trie_depth, config.draft_token_num, config.max_bfs_breadth
    tree, paths = replay_bytes(depth, n, concurrency)
    heap = _heap_bytes(breadth, depth, n)
    budget = int(avail * _SHARE)
    if tree + paths + heap <= budget:
        return
    at = f"with {concurrency} request(s) decoded at once"
    fits = f"this machine has {avail / _GIB:.1f} GiB available, a run may use half"
    if heap >= max(tree, paths):
        best = max((k for k in _candidates(breadth) if _heap_bytes(k, depth, n) + tree + paths
                    <= budget), default=None)
        raise ValueError(
            f"max_bfs_breadth={breadth} needs ~{heap / _GIB:.1f} GiB of tree-builder heap "
            f"(20 x max_bfs_breadth x depth x (draft_token_num + 1) bytes); {fits}: " + (
                f"max_bfs_breadth <= {best} fits" if best else "lower draft_token_num"))
    if tree >= paths:
        best = max((k for k in _candidates(n) if sum(replay_bytes(depth, k, concurrency))
                    <= budget and (request_steps is None
                                   or replay_seconds(k, request_steps) <= 3600)),
                   default=None)
        raise ValueError(
            f"draft_token_num={n} needs ~{tree / _GIB:.1f} GiB of draft-tree masks ({at}: "
            f"2 x {n}^2 bytes each); {fits}: " + (
                f"draft_token_num <= {best} fits" + (
                    " (and replays these streams in about an hour at most)"
                    if request_steps is not None else "") if best else "lower --concurrency"))
    name = "max_trie_depth" if config.profile == "sglang-0.5.23" else "branch_length"
    best = max((k for k in _candidates(depth) if k > 1 and sum(replay_bytes(k, n, concurrency))
                <= budget), default=None)
    raise ValueError(
        f"{name}={depth} needs ~{paths / _GIB:.1f} GiB of insert paths ({at}: 12 x depth x "
        f"(2 depth + draft_token_num) bytes each); {fits}: " + (
            f"{name} <= {best} fits" if best else "lower --concurrency"))


def _heap_bytes(breadth: int, depth: int, n: int) -> int:
    return 20 * breadth * depth * (n + 1)


def _candidates(high: int) -> list[int]:
    """Powers of two below ``high`` (the sizes the advice names)."""
    out, k = [], 2
    while k < high:
        out.append(k)
        k *= 2
    return out
