"""Greedy replay of recorded streams for any *tree proposer*, with pooled metrics.

A tree proposer drafts a token tree per decode step; the target verifies it greedily.  Because
the recorded streams were produced under greedy decoding, the target's argmax along the
recorded path is simply the next recorded token, so the serving loop replays exactly without
the model.  The protocol (duck-typed; :class:`TreeProposer` documents it):

- ``start(rid, prompt, first_token)``: admission, after the prefill emitted ``first_token``;
- ``propose(rid, context) -> (tokens, parents)``: the draft tree WITHOUT its root (the root is
  the context's last token), as two 1-D integer arrays of equal length; ``parents[i]`` is the
  index of node ``i``'s parent in these arrays, ``-1`` for a child of the root, and
  ``parents[i] < i``.  ``context`` is prompt + output so far (a read-only int32 view);
- ``on_accept(rid, emitted)``: the tokens the step emitted (accepted drafts + bonus);
- ``stop(rid)``: the request is done.

A proposer may also set ``last_real`` after each ``propose``: how many of the nodes it sent
are real drafts (the rest is padding).  SGLang always sends ``draft_token_num - 1`` nodes and
pads with token-0 children of the root; the padding is verified like any node (an accepted 0
counts, as in SGLang), so it is both *sent* and, here, counted apart from the real drafts.

Replay at concurrency 1, one request after the other, in file order (as SGLang serves them):

    out = [output_ids[0]]                          # the prefill's token; start(...)
    until out == output_ids:
        tokens, parents = propose(rid, prompt + out)
        node = root; accepted = []
        for the next recorded token t:             # greedy verification
            the first child c of node (in array order) with tokens[c] == t?  accept, node = c
            none: stop
        emitted = accepted + [next recorded token]  (cut at the end of the recording)
        on_accept(rid, emitted); out += emitted
    stop(rid)

Metrics are pooled (sums over all steps of all requests of a group, then divided):
tokens/step = emitted tokens / verify steps (the first output token, from the prefill, is not
counted); sent/step = tree nodes sent per step (padding included); real/step = real drafts per
step; share of steps with at least one real draft; drafting CPU time per step (``start``,
``propose``, ``on_accept`` and ``stop``, thread CPU time, divided by the group's steps; a
proposer may set ``last_overhead_ns`` after ``propose`` to exclude its adapter-only work, such
as converting its own tree format into parent arrays).

Proposers here: :class:`NgramspecProposer` (``ns.Drafter``: SGLang 0.5.23 exact by default, any
``NgramConfig`` via ``config=``), ``benchmarks.peers.prompt_lookup.PromptLookupProposer`` and
``benchmarks.peers.arctic.ArcticProposer``; :func:`make_proposer` builds them by name.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from typing import Any, Callable, Hashable, Iterable, Protocol, Sequence

import numpy as np

import ngramspec as ns

from benchmarks.common import load_rows

__all__ = ["TreeProposer", "NgramspecProposer", "RequestStats", "GroupStats", "greedy_accept",
           "replay_request", "replay", "pool", "make_proposer", "load_rows", "PROPOSERS"]


class TreeProposer(Protocol):
    """What :func:`replay` drives (see the module docstring)."""

    name: str

    def start(self, rid: Hashable, prompt: np.ndarray, first_token: int) -> None: ...

    def propose(self, rid: Hashable, context: np.ndarray) -> tuple[np.ndarray, np.ndarray]: ...

    def on_accept(self, rid: Hashable, emitted: np.ndarray) -> None: ...

    def stop(self, rid: Hashable) -> None: ...


def greedy_accept(tokens: np.ndarray, parents: np.ndarray, target: np.ndarray) -> int:
    """How many leading tokens of ``target`` the tree accepts: from the root, repeatedly the
    first child (in array order) whose token is the next target token."""
    toks = tokens.tolist()
    pars = parents.tolist()
    node, acc, n_target = -1, 0, len(target)
    while acc < n_target:
        want = int(target[acc])
        for i in range(node + 1, len(toks)):  # children come after their parent
            if pars[i] == node and toks[i] == want:
                node = i
                acc += 1
                break
        else:
            break
    return acc


def _check_tree(tokens: np.ndarray, parents: np.ndarray, who: str) -> None:
    if tokens.ndim != 1 or parents.shape != tokens.shape:
        raise ValueError(f"{who}: propose must return two 1-D arrays of equal length, got "
                         f"shapes {tokens.shape} and {parents.shape}")
    if parents.size and (parents.min() < -1 or np.any(parents >= np.arange(parents.size))):
        raise ValueError(f"{who}: parents must satisfy -1 <= parents[i] < i, got "
                         f"{parents.tolist()}")


@dataclass
class RequestStats:
    """One request's replay: per-step arrays and its drafting CPU time."""

    id: Hashable
    task: str
    emitted: np.ndarray      # (steps,) tokens emitted per step
    sent: np.ndarray         # (steps,) tree nodes sent per step (padding included)
    real: np.ndarray         # (steps,) real drafts per step
    draft_ns: int            # thread CPU time in start/propose/on_accept/stop
    propose_ns: int = 0      # of which in propose


@dataclass
class GroupStats:
    """Pooled figures over a group of requests."""

    requests: int
    steps: int                      # verify steps (the prefill's token is not one)
    emitted_tokens: int             # accepted drafts + bonus tokens, over all steps
    tokens_per_step: float          # emitted_tokens / steps
    sent_per_step: float            # tree nodes sent, padding included
    real_per_step: float            # real drafts (padding excluded)
    accepted_per_step: float        # tokens_per_step - 1: the accepted drafts
    share_steps_with_draft: float   # steps with at least one real draft / steps
    draft_us_per_step: float        # drafting thread CPU time (start/propose/accept/stop)
    propose_us_per_step: float      # of which in propose

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def replay_request(proposer: TreeProposer, row: dict, *, check: bool = True) -> RequestStats:
    """Replay one recorded request through ``proposer`` (see the module docstring)."""
    rid = row["id"]
    prompt = np.asarray(row["prompt_ids"], dtype=np.int32)
    output = np.asarray(row["output_ids"], dtype=np.int32)
    full = np.concatenate([prompt, output])
    full.setflags(write=False)
    plen, olen = prompt.size, output.size
    who = getattr(proposer, "name", type(proposer).__name__)
    clock = time.thread_time_ns
    emitted, sent, real = [], [], []
    t0 = clock()
    proposer.start(rid, prompt, int(output[0]))
    draft_ns = clock() - t0
    propose_ns = 0
    done = 1
    while done < olen:
        t0 = clock()
        tokens, parents = proposer.propose(rid, full[:plen + done])
        t1 = clock()
        tokens = np.asarray(tokens)
        parents = np.asarray(parents)
        if check:
            _check_tree(tokens, parents, who)
        n_real = getattr(proposer, "last_real", None)
        t1 -= getattr(proposer, "last_overhead_ns", 0)   # adapter-only work, not drafting
        acc = greedy_accept(tokens, parents, output[done:])
        step = output[done:done + acc + 1]        # accepted + bonus, cut at the end
        t2 = clock()
        proposer.on_accept(rid, step)
        t3 = clock()
        propose_ns += t1 - t0
        draft_ns += (t1 - t0) + (t3 - t2)
        emitted.append(step.size)
        sent.append(tokens.size)
        real.append(tokens.size if n_real is None else int(n_real))
        done += step.size
    t0 = clock()
    proposer.stop(rid)
    draft_ns += clock() - t0
    return RequestStats(rid, str(row.get("task", "")), np.asarray(emitted, np.int64),
                        np.asarray(sent, np.int64), np.asarray(real, np.int64), draft_ns,
                        propose_ns)


def replay(proposer: TreeProposer, rows: Iterable[dict], *, check: bool = True) -> list[RequestStats]:
    """Replay every request, one after the other (concurrency 1), on one proposer."""
    return [replay_request(proposer, row, check=check) for row in rows]


def pool(stats: Sequence[RequestStats]) -> GroupStats:
    """Pooled figures: sums over all steps of all these requests, then ratios."""
    em = np.concatenate([s.emitted for s in stats]) if stats else np.zeros(0, np.int64)
    steps = int(em.size)
    if steps == 0:
        nan = float("nan")
        return GroupStats(len(stats), 0, 0, nan, nan, nan, nan, nan, nan, nan)
    sent = sum(int(s.sent.sum()) for s in stats)
    real = sum(int(s.real.sum()) for s in stats)
    with_draft = sum(int(np.count_nonzero(s.real)) for s in stats)
    total = int(em.sum())
    dns = sum(s.draft_ns for s in stats)
    pns = sum(s.propose_ns for s in stats)
    return GroupStats(len(stats), steps, total, total / steps, sent / steps, real / steps,
                      (total - steps) / steps, with_draft / steps, dns / steps / 1e3,
                      pns / steps / 1e3)


def pool_by(stats: Sequence[RequestStats], key: Callable[[RequestStats], str] = lambda s: s.task
            ) -> dict[str, GroupStats]:
    """Pooled figures per group (task by default, sorted) and ``"overall"`` last."""
    groups: dict[str, list[RequestStats]] = {}
    for s in stats:
        groups.setdefault(key(s), []).append(s)
    out = {g: pool(groups[g]) for g in sorted(groups)}
    out["overall"] = pool(stats)
    return out


class NgramspecProposer:
    """ngramspec's :class:`ns.Drafter` as a tree proposer: SGLang 0.5.23's worker bookkeeping
    (server defaults unless ``config`` says otherwise).

    Parameters
    ----------
    config : ns.NgramConfig, optional
        Any configuration ``ns.Drafter`` accepts (new drafting options included); keyword
        arguments instead build ``ns.NgramConfig(**kwargs)``.
    send : {"all", "real"}
        ``"all"`` (SGLang): send every slot of the tree, padding included (``draft_token_num
        - 1`` nodes); ``"real"``: send only the ``num_drafts`` real drafts (slots
        ``1..num_drafts``, which come first in SGLang's level order).
    drafter : callable(config=config) -> Drafter-like, optional
        Build the drafter from the config (default ``ns.Drafter``): lets a different drafter
        with the same ``add_request`` / ``propose`` / ``accept`` / ``finish`` calls plug in.

    ``context`` is ignored: the drafter keeps each request's sequence itself (its tail must
    equal the replayed context; checked when ``check_context`` is true).
    """

    def __init__(self, config: ns.NgramConfig | None = None, *, send: str = "all",
                 drafter: Callable[[Any], Any] | None = None, check_context: bool = False,
                 name: str | None = None, **config_kw: Any) -> None:
        if config is not None and config_kw:
            raise TypeError("pass either config or NgramConfig keywords, not both")
        if send not in ("all", "real"):
            raise ValueError(f"send must be 'all' or 'real', got {send!r}")
        if config is None:
            if config_kw.pop("recommended", False):
                config = ns.NgramConfig.recommended(**config_kw)
            else:
                config = ns.NgramConfig(**config_kw) if config_kw else ns.NgramConfig()
        self.config = config
        self.send = send
        self.check_context = check_context
        self.drafter = (drafter or ns.Drafter)(config=config)
        self.name = name or f"ngramspec {getattr(config, 'match_type', '')}".strip()
        self.last_real: int | None = None
        self.last_overhead_ns = 0
        self.last_batch = None

    def start(self, rid, prompt, first_token) -> None:
        self.drafter.add_request(rid, prompt, int(first_token))

    def propose(self, rid, context):
        if self.check_context:
            seq = self.drafter.sequence(rid)
            assert np.array_equal(seq, context), "drafter and replay disagree on the context"
        batch = self.drafter.propose([rid])
        t0 = time.thread_time_ns()
        self.last_batch = batch
        k = int(batch.num_drafts[0])
        self.last_real = k
        end = batch.draft_token_num if self.send == "all" else 1 + k
        tokens = batch.tokens[0, 1:end]
        parents = batch.parents[0, 1:end] - 1    # slot 0 (root) -> -1
        # Turning the mask into parent indices is this adapter's work, not the drafter's.
        self.last_overhead_ns = time.thread_time_ns() - t0
        return tokens, parents

    def on_accept(self, rid, emitted) -> None:
        self.drafter.accept({rid: emitted})

    def stop(self, rid) -> None:
        self.drafter.finish(rid)


def _prompt_lookup(**kw):
    from .prompt_lookup import PromptLookupProposer
    return PromptLookupProposer(**kw)


def _arctic(**kw):
    from .arctic import ArcticProposer
    return ArcticProposer(**kw)


class SglangCppProposer:
    """SGLang 0.5.23's C++ core itself (:mod:`benchmarks.peers.sglang`), driven as its worker
    drives it: match the last ``max_trie_depth`` tokens statefully, then insert that window.

    ``c_ns`` accumulates the wall time spent inside its C entry points only, on inputs packed
    beforehand (its insert hands work to a thread, which a thread-CPU clock would miss)."""

    name = "SGLang C++"

    def __init__(self, match_type: str = "BFS", capacity: int = 2_000_000) -> None:
        from .sglang import SglangPeer
        self.peer = SglangPeer(match_type=match_type, capacity=capacity)
        self.depth = self.peer.depth
        self.c_ns = 0
        self.last_overhead_ns = 0
        self._window: dict = {}

    def start(self, rid, prompt, first_token) -> None:
        pass  # prefill neither matches nor inserts

    def propose(self, rid, context):
        t0 = time.thread_time_ns()
        ctx = np.ascontiguousarray(context[-self.depth:], dtype=np.int32)
        self._window[rid] = ctx
        packed = self.peer.pack_match([ctx], [rid], [len(context)])
        w0 = time.perf_counter_ns()
        self.peer.match_packed(packed)
        self.c_ns += time.perf_counter_ns() - w0
        tokens, mask = packed[5][0], packed[6][0].astype(bool)
        strict = mask & np.tri(mask.shape[0], mask.shape[0], -1, dtype=bool)
        parents = np.where(strict.any(1), mask.shape[0] - 1 - np.argmax(strict[:, ::-1], 1), -1)
        self.last_overhead_ns = time.thread_time_ns() - t0
        return tokens[1:], parents[1:] - 1

    def on_accept(self, rid, emitted) -> None:
        packed = self.peer.pack_insert([self._window[rid]])
        w0 = time.perf_counter_ns()
        self.peer.insert_packed(packed)
        self.c_ns += time.perf_counter_ns() - w0

    def stop(self, rid) -> None:
        self.peer.erase([rid])
        self._window.pop(rid, None)


#: name -> factory(**settings).
PROPOSERS: dict[str, Callable[..., TreeProposer]] = {
    "ngramspec": NgramspecProposer,
    "sglang_cpp": SglangCppProposer,
    "prompt_lookup": _prompt_lookup,
    "arctic": _arctic,
}


def make_proposer(name: str, **settings: Any) -> TreeProposer:
    """A fresh proposer by name (``"ngramspec"``, ``"prompt_lookup"``, ``"arctic"``)."""
    if name not in PROPOSERS:
        raise ValueError(f"unknown proposer {name!r}; known: {sorted(PROPOSERS)}")
    return PROPOSERS[name](**settings)
