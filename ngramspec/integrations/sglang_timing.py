"""What SGLang's NGRAM worker spends in its drafter, timed: the worker's calls
(:func:`~ngramspec.integrations.sglang_replay.replay_worker`) on ngramspec's drop-in
``NgramCorpus``, for the serving prediction of ``engine="sglang"``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from .sglang import NgramCorpus
from .sglang_replay import replay_worker

__all__ = ["time_worker"]


class _Timed:
    """A corpus whose worker-facing calls are timed (their seconds summed)."""

    CALLS = ("synchronize", "batch_get", "batch_put", "erase_match_state", "note_prompts",
             "note_finished")

    def __init__(self, corpus: Any) -> None:
        self.corpus = corpus
        self.seconds = 0.0
        self.gets = 0

    def __getattr__(self, name: str) -> Any:
        call = getattr(self.corpus, name)
        if name not in self.CALLS:
            return call

        def timed(*args: Any) -> Any:
            t0 = time.perf_counter()
            out = call(*args)
            self.seconds += time.perf_counter() - t0
            self.gets += name == "batch_get"
            return out

        return timed


def time_worker(config: Any, prompts: Sequence[Sequence[int]],
                outputs: Sequence[Sequence[int]], *, concurrency: int, steps: int,
                costs: Any = None, repeats: int = 3) -> tuple[float, int]:
    """What SGLang's NGRAM worker spends in its drafter per serving-loop iteration, on
    ngramspec's drop-in :class:`~ngramspec.integrations.sglang.NgramCorpus` running
    ``config``: ``(seconds per iteration, iterations timed)``.

    The worker's calls (:func:`replay_worker`, with the launcher hook's calls beyond SGLang)
    run on the first ``steps`` iterations of the streams; the drafter's calls are timed, the
    stand-in verification is not.  ``synchronize`` waits for the windows the previous
    ``batch_put`` queued, so the whole insert counts (a server overlaps part of it with the
    forward).  The same iterations run once untimed first, on another corpus, so that no
    kernel compile is counted, then ``repeats`` times timed, each on a fresh corpus: the
    fastest pass is kept (a busy machine only ever slows a pass down).
    """
    kwargs = dict(max_trie_depth=config.max_trie_depth,
                  draft_token_num=config.draft_token_num)
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be an integer >= 1, got {repeats!r}")
    hooks = not config.sglang_exact
    best: tuple[float, int] | None = None
    for timed in [False] + [True] * repeats:
        corpus = NgramCorpus(**kwargs, config=config, costs=costs)
        target = _Timed(corpus) if timed else corpus
        replay_worker(target, prompts, outputs, concurrency=concurrency, hooks=hooks,
                      limit=steps, **kwargs)
        if timed:
            got = (target.seconds / max(target.gets, 1), target.gets)
            best = got if best is None or got[0] < best[0] else best
    assert best is not None
    return best
