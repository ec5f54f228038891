"""``Proposer``: ngramspec's drafter as vLLM 0.33's ``custom_class`` speculative proposer.

vLLM loads an outside drafter without patching::

    LLM(model=..., speculative_config={"method": "custom_class",
                                       "model": "ngramspec.integrations.vllm.Proposer",
                                       "num_speculative_tokens": 5})

Its model runner builds the class with the ``VllmConfig`` and, after every step's
bookkeeping, calls ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu,
slot_mappings=...)`` (``NgramProposer``'s form, with ``num_speculative_tokens`` first, is
taken too).  Nothing of vLLM is imported here: the config is read by attribute
(``speculative_config.num_speculative_tokens``, ``scheduler_config.max_num_seqs``,
``model_config.max_model_len``).

**Configuration**, as the SGLang plugin's (``docs/sglang.md``): the environment variable
:data:`ENV_CONFIG` (``NGRAMSPEC_VLLM_CONFIG``) holds TOML text (``NgramConfig.to_toml()``), or
:data:`ENV_PRESET` (``NGRAMSPEC_VLLM_PRESET``) names a preset; by default a chain
configuration (:func:`~ngramspec.config.vllm_proposer.default_config`; how the variables resolve:
:func:`~ngramspec.config.vllm_proposer.resolve_config`).  vLLM verifies chains, so ``chain=True`` is
forced, and ``draft_token_num`` is vLLM's ``num_speculative_tokens + 1`` (a TOML that says
otherwise is refused).  :data:`ENV_COSTS` (``NGRAMSPEC_VLLM_COSTS``), a cost table's CSV, makes
the proposer cost-aware (:func:`~ngramspec.costs.chains.choose_counts`): each step it sends the
number of chain tokens across the batch that maximises expected emitted tokens per
millisecond, nothing at all when no draft pays (vLLM then runs a plain decode).

**Requests without ids.** vLLM tells the proposer no request ids: row ``i`` holds a request's
whole context ``token_ids_cpu[i, :num_tokens_no_spec[i]]`` and ``sampled_token_ids[i]`` the
tokens it emitted at the last step (empty: no draft this step, e.g. a partial prefill).  Rows
move between steps (new requests are appended or fill freed rows; a finished request's row is
filled by the last one).  The proposer recognises each request by its context: it keeps, per
row, the length the context had and a fingerprint (its first 16 tokens and the 16 before that
length); a row whose context, less the tokens it just emitted, has the length and fingerprint
a known request had is that request (rows that stayed put are checked in one vectorised
comparison, moved ones by a dictionary look-up; identical contexts are interchangeable).  A
known request's emitted tokens (read from its context) are ``accept``-ed against the chain it
was proposed, an unknown row with emitted tokens is ``add_request``-ed (prompt = its context
but the last token), a known request no row holds any more is ``finish``-ed.  A request the
drafter cannot follow (tokens that are no path of its chain + a bonus token; tokens emitted
without a pending proposal, or a pending one that emitted nothing) is re-synchronised: finished
and added again from its context.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from ..config.vllm import ENV_CONFIG, ENV_COSTS, ENV_PRESET
from ..config.vllm_proposer import default_config, read_vllm_config, resolve_config  # noqa: F401
from ..costs.chains import choose_counts, step_ms_row
from ..drafter import Drafter
from ._warm import Warming, warm_drafter
from .._jit import EntryPoints
from ..engine import kernels

__all__ = ["Proposer", "ENV_CONFIG", "ENV_PRESET", "ENV_COSTS", "default_config",
           "resolve_config", "choose_counts"]

# ENV_CONFIG (``NGRAMSPEC_VLLM_CONFIG``): the configuration as TOML text; ENV_PRESET
# (``NGRAMSPEC_VLLM_PRESET``): a preset's name; ENV_COSTS (``NGRAMSPEC_VLLM_COSTS``): a cost
# table's CSV path.  Named once, with how they resolve, in ngramspec.config.vllm.

_HEAD = _TAIL = 16  # equal halves: ngramspec.engine.vllm.rows reads them off the array
# The fingerprint of a context of length L: its first _HEAD tokens and the _TAIL before L
# (positions clipped into 0 .. L - 1, so it depends on the context's first L tokens only).
_HEAD_IDX = np.arange(_HEAD, dtype=np.int64)
_TAIL_IDX = np.arange(-_TAIL, 0, dtype=np.int64)
# Prior of the acceptance rate of sent drafts (cost-aware without path probabilities):
# (accepted + _PRIOR_ACCEPTED) / (sent + _PRIOR_SENT).
_PRIOR_ACCEPTED, _PRIOR_SENT = 1.0, 2.0


def _read_costs(costs: Any, environ: Mapping[str, str] | None) -> Any:
    from ..costs import CostTable

    if costs is None:
        path = (os.environ if environ is None else environ).get(ENV_COSTS)
        if not path:
            return None
        try:
            return CostTable.read(path)
        except (OSError, ValueError) as e:
            raise ValueError(f"{ENV_COSTS} = {path!r}: {e}") from None
    if isinstance(costs, CostTable):
        return costs
    if isinstance(costs, (str, os.PathLike)):
        return CostTable.read(costs)
    raise TypeError(f"costs must be a CostTable or a CSV path, got {type(costs).__name__}")


def _fingerprints(ctx: np.ndarray, rows: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """(len(rows), _HEAD + _TAIL) tokens identifying each row's first ``lengths`` tokens."""
    last = np.maximum(lengths - 1, 0)[:, None]
    idx = np.concatenate((np.minimum(_HEAD_IDX, last),
                          np.clip(lengths[:, None] + _TAIL_IDX, 0, last)), axis=1)
    return ctx[rows[:, None], idx]


class Proposer:
    """ngramspec's drafter for vLLM 0.33 (``speculative_config`` method ``"custom_class"``).

    Parameters
    ----------
    vllm_config : vLLM's ``VllmConfig`` (or any object with its attributes)
        Read: ``speculative_config.num_speculative_tokens`` (``k``: chains of at most ``k``
        drafts), ``scheduler_config.max_num_seqs`` (rows preallocated) and
        ``model_config.max_model_len`` (no draft reaches past it).
    config : NgramConfig or str, optional
        The configuration (an :class:`~ngramspec.NgramConfig`, a preset name or TOML text),
        in place of :data:`ENV_CONFIG` / :data:`ENV_PRESET`
        (:func:`~ngramspec.config.vllm_proposer.resolve_config`).
    costs : CostTable or path, optional
        A cost table, in place of :data:`ENV_COSTS`: sends the chain tokens that maximise
        expected tokens per ms (:func:`~ngramspec.costs.chains.choose_counts`).  The choice
        weighs each token by its path probability, so it wants calibrated ones: without a
        configuration, the default is then the chain preset with calibrated estimates
        (:func:`~ngramspec.config.vllm_proposer.default_config`); a
        configuration of your own should set ``calibrated_estimates = true`` and
        ``shared_pseudo_count = 0`` (ADAPTIVE), else drafts are under- or over-valued.
    environ : mapping, optional
        Where the environment variables are read (default ``os.environ``).
    backend : {"numba", "reference"}
        The drafter's backend.

    Raises
    ------
    ValueError
        A config without the attributes above, or a bad configuration (naming the variable and
        the field); checked here, once.

    Examples
    --------
    >>> import types, numpy as np
    >>> from ngramspec.integrations.vllm import Proposer
    >>> ns_ = types.SimpleNamespace
    >>> vllm_config = ns_(speculative_config=ns_(num_speculative_tokens=3),
    ...                   scheduler_config=ns_(max_num_seqs=4),
    ...                   model_config=ns_(max_model_len=64))
    >>> p = Proposer(vllm_config, environ={"NGRAMSPEC_VLLM_PRESET": "sglang"})
    >>> ctx = np.zeros((4, 64), np.int32)
    >>> ctx[0, :9] = [1, 2, 3, 4, 5, 1, 2, 3, 4]      # prompt + the prefill's first token
    >>> p.propose([[4]], np.array([9, 0, 0, 0]), ctx)  # SGLang's trie learns from steps
    [[]]
    >>> ctx[0, 9] = 5                                   # the step emitted 5
    >>> p.propose([[5]], np.array([10, 0, 0, 0]), ctx)
    [[1, 2, 3]]
    """

    def __init__(self, vllm_config: Any, *, config: Any = None, costs: Any = None,
                 environ: Mapping[str, str] | None = None, backend: str = "numba") -> None:
        k, max_num_seqs, max_model_len = read_vllm_config(vllm_config)
        self.num_speculative_tokens = k
        self.max_model_len = max_model_len
        self.costs = _read_costs(costs, environ)
        self.config = resolve_config(k, config=config, environ=environ,
                                     cost_aware=self.costs is not None)
        if self.costs is not None:
            covered = self.costs.extrapolate or (self.costs.tokens[0] <= 1 and
                                                 self.costs.tokens[-1] >= k + 1)
            if not covered:
                raise ValueError(f"{ENV_COSTS}: the cost table measures tokens "
                                 f"{int(self.costs.tokens[0])}..{int(self.costs.tokens[-1])} "
                                 f"but a verify step of k = {k} drafts has 1..{k + 1}")
        auto = self.config.min_expected_accept == "auto"
        if auto and self.costs is None:
            raise ValueError(f"min_expected_accept = \"auto\" needs step costs: set {ENV_COSTS} "
                             "to a cost table")
        drafter_costs = self.costs if auto else None
        self.drafter = Drafter(config=self.config, backend=backend, costs=drafter_costs)
        self._next_id = 0
        cap = max(max_num_seqs, 1)
        self._owner = np.full(cap, -1, np.int64)        # request at each row (-1: none)
        self._own_len = np.zeros(cap, np.int64)         # its context length there
        self._own_fp = np.zeros((cap, _HEAD + _TAIL), np.int32)
        self._owner_new = np.full(cap, -1, np.int64)
        self._rows_known = 0                            # rows of the last call
        self._known = 0                                 # requests among them
        self._auto = self.config.min_expected_accept == "auto"
        self._entries = EntryPoints()  # by the types of vLLM's arrays
        # Compiled in the background from now on (vLLM loads its model meanwhile); the first
        # draft waits for what is left.
        self._warming: Warming | None = Warming(self._warm, backend, drafter_costs)
        self._pending: dict[int, int] = {}              # proposed at the last call: id -> sent
        self._sent = self._accepted = 0                 # drafts sent / accepted (cost-aware)
        self._last: Any = None                          # the last DraftBatch proposed
        self._last_row: dict[int, int] = {}             # its row of each request
        self._cols = np.arange(k + 1, dtype=np.int64)   # (the emitted tokens' columns)
        self._one_len = np.ones(1, np.int64)
        self.resyncs = 0

    def _warm(self, backend: str, costs: Any) -> None:
        """Compile the drafter's kernels now, not at vLLM's first decode step."""
        warm_drafter(self.config, backend, costs)
        ctx, n = np.ones((2, 40), np.int32), np.full(2, 40, np.int32)  # vLLM's dtypes
        owner = np.zeros(2, np.int64)
        self._kernels(ctx, n, np.ones(2, np.int64), owner)

    def _kernels(self, ctx: np.ndarray, n: np.ndarray, emitted: np.ndarray,
                 owner: np.ndarray) -> tuple[Any, Any]:
        """The two row kernels as entry points (no per-call typing of the arguments) for the
        types of vLLM's arrays ``ctx`` and ``n``, which may vary between its versions."""
        key = (ctx.dtype.num, ctx.flags.num, ctx.ndim, n.dtype.num, n.flags.num, n.ndim)
        k = kernels("vllm.rows")  # compiled on first use
        return (self._entries(("recognise", key), k.recognise,
                              (ctx, n, emitted, 1, owner, owner, self._own_fp, 1, owner)),
                self._entries(("remember", key), k.remember,
                              (ctx, n, owner, 1, owner, owner, self._own_fp)))

    def load_model(self, *args: Any, **kwargs: Any) -> None:
        """Nothing to load (vLLM's runner calls this on every drafter that has it)."""

    def propose(self, *args: Any, slot_mappings: Any = None) -> list[list[int]]:
        """Draft chains for the rows of vLLM's input batch.

        Called as vLLM 0.33's model runner calls a ``custom_class`` proposer,
        ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, slot_mappings=None)``,
        or as it calls ``NgramProposer``, with ``num_speculative_tokens`` first (at most
        ``k``; fewer drafts per request then).  See :meth:`draft`.
        """
        if args and isinstance(args[0], (int, np.integer)) and not isinstance(args[0], bool):
            k, rest = int(args[0]), args[1:]
        else:
            k, rest = None, args
        if len(rest) != 3:
            raise TypeError("propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu, "
                            f"slot_mappings=None) takes 3 arrays, got {len(rest)}")
        return self.draft(*rest, num_speculative_tokens=k)

    def draft(self, sampled_token_ids: Sequence[Sequence[int]], num_tokens_no_spec: Any,
              token_ids_cpu: Any, *, num_speculative_tokens: int | None = None
              ) -> list[list[int]]:
        """Draft tokens per row: a list of at most ``k`` ints each (``[]``: no draft).

        Parameters
        ----------
        sampled_token_ids : list of lists of int
            Per row, the tokens the request emitted at the last step (accepted drafts + the
            bonus token); empty for a row not drafting this step (a partial prefill).
        num_tokens_no_spec : (>= rows,) int array
            Per row, the length of the request's context (prompt + output so far).
        token_ids_cpu : (>= rows, >= max length) int array
            Row ``i``'s context in ``token_ids_cpu[i, :num_tokens_no_spec[i]]``.
        num_speculative_tokens : int, optional
            At most this many drafts per request (default ``k``).
        """
        if self._warming is not None:
            warming, self._warming = self._warming, None
            warming.wait()
        k = self.num_speculative_tokens
        if num_speculative_tokens is not None:
            k = min(k, int(num_speculative_tokens))
        b = len(sampled_token_ids)
        if b == 0:  # no rows: nothing to draft (the requests that left go at the next call)
            return []
        ctx = token_ids_cpu if isinstance(token_ids_cpu, np.ndarray) else \
            np.asarray(token_ids_cpu)
        n = num_tokens_no_spec if isinstance(num_tokens_no_spec, np.ndarray) else \
            np.asarray(num_tokens_no_spec, np.int64)
        if b > self._owner.size:
            self._grow(b)
        emitted = np.fromiter(map(len, sampled_token_ids), np.int64, b)
        owner = self._owner_new[:b]
        recognise, remember = self._kernels(ctx, n, emitted, owner)
        matched = recognise(ctx, n, emitted, b, self._owner, self._own_len, self._own_fp,
                            self._rows_known, owner)
        if matched < self._known:  # a request moved to another row, or left
            self._find_moved(ctx, n, emitted, owner)
        drafter = self.drafter
        pending = self._pending
        own = owner.tolist()
        em = emitted.tolist()
        sizes = n[:b].tolist()
        accept: list[tuple[int, int]] = []  # (pending order, row)
        fresh: list[int] = []
        order = self._last_row
        for row in range(b):
            rid, e = own[row], em[row]
            if rid < 0:
                if e:
                    fresh.append(row)
                continue
            if not e:
                if rid in pending:  # proposed, then emitted nothing: start it afresh later
                    self._finish(rid)
                    own[row] = -1
                continue
            if rid in pending:
                accept.append((order[rid], row))
            else:  # tokens the drafter did not see proposed (e.g. past max_model_len)
                self._finish(rid)
                self.resyncs += 1
                fresh.append(row)
        if accept:
            for rid in self._accept(accept, ctx, n, em, own):
                row = own.index(rid)
                own[row] = -1
                fresh.append(row)
            fresh.sort()
        self._pending = {}
        for row in fresh:  # new rows (and re-synchronised ones): the context but its last token
            rid = self._next_id
            self._next_id += 1
            size = sizes[row]
            drafter.add_request(rid, ctx[row, :size - 1], int(ctx[row, size - 1]))
            own[row] = rid
        limit = self.max_model_len
        go = [row for row in range(b) if own[row] >= 0 and em[row] and sizes[row] < limit]
        out: list[list[int]] = [[] for _ in range(b)]
        if go and k > 0:
            rids = [own[row] for row in go]
            if self._auto:
                batch = drafter.propose(rids, batch_size=b)
            else:
                batch = drafter.propose(rids)
            counts = batch.num_drafts.tolist()
            if self.costs is not None:
                counts = self._cost_aware(counts, batch, b)
            tokens = batch.tokens[:, 1:k + 1].tolist()
            sent = {}
            for j, row in enumerate(go):
                c = min(counts[j], k, limit - sizes[row])
                if c > 0:
                    out[row] = tokens[j][:c]
                sent[rids[j]] = c
            self._pending = sent
            self._last, self._last_row = batch, {rid: j for j, rid in enumerate(rids)}
        owner[:] = own
        remember(ctx, n, owner, b, self._owner, self._own_len, self._own_fp)
        self._rows_known = b
        self._known = b - own.count(-1)
        return out

    def _find_moved(self, ctx: np.ndarray, n: np.ndarray, emitted: np.ndarray,
                    owner: np.ndarray) -> None:
        """Rows not matched in place: the known requests they hold (moved rows), by length and
        fingerprint; known requests found in no row are finished."""
        b = owner.size
        prev = np.asarray(n[:b], np.int64) - emitted
        known_rows = np.flatnonzero(self._owner[:self._rows_known] >= 0)
        lost = set(self._owner[known_rows].tolist()) - set(owner[owner >= 0].tolist())
        loose = np.flatnonzero((owner < 0) & (prev >= 1))
        if lost and loose.size:
            index: dict[tuple[int, bytes], list[int]] = {}
            for j in known_rows.tolist():
                rid = int(self._owner[j])
                if rid in lost:
                    index.setdefault((int(self._own_len[j]), self._own_fp[j].tobytes()),
                                     []).append(rid)
            fps = _fingerprints(ctx, loose, prev[loose])
            for i, row in enumerate(loose.tolist()):
                found = index.get((int(prev[row]), fps[i].tobytes()))
                if found:
                    rid = found.pop()
                    owner[row] = rid
                    lost.discard(rid)
        for rid in sorted(lost):
            self._finish(rid)

    def _accept(self, accept: list[tuple[int, int]], ctx: np.ndarray, n: np.ndarray,
                emitted: list[int], own: list[int]) -> list[int]:
        """``accept`` the pending requests' emitted tokens (``accept``: (pending order, row)
        of each, every pending request once), read from their rows' contexts as one matrix; a
        request whose tokens are no path of its chain + a bonus token is finished, to be added
        again from its context (its id is returned)."""
        accept.sort()
        em = [emitted[row] for _, row in accept]
        if self.costs is not None:
            for (_, row), e in zip(accept, em):
                sent = self._pending.get(own[row], 0)
                self._sent += sent
                self._accepted += min(sent, e - 1)
        if len(accept) == 1:  # a server's batch 1: a view of the row (int32 in vLLM)
            row, e = accept[0][1], em[0]
            size = int(n[row])
            matrix = ctx[row:row + 1, size - e:size]
            lens = self._one_len
            lens[0] = e
        else:
            rows = np.array([row for _, row in accept], np.int64)
            lens = np.array(em, np.int64)
            w = max(em)
            if w > self._cols.size:  # (more than a chain + its bonus: refused below)
                self._cols = np.arange(w, dtype=np.int64)
            # Row j: the last lens[j] tokens of its context, left-aligned (the rest, clipped
            # into the array, is not read).
            cols = np.minimum((n[rows] - lens)[:, None] + self._cols[:w], ctx.shape[1] - 1)
            matrix = ctx[rows[:, None], cols]
        try:
            self.drafter.accept_matrix(matrix, lens)
            return []
        except ValueError:
            pass
        tokens = {own[row]: np.asarray(matrix[j, :e], np.int32) for j, (e, (_, row)) in
                  enumerate(zip(em, accept))}
        bad = []
        for rid, toks in tokens.items():
            try:
                self._check_chain(rid, toks)
            except ValueError:
                bad.append(rid)
        for rid in bad:
            del tokens[rid]
            self._finish(rid)
            self.resyncs += 1
        if tokens:
            self.drafter.accept(tokens)
        return bad

    def _check_chain(self, rid: int, toks: np.ndarray) -> None:
        """A ValueError unless ``toks`` is a path of the chain proposed for ``rid`` + a bonus
        token (what ``Drafter.accept`` checks)."""
        j = self._last_row.get(rid)
        if j is None or self._last is None:
            raise ValueError(rid)
        chain = self._last.tokens[j, 1:1 + int(self._last.num_drafts[j])]
        a = toks.size - 1
        if a > chain.size or not np.array_equal(chain[:a], toks[:a]):
            raise ValueError(rid)

    def _cost_aware(self, counts: list[int], batch: Any, b: int) -> list[int]:
        k = self.num_speculative_tokens
        step = step_ms_row(self.costs, b, k + 1)
        lengths = np.minimum(np.array(counts, np.int64), k)
        probs = None if batch.probs is None else batch.probs[:, 1:k + 1]
        rate = (self._accepted + _PRIOR_ACCEPTED) / (self._sent + _PRIOR_SENT)
        return choose_counts(lengths, probs, b, step, accept_rate=rate).tolist()

    def _finish(self, rid: int) -> None:
        self.drafter.finish(rid)
        self._pending.pop(rid, None)

    def _grow(self, rows: int) -> None:
        size = max(rows, 2 * self._owner.size)
        old = self._owner.size

        def grown(a: np.ndarray, fill: int) -> np.ndarray:
            out = np.full((size,) + a.shape[1:], fill, a.dtype)
            out[:old] = a
            return out
        self._owner, self._owner_new = grown(self._owner, -1), grown(self._owner_new, -1)
        self._own_len, self._own_fp = grown(self._own_len, 0), grown(self._own_fp, 0)

    def __repr__(self) -> str:
        return (f"Proposer(k={self.num_speculative_tokens}, max_model_len={self.max_model_len}, "
                f"requests={len(self.drafter.requests)}, "
                f"cost_aware={self.costs is not None})")
