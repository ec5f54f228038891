"""The serving loop step by step through the public calls, as a custom loop makes them.

The readable twin of the engine's compiled replay (``backend="reference"``), the timing of the
step API, and the admission rule every loop in the project follows (:func:`admit`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from .._jit import compile_free_clock
from ..config import NgramConfig
from ..drafts.verify import verify_greedy

__all__ = ["admit", "time_step_api"]

ProgressFn = Callable[[int, int], None]


def admit(nxt: int, running: list[int], concurrency: int, lengths: Sequence[int],
          join: Callable[[int], None], done: list[int] | None = None) -> int:
    """The serving loop's admission, from request ``nxt`` on: in file order while fewer than
    ``concurrency`` requests run.

    Each admitted request has its first output token from the prefill (``done[r] = 1``); one
    whose recording holds only that token (``lengths[r] == 1``) is finished at once and never
    joins.  Every other is passed to ``join(r)`` and appended to ``running``.

    Parameters
    ----------
    nxt : int
        The first request not yet admitted.
    running : list of int
        The running requests, in admission order (appended to).
    concurrency : int
        How many requests may run at once.
    lengths : sequence of int
        Recorded output tokens per request.
    join : callable
        Called with each request that joins the running batch (its prefill).
    done : list of int, optional
        Output tokens emitted so far per request; set to 1 on admission.

    Returns
    -------
    int
        The next request to admit.

    Examples
    --------
    >>> running, done = [], [0, 0, 0, 0]
    >>> admit(0, running, 2, [3, 1, 5, 2], join=lambda r: None, done=done)
    3
    >>> running, done
    ([0, 2], [1, 1, 1, 0])
    """
    while nxt < len(lengths) and len(running) < concurrency:
        if done is not None:
            done[nxt] = 1
        if lengths[nxt] > 1:
            join(nxt)
            running.append(nxt)
        nxt += 1
    return nxt


def time_step_api(prompts, outputs, config: NgramConfig, concurrency: int, steps: int,
                   costs: Any, backend: str) -> tuple[float, float, int]:
    """The step API timed on the first ``steps`` serving-loop iterations of
    :func:`_replay_stepwise` (the recorded argmax, which stands in for the target, untimed):
    ``(seconds per iteration of propose + verify_greedy + accept, seconds per request of
    add_request + finish, iterations timed)``.

    With Numba the same iterations run once untimed first: they take the same code paths with
    the same argument types, so whatever kernel the timed run calls is compiled (or loaded from
    the disk cache) before the clock starts (a first run would count it as drafting time)."""
    everyone = list(range(len(prompts)))
    if backend == "numba":
        _replay_stepwise(prompts, outputs, config, concurrency, backend, everyone, None,
                         costs=costs, limit=steps)
    timing: dict[str, float] = {}
    _replay_stepwise(prompts, outputs, config, concurrency, backend, everyone, None,
                     costs=costs, limit=steps, timing=timing)
    taken = int(timing["steps"])
    return (timing["step_seconds"] / max(taken, 1),
            timing["request_seconds"] / max(int(timing["admitted"]), 1), taken)


#: The key of the trie's share in ``accepted_by_source`` (no corpus may have this id).
TRIE_SOURCE = "trie"


def _check_corpora(corpora: Any) -> None:
    if corpora is not None and not isinstance(corpora, Mapping):
        raise TypeError(f"corpora must be a mapping of corpus id to documents, got "
                        f"{type(corpora).__name__}")
    if corpora and TRIE_SOURCE in corpora:
        raise ValueError(f"corpora: the id {TRIE_SOURCE!r} names the trie's share of the "
                         "accepted draft tokens (accepted_by_source); give that corpus "
                         "another id")


def _recorded_argmax(drafts, rows: list[int], outputs, done: list[int]) -> np.ndarray:
    """The greedy target's argmax at every slot: the next recorded token where the slot's path
    follows the recording.  Elsewhere any value would do (verification only reads the argmax
    at accepted slots, which follow the recording); -1 is used."""
    tokens = drafts.tokens
    parents = drafts.parents
    b, n = tokens.shape
    pred = np.full((b, n), -1, np.int64)
    for i, r in enumerate(rows):
        rec = outputs[r][done[i]:]
        follows = np.zeros(n, bool)
        depth = np.zeros(n, np.int64)
        follows[0] = True
        for s in range(n):
            if s:
                p = parents[i, s]
                depth[s] = depth[p] + 1
                follows[s] = follows[p] and depth[p] < rec.size and tokens[i, s] == rec[depth[p]]
            if follows[s] and depth[s] < rec.size:
                pred[i, s] = rec[depth[s]]
    return pred


def _verify_chains(d, rows: list[int], outputs, done: list[int]
                   ) -> list[tuple[int, np.ndarray]]:
    """Greedy chain verification of each row's chain against the recording (padding is never
    a draft here, unlike SGLang's trees): per row, the tokens emitted (accepted + bonus) and
    the tokens to record (the accepted chain and a bonus; ``accept``'s ``max_tokens`` cuts
    them where the recording ends, which may cut the bonus, so a stand-in 0 takes its place
    there)."""
    from ..reference.lookup import verify_chain

    out = []
    for b, r in enumerate(rows):
        chain = d.tokens[b, 1:1 + int(d.num_drafts[b])]
        rec = outputs[r][done[r]:]
        e = verify_chain(chain, rec)
        bonus = rec[e - 1] if e - 1 < rec.size else 0
        out.append((e, np.append(chain[:e - 1], bonus).astype(np.int64)))
    return out


def _replay_stepwise(prompts, outputs, config: NgramConfig, concurrency: int, backend: str,
                     ids: list[Hashable], progress: ProgressFn | None,
                     corpora: Mapping[str, Any] | None = None, costs: Any = None, *,
                     sources: dict[str, np.ndarray] | None = None, limit: int | None = None,
                     timing: dict[str, float] | None = None):
    """The loop step by step through :class:`~ngramspec.Drafter` (whose bookkeeping follows
    the config's profile and options) and :func:`~ngramspec.verify_greedy`, as a custom loop
    calls them (``accept`` of the verify result, cut where the recording ends).

    ``sources`` (a dict, filled with corpora loaded): the accepted draft tokens per request
    by source, as :attr:`SimulationResult.accepted_by_source`, found from the parts of each
    merge (the cache's recorded trees, :func:`~ngramspec.cache.corpora.tree_paths`) independently
    of the engine's node tags.  ``limit``: stop after that many serving-loop iterations.
    ``timing`` (a dict, filled): the wall time of ``propose`` + ``verify_greedy`` +
    ``accept`` (``step_seconds``) and of ``add_request`` + ``finish`` (``request_seconds``),
    the requests admitted and the iterations run."""
    from ..drafter import Drafter

    drafter = Drafter(config=config, backend=backend, costs=costs)
    chains = config.chain  # verified as vLLM verifies: the chain alone, no padding
    _check_corpora(corpora)
    for corpus_id, documents in (corpora or {}).items():
        drafter.cache.add_corpus(corpus_id, documents)
    n_req = len(prompts)
    parts_of = drafter.cache._corpora  # the parts of the last merge, when recorded
    names = [TRIE_SOURCE, *drafter.cache.corpora()]
    column = {cid: k for k, cid in enumerate(names)}
    column[""] = 0  # the trie's part in the recorded parts
    attribute = sources is not None and len(names) > 1
    counts = np.zeros((n_req if attribute else 0, len(names)), np.int64)
    if attribute:
        parts_of.record_parts = True
    out_len = [0] * n_req
    emitted: list[list[int]] = [[] for _ in range(n_req)]
    drafts: list[list[int]] = [[] for _ in range(n_req)]
    total_tokens = sum(o.size for o in outputs)
    lengths = [o.size for o in outputs]
    nxt, running, cpu, steps = 0, [], 0.0, 0
    t_step = t_req = 0.0
    admitted = 0
    # A first run compiles the drafter's kernels inside these steps: the clocks stop then.
    with compile_free_clock() as free:
        def clock() -> float:
            return free.now()[0]

        def cputime() -> float:
            return free.now()[1]

        t0 = clock()
        while (nxt < n_req or running) and (limit is None or steps < limit):
            w0 = clock()
            before = len(running)
            nxt = admit(nxt, running, concurrency, lengths,
                        lambda r: drafter.add_request(ids[r], prompts[r], int(outputs[r][0])),
                        out_len)
            admitted += len(running) - before
            w1 = clock()
            t_req += w1 - w0
            if not running:
                continue
            c0 = cputime()
            d = drafter.propose([ids[r] for r in running])
            cpu += cputime() - c0
            t_step += clock() - w1
            left = [outputs[r].size - out_len[r] for r in running]
            if chains:
                accepts = _verify_chains(d, running, outputs, out_len)
                w0, c0 = clock(), cputime()
                drafter.accept({ids[r]: accepts[b][1] for b, r in enumerate(running)},
                               max_tokens=left)
                cpu += cputime() - c0
                t_step += clock() - w0
                accept_lens = [a for a, _ in accepts]
            else:
                pred = _recorded_argmax(d, running, outputs, [out_len[r] for r in running])
                w0, c0 = clock(), cputime()
                result = verify_greedy(d, pred)
                drafter.accept(result, max_tokens=left)
                cpu += cputime() - c0
                w1 = clock()
                t_step += w1 - w0
                accept_lens = result.accept_lens.tolist()
            parts = None
            if attribute and parts_of.active:
                parts = [(column[cid], t, m) for cid, (t, m) in parts_of.last_parts]
            for b, r in enumerate(running):
                e = min(int(accept_lens[b]), left[b])
                if attribute and e > 1:
                    _attribute(counts[r], parts, b, outputs[r][out_len[r]:out_len[r] + e - 1])
                emitted[r].append(e)
                drafts[r].append(int(d.num_drafts[b]))
                out_len[r] += e
            steps += 1
            w0 = clock()
            for r in running:
                if out_len[r] == outputs[r].size:
                    drafter.finish(ids[r])
            t_req += clock() - w0
            running = [r for r in running if out_len[r] < outputs[r].size]
            if progress is not None and steps % 256 == 0:
                progress(sum(out_len), total_tokens)
    if progress is not None:
        progress(total_tokens, total_tokens)
    if attribute:
        assert sources is not None
        sources.update(zip(names, counts.T.copy()))
    if timing is not None:
        timing.update(step_seconds=t_step, request_seconds=t_req, admitted=admitted,
                      steps=steps)
    return ([np.asarray(e, np.int32) for e in emitted], [np.asarray(d, np.int32) for d in drafts],
            cpu, steps, clock() - t0)


def _attribute(counts: np.ndarray, parts: list | None, b: int, accepted: np.ndarray) -> None:
    """Add request ``b``'s accepted draft tokens of one step to ``counts`` by source: each
    token to the first part of the merge (``parts``: column, tokens, mask; None: no corpus
    drafted, the trie alone) whose tree holds its path; the trie's when none does (padding)."""
    from ..cache.corpora import tree_paths

    if parts is None:
        counts[0] += accepted.size
        return
    paths = [(col, tree_paths(t[b], m[b])) for col, t, m in parts]
    for i in range(1, accepted.size + 1):
        prefix = tuple(int(x) for x in accepted[:i])
        counts[next((col for col, p in paths if prefix in p), 0)] += 1
