"""ngramspec's vLLM proposer against vLLM 0.33's own n-gram proposer, driven as vLLM's model
runner drives them, on the hold-out part of the shipped streams.

:class:`BatchSim` plays vLLM's persistent input batch (``vllm/v1/worker/gpu_input_batch.py``)
over recorded greedy streams: at most ``concurrency`` requests run; a finished (or aborted)
request's row is freed, a new request fills the smallest freed row (else is appended), and
``condense`` moves the last rows into the freed rows left.  Each step verifies every decoding
row's drafts against its recording (greedy: the accepted prefix + the recorded bonus token),
writes the emitted tokens into ``token_ids_cpu`` and ``num_tokens_no_spec``, and calls the
proposer with ``(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` as the runner calls it
after its bookkeeping.  A new request's first step is its prefill (its first recorded token;
optionally one more step of a partial prefill, with nothing sampled).

Measured per proposer, k (``num_speculative_tokens``) in 3..7 and concurrency 1, 8 and 48:
tokens per verify step (emitted tokens over decode steps, pooled over requests) and the CPU
time of ``propose`` per request per call (median over calls; batch 1 is concurrency 1's calls
with one row, batch 48 concurrency 48's calls with 48 rows).  The proposers:

- ``ngramspec``: :class:`ngramspec.integrations.vllm.Proposer` with its default configuration
  (the ``chain`` preset with ``draft_token_num = k + 1``, tuned on the tuning part:
  ``benchmarks/studies/tune_chain.py``);
- ``vllm 5-5``: the wheel's ``NgramProposer`` with vLLM's defaults (``prompt_lookup_min =
  prompt_lookup_max = 5``);
- ``vllm 2-5``: ``prompt_lookup_min=2, prompt_lookup_max=5`` (a common user setting);
- ``vllm 1-3``: ``prompt_lookup_min=1, prompt_lookup_max=3``.

vLLM's files come from its PyPI wheel through :mod:`benchmarks.peers.vllm`.  Timings are on a
shared machine: medians of single calls.

    python -m benchmarks.studies.vllm_proposer                 # the table
    python -m benchmarks.studies.vllm_proposer --k 5 --json out.json
    python -m benchmarks.studies.vllm_proposer --preset recommended
    python -m benchmarks.studies.vllm_proposer --k 5 --concurrency 1 8 48 --costs
    python -m benchmarks.studies.vllm_proposer --preset recommended --k 5 --length 16384 \
        --requests 48 --concurrency 1 16 48
"""

from __future__ import annotations

import argparse
import json
import time
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from ngramspec.sweep.split import split_streams

#: vLLM's n-gram settings compared (label, prompt_lookup_min, prompt_lookup_max).
VLLM_SETTINGS = (("vllm 5-5", 5, 5), ("vllm 2-5", 2, 5), ("vllm 1-3", 1, 3))
KS = (3, 4, 5, 6, 7)
CONCURRENCY = (1, 8, 48)
MAX_MODEL_LEN = 2048

Propose = Callable[[list, np.ndarray, np.ndarray], list]


@dataclass
class Request:
    sid: int
    prompt: np.ndarray
    out: np.ndarray
    pos: int = 0                      # output tokens emitted so far
    prefill_wait: int = 0             # partial-prefill steps left (nothing sampled)
    drafts: list = field(default_factory=list)
    aborted: bool = False

    @property
    def done(self) -> bool:
        return self.aborted or self.pos >= self.out.size


@dataclass
class Call:
    """One ``propose`` call: the stream id of each row (``-1``: none), what each row sampled,
    the drafts returned, the streams that left the batch and those that emitted their first
    token before it, the call's time (s)."""
    rows: list
    sampled: list
    drafts: list
    gone: list
    first: list
    seconds: float


@dataclass
class Run:
    emitted: list = field(default_factory=list)   # tokens per decode step
    sent: list = field(default_factory=list)      # drafts verified per decode step
    seconds: list = field(default_factory=list)   # per call
    rows: list = field(default_factory=list)      # rows drafting per call
    steps: list = field(default_factory=list)     # per step: (decoding rows, tokens, emitted)

    @property
    def tokens_per_step(self) -> float:
        return float(np.sum(self.emitted) / len(self.emitted))

    def us_per_request(self, batch: int | None = None) -> float:
        """Median time per request per call (µs), over calls with ``batch`` rows (any)."""
        s, r = np.array(self.seconds), np.array(self.rows)
        keep = (r > 0) if batch is None else (r == batch)
        return float(np.median(s[keep] / r[keep]) * 1e6) if keep.any() else float("nan")

    def speed_up(self, table: Any) -> float:
        """Predicted speed-up of the decode steps under vLLM's pricing, drafting left out:
        a step of ``b`` decoding rows scheduling ``T`` tokens costs ``t(b, T / b)`` (linear
        between integer token counts), against ``t(b, 1)`` per plain decode step."""
        b, t, e = (np.array(x, np.float64) for x in zip(*self.steps))
        x = t / b
        lo = np.floor(x)
        hi = np.minimum(lo + 1, table.tokens[-1])
        w = x - lo
        spec = (1 - w) * table.ms_array(b, lo) + w * table.ms_array(b, hi)
        return float((e.sum() / spec.sum()) / (b.sum() / table.ms_array(b, np.ones_like(b)).sum()))


class BatchSim:
    """vLLM's persistent input batch over recorded greedy streams (see the module docstring).

    Parameters
    ----------
    streams : list of dicts with ``prompt_ids`` and ``output_ids``
        Admitted in this order; outputs are cut so that prompt + output fit ``max_model_len``.
    concurrency : int
        Requests in the batch at most (the rows).
    max_model_len : int
        ``token_ids_cpu``'s width; no request grows past it.
    abort : float
        Chance per decode step that a request is aborted (leaves the batch at the next step).
    partial_prefill : float
        Chance that a new request spends one step in a partial prefill (nothing sampled).
    max_output : int, optional
        Cut every output to this many tokens.
    seed : int
        The random draws' seed.
    """

    def __init__(self, streams: Sequence[dict], *, concurrency: int,
                 max_model_len: int = MAX_MODEL_LEN, abort: float = 0.0,
                 partial_prefill: float = 0.0, max_output: int | None = None,
                 seed: int = 0) -> None:
        self.queue: list[Request] = []
        for sid, s in enumerate(streams):
            prompt = np.asarray(s["prompt_ids"], np.int32)
            if prompt.size + 1 > max_model_len:
                continue
            out = np.asarray(s["output_ids"], np.int32)[:max_model_len - prompt.size]
            if max_output is not None:
                out = out[:max_output]
            if out.size:
                self.queue.append(Request(sid, prompt, out))
        self.concurrency = concurrency
        self.max_model_len = max_model_len
        self.abort, self.partial = abort, partial_prefill
        self.rng = np.random.default_rng(seed)
        self.ctx = np.zeros((concurrency, max_model_len), np.int32)
        self.n = np.zeros(concurrency, np.int32)

    def run(self, propose: Propose, k: int, *, on_call: Callable[[Call], None] | None = None
            ) -> Run:
        """Drive ``propose(sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` until every
        stream has finished; checks each returned draft list (at most ``k`` ints, none past
        ``max_model_len``)."""
        rows: list[Request | None] = []
        queue = list(self.queue)
        res = Run()
        ctx, n = self.ctx, self.n
        while queue or rows:
            # Scheduler: finished and aborted requests leave, new ones fill freed rows.
            removed = sorted(i for i, r in enumerate(rows) if r is not None and r.done)
            gone = [rows[i].sid for i in removed]
            for i in removed:
                rows[i] = None
            active = sum(r is not None for r in rows)
            while queue and active < self.concurrency:
                req = queue.pop(0)
                req.prefill_wait = int(self.rng.random() < self.partial)
                i = removed.pop(0) if removed else len(rows)
                if i == len(rows):
                    rows.append(None)
                rows[i] = req
                ctx[i, :req.prompt.size] = req.prompt
                n[i] = req.prompt.size
                active += 1
            # condense: the last occupied row moves into the smallest hole.
            while removed:
                last = max(i for i, r in enumerate(rows) if r is not None) if active else -1
                hole = removed[0]
                if hole >= last:
                    break
                removed.pop(0)
                rows[hole], rows[last] = rows[last], None
                ctx[hole, :n[last]] = ctx[last, :n[last]]
                n[hole] = n[last]
            while rows and rows[-1] is None:
                rows.pop()
            if not rows:
                continue
            # The forward: prefill or verify every row, then the runner's bookkeeping.
            sampled: list[list[int]] = []
            first = []
            decoding = scheduled = produced = 0
            for i, req in enumerate(rows):
                assert req is not None
                if req.prefill_wait:
                    req.prefill_wait -= 1
                    sampled.append([])
                    continue
                if req.pos == 0:
                    em = req.out[:1]
                    first.append(req.sid)
                else:
                    d, ref = req.drafts, req.out[req.pos:]
                    a = 0
                    while a < len(d) and a < ref.size - 1 and d[a] == ref[a]:
                        a += 1
                    em = ref[:a + 1]
                    res.emitted.append(int(em.size))
                    res.sent.append(len(d))
                    decoding += 1
                    scheduled += len(d) + 1
                    produced += int(em.size)
                    if self.abort and self.rng.random() < self.abort:
                        req.aborted = True
                req.pos += em.size
                ctx[i, n[i]:n[i] + em.size] = em
                n[i] += em.size
                sampled.append(em.tolist())
            if decoding:
                res.steps.append((decoding, scheduled, produced))
            t0 = time.perf_counter()
            drafts = propose(sampled, n, ctx)
            dt = time.perf_counter() - t0
            res.seconds.append(dt)
            res.rows.append(sum(1 for s in sampled if s))
            if len(drafts) != len(rows):
                raise AssertionError(f"{len(drafts)} draft lists for {len(rows)} rows")
            for i, (req, d) in enumerate(zip(rows, drafts)):
                if type(d) is not list or len(d) > k or any(type(t) is not int for t in d):
                    raise AssertionError(f"row {i}: {d!r} is no list of at most {k} ints")
                if len(d) > self.max_model_len - int(n[i]):
                    raise AssertionError(f"row {i}: {len(d)} drafts past max_model_len")
                req.drafts = d
            if on_call is not None:
                on_call(Call([r.sid for r in rows], sampled, drafts, gone, first, dt))
        return res


def vllm_config(k: int, *, max_num_seqs: int, max_model_len: int = MAX_MODEL_LEN,
                model: str | None = None, min_n: int = 5, max_n: int = 5) -> Any:
    """A stand-in ``VllmConfig`` with the attributes both proposers read."""
    ns = types.SimpleNamespace
    spec = ns(num_speculative_tokens=k, prompt_lookup_min=min_n, prompt_lookup_max=max_n,
              method="custom_class" if model else "ngram", model=model)
    return ns(speculative_config=spec, scheduler_config=ns(max_num_seqs=max_num_seqs),
              model_config=ns(max_model_len=max_model_len),
              parallel_config=ns(tensor_parallel_size=1))


def ours(k: int, concurrency: int, preset: str | None = None, costs: Any = None,
         max_model_len: int = MAX_MODEL_LEN) -> Propose:
    """The proposer's ``propose`` with its default configuration (or ``preset``), cost-aware
    with ``costs``."""
    from ngramspec.integrations.vllm import Proposer

    p = Proposer(vllm_config(k, max_num_seqs=concurrency, max_model_len=max_model_len),
                 config=preset, costs=costs, environ={})
    return p.propose


def cost_tables() -> list[tuple[str, Any]]:
    """The illustrative costs of docs/vllm.md: a forward's fixed time plus a time per token."""
    from ngramspec.costs import CostModel, CostTable

    return [(f"12 ms + {tok} ms/token",
             CostTable.from_model(CostModel(step_ms=12, token_ms=tok), max_batch=48,
                                  max_tokens=8))
            for tok in (0.1, 0.5)]


def priced(rows: Sequence[dict], k: int = 5, concurrency: Sequence[int] = (1, 8, 48),
           preset: str | None = None) -> list[tuple[str, int, str, float, float, float]]:
    """(cost, concurrency, proposer, tokens per step, drafts per step, predicted speed-up) for
    ngramspec without and with the cost table (without ``preset``, the cost-aware default
    has calibrated estimates: shown without the table too), and vLLM's n-gram (5-5 and 1-3),
    at ``k``."""
    from ngramspec.integrations.vllm import default_config

    out = []
    for label, table in cost_tables():
        for c in concurrency:
            calibrated = preset or default_config(k, cost_aware=True)
            makers = [("ngramspec", lambda: ours(k, c, preset)),
                      ("ngramspec calibrated", lambda: ours(k, c, calibrated)),
                      ("ngramspec cost-aware", lambda: ours(k, c, preset, table)),
                      ("vllm 5-5", lambda: theirs(k, c, 5, 5)),
                      ("vllm 1-3", lambda: theirs(k, c, 1, 3))]
            for name, make in makers:
                run = BatchSim(rows, concurrency=c).run(make(), k)
                out.append((label, c, name, run.tokens_per_step,
                            float(np.mean(run.sent)), run.speed_up(table)))
    return out


def theirs(k: int, concurrency: int, min_n: int, max_n: int,
           max_model_len: int = MAX_MODEL_LEN) -> Propose:
    from benchmarks.peers import vllm as peer

    p = peer.ngram_proposer(min_n, max_n, k, max_model_len, max_num_seqs=concurrency)
    return lambda s, n, c: p.propose(k, s, n, c)


def model_len(rows: Sequence[dict]) -> int:
    """``max_model_len`` that holds every stream whole (at least :data:`MAX_MODEL_LEN`)."""
    return max([MAX_MODEL_LEN] + [len(r["prompt_ids"]) + len(r["output_ids"]) + 8
                                  for r in rows])


def measure(rows: Sequence[dict], ks: Sequence[int] = KS,
            concurrency: Sequence[int] = CONCURRENCY, preset: str | None = None,
            max_model_len: int = MAX_MODEL_LEN) -> dict:
    """{(proposer, k, concurrency): (tokens per step, µs per request per call at that
    concurrency's full batch)}."""
    out = {}
    m = max_model_len
    for k in ks:
        for c in concurrency:
            makers = [("ngramspec", lambda: ours(k, c, preset, max_model_len=m))] + [
                (label, lambda lo=lo, hi=hi: theirs(k, c, lo, hi, m))
                for label, lo, hi in VLLM_SETTINGS]
            for label, make in makers:
                run = BatchSim(rows, concurrency=c, max_model_len=m).run(make(), k)
                out[(label, k, c)] = (run.tokens_per_step, run.us_per_request(c))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--k", type=int, nargs="*", default=list(KS))
    ap.add_argument("--concurrency", type=int, nargs="*", default=list(CONCURRENCY))
    ap.add_argument("--part", default="holdout", choices=("tune", "holdout"))
    ap.add_argument("--preset", help="ngramspec's configuration (default: the proposer's)")
    ap.add_argument("--costs", action="store_true",
                    help="also: predicted speed-ups under two illustrative costs, with the "
                         "cost-aware proposer (k = the first --k)")
    ap.add_argument("--length", type=int, default=0,
                    help="prompts lengthened to this many tokens by recorded text in front "
                    "(a document in the context, as benchmarks/studies/long_context.py does; "
                    "0: as recorded)")
    ap.add_argument("--requests", type=int, default=None,
                    help="the first N streams of the part only (long prompts are slow to run)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args(argv)
    from benchmarks.common import load_rows
    from benchmarks.studies.long_context import lengthened

    rows = split_streams(load_rows(), part=args.part)[:args.requests]
    if args.length:
        rows = lengthened(rows, args.length)
    res = measure(rows, args.k, args.concurrency, args.preset, model_len(rows))
    labels = ["ngramspec"] + [lab for lab, _, _ in VLLM_SETTINGS]
    print(f"# {len(rows)} {args.part} streams, prompts "
          f"{'as recorded' if not args.length else f'of {args.length} tokens'}; tokens per "
          "verify step (TPS) and propose's CPU time per request per call (median us at the "
          "concurrency's full batch)")
    head = "k  conc " + "".join(f"{lab:>18}" for lab in labels) + "   TPS ratio vs 5-5 / best vllm"
    print(head)
    for k in args.k:
        for c in args.concurrency:
            cells = [res[(lab, k, c)] for lab in labels]
            best = max(t for t, _ in cells[1:])
            print(f"{k}  {c:4d} " + "".join(f"{t:8.3f} {us:7.1f}us " for t, us in cells)
                  + f"   {cells[0][0] / cells[1][0]:.3f} / {cells[0][0] / best:.3f}")
    print("# CPU ratio ngramspec / vllm 5-5 (us per request per call)")
    for k in args.k:
        for c in args.concurrency:
            print(f"k={k} conc={c}: {res[('ngramspec', k, c)][1] / res[('vllm 5-5', k, c)][1]:.2f}")
    if args.costs:
        print(f"# predicted speed-up of the decode steps (vLLM's pricing, drafting left out), "
              f"k = {args.k[0]}")
        for label, c, name, tps, sent, up in priced(rows, args.k[0], args.concurrency,
                                                    preset=args.preset):
            print(f"{label:22s} conc {c:3d}  {name:22s} {tps:6.3f} tokens/step "
                  f"{sent:5.2f} drafts/step  {up:5.3f}x")
    if args.json:
        args.json.write_text(json.dumps(
            [{"proposer": lab, "k": k, "concurrency": c, "tokens_per_step": t, "us": us}
             for (lab, k, c), (t, us) in res.items()], indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
