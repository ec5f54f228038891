"""`simulate` and `simulate_stream`: inputs checked and prepared, the replay run, results built."""


from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable, Hashable

import numpy as np

from .. import _validate as v
from ..cache import BACKENDS
from ..config import NgramConfig
from ..streams.files import StreamSource, read_streams

from .results import TOKEN_FIELDS, SimulationResult, StreamResult, _Tally
from .stepwise import TRIE_SOURCE, ProgressFn, _check_corpora, _replay_stepwise

from .limits import check_fits

__all__ = ["simulate", "simulate_stream"]


def _check_args(config: Any, concurrency: Any, backend: Any, costs: Any = None
                ) -> NgramConfig:
    from ..costs import check_costs

    config = v.check_config(config)
    v.as_positive_int(concurrency, "concurrency", "requests decoded together")
    v.check_backend(backend, BACKENDS)
    check_costs(config, costs)
    return config


def simulate(streams: StreamSource, *, config: NgramConfig | None = None,
             concurrency: int = 1, backend: str = "numba",
             progress: ProgressFn | None = None,
             corpora: Mapping[str, Any] | None = None, costs: Any = None,
             step_api_steps: int = 128) -> SimulationResult:
    """Replay SGLang's serving loop with n-gram speculation on recorded greedy streams.

    Parameters
    ----------
    streams : path, list of paths, or iterable of records
        Recorded streams (see :func:`~ngramspec.read_streams`): each a request's ``id``,
        ``prompt_ids`` and greedy ``output_ids``; replayed in this order.
    config : NgramConfig, optional
        Drafter settings (SGLang's server defaults if omitted).  ``capacity`` is honoured
        (eviction included); memory follows the nodes actually used.
    concurrency : int
        Requests decoded together; new requests are admitted as others finish, in order.  One
        trie is shared by all (as in a server).  A value above the number of requests is
        clamped to it (the result's ``concurrency`` says so); it never sizes an allocation.
    backend : {"numba", "reference"}
        ``"numba"``: the engine's compiled loop (every profile, match type and option).
        ``"reference"``: a :class:`~ngramspec.Drafter` on the pure-Python cache, step by
        step (the readable definition; slow).
    progress : callable(done, total), optional
        Called now and then with output tokens replayed so far and in total.
    corpora : mapping of corpus id to documents, optional
        External corpora loaded before the traffic (needs ``config.external_sam_budget > 0``;
        see :meth:`~ngramspec.NgramCache.add_corpus`), in SGLang's merge order whatever the
        mapping's order.  The compiled loop drafts from them as the cache does, and the
        result says where the accepted draft tokens came from
        (:attr:`SimulationResult.accepted_by_source`; ``"trie"`` names the trie's share
        there, so no corpus may have that id).
    costs : CostTable or CostModel, optional
        Required with ``min_expected_accept="auto"`` (refused otherwise): the step costs
        the tree sizes are chosen from, at each step's batch size.
    step_api_steps : int
        The serving-loop iterations :func:`ngramspec.time_drafting` times an engine's drafting
        on (the step API a custom loop runs, :class:`~ngramspec.Drafter` and
        :func:`~ngramspec.verify_greedy` as ``docs/custom-loop.md`` teaches them, or SGLang's
        worker calls on the drop-in): the first this many; 0: the result cannot be timed.
        Nothing is timed here: the compiled replay's own time (``draft_ms_per_step``) leaves
        out the Python a loop runs around the kernels.

    Returns
    -------
    SimulationResult

    Raises
    ------
    ValueError
        No requests, or no verify steps at all (every request has a single output token,
        which the prefill emits): there would be nothing to measure.

    Examples
    --------
    >>> import ngramspec as ns
    >>> rows = [{"id": "a", "prompt_ids": [7, 1, 2, 3, 4, 5], "output_ids": [1, 2, 3, 4, 5, 6]},
    ...         {"id": "b", "prompt_ids": [9], "output_ids": [1, 2, 3, 4, 5, 6, 8]}]
    >>> r = ns.simulate(rows, config=ns.NgramConfig(draft_token_num=4, capacity=10_000))
    >>> [e.tolist() for e in r.emitted]     # tokens emitted at each verify step
    [[1, 4], [4, 1, 1]]
    >>> r.summary.verify_steps, r.tokens_per_step
    (5, 2.2)

    With a corpus, where the accepted draft tokens came from (per request, and pooled):

    >>> cfg = ns.NgramConfig(draft_token_num=4, capacity=10_000, external_sam_budget=2)
    >>> r = ns.simulate(rows, config=cfg, corpora={"docs": [[2, 3, 4, 5, 6, 8]]})
    >>> {k: v.tolist() for k, v in r.accepted_by_source.items()}
    {'trie': [1, 2], 'docs': [1, 1]}
    >>> r.summary.accepted_by_source, r.summary.emitted_tokens - r.summary.verify_steps
    ({'trie': 3, 'docs': 2}, 5)
    """
    config = _check_args(config, concurrency, backend, costs)
    if isinstance(step_api_steps, bool) or not isinstance(step_api_steps, (int, np.integer)) \
            or step_api_steps < 0:
        raise ValueError(f"step_api_steps must be an integer >= 0 (0: do not time the step "
                         f"API), got {step_api_steps!r}")
    rows = read_streams(streams)
    if not rows:
        raise ValueError("streams holds no requests")
    prompts = [np.asarray(r["prompt_ids"], dtype=np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], dtype=np.int32) for r in rows]
    if all(o.size <= 1 for o in outputs):
        raise ValueError(f"no verify steps to simulate: all {len(rows)} requests have a single "
                         "output token (the prefill emits it; speculation starts at the second "
                         "output token)")
    # More requests decoded together than there are requests changes nothing.
    concurrency = min(int(concurrency), len(rows))
    # the sizes' memory, before anything is allocated
    check_fits(config, concurrency, request_steps=sum(o.size for o in outputs))
    ids = [r["id"] for r in rows]
    emitted, drafts, cpu, batch_steps, wall, by_source = _run_replay(
        prompts, outputs, config, concurrency, backend, ids, progress, corpora, costs)
    # Timed by an explicit call (ngramspec.time_drafting, which predictions make): compiling
    # the step API's kernels is for the runs that predict, not for every simulation.
    pending = (prompts, outputs, costs, int(step_api_steps)) \
        if step_api_steps and not config.vllm else None  # vLLM's proposer has no step API
    return SimulationResult(
        config=config, concurrency=concurrency, backend=backend, ids=ids,
        metadata=[{k: v for k, v in r.items() if k not in TOKEN_FIELDS} for r in rows],
        prompt_lens=np.asarray([p.size for p in prompts], np.int64),
        output_lens=np.asarray([o.size for o in outputs], np.int64),
        emitted=emitted, drafts=drafts, draft_seconds=cpu, wall_seconds=wall,
        batch_steps=batch_steps, accepted_by_source=by_source, timing_streams=pending)


def _run_replay(prompts: list[np.ndarray], outputs: list[np.ndarray], config: NgramConfig,
                concurrency: int, backend: str, ids: list, progress: ProgressFn | None,
                corpora: Any, costs: Any) -> tuple:
    """The replay that runs ``config``: vLLM's lookup, the compiled serving loop, or the
    readable one (chains, the reference backend); ``(emitted, drafts, draft seconds, batch
    steps, wall seconds, accepted drafts by source or None)``."""
    by_source = None
    if config.vllm:
        if corpora:
            raise ValueError(f"corpora: profile {config.profile!r} (vLLM's n-gram proposer) "
                             "drafts from each request's own tokens only")
        emitted, drafts, cpu, wall = _replay_lookup(prompts, outputs, config, backend,
                                                    progress)
        batch_steps = _loop_steps(emitted, concurrency)
    elif backend == "numba" and not config.chain:
        from ..engine.serving.replay import replay  # imports numba: only when simulating

        names, automata = _automata(config, corpora)
        out = replay(prompts, outputs, config, concurrency=concurrency, progress=progress,
                     costs=costs, corpora=automata)
        emitted, drafts, cpu, batch_steps, wall = (out.emitted, out.drafts, out.draft_seconds,
                                                   out.batch_steps, out.wall_seconds)
        if out.accepted_by_source is not None:
            by_source = dict(zip(names, out.accepted_by_source.T.copy()))
    else:  # the readable loop; chains (vLLM's verification) run through it on either backend
        found: dict[str, np.ndarray] = {}
        emitted, drafts, cpu, batch_steps, wall = _replay_stepwise(
            prompts, outputs, config, concurrency, backend, ids, progress, corpora, costs,
            sources=found)
        by_source = found or None
    return emitted, drafts, cpu, batch_steps, wall, by_source


def _replay_lookup(prompts, outputs, config: NgramConfig, backend: str,
                   progress: ProgressFn | None):
    """Every request under vLLM's n-gram proposer and greedy chain verification:
    ``(emitted, drafts, cpu_seconds, wall_seconds)``; compiled, or (``"reference"``) the
    readable definition step by step."""
    lo, hi, k = (config.prompt_lookup_min, config.prompt_lookup_max,
                 config.num_speculative_tokens)
    if backend == "numba":
        from ..engine.vllm.lookup import replay_lookup  # imports numba: only when simulating

        return replay_lookup(prompts, outputs, min_n=lo, max_n=hi, k=k, progress=progress)
    from ..reference.lookup import prompt_lookup, verify_chain

    import time

    w0, c0 = time.perf_counter(), time.thread_time()
    emitted, drafts = [], []
    total, seen = sum(o.size for o in outputs), 0
    for p, o in zip(prompts, outputs):
        seq = np.concatenate([p, o])
        done, em, dr = 1, [], []
        while done < o.size:
            draft = prompt_lookup(seq[:p.size + done], min_n=lo, max_n=hi, k=k)
            e = min(verify_chain(draft, o[done:]), o.size - done)
            em.append(e)
            dr.append(draft.size)
            done += e
        emitted.append(np.asarray(em, np.int32))
        drafts.append(np.asarray(dr, np.int32))
        seen += o.size
        if progress is not None:
            progress(seen, total)
    return emitted, drafts, time.thread_time() - c0, time.perf_counter() - w0


def _loop_steps(emitted: list[np.ndarray], concurrency: int) -> int:
    """Serving-loop iterations of requests with these verify steps, admitted in order as
    others finish (the admission rule of :func:`~ngramspec.simulate.admit`)."""
    from ..costs.serving import _starts

    steps = np.array([e.size for e in emitted], np.int64)
    return int((_starts(steps, concurrency) + steps).max(initial=0))


def _automata(config: NgramConfig, corpora: Mapping[str, Any] | None
              ) -> tuple[list[str], list]:
    """The source names (``"trie"``, then the corpus ids) and the corpora's automata, both in
    SGLang's merge order, checked and built as :meth:`~ngramspec.NgramCache.add_corpus` does
    (the same errors)."""
    _check_corpora(corpora)
    if not corpora:
        return [TRIE_SOURCE], []
    from ..cache import NgramCache

    cache = NgramCache(config=config.replace(capacity=config.trie_depth + 1))
    for corpus_id, documents in corpora.items():
        cache.add_corpus(corpus_id, documents)
    return [TRIE_SOURCE, *cache.corpora()], cache._corpora.ordered_automata()


RequestFn = Callable[[Hashable, np.ndarray, np.ndarray], None]


def simulate_stream(streams: StreamSource, *, config: NgramConfig | None = None,
                    concurrency: int = 1, by: str | None = None,
                    where: tuple[str, str] | None = None, progress: ProgressFn | None = None,
                    on_request: RequestFn | None = None, chunk: int = 4096,
                    costs: Any = None) -> StreamResult:
    """:func:`simulate` on a corpus read as it is replayed (the ``numba`` backend's loop).

    Requests are admitted from :func:`~ngramspec.streams.iter_streams` (files, directories
    of shards, glob patterns, any iterable of records): only the running requests, the next
    ``chunk`` read ahead and the tries are held, and per-request results are pooled as each
    request finishes.  The figures equal :func:`simulate`'s on the same requests exactly.

    Parameters
    ----------
    streams
        As :func:`~ngramspec.streams.iter_streams`.
    config, concurrency, progress
        As :func:`simulate` (progress: tokens replayed so far, tokens read so far).
    by : str, optional
        Also pool per value of this metadata field (``result.groups``).
    where : (field, value), optional
        Replay only the requests whose ``str(record[field]) == value`` (one shard).
    on_request : callable(id, emitted, drafts), optional
        Called with each request's per-step counts as it finishes (any order).
    chunk : int
        Requests read ahead at a time.
    costs : CostTable or CostModel, optional
        The step costs of ``min_expected_accept="auto"``, as :func:`simulate`.

    Examples
    --------
    >>> import ngramspec as ns
    >>> rows = [{"id": "a", "prompt_ids": [7, 1, 2, 3, 4, 5], "output_ids": [1, 2, 3, 4, 5, 6]},
    ...         {"id": "b", "prompt_ids": [9], "output_ids": [1, 2, 3, 4, 5, 6, 8]}]
    >>> r = ns.simulate_stream(iter(rows), config=ns.NgramConfig(draft_token_num=4,
    ...                                                          capacity=10_000))
    >>> r.summary.verify_steps, r.tokens_per_step
    (5, 2.2)
    """
    from ..engine.serving.replay import replay_stream  # imports numba: only when simulating
    from ..streams import SAMPLING_FIELDS, decoding_of, iter_streams

    config = _check_args(config, concurrency, "numba", costs)
    check_fits(config, int(concurrency))
    if config.chains:
        raise ValueError(f"simulate_stream replays SGLang's compiled loop; chains (profile "
                         f"{config.profile!r}, chain={config.chain}) run in simulate(): pass "
                         "the requests to simulate (or shard them and pool the results)")
    if by is not None and not isinstance(by, str):
        raise TypeError(f"by must be a metadata field name (str), got {type(by).__name__}")
    if where is not None and not (isinstance(where, tuple) and len(where) == 2):
        raise TypeError("where must be a (field, value) pair")
    n = config.draft_token_num
    tally = _Tally(n)
    groups: dict[str, _Tally] = {}
    pending: dict[int, tuple[Hashable, str | None]] = {}
    decoding: dict[str, Any] = {"greedy": 0, "sampled": 0, "settings": []}
    seen_by = [False]
    totals = [0, 0]  # output tokens, requests with more than one output token

    def requests():
        i = 0
        for rec in iter_streams(streams):
            if where is not None and str(rec.get(where[0])) != where[1]:
                continue
            group = None
            if by is not None:
                seen_by[0] = seen_by[0] or by in rec
                group = str(rec["id"]) if by == "id" else str(rec.get(by, "(missing)"))
                groups.setdefault(group, _Tally(n))  # first-seen order, as SimulationResult
            if decoding_of(rec) == "greedy":
                decoding["greedy"] += 1
            else:
                decoding["sampled"] += 1
                s = {k: rec.get(k) for k in SAMPLING_FIELDS}
                if s not in decoding["settings"]:
                    decoding["settings"].append(s)
            pending[i] = (rec["id"], group)
            out = np.asarray(rec["output_ids"], dtype=np.int32)
            totals[0] += out.size
            totals[1] += out.size > 1
            i += 1
            yield np.asarray(rec["prompt_ids"], dtype=np.int32), out

    def finished(i: int, emitted: np.ndarray, drafts: np.ndarray) -> None:
        rid, group = pending.pop(i)
        tally.add(emitted, drafts)
        if group is not None:
            groups[group].add(emitted, drafts)
        if on_request is not None:
            on_request(rid, emitted, drafts)

    out = replay_stream(requests(), config, concurrency=int(concurrency), on_finish=finished,
                        chunk=chunk, progress=progress, costs=costs)
    if tally.requests == 0:
        raise ValueError("streams holds no requests" + (
            f" with {where[0]} = {where[1]!r}" if where is not None else ""))
    if totals[1] == 0:
        raise ValueError(f"no verify steps to simulate: all {tally.requests} requests have a "
                         "single output token (the prefill emits it; speculation starts at the "
                         "second output token)")
    if by is not None and by != "id" and not seen_by[0]:
        raise KeyError(f"by={by!r}: no request has that field")
    decoding["kind"] = ("mixed" if decoding["greedy"] and decoding["sampled"] else
                        "sampled" if decoding["sampled"] else "greedy")
    return StreamResult(config, out.concurrency, out.batch_steps, out.draft_seconds,
                        out.wall_seconds, totals[0], by, decoding, tally, groups)
