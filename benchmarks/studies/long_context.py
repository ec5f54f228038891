"""Long contexts: ``recommended()``'s step API against SGLang's C++ match and vLLM's n-gram
proposer, per context length, in one run.

Recorded requests (the shipped streams) get their prompts lengthened to ``L`` tokens by
putting other recorded text in front of them (a document in the context: the text of
recorded requests that do not run here, see :func:`lengthened`), then run through
the custom-loop step API (``add_request``, then ``propose`` -> ``verify_greedy`` -> ``accept``
per step, teacher-forced on the recorded outputs) at a fixed concurrency.  Per length it
prints:

- admission: ``add_request`` time per prompt token (its own index built from the whole
  prompt, room reserved for the decode);
- memory: bytes of the request's own index per prompt token (``Drafter.index_nbytes``:
  reserved, not only used);
- a step per request: the three calls of a step over the batch, per request (median over
  steps), and the worst single step (all three calls, whole batch);
- tokens per verify step (the drafts see the document);
- the same steps through SGLang 0.5.23's C++ match at its server defaults (its worker matches
  the last 18 tokens and inserts them: its cost is flat, its drafts never see the prompt;
  match timed alone at its C entry point, as ``benchmarks/studies/step_api.py`` does), and
  through vLLM 0.33's own n-gram proposer kernel (``prompt_lookup_min = max = 5``, 5 tokens:
  it scans the whole context at every step), both from their PyPI wheels, per request-step
  (median over steps) and their worst step.

    python -m benchmarks.studies.long_context                         # 1k .. 128k, the table
    python -m benchmarks.studies.long_context --lengths 0 16384 65536 --concurrency 16
    python -m benchmarks.studies.long_context --json out.json --plot docs/reports/long-context.png

Length 0 stands for the prompts as recorded (median about 230 tokens).
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import time
from pathlib import Path

import numpy as np

import ngramspec as ns
from ngramspec.simulate import _recorded_argmax

from benchmarks.common import DEFAULTS, load_rows, machine
from benchmarks.peers import sglang as sglang_peer

LENGTHS = (0, 1024, 4096, 16384, 65536, 131072)


def lengthened(rows: list[dict], length: int) -> list[dict]:
    """``rows`` with each prompt lengthened to ``length`` tokens (0: as recorded) by a document
    put in front: the text (prompt, then output, cycling) of the recorded rows that are not
    among ``rows``, in file order.  Never the text of a row that runs with them: a prompt
    cannot hold what a request running beside it has yet to write (a request's output in its
    neighbours' documents would be drafted from the shared trie once they finish)."""
    if length == 0:
        return rows
    ids = {r["id"] for r in rows}
    text = [t for o in load_rows() if o["id"] not in ids
            for t in list(o["prompt_ids"]) + list(o["output_ids"])]
    if not text:
        raise ValueError("no recorded row is left for the document: run fewer requests")
    out = []
    for r in rows:
        need = max(0, length - len(r["prompt_ids"]))
        filler = (text * (need // len(text) + 1))[:need]
        out.append(dict(r, prompt_ids=filler + list(r["prompt_ids"])))
    return out


def run_ours(rows: list[dict], concurrency: int) -> dict:
    """The step API over ``rows``: admission, memory, steps; and the steps for the peers."""
    cfg = ns.NgramConfig.recommended(capacity=2_000_000)
    drafter = ns.Drafter(config=cfg, reserve=True)
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    done = [0] * len(rows)
    queue, running = list(range(len(rows))), []
    admit_s, admit_tokens, mem = 0.0, 0, []
    per_req, worst, emitted, verify_steps = [], 0.0, 0, 0
    steps = []  # (running, total lengths) per step, for the peers
    while queue or running:
        while queue and len(running) < concurrency:
            r = queue.pop(0)
            t0 = time.perf_counter()
            drafter.add_request(r, prompts[r], int(outputs[r][0]))
            admit_s += time.perf_counter() - t0
            admit_tokens += prompts[r].size
            mem.append(drafter.index_nbytes(r) / max(1, prompts[r].size))
            done[r] = 1
            running.append(r)
        steps.append((list(running), [prompts[r].size + done[r] for r in running]))
        t0 = time.perf_counter()
        d = drafter.propose(running)
        t1 = time.perf_counter()
        pred = _recorded_argmax(d, running, outputs, [done[r] for r in running])
        pred[pred < 0] = 0
        left = np.array([outputs[r].size - done[r] for r in running], np.int32)
        t2 = time.perf_counter()
        res = ns.verify_greedy(d, pred)
        drafter.accept(res, max_tokens=left)
        t3 = time.perf_counter()
        step = (t1 - t0) + (t3 - t2)
        per_req.append(step / len(running))
        worst = max(worst, step)
        lens = np.minimum(res.accept_lens, left)
        for b, r in enumerate(running):
            done[r] += int(lens[b])
        emitted += int(lens.sum())
        verify_steps += len(running)
        for r in [r for r in running if done[r] >= outputs[r].size]:
            drafter.finish(r)
        running = [r for r in running if done[r] < outputs[r].size]
    return dict(admission_us_per_token=1e6 * admit_s / max(1, admit_tokens),
                bytes_per_token=statistics.median(mem),
                step_us=1e6 * statistics.median(per_req), worst_ms=1e3 * worst,
                tokens_per_step=emitted / verify_steps, steps=steps)


def _sequence(prompt: np.ndarray, output: np.ndarray, total: int) -> np.ndarray:
    return np.concatenate([prompt, output])[:total]


def run_sglang(rows: list[dict], steps: list) -> dict:
    """SGLang's match (its server defaults) over the same steps: its last 18 tokens matched,
    then inserted (untimed), as its worker does."""
    p = sglang_peer.SglangPeer(**dict(DEFAULTS, capacity=2_000_000))
    depth = DEFAULTS["max_trie_depth"]
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    per_req, worst = [], 0.0
    for running, totals in steps:
        tails = [_sequence(prompts[r], outputs[r], n)[-depth:] for r, n in zip(running, totals)]
        pm, pi = p.pack_match(tails, list(running), totals), p.pack_insert(tails)
        t0 = time.perf_counter()
        p.match_packed(pm)
        t = time.perf_counter() - t0
        p.insert_packed(pi)
        per_req.append(t / len(running))
        worst = max(worst, t)
    return dict(step_us=1e6 * statistics.median(per_req), worst_ms=1e3 * worst)


def run_vllm(rows: list[dict], steps: list) -> dict | None:
    """vLLM's n-gram proposer kernel (5-5, 5 tokens) on every request's whole context."""
    try:
        from benchmarks.peers import vllm as vllm_peer

        find = vllm_peer.find_longest_matched_ngram()
    except Exception as exc:  # noqa: BLE001 - a peer that cannot be had is reported
        print(f"(vLLM's proposer unavailable: {exc})")
        return None
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    find(np.array([1, 2, 1, 2, 1], np.int32), 5, 5, vllm_peer.UNLIMITED, 5)  # compile
    per_req, worst = [], 0.0
    for running, totals in steps:
        ctxs = [_sequence(prompts[r], outputs[r], n) for r, n in zip(running, totals)]
        t0 = time.perf_counter()
        for c in ctxs:
            find(c, 5, 5, vllm_peer.UNLIMITED, 5)
        t = time.perf_counter() - t0
        per_req.append(t / len(running))
        worst = max(worst, t)
    return dict(step_us=1e6 * statistics.median(per_req), worst_ms=1e3 * worst)


def plot(results: list[dict], path: Path, recorded: float) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xs = [r["length"] or recorded for r in results]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    ax.plot(xs, [r["ours"]["step_us"] for r in results], "o-",
            label="ngramspec recommended() (sees the prompt)")
    ax.plot(xs, [r["sglang"]["step_us"] for r in results], "s--",
            label="SGLang's C++ match (last 18 tokens only)")
    if all(r.get("vllm") for r in results):
        ax.plot(xs, [r["vllm"]["step_us"] for r in results], "^-",
                label="vLLM's n-gram proposer (rescans the context)")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("prompt length (tokens)")
    ax.set_ylabel("drafting time per request-step (µs)")
    ax.set_title("Cost per step against context length")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    ap.add_argument("--requests", type=int, default=8, help="recorded requests per length")
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--plot", type=Path, default=None, help="a PNG of cost against length")
    args = ap.parse_args()
    base = load_rows()[:args.requests]
    run_ours(lengthened(base[:2], 2048), 2)  # compile outside the timings
    recorded = float(np.median([len(r["prompt_ids"]) for r in base]))
    print(f"{machine()}\n{len(base)} requests at concurrency {args.concurrency}; "
          f"length 0 = as recorded (median {recorded:.0f} tokens)")
    print(f"{'length':>7} | {'admit us/tok':>12} {'B/tok':>6} {'step us':>8} {'worst ms':>8} "
          f"{'tok/step':>8} | {'SGLang us':>9} {'worst':>6} | {'vLLM us':>8} {'worst':>6} | "
          f"{'/SGLang':>7} {'/vLLM':>6}")
    results = []
    for length in args.lengths:
        rows = lengthened(base, length)
        gc.collect()
        ours = run_ours(rows, args.concurrency)
        theirs = run_sglang(rows, ours["steps"])
        vllm = run_vllm(rows, ours["steps"])
        del ours["steps"]
        results.append(dict(length=length, ours=ours, sglang=theirs, vllm=vllm))
        v_us = f"{vllm['step_us']:8.1f} {vllm['worst_ms']:6.2f}" if vllm else f"{'-':>8} {'-':>6}"
        v_ratio = f"{ours['step_us'] / vllm['step_us']:6.2f}" if vllm else f"{'-':>6}"
        print(f"{length:>7} | {ours['admission_us_per_token']:12.3f} "
              f"{ours['bytes_per_token']:6.0f} {ours['step_us']:8.1f} {ours['worst_ms']:8.2f} "
              f"{ours['tokens_per_step']:8.3f} | {theirs['step_us']:9.1f} "
              f"{theirs['worst_ms']:6.2f} | {v_us} | {ours['step_us'] / theirs['step_us']:7.2f} "
              f"{v_ratio}", flush=True)
    if args.json:
        args.json.write_text(json.dumps(dict(machine=machine(), results=results), indent=1))
    if args.plot:
        plot(results, args.plot, recorded)


if __name__ == "__main__":
    main()
