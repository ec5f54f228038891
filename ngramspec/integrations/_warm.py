"""The integrations' warm-up: a server's drafter compiles its kernels in a background thread
from the moment it is built (a model load hides it), and its first call waits only for what
is not done yet."""

from __future__ import annotations

import threading
from typing import Any, Callable

from ..config import NgramConfig
from ..drafter import Drafter

__all__ = ["Warming", "warm_corpus", "warm_drafter"]


class Warming:
    """``fn(*args)`` running in a daemon thread ("ngramspec-warmup"); :meth:`wait` joins it
    (once: later calls return at once) and raises what it raised."""

    def __init__(self, fn: Callable[..., None], *args: Any) -> None:
        self._error: BaseException | None = None
        self._thread: threading.Thread | None = threading.Thread(
            target=self._run, args=(fn, args), name="ngramspec-warmup", daemon=True)
        self._thread.start()

    def _run(self, fn: Callable[..., None], args: tuple) -> None:
        try:
            fn(*args)
        except BaseException as e:  # noqa: BLE001 - handed to the first call that waits
            self._error = e

    @property
    def done(self) -> bool:
        """Whether the warm-up has ended (waited for or not)."""
        return self._thread is None or not self._thread.is_alive()

    def wait(self) -> None:
        thread = self._thread
        if thread is None:
            return
        thread.join()
        self._thread = None
        if self._error is not None:
            error, self._error = self._error, None
            raise RuntimeError("ngramspec: compiling the drafter's kernels failed (see the "
                               "cause above)") from error


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


def warm_corpus(corpus_class: type, config: NgramConfig, backend: str = "numba",
                costs: Any = None) -> None:
    """Compile what SGLang's worker calls on a drop-in ``NgramCorpus`` (``corpus_class``) running
    ``config``:
    a throwaway corpus through the worker's own call sequence (one request, then a batch
    larger than a new drafter's rows, with the launcher hook's calls), so that exactly the
    kernels a server runs are compiled, and no others."""
    from .sglang_replay import replay_worker  # (it drives any corpus: no import of this)

    small = config.replace(capacity=max(config.trie_depth + 1, 256))
    text = [1, 2, 3, 4, 1, 2, 3, 5, 1, 2, 3, 4, 1, 2]
    for n in (1, 9):  # 9: past a new drafter's 8 rows
        corpus = corpus_class(max_trie_depth=config.max_trie_depth,
                             draft_token_num=config.draft_token_num, config=small,
                             backend=backend, costs=costs, warm=False)
        replay_worker(corpus, [text[:8 + r % 3] for r in range(n)],
                      [text[8 + r % 3:] + text for r in range(n)], concurrency=n,
                      max_trie_depth=config.max_trie_depth,
                      draft_token_num=config.draft_token_num, hooks=not config.sglang_exact,
                      forward=lambda kind, count: None)
