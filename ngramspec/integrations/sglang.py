"""``NgramCorpus``: SGLang 0.5.23's NGRAM drafter class, backed by ngramspec.

SGLang's NGRAM worker (``sglang/srt/speculative/ngram_worker.py``) talks to its drafter only
through ``sglang.srt.speculative.cpp_ngram.ngram_corpus.NgramCorpus``; this class has the same
constructor keywords, methods, return types, shapes and dtypes, so that replacing that name
puts any :class:`~ngramspec.NgramConfig` into the server (see
:mod:`ngramspec.integrations.sglang_launch` and ``docs/sglang.md``).  Nothing of SGLang is
imported here.

Two ways of running, chosen by the configuration:

* **SGLang-exact** (SGLang's keywords alone, or any ``sglang_exact`` config): an
  :class:`~ngramspec.NgramCache` does what SGLang's C++ object does, call for call: ``batch_put``
  queues the windows for the cache's insert thread and returns, ``synchronize`` waits for them,
  ``batch_get`` matches statefully per request id.  Every draft equals SGLang's own.
* **Beyond SGLang** (``recommended()``, ADAPTIVE trees, prompt indexing, exact counts, a
  per-request index): a :class:`~ngramspec.Drafter` over the cache, fed from what the worker
  sends.  Each ``batch_get`` reads what every request emitted since its last draft from the
  growth of its ``total_lens`` and the tail of its context (``accept``), forgets the requests
  that left the batch (``finish``), adds the new ones (``add_request``) and proposes.  Trees
  that use fewer slots are padded to ``draft_token_num`` the way SGLang pads its own (token
  0, a mask row of the root and the slot itself), so the worker's verification is unchanged.
  ``batch_put`` has nothing left to do (the windows it carries are the contexts already seen).
  What the worker's calls cannot tell (a request's prompt beyond its last ``max_trie_depth``
  tokens; what a request emitted at its last step) comes from :meth:`NgramCorpus.note_prompts`
  and :meth:`NgramCorpus.note_finished`, which the launcher's worker hook calls; without them
  the drafter indexes what it sees.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np

from .. import _validate as v
from ..engine import kernels
from ..cache import NgramCache
from ..config import NgramConfig
from ..drafter import Drafter
from ._warm import Warming, warm_corpus
from .sglang_hooks import NOTED_MAX, WorkerHooks  # noqa: F401 (NOTED_MAX: its old home)
from .sglang_shared import (EMPTY, leaf_paths_from_mask, log_draft_trees, pack_windows,
                            resolve_config)

__all__ = ["SEPARATOR_TOKEN", "NgramCorpus", "leaf_paths_from_mask", "resolve_config"]

logger = logging.getLogger(__name__)

#: The token SGLang puts between the documents of an external corpus.
SEPARATOR_TOKEN = -(2**31)

_INT = frozenset((int,))


class NgramCorpus(WorkerHooks):
    """SGLang 0.5.23's ``NgramCorpus`` (same keywords, methods and outputs), backed by ngramspec.

    Parameters
    ----------
    max_trie_depth, min_bfs_breadth, max_bfs_breadth, draft_token_num, match_type, capacity
        SGLang's keywords, with the defaults of SGLang's class.  Alone they give exactly
        SGLang's drafter.
    external_sam_budget, external_corpus_max_tokens
        SGLang's external corpora (see :meth:`~ngramspec.NgramCache.add_corpus`).
    config : NgramConfig, str or path, optional
        Keyword-only: the configuration to run instead (a config, a preset name such as
        ``"recommended"``, or a TOML file).  The worker sizes its buffers and its windows by
        the keywords it passes, so ``draft_token_num`` and ``max_trie_depth`` must equal the
        config's (``to_sglang_args(plugin=True)`` gives the server arguments that make them
        so); the config decides everything else.
    backend : {"numba", "reference"}
        Keyword-only: the cache's backend.
    costs : CostTable or CostModel, optional
        Keyword-only: step costs, for configs with ``min_expected_accept="auto"``.
    reserve : bool, default True
        Keyword-only: allocate the trie's whole ``capacity`` when built, as SGLang's class does
        (:meth:`~ngramspec.NgramCache.reserve`; about 48 bytes per node, against SGLang's
        176), so that no ``batch_get`` waits while the trie doubles (10-60 ms at 10^5-10^6
        nodes).  ``False``: memory follows the nodes in use.
    warm : bool, default True
        Keyword-only: compile the kernels this configuration runs in a background thread
        from construction on (the worker's own calls on a throwaway corpus), so that a
        server's model load hides the compile; the first call that runs a kernel waits for
        what is left (:attr:`warming`).  ``False``: each kernel compiles at its first use.

    Examples
    --------
    >>> from ngramspec.integrations.sglang import NgramCorpus
    >>> corpus = NgramCorpus(max_trie_depth=12, draft_token_num=8)
    >>> corpus.batch_put([[1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [1, 2, 3, 44, 55, 66, 77, 88, 99, 100]])
    >>> corpus.synchronize()
    >>> tokens, mask = corpus.batch_get(["q0", "q1"], [[1, 2, 3], [3, 44]], [3, 2])
    >>> tokens.dtype, tokens.shape, mask.shape
    (dtype('int64'), (16,), (128,))
    >>> tokens.reshape(2, 8).tolist()
    [[3, 4, 44, 5, 55, 6, 66, 77], [44, 55, 66, 77, 88, 99, 100, 0]]
    """

    def __init__(self, max_trie_depth: int = 18, min_bfs_breadth: int = 1,
                 max_bfs_breadth: int = 8, draft_token_num: int = 8, match_type: str = "BFS",
                 capacity: int = 1_000_000, external_sam_budget: int = 0,
                 external_corpus_max_tokens: int = 10_000_000, *,
                 config: NgramConfig | str | os.PathLike | None = None,
                 backend: str = "numba", costs: Any = None, reserve: bool = True,
                 warm: bool = True) -> None:
        given = {"max_trie_depth": max_trie_depth, "min_bfs_breadth": min_bfs_breadth,
                 "max_bfs_breadth": max_bfs_breadth, "draft_token_num": draft_token_num,
                 "match_type": match_type, "capacity": capacity,
                 "external_sam_budget": external_sam_budget,
                 "external_corpus_max_tokens": external_corpus_max_tokens}
        if config is None:
            if match_type not in ("BFS", "PROB"):  # SGLang's own words
                raise ValueError(f"Unknown match_type: '{match_type}'. Must be 'BFS' or 'PROB'.")
            cfg = NgramConfig(**given)
        else:
            cfg = resolve_config(config)
            if cfg.profile != "sglang-0.5.23":
                raise ValueError(f"config has profile {cfg.profile!r}; SGLang 0.5.23's worker "
                                 "runs profile 'sglang-0.5.23' configurations")
            for name, flag in (("draft_token_num", "--speculative-num-draft-tokens"),
                               ("max_trie_depth", "--speculative-ngram-max-trie-depth")):
                if given[name] != getattr(cfg, name):
                    raise ValueError(
                        f"the worker passed {name}={given[name]} but the config has "
                        f"{getattr(cfg, name)}: the worker sizes its buffers and windows by "
                        f"it; start the server with {flag} {getattr(cfg, name)} "
                        "(NgramConfig.to_sglang_args(plugin=True) lists every argument)")
        self._config = cfg
        self.draft_token_num = cfg.draft_token_num
        self.external_corpus_max_tokens = cfg.external_corpus_max_tokens
        self._corpus_token_counts: dict[str, int] = {}
        self._total_loaded_tokens = 0
        self._cache = NgramCache(config=cfg, backend=backend)
        if v.check_bool(reserve, "reserve"):
            self._cache.reserve()
        self._exact = cfg.sglang_exact
        self._costs = costs
        self._drafter: Drafter | None = None
        if not self._exact:
            self._drafter = Drafter(cache=self._cache, costs=costs)
            # Finished requests' counts are queued for the insert thread at batch_put, where
            # SGLang queues its own inserts (waking the thread inside batch_get would share
            # the serving thread's core with it while the worker waits for the drafts).
            self._cache.port.defer_due()
        # Compiled in the background from now on (a server loads its model meanwhile); the
        # first call that runs a kernel waits for what is left.
        self._warming = (Warming(warm_corpus, NgramCorpus, cfg, backend, costs)
                         if v.check_bool(warm, "warm") else None)
        # The last draft's request ids and their total lengths then (int64, same order).
        self._last_keys: list[Hashable] | None = None
        self._last_lens = EMPTY
        self._prompts: dict[Hashable, np.ndarray] = {}
        self._final: dict[Hashable, np.ndarray] = {}

    # ---- what SGLang's worker calls ---------------------------------------------------------

    @property
    def warming(self) -> bool:
        """Whether the background compile started at construction is still running."""
        return self._warming is not None and not self._warming.done

    def _ready(self) -> None:
        """Wait for the background compile (the first time a kernel is about to run)."""
        if self._warming is not None:
            warming, self._warming = self._warming, None
            warming.wait()

    @property
    def config(self) -> NgramConfig:
        """The configuration this drafter runs."""
        return self._config

    @property
    def cache(self) -> NgramCache:
        """The shared :class:`~ngramspec.NgramCache` (the trie every request drafts from)."""
        return self._cache

    def batch_put(self, batch_tokens: Sequence[Sequence[int]]) -> None:
        """Insert each window (SGLang: the last ``max_trie_depth`` tokens of each request of
        the step) into the trie, in a background thread; returns at once.  Beyond SGLang the
        windows are the contexts ``batch_get`` already saw, and the drafter's own policy
        inserts what the requests emitted at the next ``batch_get``: nothing is done here."""
        self._ready()
        if not self._exact:
            self._cache.port.release_due()
            return
        packed = pack_windows(batch_tokens)
        if packed is None:  # anything unusual: the cache's checked path (and its errors)
            self._cache.insert(batch_tokens, wait=False)
        else:
            self._cache.port.insert_packed(*packed, wait=False)

    def synchronize(self) -> None:
        """Wait until every window queued by ``batch_put`` is in the trie (beyond SGLang: the
        counts of the requests finished before the last ``batch_get``; those finished since
        are taught after the next one drafts)."""
        self._ready()
        if self._exact:
            self._cache.synchronize()
            return
        self._cache.port.release_due()
        self._cache.port.wait_queued()

    def batch_get(self, req_ids: Sequence[Hashable], batch_tokens: Sequence[Sequence[int]],
                  total_lens: Sequence[int]) -> tuple[np.ndarray, np.ndarray]:
        """Draft a tree per request: ``(tokens, mask)``, flat int64 arrays of
        ``len(req_ids) * draft_token_num`` and ``len(req_ids) * draft_token_num ** 2``.

        ``batch_tokens[i]`` is the tail of request ``req_ids[i]`` (its last token is the
        tree's root), ``total_lens[i]`` the request's full length.
        """
        self._ready()
        if not (len(req_ids) == len(batch_tokens) == len(total_lens)):
            raise ValueError("batchMatch expects state_ids, tokens, and total_lens to match in "
                             "size")
        if not len(req_ids):
            return EMPTY.copy(), EMPTY.copy()
        if self._exact:
            d = self._cache.match(batch_tokens, request_ids=req_ids, total_lens=total_lens)
        else:
            d = self._next_step(req_ids, batch_tokens, total_lens)
            if d is None:
                d = self._step(req_ids, batch_tokens, total_lens)
        # (the raw arrays: the read-only views the properties make are not needed here)
        return d._tokens.reshape(-1).astype(np.int64), d._mask.reshape(-1).astype(np.int64)

    def erase_match_state(self, req_ids: Sequence[Hashable]) -> None:
        """Forget these requests (their match states; beyond SGLang, their bookkeeping)."""
        self._ready()
        keys = v.as_request_ids(list(req_ids))
        if self._exact:
            self._cache.erase(keys)
            return
        assert self._drafter is not None
        known = set(self._drafter.requests)
        for k in keys:
            if k in known:
                self._drafter.finish(k)
            self._forget(k)

    def reset(self) -> None:
        """Empty the trie and forget every request (SGLang's cache flush; corpora stay)."""
        self._ready()
        self._cache.reset()
        if not self._exact:
            self._drafter = Drafter(cache=self._cache, costs=self._costs)
        self._last_keys = None
        self._final.clear()

    # ---- external corpora (SGLang's bookkeeping, ngramspec's automata) ------------------------

    @property
    def remaining_token_budget(self) -> int:
        """Corpus tokens that may still be loaded (``external_corpus_max_tokens`` less those
        committed)."""
        return self.external_corpus_max_tokens - self._total_loaded_tokens

    def load_external_corpus_named(self, corpus_id: str,
                                   chunks: Iterable[Sequence[int]]) -> int:
        """Load a corpus given as SGLang's token chunks (documents separated by
        :data:`SEPARATOR_TOKEN`); returns the tokens loaded.  Commit them with
        :meth:`commit_external_corpus_load`."""
        self._ready()
        if corpus_id in self._corpus_token_counts:
            raise ValueError(f"External corpus '{corpus_id}' already exists. Remove it before "
                             "adding a new corpus with the same id.")
        budget = self.remaining_token_budget
        parts: list[np.ndarray] = []
        loaded = 0
        for chunk in chunks:
            arr = np.asarray(list(chunk), np.int64)
            if loaded + arr.size > budget:
                raise ValueError("External ngram corpus exceeds the remaining token budget "
                                 f"({budget}) after loading {loaded} tokens.")
            loaded += arr.size
            parts.append(arr)
        stream = np.concatenate(parts) if parts else EMPTY
        cuts = np.flatnonzero(stream == SEPARATOR_TOKEN)
        docs = [d for d in np.split(stream, cuts) if d.size]
        docs = [d[1:] if d[0] == SEPARATOR_TOKEN else d for d in docs]
        self._cache.add_corpus(corpus_id, [d for d in docs if d.size])
        return loaded

    def commit_external_corpus_load(self, corpus_id: str, loaded_token_count: int) -> None:
        """Count a loaded corpus against the token budget."""
        self._ready()
        self._corpus_token_counts[corpus_id] = loaded_token_count
        self._total_loaded_tokens += loaded_token_count

    def remove_external_corpus(self, corpus_id: str) -> None:
        """Unload a corpus (an unknown id is a no-op, as in SGLang)."""
        self._ready()
        if corpus_id in self._cache.corpora():
            self._cache.remove_corpus(corpus_id)
        self._total_loaded_tokens -= self._corpus_token_counts.pop(corpus_id, 0)

    def list_external_corpora(self) -> dict[str, int]:
        """``{corpus_id: tokens}`` of the loaded corpora."""
        return self._cache.corpora()

    # ---- SGLang's debugging helpers ---------------------------------------------------------

    def leaf_paths_from_mask(self, tokens: Sequence[Any], tree_mask: Any) -> list[list[Any]]:
        """The token paths of a draft tree's leaves (see :func:`leaf_paths_from_mask`).

        Examples
        --------
        >>> NgramCorpus(draft_token_num=3).leaf_paths_from_mask(
        ...     [10, 20, 30], [[1, 0, 0], [1, 1, 0], [1, 0, 1]])
        [[10, 20], [10, 30]]
        """
        return leaf_paths_from_mask(tokens, tree_mask)

    def debug_result(self, decoding_ids: Any, decoding_masks: Any, tokenizer: Any = None
                     ) -> None:
        """Log the trees of a :meth:`batch_get` (flat or shaped) at INFO, as SGLang's does: the
        arrays reshaped to ``(trees, draft_token_num)`` and ``(trees, draft_token_num,
        draft_token_num)``, then each tree's leaf paths (``"draft path i: [...]"``), decoded
        by ``tokenizer.decode(path, ensure_ascii=False)`` when a tokenizer is given.  Nothing
        is computed when INFO is off for this module's logger.

        Examples
        --------
        >>> import logging, sys
        >>> log = logging.getLogger("ngramspec.integrations.sglang")
        >>> show = logging.StreamHandler(sys.stdout)
        >>> log.addHandler(show); log.setLevel(logging.INFO); log.propagate = False
        >>> NgramCorpus(draft_token_num=2).debug_result(np.array([5, 6]), np.array([1, 0, 1, 1]))
        <BLANKLINE>
        decoding_ids=array([[5, 6]])
        decoding_masks=array([[[1, 0],
                [1, 1]]])
        draft path 0: [[5, 6]]
        >>> log.removeHandler(show); log.setLevel(logging.NOTSET); log.propagate = True
        """
        log_draft_trees(logger, self.draft_token_num, decoding_ids, decoding_masks, tokenizer)

    # ---- the Drafter path (fed by what the worker hook tells: WorkerHooks) -------------------

    def _next_step(self, req_ids, batch_tokens, total_lens):
        """The common step, without per-request Python work: the requests of the last draft,
        in the same order, less those that left the batch, each continuing it (its emitted
        tokens the tail of its context, at most a tree's slots; a departed one's from
        :meth:`note_finished`, else none); None for anything else, which :meth:`_step` then
        handles (nothing is changed before a refusal, but the departures without final
        tokens, which :meth:`_step` would finish first too)."""
        dr = self._drafter
        keys = req_ids if type(req_ids) is list else list(req_ids)
        last = self._last_keys
        if last is None or len(dr) != len(last) or last != dr.pending or not keys \
                or not set(map(type, total_lens)) <= _INT:
            return None
        packed = pack_windows(batch_tokens)
        if packed is None:
            return None
        n = self.draft_token_num
        lens = np.fromiter(total_lens, np.int64, len(keys))
        steps = kernels("serving.steps")
        if keys == last:
            matrix = np.empty((len(keys), n), np.int32)
            new = np.empty(len(keys), np.int64)
            if not steps.emitted_tails(*packed, lens, self._last_lens, matrix, new):
                return None
            finals: dict = {}
        else:  # departures only (none new, none moved)
            at = {k: i for i, k in enumerate(last)}
            rows = [at.get(k, -1) for k in keys]
            if -1 in rows or any(a >= b for a, b in zip(rows, rows[1:])):
                return None
            staying = set(keys)
            gone = [k for k in last if k not in staying]
            dropped = [k for k in gone if k not in self._final]
            finals = {}
            for k in gone:
                seq = self._final.get(k)
                if seq is not None:
                    got = seq.size - int(self._last_lens[at[k]])
                    if not 1 <= got <= n:
                        return None  # not a continuation: _step restarts it
                    finals[k] = seq[-got:]
            # accept takes the rows pending once the dropped ones are finished, in order
            lost = set(dropped)
            pend = np.array([i for i, k in enumerate(last) if k not in lost], np.int64)
            kept = np.asarray(rows, np.int64)
            sub_m = np.empty((len(keys), n), np.int32)
            sub_n = np.empty(len(keys), np.int64)
            if not steps.emitted_tails(*packed, lens, self._last_lens[kept], sub_m, sub_n):
                return None
            matrix = np.zeros((pend.size, n), np.int32)
            new = np.empty(pend.size, np.int64)
            into = np.searchsorted(pend, kept)
            matrix[into] = sub_m
            new[into] = sub_n
            for k, tail in finals.items():
                j = int(np.searchsorted(pend, at[k]))
                matrix[j, :tail.size] = tail
                new[j] = tail.size
            for k in dropped:  # (as _step does first: finished without their last tokens)
                dr.finish(k)
                self._forget(k)
        try:
            dr.accept_matrix(matrix, new)
        except ValueError:  # not a path of its tree: _step says so and restarts them
            return None
        for k in finals:  # (departures with their final tokens: accepted, then gone)
            dr.finish(k)
            self._forget(k)
        drafts = dr.propose(keys)
        self._last_keys = keys.copy() if keys is req_ids else keys
        self._last_lens = lens
        return drafts

    def _step(self, req_ids, batch_tokens, total_lens):
        dr = self._drafter
        assert dr is not None
        keys = v.as_request_ids(list(req_ids), len(batch_tokens))
        seen = {} if self._last_keys is None else dict(zip(self._last_keys,
                                                           self._last_lens.tolist()))
        tails = v.as_contexts(batch_tokens, "batch_tokens")
        lens = v.as_total_lens(total_lens, tails)
        row = {k: i for i, k in enumerate(keys)}  # ids are unique (checked)
        emitted: dict[Hashable, np.ndarray] = {}
        drop, leaving = [], []
        for k in dr.pending:
            i = row.get(k)
            if i is not None:
                new = int(lens[i]) - seen[k]
                if 1 <= new <= tails[i].size:
                    emitted[k] = tails[i][-new:]
                else:  # not a continuation of its last draft: start it afresh
                    drop.append(k)
            elif k in self._final:
                seq = self._final[k]
                new = seq.size - seen[k]
                (emitted.__setitem__(k, seq[-new:]) if new >= 1 else drop.append(k))
                leaving.append(k)
            else:
                drop.append(k)
        for k in drop:
            dr.finish(k)
            if k not in row:
                self._forget(k)
        if emitted:
            try:
                dr.accept(emitted)
            except ValueError as e:  # tokens that are no path of their tree: start afresh
                logger.warning("ngramspec: %s; restarting those requests' drafting", e)
                for k in emitted:
                    dr.finish(k)
        known = set(dr.requests)
        for k in leaving:
            if k in known:
                dr.finish(k)
            self._forget(k)
        for k in known - row.keys() - set(leaving):
            dr.finish(k)
            self._forget(k)
        known = set(dr.requests)
        prepared = set(dr.prepared) if self._prompts else ()
        for i, k in enumerate(keys):
            if k in known:
                continue
            prompt, first = self._first_sequence(k, tails[i], int(lens[i]))
            if k in prepared and prompt is self._prompts.get(k):  # (checked when noted)
                dr.add_prepared(k, first)
            else:
                dr.add_request(k, prompt, first)
        drafts = dr.propose(list(keys))
        self._last_keys = list(keys)
        self._last_lens = lens.astype(np.int64)
        return drafts
