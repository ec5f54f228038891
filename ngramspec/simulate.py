"""Offline acceptance simulation: SGLang's serving loop replayed on recorded greedy streams.

The loop (SGLang 0.5.23, greedy verification), exactly::

    queue = streams in file order; running = []
    until queue and running are empty:
        while queue and len(running) < concurrency:           # admission (prefill)
            take the next stream; out = [output_ids[0]]        # prefill emits the first token
            if it has more output tokens, append it to running # (prefill neither matches nor inserts)
        contexts   = last max_trie_depth tokens of prompt+out, per running request, in order
        total_lens = len(prompt) + len(out)
        drafts = cache.match(contexts, request_ids=ids, total_lens=total_lens)
        per request: greedy-verify its tree against the recorded continuation
            output_ids[len(out):] (the target's argmax along the recorded path is the next
            recorded token); emitted = accepted drafts + bonus, cut at the end of the recording
        cache.insert(contexts)                                 # the same windows, batch order
        append emitted to out; requests whose out is complete leave running (order kept)
        (and their match states are erased)

What is matched and inserted where and when follows the profile and the options as
:class:`~ngramspec.Drafter` defines it (for ``sglang-0.5.9`` that release's worker, for
``index_prompt`` & co. what they insert).  With the ``numba`` backend the whole loop runs in the
engine's compiled replay (:func:`ngramspec.engine.replay.replay`), for every configuration;
with ``"reference"`` it is driven step by step through the public ``Drafter`` on the
pure-Python cache and :func:`~ngramspec.verify_greedy` (the readable path).  Both give identical
per-step counts (tested for every combination of profile, match type and options).
This module prepares the inputs and reports; it holds no engine array.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from . import _validate as v
from .cache import BACKENDS
from .config import NgramConfig
from .streams import StreamSource, describe_decoding, read_streams
from .verify import verify_greedy

__all__ = ["simulate", "SimulationResult", "Summary", "simulate_stream", "StreamResult",
           "pool_results"]

#: Fields of a record that are token data, not metadata.
TOKEN_FIELDS = ("prompt_ids", "output_ids")

ProgressFn = Callable[[int, int], None]

@dataclass(frozen=True)
class Summary:
    """Pooled figures over a set of requests (all verify steps of all of them).

    Attributes
    ----------
    requests : int
        Requests included.
    verify_steps : int
        Verify steps (decode steps with speculation) over all of them.
    emitted_tokens : int
        Tokens emitted by those steps (the first output token of each request comes from the
        prefill and is not counted).
    tokens_per_step : float
        ``emitted_tokens / verify_steps``: SGLang's mean accept length (accepted drafts +
        bonus), pooled.  1.0 means speculation never helped.  NaN without steps.
    acceptance_by_depth : list of float
        ``[k-1]``: share of steps that accepted at least ``k`` drafts, ``k = 1 .. n-1``
        (``n = draft_token_num``).  Their sum is ``tokens_per_step - 1``.  Accepted token-0
        padding counts, as in SGLang's accept length.
    draft_nodes_per_step : float
        Real draft nodes per tree (padding excluded), mean over steps.
    share_steps_with_draft : float
        Share of steps whose tree held at least one real draft.
    accepted_by_source : dict of str to int, or None
        With external corpora: the accepted draft tokens (bonus tokens excluded) by the part
        of SGLang's merged tree that drafted them, ``"trie"`` first, then each corpus id in
        merge order (see :attr:`SimulationResult.accepted_by_source`).  They sum to
        ``emitted_tokens - verify_steps``.  None without corpora.
    """

    requests: int
    verify_steps: int
    emitted_tokens: int
    tokens_per_step: float
    acceptance_by_depth: list[float]
    draft_nodes_per_step: float
    share_steps_with_draft: float
    accepted_by_source: dict[str, int] | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _summarise(emitted: Sequence[np.ndarray], drafts: Sequence[np.ndarray], n: int,
               by_source: dict[str, int] | None = None) -> Summary:
    em = np.concatenate(emitted) if emitted else np.zeros(0, np.int32)
    dr = np.concatenate(drafts) if drafts else np.zeros(0, np.int32)
    steps = int(em.size)
    total = int(em.sum())
    if steps:
        acc = np.bincount(em.astype(np.int64) - 1, minlength=n)[:n]
        at_least = acc[::-1].cumsum()[::-1] / steps  # at_least[k] = share with >= k accepted
        by_depth = [float(x) for x in at_least[1:n]]
        tps = total / steps
        nodes = float(dr.mean())
        share = float(np.count_nonzero(dr) / steps)
    else:
        by_depth = [0.0] * (n - 1)
        tps = nodes = share = float("nan")
    return Summary(len(emitted), steps, total, tps, by_depth, nodes, share, by_source)


@dataclass
class SimulationResult:
    """Outcome of :func:`simulate`: per-request, per-step counts and pooled aggregates.

    Attributes
    ----------
    config : NgramConfig
        The drafter's settings.
    concurrency : int
        Requests decoded together (SGLang's running batch size, at most).
    backend : str
        ``"numba"`` or ``"reference"``.
    ids : list
        Request ids, in file order.
    metadata : list of dict
        Per request, every field of its record except the token lists.
    prompt_lens, output_lens : np.ndarray
        (R,) int64 token counts.
    emitted : list of np.ndarray
        Per request, int32: ``emitted[r][k]`` = tokens emitted at its verify step ``k``
        (accepted drafts + bonus, cut at the end of the recording).  They sum to
        ``output_lens[r] - 1``.
    drafts : list of np.ndarray
        Per request, int32: real draft nodes in its tree at each verify step.
    draft_seconds : float
        CPU time spent drafting (matching, building trees, inserting; in the compiled loop
        also the verification bookkeeping, a small part), over the whole run.
    wall_seconds : float
        Wall time of the replay (reading the streams and compiling or loading the kernels
        excluded).
    batch_steps : int
        Serving-loop iterations (one target forward each); at concurrency 1 the verify steps.
    accepted_by_source : dict of str to np.ndarray, or None
        With external corpora (``simulate(..., corpora=...)``): per request, int64, its
        accepted draft tokens (the bonus tokens and tokens cut at the end of the recording
        excluded) by where they came from: ``"trie"``, the trie's part of the merged tree,
        then each corpus id in SGLang's merge order.  A token counts for the first part of the
        merge (spec section 3.6.8: the trie's tree, then the corpora in merge order) whose tree
        holds its path from the root, i.e. the part that put its node into the merged tree;
        an accepted token-0 padding slot counts for the trie.  Per request they sum to
        ``emitted[r].sum() - emitted[r].size``; pooled in :attr:`summary`.  None without
        corpora.
    """

    config: NgramConfig
    concurrency: int
    backend: str
    ids: list[Hashable]
    metadata: list[dict[str, Any]]
    prompt_lens: np.ndarray
    output_lens: np.ndarray
    emitted: list[np.ndarray]
    drafts: list[np.ndarray]
    draft_seconds: float
    wall_seconds: float
    batch_steps: int
    accepted_by_source: dict[str, np.ndarray] | None = None
    step_api_seconds: float | None = None
    step_api_steps: int = 0
    _summary: Summary | None = field(default=None, repr=False)
    _step_api: tuple | None = field(default=None, repr=False)  # what to time, until timed

    def __repr__(self) -> str:
        s = self.summary
        return (f"SimulationResult(requests={s.requests}, verify_steps={s.verify_steps}, "
                f"tokens_per_step={s.tokens_per_step:.4f}, concurrency={self.concurrency}, "
                f"match_type={self.config.match_type!r})")

    @property
    def summary(self) -> Summary:
        """Pooled figures over all requests."""
        if self._summary is None:
            self._summary = _summarise(self.emitted, self.drafts, self.config.draft_token_num,
                                       self._sources(range(len(self.emitted))))
        return self._summary

    def _sources(self, idx: Sequence[int]) -> dict[str, int] | None:
        """:attr:`accepted_by_source` summed over the requests ``idx``."""
        if self.accepted_by_source is None:
            return None
        pick = np.asarray(idx, np.int64)
        return {k: int(v[pick].sum()) for k, v in self.accepted_by_source.items()}

    @property
    def tokens_per_step(self) -> float:
        """Total emitted tokens / total verify steps (SGLang's accept length, pooled)."""
        return self.summary.tokens_per_step

    @property
    def verify_steps(self) -> int:
        return self.summary.verify_steps

    @property
    def decoding(self) -> dict[str, Any]:
        """How the streams were decoded (``streams.describe_decoding``): greedy streams give
        SGLang's accept lengths exactly; sampled ones one draw of their distribution."""
        return describe_decoding(self.metadata)

    @property
    def draft_ms_per_step(self) -> float:
        """Drafting CPU time per serving-loop iteration (one batch's match + insert), ms."""
        return 1e3 * self.draft_seconds / max(self.batch_steps, 1)

    @property
    def step_api_ms_per_step(self) -> float | None:
        """What a custom loop pays per serving-loop iteration for drafting, ms: the step API
        (``Drafter.propose``, ``verify_greedy``, ``Drafter.accept``, with ``add_request`` and
        ``finish`` spread over the steps) timed on the first ``step_api_steps`` iterations
        of these streams (``simulate(..., step_api_steps=...)``); None if not timed.  What
        :func:`~ngramspec.costs.predict_serving` adds to each step by default.  Admission
        and finishing are timed per request and spread over all the run's iterations."""
        if self.step_api_seconds is None and self._step_api is not None:
            prompts, outputs, costs, steps = self._step_api
            per_step, per_req, taken = _time_step_api(prompts, outputs, self.config,
                                                      self.concurrency, steps, costs,
                                                      self.backend)
            # Admission and finishing, per request, spread over the whole run's iterations.
            n_run = sum(1 for o in outputs if o.size > 1)
            self.step_api_seconds = taken * (per_step + per_req * n_run /
                                             max(self.batch_steps, 1))
            self.step_api_steps = taken
            self._step_api = None
        if self.step_api_seconds is None or not self.step_api_steps:
            return None
        return 1e3 * self.step_api_seconds / self.step_api_steps

    @property
    def step_api_timed(self) -> bool:
        """Whether :attr:`step_api_ms_per_step` has been measured (it is, when first read)."""
        return self.step_api_seconds is not None

    @property
    def output_tokens_per_second(self) -> float:
        """Recorded output tokens replayed per second of wall time (the simulator's speed)."""
        return float(self.output_lens.sum()) / self.wall_seconds if self.wall_seconds else 0.0

    def groups(self, by: str) -> dict[str, list[int]]:
        """Request indices per value of metadata field ``by`` (first-seen order)."""
        if not isinstance(by, str):
            raise TypeError(f"by must be a metadata field name (str), got {type(by).__name__}")
        if by not in ("id",) and not any(by in m for m in self.metadata):
            fields = sorted({k for m in self.metadata for k in m})
            raise KeyError(f"by={by!r}: no request has that field; fields: {', '.join(fields)}")
        out: dict[str, list[int]] = {}
        for i, m in enumerate(self.metadata):
            value = self.ids[i] if by == "id" else m.get(by, "(missing)")
            out.setdefault(str(value), []).append(i)
        return out

    def by(self, field_name: str) -> dict[str, Summary]:
        """Pooled figures per value of a metadata field (e.g. ``"task"``).

        Examples
        --------
        >>> import ngramspec as ns
        >>> rows = [{"id": i, "prompt_ids": [1, 2, 3], "output_ids": [1, 2, 3, 1, 2, 3, 4],
        ...          "task": "ab"[i % 2]} for i in range(4)]
        >>> r = ns.simulate(rows, config=ns.NgramConfig(capacity=10_000), backend="reference")
        >>> {k: round(v.tokens_per_step, 3) for k, v in r.by("task").items()}
        {'a': 3.0, 'b': 6.0}
        """
        n = self.config.draft_token_num
        return {k: _summarise([self.emitted[i] for i in idx], [self.drafts[i] for i in idx], n,
                              self._sources(idx))
                for k, idx in self.groups(field_name).items()}

    def to_dict(self, *, by: str | None = None) -> dict[str, Any]:
        """The JSON report: ``{"config", "summary", ["groups"], "requests"}``.

        ``requests[r]`` holds ``id``, ``emitted`` (tokens emitted at each verify step),
        ``drafts`` (real draft nodes at each step), ``prompt_tokens``, ``output_tokens``, with
        corpora ``accepted_by_source`` (its accepted draft tokens by source) and the record's
        scalar metadata fields.  The summary (and each group) holds ``accepted_by_source``
        pooled (null without corpora).
        """
        summary = self.summary.to_dict()
        summary.update(concurrency=self.concurrency, backend=self.backend,
                       batch_steps=self.batch_steps, decoding=self.decoding["kind"],
                       output_tokens=int(self.output_lens.sum()),
                       draft_ms_per_step=self.draft_ms_per_step,
                       step_api_ms_per_step=(self.step_api_ms_per_step
                                             if self.step_api_timed else None),
                       wall_seconds=self.wall_seconds,
                       output_tokens_per_second=self.output_tokens_per_second)
        out: dict[str, Any] = {"config": asdict(self.config), "summary": summary}
        if by is not None:
            out["groups"] = {k: v.to_dict() for k, v in self.by(by).items()}
        reqs = []
        for i, rid in enumerate(self.ids):
            row: dict[str, Any] = {"id": rid, "emitted": self.emitted[i].tolist(),
                                   "drafts": self.drafts[i].tolist(),
                                   "prompt_tokens": int(self.prompt_lens[i]),
                                   "output_tokens": int(self.output_lens[i])}
            if self.accepted_by_source is not None:
                row["accepted_by_source"] = {k: int(v[i])
                                             for k, v in self.accepted_by_source.items()}
            for k, v in self.metadata[i].items():
                if k not in row and (v is None or isinstance(v, (str, int, float, bool))):
                    row[k] = v
            reqs.append(row)
        out["requests"] = reqs
        return out


def _check_args(config: Any, concurrency: Any, backend: Any, costs: Any = None
                ) -> NgramConfig:
    from .acceptance import check_costs

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
        Time the step API a custom loop runs (:class:`~ngramspec.Drafter` and
        :func:`~ngramspec.verify_greedy`, as ``docs/custom-loop.md`` teaches them) on the
        first this many serving-loop iterations, when
        :attr:`SimulationResult.step_api_ms_per_step` is first read (predictions add it to
        each step); 0: never.  The compiled replay's own time (``draft_ms_per_step``) leaves out the
        Python a loop runs around the kernels.

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
    ids = [r["id"] for r in rows]
    by_source = None
    if backend == "numba":
        from .engine.replay import replay  # imports numba: only when simulating

        names, automata = _automata(config, corpora)
        out = replay(prompts, outputs, config, concurrency=concurrency, progress=progress,
                     costs=costs, corpora=automata)
        emitted, drafts, cpu, batch_steps, wall = (out.emitted, out.drafts, out.draft_seconds,
                                                   out.batch_steps, out.wall_seconds)
        if out.accepted_by_source is not None:
            by_source = dict(zip(names, out.accepted_by_source.T.copy()))
    else:
        found: dict[str, np.ndarray] = {}
        emitted, drafts, cpu, batch_steps, wall = _replay_stepwise(
            prompts, outputs, config, concurrency, backend, ids, progress, corpora, costs,
            sources=found)
        by_source = found or None
    # Timed when first asked for (a prediction): compiling the step API's kernels is for the
    # runs that predict, not for every simulation.
    pending = (prompts, outputs, costs, int(step_api_steps)) if step_api_steps else None
    return SimulationResult(
        config=config, concurrency=concurrency, backend=backend, ids=ids,
        metadata=[{k: v for k, v in r.items() if k not in TOKEN_FIELDS} for r in rows],
        prompt_lens=np.asarray([p.size for p in prompts], np.int64),
        output_lens=np.asarray([o.size for o in outputs], np.int64),
        emitted=emitted, drafts=drafts, draft_seconds=cpu, wall_seconds=wall,
        batch_steps=batch_steps, accepted_by_source=by_source, _step_api=pending)


def _time_step_api(prompts, outputs, config: NgramConfig, concurrency: int, steps: int,
                   costs: Any, backend: str, warm: bool = True) -> tuple[float, float, int]:
    """The step API timed on the first ``steps`` serving-loop iterations of
    :func:`_replay_stepwise` (the recorded argmax, which stands in for the target, untimed):
    ``(seconds per iteration of propose + verify_greedy + accept, seconds per request of
    add_request + finish, iterations timed)``.  The drafter's kernels are compiled before the
    clock starts."""
    if backend == "numba" and warm:
        _warm_step_api(config, costs)
    timing: dict[str, float] = {}
    _replay_stepwise(prompts, outputs, config, concurrency, backend, list(range(len(prompts))),
                     None, costs=costs, limit=steps, timing=timing)
    taken = int(timing["steps"])
    return (timing["step_seconds"] / max(taken, 1),
            timing["request_seconds"] / max(int(timing["admitted"]), 1), taken)


_WARMED: set = set()


def _warm_step_api(config: NgramConfig, costs: Any) -> None:
    """Compile (or load) the step API's kernels for this kind of configuration once."""
    key = (config.replace(capacity=config.trie_depth + 8), costs is not None)
    if key in _WARMED:
        return
    small = [np.array([1, 2, 3, 1, 2], np.int32)] * 2
    outs = [np.array([3, 1, 2, 4], np.int32)] * 2
    _time_step_api(small, outs, key[0], 2, 8, costs,
                   "numba", warm=False)
    _WARMED.add(key)


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


def _automata(config: NgramConfig, corpora: Mapping[str, Any] | None
              ) -> tuple[list[str], list]:
    """The source names (``"trie"``, then the corpus ids) and the corpora's automata, both in
    SGLang's merge order, checked and built as :meth:`~ngramspec.NgramCache.add_corpus` does
    (the same errors)."""
    _check_corpora(corpora)
    if not corpora:
        return [TRIE_SOURCE], []
    from .cache import NgramCache

    cache = NgramCache(config=config.replace(capacity=config.trie_depth + 1))
    for corpus_id, documents in corpora.items():
        cache.add_corpus(corpus_id, documents)
    return [TRIE_SOURCE, *cache.corpora()], cache._corpora.ordered_automata()


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
    merge (the cache's recorded trees, :func:`~ngramspec.corpora.tree_paths`) independently
    of the engine's node tags.  ``limit``: stop after that many serving-loop iterations.
    ``timing`` (a dict, filled): the wall time of ``propose`` + ``verify_greedy`` +
    ``accept`` (``step_seconds``) and of ``add_request`` + ``finish`` (``request_seconds``),
    the requests admitted and the iterations run."""
    from .drafter import Drafter

    drafter = Drafter(config=config, backend=backend, costs=costs)
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
    nxt, running, cpu, steps = 0, [], 0.0, 0
    t_step = t_req = 0.0
    admitted = 0
    clock = time.perf_counter
    t0 = clock()
    while (nxt < n_req or running) and (limit is None or steps < limit):
        w0 = clock()
        while nxt < n_req and len(running) < concurrency:
            out_len[nxt] = 1
            if outputs[nxt].size > 1:
                drafter.add_request(ids[nxt], prompts[nxt], int(outputs[nxt][0]))
                running.append(nxt)
                admitted += 1
            nxt += 1
        w1 = clock()
        t_req += w1 - w0
        if not running:
            continue
        c0 = time.thread_time()
        d = drafter.propose([ids[r] for r in running])
        cpu += time.thread_time() - c0
        t_step += clock() - w1
        pred = _recorded_argmax(d, running, outputs, [out_len[r] for r in running])
        left = [outputs[r].size - out_len[r] for r in running]
        w0, c0 = clock(), time.thread_time()
        result = verify_greedy(d, pred)
        drafter.accept(result, max_tokens=left)
        cpu += time.thread_time() - c0
        w1 = clock()
        t_step += w1 - w0
        parts = None
        if attribute and parts_of.active:
            parts = [(column[cid], t, m) for cid, (t, m) in parts_of.last_parts]
        for b, r in enumerate(running):
            e = min(int(result.accept_lens[b]), left[b])
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
    from .corpora import tree_paths

    if parts is None:
        counts[0] += accepted.size
        return
    paths = [(col, tree_paths(t[b], m[b])) for col, t, m in parts]
    for i in range(1, accepted.size + 1):
        prefix = tuple(int(x) for x in accepted[:i])
        counts[next((col for col, p in paths if prefix in p), 0)] += 1


# --- streaming: corpora larger than memory -------------------------------------------------


class _Tally:
    """Pooled counts of verify steps, added request by request; :meth:`summary` gives the
    very figures :func:`_summarise` gives on the same requests' arrays."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.requests = 0
        self.steps = 0
        self.emitted = 0
        self.accepted = np.zeros(n, np.int64)  # [a]: steps that emitted a + 1 tokens
        self.draft_nodes = 0
        self.with_draft = 0

    def add(self, emitted: np.ndarray, drafts: np.ndarray) -> None:
        self.requests += 1
        if emitted.size:
            self.steps += int(emitted.size)
            self.emitted += int(emitted.sum(dtype=np.int64))
            self.accepted += np.bincount(emitted.astype(np.int64) - 1, minlength=self.n)[:self.n]
            self.draft_nodes += int(drafts.sum(dtype=np.int64))
            self.with_draft += int(np.count_nonzero(drafts))

    def merge(self, other: "_Tally") -> None:
        self.requests += other.requests
        self.steps += other.steps
        self.emitted += other.emitted
        self.accepted += other.accepted
        self.draft_nodes += other.draft_nodes
        self.with_draft += other.with_draft

    def summary(self) -> Summary:
        n, steps = self.n, self.steps
        if steps:
            at_least = self.accepted[::-1].cumsum()[::-1] / steps
            by_depth = [float(x) for x in at_least[1:n]]
            return Summary(self.requests, steps, self.emitted, self.emitted / steps, by_depth,
                           float(self.draft_nodes) / steps, float(self.with_draft / steps))
        nan = float("nan")
        return Summary(self.requests, 0, 0, nan, [0.0] * (n - 1), nan, nan)


@dataclass
class StreamResult:
    """Outcome of :func:`simulate_stream`: pooled figures (and per group), no per-request
    arrays (memory does not grow with the corpus).

    Attributes
    ----------
    config, concurrency, batch_steps, draft_seconds, wall_seconds
        As :class:`SimulationResult`.
    output_tokens : int
        Recorded output tokens replayed.
    summary : Summary
        Pooled over all requests; equal to ``simulate(...).summary`` on the same requests.
    group_by : str or None
        The metadata field of ``groups``.
    groups : dict of str to Summary
        Per value of ``group_by`` (first-seen order), as ``SimulationResult.by``.
    decoding : dict
        As ``SimulationResult.decoding``.
    """

    config: NgramConfig
    concurrency: int
    batch_steps: int
    draft_seconds: float
    wall_seconds: float
    output_tokens: int
    group_by: str | None
    decoding: dict[str, Any]
    _tally: _Tally = field(repr=False)
    _groups: dict[str, _Tally] = field(repr=False, default_factory=dict)
    backend: str = "numba"

    def __repr__(self) -> str:
        s = self.summary
        return (f"StreamResult(requests={s.requests}, verify_steps={s.verify_steps}, "
                f"tokens_per_step={s.tokens_per_step:.4f}, concurrency={self.concurrency})")

    @property
    def summary(self) -> Summary:
        return self._tally.summary()

    @property
    def groups(self) -> dict[str, Summary]:
        return {k: t.summary() for k, t in self._groups.items()}

    @property
    def tokens_per_step(self) -> float:
        return self.summary.tokens_per_step

    @property
    def draft_ms_per_step(self) -> float:
        return 1e3 * self.draft_seconds / max(self.batch_steps, 1)

    @property
    def step_api_ms_per_step(self) -> None:
        """Not timed for streamed traffic (:attr:`SimulationResult.step_api_ms_per_step`):
        predictions add the compiled replay's drafting time."""
        return None

    step_api_timed = False

    @property
    def output_tokens_per_second(self) -> float:
        return self.output_tokens / self.wall_seconds if self.wall_seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        """``{"config", "summary", ["groups"]}`` as :meth:`SimulationResult.to_dict`, without
        the per-request part."""
        summary = self.summary.to_dict()
        summary.update(concurrency=self.concurrency, backend=self.backend,
                       batch_steps=self.batch_steps, decoding=self.decoding["kind"],
                       output_tokens=self.output_tokens,
                       draft_ms_per_step=self.draft_ms_per_step,
                       step_api_ms_per_step=(self.step_api_ms_per_step
                                             if self.step_api_timed else None),
                       wall_seconds=self.wall_seconds,
                       output_tokens_per_second=self.output_tokens_per_second)
        out: dict[str, Any] = {"config": asdict(self.config), "summary": summary}
        if self.group_by is not None:
            out["groups"] = {k: v.to_dict() for k, v in self.groups.items()}
        return out


def pool_results(results: Sequence[StreamResult]) -> StreamResult:
    """Independent shards' results pooled: every verify step of every shard counts once
    (timings summed; the concurrency is the largest).

    Examples
    --------
    >>> import ngramspec as ns
    >>> from ngramspec.simulate import simulate_stream, pool_results
    >>> rows = [{"id": i, "prompt_ids": [1, 2, 3], "output_ids": [1, 2, 3, 1, 2, 3, 4]}
    ...         for i in range(4)]
    >>> cfg = ns.NgramConfig(capacity=10_000)
    >>> a, b = simulate_stream(rows[:2], config=cfg), simulate_stream(rows[2:], config=cfg)
    >>> pool_results([a, b]).summary.verify_steps == a.summary.verify_steps * 2
    True
    """
    if not results:
        raise ValueError("pool_results needs at least one result")
    first = results[0]
    tally = _Tally(first._tally.n)
    groups: dict[str, _Tally] = {}
    decoding = {"greedy": 0, "sampled": 0, "settings": []}
    for r in results:
        if r.config != first.config or r.group_by != first.group_by:
            raise ValueError("pool_results: the results differ in config or group_by")
        tally.merge(r._tally)
        for k, t in r._groups.items():
            groups.setdefault(k, _Tally(t.n)).merge(t)
        decoding["greedy"] += r.decoding["greedy"]
        decoding["sampled"] += r.decoding["sampled"]
        decoding["settings"] += [s for s in r.decoding["settings"]
                                 if s not in decoding["settings"]]
    decoding["kind"] = ("mixed" if decoding["greedy"] and decoding["sampled"] else
                        "sampled" if decoding["sampled"] else "greedy")
    return StreamResult(first.config, max(r.concurrency for r in results),
                        sum(r.batch_steps for r in results),
                        sum(r.draft_seconds for r in results),
                        sum(r.wall_seconds for r in results),
                        sum(r.output_tokens for r in results), first.group_by, decoding,
                        tally, groups)


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
    from .engine.replay import replay_stream  # imports numba: only when simulating
    from .streams import SAMPLING_FIELDS, decoding_of, iter_streams

    config = _check_args(config, concurrency, "numba", costs)
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
