"""The SGLang drop-in at long contexts: the serving thread's time in the drafter on SGLang's
NGRAM worker loop, ngramspec's ``NgramCorpus`` against SGLang 0.5.23's own class, per prompt
length and batch size, in one run.

Recorded requests get their prompts lengthened to ``L`` tokens (other recorded text in front,
as in ``benchmarks/studies/long_context.py``) and run through the worker's calls
(:func:`ngramspec.integrations.sglang_replay.replay_worker`: the launcher hook's
``note_prompts`` when requests arrive, then per iteration ``synchronize``, ``batch_get``,
``batch_put``, ``erase_match_state``, and ``note_finished``), with the model's forwards as
sleeps where the server runs them: a prefill of ``--prefill-us`` per prompt token after the new
requests arrive (the extend batch), a decode of ``--decode-ms`` after each iteration's
``batch_put`` (the scheduler's work and the next forward).  All requests run together
(concurrency = requests), greedy verification against the recorded outputs.

Each corpus is built, then called once its background compile is done (a server loads its
model meanwhile: that wait, about 10 ms with the kernels on disk, is not serving time).
Per row: the serving thread's time in the drafter's calls per request-step (their sum over
the run divided by the request-steps) and the worst single iteration (all calls of one
iteration, whole batch; the extend batch's ``note_prompts`` is an iteration of its own, as
in the server, and so is the last erase, after the last iteration), for
SGLang's class at the server defaults, the drop-in at the server
defaults (SGLang-exact), the drop-in with ``recommended()`` and with ``recommended()`` whose
finished requests teach the shared trie their whole prompt (``shared_prompt_window=None``,
as before that option); the ratios to SGLang's class;
tokens per verify step.  Every configuration runs once untimed first (kernels compiled), then
``--rounds`` times alternately; per configuration the round with the least total is kept.

    python -m benchmarks.studies.sglang_long_context
    python -m benchmarks.studies.sglang_long_context --lengths 0 4096 16384 --requests 1 16 48

Length 0 stands for the prompts as recorded (median about 230 tokens).
"""

from __future__ import annotations

import argparse
import gc
import json
import time
from pathlib import Path


import ngramspec as ns
from benchmarks.common import load_rows, machine
from benchmarks.peers import sglang_corpus
from benchmarks.studies.long_context import lengthened
from benchmarks.studies.sglang_adapter import _server_kw
from ngramspec.integrations.sglang import NgramCorpus
from ngramspec.integrations.sglang_replay import replay_worker

CALLS = ("synchronize", "batch_get", "batch_put", "erase_match_state", "note_prompts",
         "note_finished")


class Clocked:
    """A corpus whose worker-facing calls are timed, summed per serving-loop iteration."""

    def __init__(self, corpus, prefill_us: float, decode_ms: float) -> None:
        self.corpus = corpus
        self.prefill_us, self.decode_ms = prefill_us, decode_ms
        self.now = 0.0  # this iteration's seconds so far
        self.iterations: list[float] = []
        self.request_steps = 0

    def __getattr__(self, name):
        call = getattr(self.corpus, name)
        if name not in CALLS:
            return call

        def timed(*args):
            t0 = time.perf_counter()
            out = call(*args)
            self.now += time.perf_counter() - t0
            return out

        return timed

    def forward(self, kind: str, n: int) -> None:
        if kind == "prefill":  # the extend batch: an iteration of its own in the server
            self.iterations.append(self.now)
            self.now = 0.0
            time.sleep(self.prefill_us * 1e-6 * n)
            return
        self.iterations.append(self.now)
        self.request_steps += n
        self.now = 0.0
        time.sleep(self.decode_ms * 1e-3)


def loaded(corpus):
    """``corpus`` once a server would first call it: after the model load that its
    background compile (``NgramCorpus(warm=True)``) runs behind."""
    while getattr(corpus, "warming", False):
        time.sleep(0.005)
    return corpus


def run(make, rows: list[dict], cfg: ns.NgramConfig, hooks: bool, args) -> dict:
    corpus = Clocked(loaded(make()), args.prefill_us, args.decode_ms)
    emitted = replay_worker(corpus, [r["prompt_ids"] for r in rows],
                            [r["output_ids"] for r in rows], concurrency=len(rows),
                            max_trie_depth=cfg.max_trie_depth,
                            draft_token_num=cfg.draft_token_num, hooks=hooks,
                            limit=args.steps, forward=corpus.forward)
    total = sum(corpus.iterations) + corpus.now  # (the final erase after the last iteration)
    steps = sum(e.size for e in emitted)
    return dict(us_per_request_step=1e6 * total / max(1, corpus.request_steps),
                worst_ms=1e3 * max(corpus.iterations + [corpus.now]),
                tokens_per_step=sum(int(e.sum()) for e in emitted) / max(1, steps),
                total_s=total)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=[0, 4096, 16384])
    ap.add_argument("--requests", type=int, nargs="+", default=[1, 16, 48])
    ap.add_argument("--steps", type=int, default=120, help="serving-loop iterations per run")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--prefill-us", type=float, default=2.0,
                    help="the prefill stand-in, microseconds per prompt token")
    ap.add_argument("--decode-ms", type=float, default=12.0,
                    help="the stand-in between iterations, milliseconds (default: a large "
                    "MoE model's decode step)")
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    sglang_cls = sglang_corpus.corpus_class()
    server, rec = ns.NgramConfig(), ns.NgramConfig.recommended()
    whole = rec.replace(shared_prompt_window=None)
    configs = [("SGLang's class", lambda: sglang_cls(**_server_kw(server)), server, False),
               ("drop-in, defaults", lambda: NgramCorpus(**_server_kw(server), config=server),
                server, False),
               ("drop-in, recommended()", lambda: NgramCorpus(**_server_kw(rec), config=rec),
                rec, True),
               # before shared_prompt_window: a finished request's whole prompt to the trie
               ("  ... whole prompt shared", lambda: NgramCorpus(**_server_kw(whole),
                                                                  config=whole), whole, True)]
    pool = load_rows()
    print(f"{machine()}\nprefill stand-in {args.prefill_us} us/prompt token, decode stand-in "
          f"{args.decode_ms} ms, {args.steps} iterations, best of {args.rounds} rounds; "
          "serving-thread time in the drafter's calls")
    print(f"{'length':>6} {'reqs':>4} | {'config':22} | {'us/req-step':>11} {'worst ms':>8} "
          f"{'tok/step':>8} | {'x SGLang':>8} {'worst x':>7}")
    for label, make, cfg, hooks in configs:  # compile outside the timings
        run(make, lengthened(pool[:2], 1024), cfg, hooks, argparse.Namespace(**{
            **vars(args), "steps": 20, "prefill_us": 0.0, "decode_ms": 0.0}))
    results = []
    for length in args.lengths:
        for n in args.requests:
            rows = lengthened(pool[:n], length)
            best: dict[str, dict] = {}
            for _ in range(args.rounds):
                for label, make, cfg, hooks in configs:
                    gc.collect()
                    got = run(make, rows, cfg, hooks, args)
                    if label not in best or got["total_s"] < best[label]["total_s"]:
                        best[label] = got
            base = best["SGLang's class"]
            for label, *_ in configs:
                r = best[label]
                print(f"{length:>6} {n:>4} | {label:22} | {r['us_per_request_step']:11.1f} "
                      f"{r['worst_ms']:8.2f} {r['tokens_per_step']:8.3f} | "
                      f"{r['us_per_request_step'] / base['us_per_request_step']:8.2f} "
                      f"{r['worst_ms'] / base['worst_ms']:7.2f}", flush=True)
                results.append(dict(length=length, requests=n, config=label, **r))
    if args.json:
        args.json.write_text(json.dumps(dict(machine=machine(), args=vars(args) | {
            "json": str(args.json)}, results=results), indent=1))


if __name__ == "__main__":
    main()
