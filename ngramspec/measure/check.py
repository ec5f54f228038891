"""Hold the prediction against the real model: ``ngramspec check``.

:func:`check_against_model` decodes recorded streams with a local transformers model, twice
per concurrency level, and times the decode steps:

- **plain**: one decode forward per output token per request, the requests batched;
- **speculative**: :meth:`Drafter.propose <ngramspec.Drafter.propose>`, one forward over the
  draft trees (4-D additive tree mask, tree-depth positions), the verdict, then
  :func:`~ngramspec.verify_greedy`, :meth:`~ngramspec.Drafter.accept` and the KV rows of the
  root and the accepted slots kept (the others dropped).

Decoding is **teacher-forced**: the recorded output token stands in for the model's choice
(the "target argmax" of a slot is the next recorded token where the slot's path follows the
recording), so acceptance is exactly the recording's and the step counts equal the
simulator's, whatever the model's weights.  Every forward still runs on the model with the
real shapes, and its verdict (the argmax over the slots) is read back to the host every step,
as a real loop does; the report also says how often the model's own argmax agreed with the
recording on the accepted path (1.0 for streams recorded greedily with this model, up to
numerical near-ties).

The forward's width follows the engine priced (``engine=``, :mod:`ngramspec.costs.engines`):

- ``"custom"`` (a loop of your own): ADAPTIVE drafts are sent as the cost model prices them,
  the root and the real drafts (the batch's largest tree), and a step where no request has a
  draft is a plain decode step; SGLang's BFS and PROB trees are sent whole.
- ``"sglang"`` (SGLang 0.5.23's NGRAM worker): every request sends ``draft_token_num`` slots
  at every step, the whole :class:`~ngramspec.DraftBatch` as
  :meth:`Drafter.propose <ngramspec.Drafter.propose>` returns it (ADAPTIVE trees padded with
  SGLang's padding: token 0, a child of the root), and no step is a plain decode.  Drafting
  still runs through the step API in the loop, while the prediction adds the drop-in
  ``NgramCorpus``'s worker calls
  (:attr:`~ngramspec.SimulationResult.sglang_ms_per_step`): on a CPU model the two differ by
  microseconds per step against forwards of tens of milliseconds.

Requests are admitted as the simulator admits them: in file order, a new one joins as soon as
one finishes.  The batch shares one KV cache whose per-request rows are left-padded (the
masks hide the padding); after every tree step each request's kept rows are gathered and
re-padded to the new longest.  A joining request's prefill is merged into it, untimed.

Timed: the decode steps only (device synchronised), each step from building its inputs to
keeping its KV rows, drafting and verification included (the stand-in for the model's choice
excluded).  The realised speed-up (plain time / speculative time) is compared with
:func:`ngramspec.costs.predict_serving` for the same streams, config, cost table and engine.

Needs the optional extra: ``pip install 'ngramspec[calibrate]'`` (torch, transformers).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from . import torch_loop as tl
from ..config import NgramConfig
from ..costs import CostTable, Engine, ServingPrediction, engine_of, predict_serving, schedule
from ..costs.uncertainty import bootstrap, with_interval
from ..drafter import Drafter
from ..drafts import DraftBatch
from ..simulate import _recorded_argmax, admit, simulate
from ..streams import read_streams
from ..integrations.timing import time_drafting
from ..drafts.verify import verify_greedy

__all__ = ["check_against_model", "CheckReport", "CheckRow", "TOLERANCE"]

#: ``|realised / predicted - 1|`` above this is flagged.
TOLERANCE = 0.10


@dataclass(frozen=True)
class CheckRow:
    """One concurrency level: the loop on the model against the prediction.

    Attributes
    ----------
    concurrency, run_at : int
        Level asked for, and the level run (at most the number of requests).
    steps, simulated_steps : int
        Speculative steps of the loop and of the simulator (equal unless something is wrong).
    plain_steps : int
        Plain decode steps of the loop.
    tokens : int
        Decode tokens (output tokens after the prefill's first), in both runs.
    plain_ms, speculative_ms : float
        Wall time of the decode steps of each run.
    realised_speed_up, predicted_speed_up : float
        ``plain_ms / speculative_ms``, and the prediction's ``speed_up``.
    agreement : float
        Fraction of the accepted slots (both runs) where the model's own argmax equalled the
        recording.
    interpolated : dict
        ``{"batches": [...], "tokens": [...], "plain_steps": f, "speculative_steps": f}``:
        batch sizes and tree sizes the schedule runs that the cost table does not hold
        (interpolated), and the fractions of the steps of each run at them.  Step times need
        not be linear in either (CPU kernels especially): a ratio off the mark with a large
        fraction here asks for those points to be measured.
    prediction : ServingPrediction
    """

    concurrency: int
    run_at: int
    steps: int
    simulated_steps: int
    plain_steps: int
    tokens: int
    plain_ms: float
    speculative_ms: float
    realised_speed_up: float
    predicted_speed_up: float
    agreement: float
    prediction: ServingPrediction = field(repr=False)
    interpolated: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        """``realised / predicted`` speed-up."""
        return self.realised_speed_up / self.predicted_speed_up

    @property
    def flagged(self) -> bool:
        return not abs(self.ratio - 1) <= TOLERANCE

    def to_dict(self) -> dict[str, Any]:
        return {"concurrency": self.concurrency, "run_at": self.run_at, "steps": self.steps,
                "simulated_steps": self.simulated_steps, "plain_steps": self.plain_steps,
                "tokens": self.tokens, "plain_ms": self.plain_ms,
                "speculative_ms": self.speculative_ms,
                "predicted_speculative_ms": self.prediction.speculative_ms,
                "predicted_plain_ms": self.prediction.baseline_ms,
                "predicted_draft_ms_per_step": self.prediction.draft_ms,
                "predicted_draft_source": self.prediction.draft_source,
                "predicted_speed_up": self.predicted_speed_up,
                **({"predicted_speed_up_low": self.prediction.interval.speed_up[0],
                    "predicted_speed_up_high": self.prediction.interval.speed_up[1]}
                   if self.prediction.interval is not None else {}),
                "realised_speed_up": self.realised_speed_up, "ratio": self.ratio,
                "flagged": self.flagged, "agreement": self.agreement,
                "interpolated": dict(self.interpolated)}


@dataclass(frozen=True)
class CheckReport:
    """What :func:`check_against_model` found: one :class:`CheckRow` per level.

    ``engine`` is the serving engine the loop ran as and the prediction priced
    (``"custom"`` or ``"sglang"``, :mod:`ngramspec.costs.engines`)."""

    rows: list[CheckRow]
    config: NgramConfig
    cost_table: CostTable
    model: str
    device: str
    requests: int
    identical: bool
    engine: str = "custom"

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "model": self.model,
                "device": self.device, "requests": self.requests, "engine": self.engine,
                "emitted_equal_recording": self.identical,
                "cost_table": {"source": self.cost_table.source,
                               "points": self.cost_table.points(),
                               "extrapolate": self.cost_table.extrapolate},
                "config": _config_dict(self.config)}


def _config_dict(cfg: NgramConfig) -> dict[str, Any]:
    import dataclasses

    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


class _Batch:
    """The running requests' shared KV cache, rows left-padded to the longest."""

    def __init__(self, stepper: tl.Stepper) -> None:
        self.stepper = stepper
        self.lens: list[int] = []  # real KV rows per running request

    def join(self, model, prompt: np.ndarray) -> None:
        torch = self.stepper.torch
        ids = torch.from_numpy(prompt.astype(np.int64)[None]).to(self.stepper.dev)
        _, cache = tl.prefill(model, ids)
        if self.stepper.cache is None or not self.lens:
            self.stepper.cache = cache
        else:
            tl.merge(self.stepper.cache, cache)
        self.lens.append(int(prompt.size))

    def leave(self, keep: list[int]) -> None:
        self.lens = [self.lens[i] for i in keep]
        if not keep:
            self.stepper.cache = None
            return
        tl.select(self.stepper.cache, keep, max(self.lens))


def _interpolated(sim: Any, table: CostTable, engine: Engine) -> dict[str, Any]:
    sched = schedule(sim, engine=engine)
    plain = ~np.isin(sched.baseline_batch, table.batches)
    off_b = ~np.isin(sched.batch, table.batches)
    off_n = ~np.isin(sched.tokens, table.tokens)
    spec = off_b | off_n
    batches = sorted(set(sched.baseline_batch[plain].tolist()) | set(sched.batch[off_b].tolist()))
    return {"batches": [int(b) for b in batches],
            "tokens": sorted(int(n) for n in set(sched.tokens[off_n].tolist())),
            "plain_steps": float(plain.mean()) if plain.size else 0.0,
            "speculative_steps": float(spec.mean()) if spec.size else 0.0}


def _check_inputs(rows: list[dict], vocab: int) -> None:
    for r in rows:
        if len(r["output_ids"]) > 1 and not len(r["prompt_ids"]):
            raise ValueError(f"request {r['id']!r} has an empty prompt: the model needs at "
                             "least one prompt token to prefill")
        top = max(max(r["prompt_ids"], default=0), max(r["output_ids"], default=0))
        if top >= vocab:
            raise ValueError(f"request {r['id']!r} holds token id {top}, beyond the model's "
                             f"vocabulary ({vocab}): were these streams recorded with this "
                             "model's tokenizer?")


def _real_slots(drafts: DraftBatch) -> DraftBatch:
    """The first ``max(num_drafts) + 1`` slots of ADAPTIVE drafts (level order puts the real
    drafts first; the rest is padding that ADAPTIVE does not send)."""
    w = int(drafts.num_drafts.max()) + 1
    if w >= drafts.draft_token_num:
        return drafts
    probs = drafts.probs
    return DraftBatch._trusted(drafts.tokens[:, :w], drafts.mask[:, :w, :w], drafts.num_drafts,
                               None if probs is None else probs[:, :w])


def _admit(nxt: int, running: list[int], c: int, outputs, out: list, done: list[int],
           join: Callable[[int], None]) -> int:
    """The simulator's admission from request ``nxt`` on: in file order while fewer than
    ``c`` run (a request whose only output token is the prefill's joins and leaves at once);
    returns the next request to admit."""
    first = nxt
    nxt = admit(nxt, running, c, [o.size for o in outputs], join, done)
    for r in range(first, nxt):
        out[r] = [int(outputs[r][0])]
    return nxt


def _plain(model, stepper: tl.Stepper, prompts, outputs, c: int, tick) -> tuple:
    """Plain decoding, teacher-forced: (wall seconds, steps, emitted outputs, agreement)."""
    batch = _Batch(stepper)
    n_req = len(prompts)
    done = [0] * n_req
    out: list[list[int]] = [[] for _ in range(n_req)]
    agree = [0, 0]
    nxt, running, steps, wall = 0, [], 0, 0.0
    while nxt < n_req or running:
        nxt = _admit(nxt, running, c, outputs, out, done,
                     lambda r: batch.join(model, prompts[r]))
        if not running:
            continue
        t0 = stepper.timed()
        toks = np.array([[outputs[r][done[r] - 1]] for r in running], np.int64)
        kv = np.asarray(batch.lens, np.int64)
        verdict = stepper.step(toks, kv)
        t1 = stepper.timed()
        wall += t1 - t0
        steps += 1
        for i, r in enumerate(running):
            nxt_tok = int(outputs[r][done[r]])  # the recording decides
            agree[0] += int(verdict[i, 0] == nxt_tok)
            agree[1] += 1
            out[r].append(nxt_tok)
            done[r] += 1
            batch.lens[i] += 1
        keep = [i for i, r in enumerate(running) if done[r] < outputs[r].size]
        if len(keep) < len(running):
            batch.leave(keep)
            running = [running[i] for i in keep]
        tick(len(toks))
    return wall, steps, out, agree


def _speculative(model, stepper: tl.Stepper, prompts, outputs, c: int, config: NgramConfig,
                 tick, costs: Any = None, engine: Engine | None = None) -> tuple:
    """Speculative decoding, teacher-forced: (wall seconds, steps, outputs, agreement).

    The engine's rule sets the forward's width: SGLang's worker (``fixed_width``) verifies
    every slot of the batch as ``propose`` returns it, at every step; a custom loop sends
    ADAPTIVE's real slots only and decodes plainly when no request has a draft."""
    auto = config.min_expected_accept == "auto"
    fixed = engine is not None and engine.fixed_width
    # A custom loop sends ADAPTIVE's real drafts + root, as the cost model prices it.
    adaptive = not config.mode.padded and not fixed
    drafter = Drafter(config=config, costs=costs if auto else None)
    batch = _Batch(stepper)
    n_req = len(prompts)
    done = [0] * n_req
    agree = [0, 0]
    out: list[list[int]] = [[] for _ in range(n_req)]
    nxt, running, steps, wall = 0, [], 0, 0.0
    def join(r: int) -> None:
        batch.join(model, prompts[r])
        drafter.add_request(r, prompts[r], int(outputs[r][0]))

    while nxt < n_req or running:
        nxt = _admit(nxt, running, c, outputs, out, done, join)
        if not running:
            continue
        t0 = stepper.timed()
        drafts = drafter.propose(running)
        if adaptive:  # ADAPTIVE sends its real drafts + the root (the rest is padding)
            drafts = _real_slots(drafts)
        kv = np.asarray(batch.lens, np.int64)
        padded = tl.cache_len(stepper.cache)
        # Else a plain decode step, as the custom rule prices it (never under SGLang's).
        tree = fixed or drafts.draft_token_num > 1
        verdict = stepper.step(drafts.tokens, kv, drafts if tree else None)
        t1 = time.perf_counter()
        pred = _recorded_argmax(drafts, running, outputs, [done[r] for r in running])
        t2 = time.perf_counter()
        result = verify_greedy(drafts, pred)
        left = [outputs[r].size - done[r] for r in running]
        drafter.accept(result, max_tokens=left)  # the step API's fast form
        lens = np.minimum(result.accept_lens, left)
        emitted = {r: result.emitted[i][:lens[i]] for i, r in enumerate(running)}
        slots = [result.accept_index[i, :int(result.accept_lens[i])].astype(np.int64)
                 for i in range(len(running))]
        if tree:
            index, new = tl.kept_index(kv, padded, slots)
            stepper.keep(index)
        else:  # the root's row, appended by the forward, is all there is to keep
            new = kv + 1
        t3 = stepper.timed()
        wall += (t1 - t0) + (t3 - t2)
        steps += 1
        for i, r in enumerate(running):
            e = emitted[r].size
            acc = result.accept_index[i, :e]
            agree[0] += int((verdict[i, acc] == pred[i, acc]).sum())
            agree[1] += e
            out[r].extend(int(t) for t in emitted[r])
            done[r] += e
            batch.lens[i] = int(new[i])
        keep = [i for i, r in enumerate(running) if done[r] < outputs[r].size]
        if len(keep) < len(running):
            for i, r in enumerate(running):
                if done[r] >= outputs[r].size:
                    drafter.finish(r)
            batch.leave(keep)
            running = [running[i] for i in keep]
        tick(sum(emitted[r].size for r in emitted))
    return wall, steps, out, agree


def check_against_model(model: Any, streams: Any, *, cost_table: CostTable,
                        config: NgramConfig | None = None,
                        concurrency: Sequence[int] = (1,), device: str = "cpu",
                        dtype: str | None = None, threads: int | None = None,
                        max_requests: int | None = None, max_output: int | None = None,
                        progress: Callable[[int, int], None] | None = None,
                        engine: str | Engine = "custom") -> CheckReport:
    """Decode recorded streams on the model, plainly and speculatively, at each concurrency
    level, and hold the realised speed-up against the predicted one (module docstring: what
    runs and what is timed).

    Parameters
    ----------
    model : str, os.PathLike or torch.nn.Module
        A local transformers model directory, or a loaded causal LM.
    streams : path, list of paths, or iterable of records
        Recorded greedy streams (see :func:`~ngramspec.read_streams`), decoded in order.
    cost_table : CostTable
        The table the prediction uses (e.g. from ``ngramspec calibrate`` on this model).
    config : NgramConfig, optional
        Drafter settings (SGLang's server defaults if omitted).
    concurrency : sequence of int
        Levels to check; a level above the number of requests runs at that number.
    device, dtype, threads
        As for :func:`ngramspec.measure.calibrate.measure`.
    max_requests : int, optional
        Use only the first this many requests.
    max_output : int, optional
        Cut every recorded output to this many tokens (in the loop and the prediction alike).
    progress : callable(done, total), optional
        Called with output tokens decoded so far and in total (all levels, both runs).
    engine : {"custom", "sglang"}
        The serving engine held against the model (:mod:`ngramspec.costs.engines`): the loop
        sends the forward widths that engine runs and the prediction prices them the same
        way (``predict_serving(..., engine=engine)``).  ``"sglang"``: every request
        ``draft_token_num`` slots at every step, no plain decode step.

    Returns
    -------
    CheckReport

    Raises
    ------
    ValueError
        Bad options (an unknown ``engine`` among them) or streams, a model that cannot be
        loaded, a cost table that lacks a point the prediction needs, token ids beyond the
        model's vocabulary; and RuntimeError if the emitted tokens differ from the recording
        (a bug).
    """
    rule = engine_of(engine)
    if rule.mean_width:
        raise ValueError(f"engine {rule.name!r}: check decodes in its own loop, whose forward "
                         "pads every request to the widest; vLLM's steps (each request its own "
                         "tokens) are not realised here: check the chains with engine "
                         "'custom' (a custom loop), and price vLLM with simulate")
    config, levels = _check_args(config, cost_table, concurrency, max_requests, max_output)
    tl.check_options(dtype=dtype, threads=threads)
    rows = read_streams(streams)
    if max_requests is not None:
        rows = rows[:max_requests]
    if max_output is not None:
        rows = [dict(r, output_ids=list(r["output_ids"])[:max_output]) for r in rows]
    if not rows:
        raise ValueError("the streams hold no requests")
    tl.check_model_dir(model)
    auto = cost_table if config.min_expected_accept == "auto" else None
    # Every forward the prediction prices is in the table (or extrapolated): said before any
    # replay compiles or runs.
    top, n = min(max(levels), len(rows)), config.draft_token_num
    cost_table.ms_array(np.array([1, 1, top, top]), np.array([1, n, 1, n]))
    # The prediction first: cheap, and it names a missing cost table point before any model
    # runs.
    predicted = _predictions(rows, config, levels, cost_table, auto, rule)
    torch, dev = tl.setup(device, dtype=dtype, threads=threads, what="check")
    model, name = tl.load_model(model, dev, dtype)
    _check_inputs(rows, int(model.config.vocab_size))
    prompts = [np.asarray(r["prompt_ids"], np.int64) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int64) for r in rows]
    decode_tokens = sum(max(o.size - 1, 0) for o in outputs)
    total, done = 2 * decode_tokens * len(levels), [0]

    def tick(k: int) -> None:
        done[0] += k
        if progress is not None:
            progress(min(done[0], total), total)

    report_rows, identical = [], True
    stepper = tl.Stepper(model, dev)
    with torch.inference_mode():
        # One untimed warm-up step of each kind, so that the first level pays no start-up.
        _plain(model, stepper, prompts[:1], [outputs[0][:3]], 1, lambda k: None)
        _speculative(model, stepper, prompts[:1], [outputs[0][:3]], 1, config,
                     lambda k: None, auto, rule)
        for c, run_at, sim, pred in predicted:
            plain_s, plain_steps, plain_out, agree_p = _plain(model, stepper, prompts, outputs,
                                                              run_at, tick)
            spec_s, spec_steps, spec_out, agree_s = _speculative(
                model, stepper, prompts, outputs, run_at, config, tick, auto, rule)
            for r, o in enumerate(outputs):
                if plain_out[r] != o.tolist() or spec_out[r] != o.tolist():
                    identical = False
                    raise RuntimeError(f"concurrency {run_at}: the tokens emitted for request "
                                       f"{rows[r]['id']!r} differ from the recording (a bug "
                                       "in the check loop)")
            plain_ms, spec_ms = 1e3 * plain_s, 1e3 * spec_s
            seen = agree_p[1] + agree_s[1]
            report_rows.append(CheckRow(
                concurrency=c, run_at=run_at, steps=spec_steps, simulated_steps=pred.steps,
                plain_steps=plain_steps, tokens=decode_tokens, plain_ms=plain_ms,
                speculative_ms=spec_ms,
                realised_speed_up=plain_ms / spec_ms if spec_ms else math.nan,
                predicted_speed_up=pred.speed_up,
                agreement=(agree_p[0] + agree_s[0]) / seen if seen else math.nan,
                prediction=pred, interpolated=_interpolated(sim, cost_table, rule)))
    return CheckReport(rows=report_rows, config=config, cost_table=cost_table, model=name,
                       device=str(dev), requests=len(rows), identical=identical,
                       engine=rule.name)


def _check_args(config: Any, cost_table: Any, concurrency: Any, max_requests: Any,
                max_output: Any) -> tuple[NgramConfig, list[int]]:
    """:func:`check_against_model`'s options checked: the configuration and the levels."""
    config = NgramConfig() if config is None else config
    if not isinstance(config, NgramConfig):
        raise TypeError(f"config must be an NgramConfig, got {type(config).__name__}")
    if not isinstance(cost_table, CostTable):
        raise TypeError(f"cost_table must be a CostTable, got {type(cost_table).__name__}")
    levels = [int(c) for c in concurrency]
    if not levels or any(isinstance(c, bool) or c < 1 for c in concurrency):
        raise ValueError(f"concurrency must be integers >= 1, got {list(concurrency)!r}")
    for name, v in (("max_requests", max_requests), ("max_output", max_output)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
            raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
    return config, levels


def _predictions(rows: list[dict], config: NgramConfig, levels: list[int],
                 cost_table: CostTable, auto: Any, rule: Any) -> list[tuple]:
    """Per level: ``(level, level run, simulation, prediction with its interval)``, the
    engine's drafting cost timed on these streams unless the table includes it."""
    predicted = []
    for c in levels:
        run_at = min(c, len(rows))
        sim = simulate(rows, config=config, concurrency=run_at, costs=auto)
        if not getattr(cost_table, "drafting_included", False):
            time_drafting(sim, rule)  # what the engine pays for drafting, on these streams
        pred = predict_serving(sim, cost_table, engine=rule)
        pred = with_interval(pred, bootstrap(sim, cost_table, engine=rule,
                                             draft_ms=pred.draft_ms))
        predicted.append((c, run_at, sim, pred))
    return predicted
