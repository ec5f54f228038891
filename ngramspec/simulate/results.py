"""What a simulation reports: pooled figures, per-request arrays, per-group summaries."""


from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Hashable, Sequence

import numpy as np

from ..config import NgramConfig
from ..streams import describe_decoding

__all__ = ["Summary", "SimulationResult", "StreamResult", "pool_results"]

#: Fields of a record that are token data, not metadata.
TOKEN_FIELDS = ("prompt_ids", "output_ids")


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
    step_api_seconds, step_api_steps, sglang_seconds, sglang_steps : float or None, int
        The drafting an engine pays, timed by :func:`ngramspec.time_drafting` (None and 0
        until then; see :attr:`step_api_ms_per_step`, :attr:`sglang_ms_per_step`).
    timing_streams : tuple or None
        What :func:`ngramspec.time_drafting` times: the run's prompts and outputs, its step
        costs and the iterations to time (``simulate(..., step_api_steps=...)``); None when
        the run is not to be timed (``step_api_steps=0``, vLLM's own proposer).
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
    sglang_seconds: float | None = None
    sglang_steps: int = 0
    _summary: Summary | None = field(default=None, repr=False)
    timing_streams: tuple | None = field(default=None, repr=False)

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
        of these streams by :func:`ngramspec.time_drafting` (``engine="custom"``); None until
        then.  What :func:`~ngramspec.costs.predict_serving` adds to each step by default.
        Reading it never runs anything."""
        if self.step_api_seconds is None or not self.step_api_steps:
            return None
        return 1e3 * self.step_api_seconds / self.step_api_steps

    @property
    def sglang_ms_per_step(self) -> float | None:
        """What SGLang's NGRAM worker pays per serving-loop iteration for drafting, ms: its
        calls (``synchronize``, ``batch_get``, ``batch_put``, ``erase_match_state``; beyond
        SGLang also the launcher hook's ``note_prompts`` and ``note_finished``) on ngramspec's
        drop-in ``NgramCorpus`` running this configuration, timed on the first
        ``step_api_steps`` iterations of these streams by :func:`ngramspec.time_drafting`
        (``engine="sglang"``); None until then.  What
        :func:`~ngramspec.costs.predict_serving` adds to each step with
        ``engine="sglang"``.  For SGLang-exact settings the drop-in runs SGLang's algorithm
        call for call on ngramspec's kernels: the figure stands in for SGLang's own C++
        class, which is not needed to predict."""
        if self.sglang_seconds is None or not self.sglang_steps:
            return None
        return 1e3 * self.sglang_seconds / self.sglang_steps

    @property
    def vllm_ms_per_step(self) -> float | None:
        """What vLLM pays per serving-loop iteration for drafting, ms: for profile
        ``vllm-0.33`` the compiled replay's time of vLLM's lookup (:attr:`draft_ms_per_step`:
        ngramspec's twin of vLLM's compiled function, the same scan of each context); for
        ngramspec's chains (``chain=True``), the step API (:attr:`step_api_ms_per_step`),
        which ``ngramspec.integrations.vllm.Proposer`` runs.  What
        :func:`~ngramspec.costs.predict_serving` adds to each step with ``engine="vllm"``."""
        if self.config.vllm:
            return self.draft_ms_per_step
        return self.step_api_ms_per_step

    @property
    def sglang_timed(self) -> bool:
        """Whether :attr:`sglang_ms_per_step` has been measured (:func:`ngramspec.time_drafting`)."""
        return self.sglang_seconds is not None

    @property
    def step_api_timed(self) -> bool:
        """Whether :attr:`step_api_ms_per_step` has been measured (:func:`ngramspec.time_drafting`)."""
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
        out = _run_dict(self, int(self.output_lens.sum()))
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

    @property
    def sglang_ms_per_step(self) -> None:
        """Not timed for streamed traffic (:attr:`SimulationResult.sglang_ms_per_step`)."""
        return None

    step_api_timed = False
    sglang_timed = False

    @property
    def output_tokens_per_second(self) -> float:
        return self.output_tokens / self.wall_seconds if self.wall_seconds else 0.0

    def to_dict(self) -> dict[str, Any]:
        """``{"config", "summary", ["groups"]}`` as :meth:`SimulationResult.to_dict`, without
        the per-request part."""
        out = _run_dict(self, self.output_tokens)
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


def _run_dict(result: Any, output_tokens: int) -> dict[str, Any]:
    """``{"config", "summary"}`` of a :class:`SimulationResult` or :class:`StreamResult`: the
    pooled summary with the run's settings and timings."""
    summary = result.summary.to_dict()
    summary.update(concurrency=result.concurrency, backend=result.backend,
                   batch_steps=result.batch_steps, decoding=result.decoding["kind"],
                   output_tokens=output_tokens, draft_ms_per_step=result.draft_ms_per_step,
                   step_api_ms_per_step=(result.step_api_ms_per_step
                                         if result.step_api_timed else None),
                   sglang_ms_per_step=(result.sglang_ms_per_step
                                       if result.sglang_timed else None),
                   wall_seconds=result.wall_seconds,
                   output_tokens_per_second=result.output_tokens_per_second)
    return {"config": asdict(result.config), "summary": summary}
