"""The serving-loop replay, compiled: the engine's one entry point for :mod:`ngramspec.simulate`.

:func:`replay` takes the recorded streams as arrays, allocates every engine array itself and
runs :func:`~ngramspec.engine.serving.replay_kernel.replay_kernel` (whose module docstring says what
the loop does, per configuration) in chunks, so that progress can be shown and the tries can
grow between chunks; :func:`replay_stream` does the same over requests taken from an iterator
as the loop admits them.  Both hand the kernel the arrays of one :class:`_Run`, whose
:meth:`_Run.drive` is the one driver loop (call, grow the tries asked for, report progress,
take more requests, until done).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Sequence

import numpy as np
from numba.typed import List

from ..._jit import jit
from ...config import NgramConfig
from ..match import new_states
from .replay_kernel import (C_WINDOWS, DONE, L_ADMLEFT, L_FINLEFT, L_LEFT, L_MORE, L_NEXT,
                            L_NFIN, L_NRUN, L_STEPS, LOOP_SIZE, NEED_REQUESTS, NEED_ROOM, PAUSED,
                            _config_arrays, replay_kernel)
from ..corpora.sam import replay_corpora
from ..tree import BUCKET_COUNTS
from .own_index import OwnIndexArrays
from ..trie import TrieArrays

__all__ = ["replay", "replay_stream", "ReplayOutput"]

# Verify steps per compiled chunk between progress reports.
_CHUNK_STEPS = 4096

ProgressFn = Callable[[int, int], None]


@dataclass(frozen=True)
class ReplayOutput:
    """What :func:`replay` measured.

    Attributes
    ----------
    emitted : list of np.ndarray
        Per request, int32: tokens emitted at each of its verify steps.
    drafts : list of np.ndarray
        Per request, int32: real draft nodes in its tree at each verify step.
    batch_steps : int
        Serving-loop iterations (one target forward each).
    draft_seconds : float
        CPU time of the compiled loop (drafting, inserting, and the verification bookkeeping).
    wall_seconds : float
        Wall time of the loop (compiling or loading the kernel excluded).
    concurrency : int
        The concurrency used (at most the number of requests).
    accepted_by_source : np.ndarray or None
        With corpora, ``(R, 1 + K)`` int64: per request, its accepted draft tokens (the bonus
        tokens excluded) by the part of the merged tree that drafted them: column 0 the
        trie's tree, column ``k + 1`` corpus ``k`` in merge order.  A row sums to
        ``emitted[r].sum() - emitted[r].size``.  None without corpora.
    """

    emitted: list[np.ndarray]
    drafts: list[np.ndarray]
    batch_steps: int
    draft_seconds: float
    wall_seconds: float
    concurrency: int
    accepted_by_source: np.ndarray | None = None


def _pack(seqs: Sequence[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    off = np.zeros(len(seqs) + 1, np.int64)
    np.cumsum([s.size for s in seqs], out=off[1:])
    flat = np.concatenate(seqs) if len(seqs) else np.zeros(0, np.int32)
    return np.ascontiguousarray(flat, dtype=np.int32), off


@jit
def _list_of(bundle):
    out = List()
    out.append(bundle)
    return out


@jit
def _list_append(out, bundle):
    out.append(bundle)


@jit
def _list_set(out, i, bundle):
    out[i] = bundle


def _trie_list(tries: list[OwnIndexArrays]):
    """The slots' own indexes as the kernel takes them (a typed list; a list without the JIT).

    The typed list is built and changed only inside cached kernels: its methods called from
    Python compile on every start (about a second), which dominated short replays."""
    import numba

    if numba.config.DISABLE_JIT:
        return [t.bundle for t in tries]
    out = _list_of(tries[0].bundle)
    for t in tries[1:]:
        _list_append(out, t.bundle)
    return out


class _Run:
    """The engine arrays of one replay (everything the kernel takes but the streams, the
    per-request arrays and the per-step record, which the caller sets: ``streams``,
    ``per_req``, ``out``), and the driver of the kernel over them."""

    def __init__(self, config: NgramConfig, conc: int, costs: Any,
                 corpora: tuple | None) -> None:
        depth = config.trie_depth
        n = config.draft_token_num
        exact = config.exact_counts or config.local_index
        self.cfg, fcfg = _config_arrays(config, conc)
        from ...config.acceptance_table import calibration_array
        from ...costs import check_costs, cost_matrix

        costs = check_costs(config, costs)
        # None where unused: the kernel then compiles without that drafting (replay_kernel).
        self.adaptive = None
        if config.match_type == "ADAPTIVE":
            cost_rows = (np.zeros((0, n), np.float64) if costs is None
                         else cost_matrix(costs, conc, n))
            self.adaptive = (fcfg, calibration_array(config), cost_rows,
                             np.zeros(2, np.float64))
        self.corpora = corpora
        self.prob = True if config.match_type == "PROB" else None  # (BFS: PROB not compiled)
        self.trie = TrieArrays(config.capacity)
        # Own indexes (local_index), each sized for its request's whole length at admission.
        self.local = [OwnIndexArrays(depth, config.own_window, 1)
                      for _ in range(conc if config.local_index else 1)]
        self.local_list = _trie_list(self.local)
        # (None but for ADAPTIVE, the only trees drafted from them: not compiled for BFS/PROB)
        self.kernel_local = self.local_list if self.adaptive is not None else None
        self.states = new_states(conc, depth)

        def remembered(width: int, on: bool):
            shape = (conc, width, depth) if on else (1, 1, 1)
            return (np.zeros(shape, np.int32), np.zeros(shape, np.int64),
                    np.zeros(conc, np.int64), np.zeros(conc, np.int64))

        self.remembered = (remembered(depth, bool(self.cfg[C_WINDOWS])),
                           remembered(depth - 1 + n, exact))
        self.loop = np.zeros(LOOP_SIZE, np.int64)
        self.need = np.zeros(conc + 1, np.int64)
        self.run = (self.loop, np.zeros(conc, np.int64), np.zeros(conc, np.int64),
                    np.arange(conc - 1, -1, -1, dtype=np.int64), np.zeros(conc, np.int64),
                    np.zeros(conc, np.int64), np.zeros(conc, np.int64), self.need)
        self.streams: tuple = ()
        self.per_req: tuple = ()
        self.out: tuple = ()

    def drive(self, max_steps: int, report: Callable[[], None],
              more: Callable[[], None] | None = None) -> tuple[float, float]:
        """Run the kernel to the end, ``max_steps`` verify steps per call; returns its CPU and
        wall seconds (compiling or loading it excluded: the first call runs nothing).

        Between calls the tries asked for are grown, ``more()`` takes more requests when the
        kernel ran out of those given (then ``report()``), and ``report()`` follows a pause."""
        first = True
        cpu = wall = 0.0
        while True:
            c0 = time.thread_time()
            w0 = time.perf_counter()
            code = replay_kernel(self.streams, self.cfg, self.trie.bundle, self.kernel_local,
                                 self.states, self.remembered, self.run, self.per_req, self.out,
                                 BUCKET_COUNTS, 0 if first else max_steps, self.adaptive,
                                 self.prob, self.corpora)
            if first:
                first = False
            else:
                cpu += time.thread_time() - c0
                wall += time.perf_counter() - w0
            if code == DONE:
                return cpu, wall
            if code == NEED_ROOM:
                wall += self._make_room()
            elif code == NEED_REQUESTS and more is not None:
                more()
                report()
            elif code == PAUSED:
                report()
            else:
                raise AssertionError(f"replay kernel failed with code {code}")

    def _make_room(self) -> float:
        """Grow the tries the kernel asked room in (``need``: the shared trie's nodes, then
        each slot's own); returns the seconds it took."""
        w0 = time.perf_counter()
        need = self.need
        _grow(self.trie, int(need[0]))
        for s in np.flatnonzero(need[1:]):
            self.local[s].reserve_whole(int(need[1 + s]))
            _set_slot(self.local_list, int(s), self.local[s].bundle)
        return time.perf_counter() - w0


def _set_slot(local_list, i: int, bundle) -> None:
    if isinstance(local_list, list):  # without the JIT
        local_list[i] = bundle
    else:
        _list_set(local_list, i, bundle)


def _grow(trie: TrieArrays, want: int) -> None:
    """Grow until ``want`` node slots are allocated (or the trie reached its capacity)."""
    while trie.alloc < min(trie.capacity, want):
        trie.grow()


def _emit_offsets(olen: np.ndarray) -> np.ndarray:
    """Where each request's per-step record starts: request ``r`` has at most
    ``len(output) - 1`` verify steps (each emits at least one token)."""
    off = np.zeros(olen.size + 1, np.int64)
    np.cumsum(np.maximum(olen - 1, 0), out=off[1:])
    return off


def _bounds(plen: np.ndarray, olen: np.ndarray, config: NgramConfig):
    """Node bounds of each request's inserts at admission (shared, local) and at finish: the
    same as :func:`replay` computes for all requests at once."""
    depth = config.trie_depth
    exact = config.exact_counts or config.local_index
    admitted = olen > 1
    start = plen if not config.index_prompt else np.zeros_like(plen)
    count_len = plen + 1 - np.maximum(0, start - depth + 1)
    zeros = np.zeros(plen.size, np.int64)
    # local_index: the tokens its own index holds at most (the request's whole length, within
    # the own index's window), which it is sized for at admission.
    whole = np.minimum(plen + olen - np.maximum(0, start - depth + 1), config.own_window)
    adm_local = np.where(admitted, whole, 0) if config.local_index else zeros
    if exact and not config.local_index:
        adm_shared = np.where(admitted, count_len * depth, 0)
    elif config.index_prompt and not exact:
        adm_shared = np.where(admitted, plen * depth, 0)
    else:
        adm_shared = zeros
    if config.local_index and config.exact_counts:
        fin_start = start if config.shared_prompt_window is None else \
            np.maximum(start, plen - config.shared_prompt_window)
        fin = np.where(admitted, (plen + olen - np.maximum(0, fin_start - depth + 1)) * depth, 0)
    else:
        fin = zeros
    return tuple(np.ascontiguousarray(a, np.int64) for a in (adm_shared, adm_local, fin))


def replay(prompts: Sequence[np.ndarray], outputs: Sequence[np.ndarray], config: NgramConfig,
           *, concurrency: int, progress: ProgressFn | None = None,
           costs: object = None, corpora: Sequence = ()) -> ReplayOutput:
    """Replay the serving loop of :mod:`ngramspec.simulate` over recorded streams, compiled.

    Parameters
    ----------
    prompts, outputs : sequences of 1-D int32 arrays
        Per request (in admission order), its prompt and recorded greedy output tokens.
    config : NgramConfig
        Any configuration (both profiles, every match type and option).
    concurrency : int
        Requests decoded together (>= 1); more than the number of requests is clamped to it.
    progress : callable(done, total), optional
        Called now and then with output tokens replayed so far and in total.
    costs : CostTable or CostModel, optional
        The step costs of ``min_expected_accept="auto"`` (required there).
    corpora : sequence of FlatAutomaton, optional
        External corpora loaded before the traffic, in SGLang's merge order
        (``NgramCache.corpora()`` order), built for ``config``'s match type.

    Returns
    -------
    ReplayOutput
        Per-request emitted and draft counts, batch steps and timings; equal, step for step,
        to the :class:`~ngramspec.Drafter` replay of the same configuration.  With corpora
        also the accepted draft tokens by source (a budget too small to split among the
        corpora drafts from the trie alone: all the trie's).
    """
    n_req = len(prompts)
    if n_req != len(outputs):
        raise ValueError(f"prompts and outputs differ in length ({n_req} != {len(outputs)})")
    conc = max(1, min(int(concurrency), max(n_req, 1)))
    p_flat, p_off = _pack(prompts)
    o_flat, o_off = _pack(outputs)
    plen = np.diff(p_off)
    olen = np.diff(o_off)
    n = config.draft_token_num
    # External corpora: SGLang's budget split (spec §3.6.7), the same for the whole run.
    k = len(corpora)
    per = min(config.external_sam_budget, config.budget) // k if k else 0
    corpus_args = None
    if per:
        corpus_args = replay_corpora(list(corpora), per, config.budget - per * k, n=n,
                                     max_depth=config.trie_depth,
                                     min_breadth=config.min_bfs_breadth,
                                     max_breadth=config.max_bfs_breadth,
                                     prob=config.match_type == "PROB", rows=conc,
                                     requests=n_req)
    run = _Run(config, conc, costs, corpus_args)
    adm_shared, adm_local, fin = _bounds(plen, olen, config)
    loop = run.loop
    loop[L_LEFT] = int(np.maximum(olen - 1, 0).sum())
    loop[L_ADMLEFT] = int(adm_shared.sum())
    loop[L_FINLEFT] = int(fin.sum())
    out_len = np.zeros(n_req, np.int64)
    em_off = _emit_offsets(olen)
    em_steps = np.zeros(n_req, np.int64)
    em_count = np.zeros(int(em_off[-1]), np.int32)
    em_drafts = np.zeros(int(em_off[-1]), np.int32)
    run.streams = (p_flat, p_off, o_flat, o_off)
    run.per_req = (out_len, adm_shared, adm_local, fin)
    run.out = (em_off, em_steps, em_count, em_drafts)
    total_tokens = int(o_off[-1])

    def report() -> None:
        if progress is not None:
            progress(int(out_len.sum()), total_tokens)

    cpu, wall = run.drive(_CHUNK_STEPS if progress is not None else np.iinfo(np.int64).max,
                          report)
    if progress is not None:
        progress(total_tokens, total_tokens)
    emitted = [em_count[em_off[r]:em_off[r] + em_steps[r]].copy() for r in range(n_req)]
    drafts = [em_drafts[em_off[r]:em_off[r] + em_steps[r]].copy() for r in range(n_req)]
    by_source = None
    if corpus_args is not None:
        by_source = corpus_args[5]
    elif k:  # corpora loaded, but no budget for them: every accepted draft is the trie's
        by_source = np.zeros((n_req, 1 + k), np.int64)
        by_source[:, 0] = [int(e.sum()) - e.size for e in emitted]
    return ReplayOutput(emitted, drafts, int(loop[L_STEPS]), cpu, wall, conc, by_source)


# --- streaming: requests admitted from an iterator ----------------------------------------


def replay_stream(requests: Iterable[tuple[np.ndarray, np.ndarray]], config: NgramConfig, *,
                  concurrency: int,
                  on_finish: Callable[[int, np.ndarray, np.ndarray], None],
                  chunk: int = 4096, progress: ProgressFn | None = None,
                  costs: Any = None) -> ReplayOutput:
    """:func:`replay` over requests taken from an iterator as the loop admits them.

    Only the requests admitted and not yet finished, and the next ``chunk`` or so, are held
    (with the tries): the kernel stops at the top of an iteration whose admissions would look
    past the requests given (NEED_REQUESTS), the finished ones are handed to ``on_finish``
    and dropped, the others renumbered, and more are read.  The result is the same as
    :func:`replay` on all requests at once, request for request and step for step.

    Parameters
    ----------
    requests : iterable of (prompt, output) 1-D int32 arrays
        In admission order.
    config, concurrency
        As :func:`replay` (the concurrency is clamped to the number of requests when the
        iterator holds fewer than it, as there).
    on_finish : callable(index, emitted, drafts)
        Called once per request (``index``: its position in ``requests``), soon after it
        finished, with its per-step emitted tokens and draft nodes (int32 arrays).
    chunk : int
        Requests read at a time (at least the concurrency).
    progress : callable(done, total), optional
        Output tokens replayed so far and read so far.
    costs : CostTable or CostModel, optional
        As :func:`replay` (``min_expected_accept="auto"``).

    Returns
    -------
    ReplayOutput
        Its ``emitted`` and ``drafts`` are empty (they went to ``on_finish``).
    """
    win = _Window(requests, config, max(int(chunk), int(concurrency), 1), on_finish)
    win.read()
    conc = max(1, min(int(concurrency), max(win.n_read, 1))) if win.exhausted else \
        int(concurrency)
    run = win.run = _Run(config, conc, costs, None)
    loop = run.loop
    if not win.exhausted:  # until the last request is read, eviction is never ruled out
        loop[L_ADMLEFT] += win.unknown
    win.rebuild()

    def report() -> None:
        if progress is not None:
            progress(win.done_tokens + int(win.out_len.sum()), win.tokens_read)

    def more() -> None:
        win.compact()
        win.read()
        win.rebuild()

    cpu, wall = run.drive(_CHUNK_STEPS if progress is not None else np.iinfo(np.int64).max,
                          report, more)
    win.compact()
    if progress is not None:
        progress(win.tokens_read, win.tokens_read)
    return ReplayOutput([], [], int(loop[L_STEPS]), cpu, wall, conc)


class _Window:
    """A streaming replay's requests read and not yet handed over (``p``, ``o``: prompts and
    outputs; ``g``: their positions in the iterator), and per request what the loop did so
    far (output length, verify steps and their counts), carried across the kernel's arrays
    as requests are read (:meth:`rebuild`) and finished ones dropped (:meth:`compact`)."""

    def __init__(self, requests: Iterable, config: NgramConfig, chunk: int,
                 on_finish: Callable[[int, np.ndarray, np.ndarray], None]) -> None:
        self.it, self.config, self.chunk, self.on_finish = iter(requests), config, chunk, \
            on_finish
        self.p: list[np.ndarray] = []
        self.o: list[np.ndarray] = []
        self.g: list[int] = []
        self.n_read = self.tokens_read = self.done_tokens = 0
        self.exhausted = False
        self.run: Any = None
        # The node bound of admissions not read yet: more than the shared trie holds.
        self.unknown = config.capacity + 1
        self.out_len = np.zeros(0, np.int64)
        self.em_steps = np.zeros(0, np.int64)
        self.em_count = np.zeros(0, np.int32)
        self.em_drafts = np.zeros(0, np.int32)
        self.em_off = np.zeros(1, np.int64)
        self.n_old = 0  # window requests whose bounds are already in the loop's totals

    def read(self) -> None:
        for _ in range(self.chunk):
            item = next(self.it, None)
            if item is None:
                self.exhausted = True
                return
            p, o = item
            self.p.append(np.ascontiguousarray(p, np.int32))
            self.o.append(np.ascontiguousarray(o, np.int32))
            self.g.append(self.n_read)
            self.n_read += 1
            self.tokens_read += self.o[-1].size

    def rebuild(self) -> None:
        """The kernel's arrays of the window, what the carried requests did so far kept."""
        run, loop, n_old = self.run, self.run.loop, self.n_old
        p_flat, p_off = _pack(self.p)
        o_flat, o_off = _pack(self.o)
        plen, olen = np.diff(p_off), np.diff(o_off)
        adm_shared, adm_local, fin = _bounds(plen, olen, self.config)
        loop[L_LEFT] += int(np.maximum(olen[n_old:] - 1, 0).sum())
        loop[L_ADMLEFT] += int(adm_shared[n_old:].sum())
        loop[L_FINLEFT] += int(fin[n_old:].sum())
        if self.exhausted and loop[L_MORE]:
            loop[L_ADMLEFT] -= self.unknown
        loop[L_MORE] = 0 if self.exhausted else 1
        new_off = _emit_offsets(olen)
        new_count = np.zeros(int(new_off[-1]), np.int32)
        new_drafts = np.zeros(int(new_off[-1]), np.int32)
        new_steps = np.zeros(len(self.p), np.int64)
        new_len = np.zeros(len(self.p), np.int64)
        em_off, em_steps = self.em_off, self.em_steps
        for w in range(n_old):  # requests carried over keep what they did so far
            k = em_steps[w]
            new_count[new_off[w]:new_off[w] + k] = self.em_count[em_off[w]:em_off[w] + k]
            new_drafts[new_off[w]:new_off[w] + k] = self.em_drafts[em_off[w]:em_off[w] + k]
        new_steps[:n_old] = em_steps[:n_old]
        new_len[:n_old] = self.out_len[:n_old]
        self.out_len, self.em_steps, self.em_count, self.em_drafts, self.em_off = (
            new_len, new_steps, new_count, new_drafts, new_off)
        self.n_old = len(self.p)
        run.streams = (p_flat, p_off, o_flat, o_off)
        run.per_req = (self.out_len, adm_shared, adm_local, fin)
        run.out = (self.em_off, self.em_steps, self.em_count, self.em_drafts)

    def compact(self) -> None:
        """Hand the finished requests over, drop them and renumber the others."""
        loop = self.run.loop
        run_req, fin_req = self.run.run[1], self.run.run[4]
        nxt, nrun, nfin = int(loop[L_NEXT]), int(loop[L_NRUN]), int(loop[L_NFIN])
        busy = set(run_req[:nrun].tolist()) | set(fin_req[:nfin].tolist())
        em_off, em_steps, em_count, em_drafts = (self.em_off, self.em_steps, self.em_count,
                                                 self.em_drafts)
        keep = []
        for w in range(len(self.p)):
            if w < nxt and w not in busy:
                k = em_steps[w]
                self.on_finish(self.g[w], em_count[em_off[w]:em_off[w] + k].copy(),
                               em_drafts[em_off[w]:em_off[w] + k].copy())
                self.done_tokens += self.o[w].size
            else:
                keep.append(w)
        new_index = np.full(len(self.p) + 1, -1, np.int64)
        new_index[keep] = np.arange(len(keep))
        run_req[:nrun] = new_index[run_req[:nrun]]
        fin_req[:nfin] = new_index[fin_req[:nfin]]
        loop[L_NEXT] = sum(1 for w in keep if w < nxt)
        self.p[:] = [self.p[w] for w in keep]
        self.o[:] = [self.o[w] for w in keep]
        self.g[:] = [self.g[w] for w in keep]
        idx = np.asarray(keep, np.int64)
        k_steps = em_steps[idx]
        k_off = np.zeros(len(keep) + 1, np.int64)
        np.cumsum(k_steps, out=k_off[1:])
        k_count = np.zeros(int(k_off[-1]), np.int32)
        k_drafts = np.zeros(int(k_off[-1]), np.int32)
        for j, w in enumerate(keep):
            k_count[k_off[j]:k_off[j + 1]] = em_count[em_off[w]:em_off[w] + k_steps[j]]
            k_drafts[k_off[j]:k_off[j + 1]] = em_drafts[em_off[w]:em_off[w] + k_steps[j]]
        self.out_len, self.em_steps, self.em_count, self.em_drafts, self.em_off = (
            self.out_len[idx], k_steps, k_count, k_drafts, k_off)
        self.n_old = len(keep)
