"""vLLM-style prompt lookup (n-gram) drafting, written here from its documented behaviour.

At each step, look for the last ``n`` tokens of the context (prompt + output so far) earlier
in the same context, for ``n = max_n, ..., min_n`` (3, 2, 1 by default): the first ``n`` with
at least one earlier occurrence wins (the longest match).  Among that ``n``'s occurrences
vLLM's ``NgramProposer`` takes the EARLIEST one (its KMP scan keeps the occurrence closest to
the start of the context); ``occurrence="latest"`` takes the most recent one instead.  The
draft is the ``k`` tokens (8 by default) that follow the occurrence, cut at the end of the
context (the occurrence may overlap the suffix itself: in ``1 1 1`` the suffix ``1 1`` occurs
at 0 and the draft is ``1``).  A chain: each draft token is the child of the previous one.

Nothing is indexed between steps; the cost is one vectorised scan of the context per step.
"""

from __future__ import annotations

import numpy as np

DEFAULTS = dict(min_n=1, max_n=3, k=8, occurrence="earliest")


def prompt_lookup(context, *, min_n: int = 1, max_n: int = 3, k: int = 8,
                  occurrence: str = "earliest") -> np.ndarray:
    """The draft (a 1-D int64 array, possibly empty) for this context."""
    if occurrence not in ("earliest", "latest"):
        raise ValueError(f"occurrence must be 'earliest' or 'latest', got {occurrence!r}")
    if not 1 <= min_n <= max_n or k < 0:
        raise ValueError("need 1 <= min_n <= max_n and k >= 0")
    ctx = np.asarray(context, dtype=np.int64).reshape(-1)
    size = ctx.size
    if size < 2 or k == 0:
        return ctx[:0]
    # ends[p]: the n-gram ending at position p (p <= size - 2, so a token follows it) equals
    # the context's last n tokens.  Grown one token to the left per n.
    ends = ctx[:size - 1] == ctx[size - 1]
    best = None
    for n in range(1, max_n + 1):
        if n > 1:
            if size - n < 0:
                break
            shifted = np.zeros(size - 1, dtype=bool)
            # token n-1 places before the end p must equal ctx[size - n]
            shifted[n - 1:] = ctx[:size - n] == ctx[size - n]
            ends = ends & shifted
        if not ends.any():
            break
        if n >= min_n:
            hits = np.flatnonzero(ends)
            best = hits[0] if occurrence == "earliest" else hits[-1]
    if best is None:
        return ctx[:0]
    return ctx[best + 1: best + 1 + k]


class PromptLookupProposer:
    """Prompt lookup behind the tree-proposer protocol of ``benchmarks/peers/replay.py``:
    a chain of up to ``k`` tokens (parents -1, 0, 1, ...)."""

    name = "prompt lookup"

    def __init__(self, **settings) -> None:
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown prompt-lookup settings {sorted(unknown)}; known: "
                            f"{sorted(DEFAULTS)}")
        self.settings = {**DEFAULTS, **settings}

    def start(self, rid, prompt, first_token) -> None:
        pass

    def propose(self, rid, context):
        draft = prompt_lookup(context, **self.settings)
        return draft, np.arange(-1, draft.size - 1, dtype=np.int64)

    def on_accept(self, rid, emitted) -> None:
        pass

    def stop(self, rid) -> None:
        pass
