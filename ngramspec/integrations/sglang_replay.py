"""SGLang's NGRAM worker's call sequence on recorded greedy streams, against any object with
``NgramCorpus``'s methods (ours, or SGLang's own class).

Per serving-loop iteration, as ``ngram_worker.py`` issues the calls (admission as in
:func:`ngramspec.simulate`): ``synchronize``; ``batch_get`` of the running requests' last
``max_trie_depth`` tokens with their full lengths; greedy verification of each tree against the
recorded continuation; ``batch_put`` of the same windows; ``erase_match_state`` of the
requests that left the batch (the worker erases them one iteration later, after that
iteration's ``batch_put``).  With ``hooks``, the calls of the launcher's worker hook as well:
``note_prompts`` of newly admitted requests and ``note_finished`` of departed ones before the
``batch_get``.  Used to check the adapter against SGLang's class and against ``simulate``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = ["accepted_length", "replay_worker"]


def accepted_length(tokens: np.ndarray, mask: np.ndarray, recorded: np.ndarray) -> int:
    """Tokens one greedy verify step emits (accepted drafts + bonus, cut at the recording's
    end) for a tree (``tokens`` (n,), ``mask`` (n, n)) whose target follows ``recorded``.

    Slots are walked in order; a slot's parent is its ancestor one level up (masks are
    ancestor-closed), and padding slots are children of the root like any other (SGLang's
    verification treats them so).
    """
    n = tokens.size
    depth = mask.sum(axis=1) - 1
    cur = acc = 0
    while acc < recorded.size:
        for c in range(cur + 1, n):
            if depth[c] == depth[cur] + 1 and mask[c, cur] and tokens[c] == recorded[acc]:
                cur, acc = c, acc + 1
                break
        else:
            break
    return min(acc + 1, int(recorded.size))


def replay_worker(corpus: Any, prompts: Sequence[Sequence[int]],
                  outputs: Sequence[Sequence[int]], *, concurrency: int, max_trie_depth: int,
                  draft_token_num: int, hooks: bool = False,
                  on_get: Callable[[list, np.ndarray, np.ndarray], None] | None = None,
                  legacy_branch_length: int | None = None,
                  limit: int | None = None,
                  forward: Callable[[str, int], None] | None = None) -> list[np.ndarray]:
    """Drive ``corpus`` through the worker's calls; per request, the tokens emitted at each of
    its verify steps (int32, as :attr:`ngramspec.SimulationResult.emitted`).

    ``on_get(req_ids, tokens, mask)`` sees every ``batch_get``'s output (for differential
    checks).  Request ids are ``"r<index>"``.  ``legacy_branch_length``: SGLang 0.5.9's worker
    instead (``NgramCache``): ``batch_get`` of the last ``max_trie_depth`` (there:
    ``max_match_window_size``) tokens without ids, ``batch_put`` of each request's last
    ``legacy_branch_length`` tokens after appending what it emitted, no erase.  ``limit``
    stops after that many serving-loop iterations (the requests still running are erased).
    ``forward(kind, n)`` stands for the model's forwards where the server runs them:
    ``("prefill", prompt tokens)`` after the new requests' ``note_prompts`` (the extend batch
    the launcher hook sees first), ``("decode", batch size)`` after each iteration's
    ``batch_put`` and erase (the scheduler's work and the next forward, which the insert
    thread overlaps).
    """
    legacy = legacy_branch_length is not None
    prompts = [np.asarray(p, np.int64) for p in prompts]
    outputs = [np.asarray(o, np.int64) for o in outputs]
    n_req, n = len(prompts), draft_token_num
    done = [0] * n_req
    emitted: list[list[int]] = [[] for _ in range(n_req)]
    running: list[int] = []
    previous: list[int] = []
    nxt = iterations = 0
    while nxt < n_req or running:
        if limit is not None and iterations >= limit:
            break
        joined = []
        while nxt < n_req and len(running) < concurrency:  # admission: prefill emits one token
            done[nxt] = 1
            if outputs[nxt].size > 1:
                running.append(nxt)
                joined.append(nxt)
            nxt += 1
        if not running:
            continue
        current = set(running)
        departed = [r for r in previous if r not in current]
        if hooks:
            if joined:
                corpus.note_prompts([f"r{r}" for r in joined], [prompts[r] for r in joined])
            if departed:
                corpus.note_finished([f"r{r}" for r in departed],
                                     [np.concatenate([prompts[r], outputs[r][:done[r]]])
                                      for r in departed])
        if joined and forward is not None:
            forward("prefill", sum(int(prompts[r].size) for r in joined))
        ids = [f"r{r}" for r in running]
        windows = []
        for r in running:
            seq = np.concatenate([prompts[r][-max_trie_depth:], outputs[r][:done[r]]])
            windows.append(seq[-max_trie_depth:].tolist())
        lens = [int(prompts[r].size + done[r]) for r in running]
        corpus.synchronize()
        tokens, mask = (corpus.batch_get(windows) if legacy else
                        corpus.batch_get(ids, windows, lens))
        if on_get is not None:
            on_get(ids, tokens, mask)
        b = len(running)
        tokens = tokens.reshape(b, n)
        mask = mask.reshape(b, n, n).astype(bool)
        for i, r in enumerate(running):
            e = accepted_length(tokens[i], mask[i], outputs[r][done[r]:])
            emitted[r].append(e)
            done[r] += e
        if legacy:
            corpus.batch_put([np.concatenate([prompts[r], outputs[r][:done[r]]])
                              [-legacy_branch_length:].tolist() for r in running])
        else:
            corpus.batch_put(windows)
        if departed and not legacy:  # the worker erases last iteration's departures now
            corpus.erase_match_state([f"r{r}" for r in departed])
        if forward is not None:
            forward("decode", b)
        previous = list(running)
        running = [r for r in running if done[r] < outputs[r].size]
        iterations += 1
    if running and not legacy:  # stopped at the limit
        previous = sorted(set(previous) | set(running))
    if previous and not legacy:
        corpus.erase_match_state([f"r{r}" for r in previous])
    return [np.asarray(e, np.int32) for e in emitted]
