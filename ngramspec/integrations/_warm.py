"""The integrations' warm-up: a :class:`~ngramspec.Drafter`'s kernels compiled when a server
builds its drafter, not at its first decode steps."""

from __future__ import annotations

from typing import Any

from ..config import NgramConfig
from ..drafter import Drafter

__all__ = ["warm_drafter"]


def warm_drafter(config: NgramConfig, backend: str = "numba", costs: Any = None) -> None:
    """Compile a :class:`~ngramspec.Drafter`'s kernels for ``config`` now (a throwaway run), not at a
    server's first decode steps: one request, then a batch larger than the first store's
    rows (growing rows compiles too), its prompts prepared ahead (:meth:`Drafter.prepare`)."""
    scratch = Drafter(config=config.replace(capacity=max(config.trie_depth + 1, 64)),
                      backend=backend, costs=costs)
    prompt = [1, 2, 3, 1, 2, 3, 1, 2]
    for rids in ([0], list(range(9))):  # 9: past a new drafter's 8 rows
        for r in rids:
            if len(rids) > 1:
                scratch.prepare(r, prompt)
            scratch.add_request(r, prompt, first_token=3)
        for _ in range(2):
            d = scratch.propose(rids)
            scratch.accept({r: [int(d.tokens[i, 1]) if d.num_drafts[i] else 1]
                            for i, r in enumerate(rids)})
        for r in rids:
            scratch.finish(r)
