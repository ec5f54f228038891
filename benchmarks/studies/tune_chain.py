"""The ``chain`` preset (ngramspec's drafts for vLLM, which verifies chains): tuned on the
tuning part of the shipped streams, reported on the hold-out part against vLLM's own n-gram
proposer and, where it builds, Arctic's suffix decoding in its chain mode.

Tuning (tuning part only).  ngramspec's chains are ``recommended()`` with ``chain=True``
(ADAPTIVE trees from the request's own index and the shared trie, cut to the path with the
most expected accepted tokens); the grid is ``min_token_prob`` x ``max_spec_factor`` x the
chain's length ``k`` (``draft_token_num - 1``).  The score of a setting is its mean predicted
speed-up under vLLM's pricing (``engine="vllm"``: each request sends its chain + 1 tokens)
over the illustrative costs and concurrencies below, drafting time left out (``draft_ms=0``:
on a shared 2-core machine its noise would decide close cells; it is measured on its own by
``benchmarks/studies/vllm_proposer.py``).  vLLM's n-gram gets the same treatment over its
own grid (``prompt_lookup_min/max`` x ``k``), so each side is compared at its best.

Reported (hold-out part): tokens per verify step and draft tokens per step at each ``k``
(vLLM's defaults ``prompt_lookup_min = max = 5``, vLLM's tuned sizes, and the chain preset at
the same ``k``), at concurrency 1 and 8, and each side's tuned winner's predicted speed-ups.

    python -m benchmarks.studies.tune_chain               # the tables of docs/vllm.md
    python -m benchmarks.studies.tune_chain --arctic      # also Arctic's chains (builds it)
"""

from __future__ import annotations

import argparse
import itertools
import statistics
from typing import Any

import ngramspec as ns
from ngramspec.costs import predict_serving

from benchmarks.peers.protocol import load_parts

COSTS = (("12 ms + 0.1 ms/token", ns.CostModel(step_ms=12, token_ms=0.1)),
         ("12 ms + 0.5 ms/token", ns.CostModel(step_ms=12, token_ms=0.5)))
CONCURRENCY = (1, 8)
KS = (3, 5, 7)
CHAIN_GRID = dict(min_token_prob=(0.0, 0.2, 0.35, 0.5), max_spec_factor=(0.0, 1.0, 2.0))
VLLM_GRID = dict(lookup=((1, 3), (2, 5), (3, 5), (5, 5)))


def chain_config(k: int, **options: Any) -> ns.NgramConfig:
    return ns.NgramConfig.recommended(chain=True, draft_token_num=k + 1, **options)


def vllm_config(k: int, lookup: tuple[int, int]) -> ns.NgramConfig:
    return ns.NgramConfig(profile="vllm-0.33", prompt_lookup_min=lookup[0],
                          prompt_lookup_max=lookup[1], num_speculative_tokens=k)


def figures(rows: list[dict], cfg: ns.NgramConfig) -> dict[str, Any]:
    """Per concurrency: tokens per step, draft tokens per step, speed-up per cost."""
    out: dict[str, Any] = {}
    for c in CONCURRENCY:
        r = ns.simulate(rows, config=cfg, concurrency=c, step_api_steps=0)
        ups = {label: predict_serving(r, cost, engine="vllm", draft_ms=0).speed_up
               for label, cost in COSTS}
        out[c] = dict(tps=r.tokens_per_step, drafts=r.summary.draft_nodes_per_step, ups=ups)
    return out


def score(f: dict[str, Any]) -> float:
    return statistics.mean(u for c in CONCURRENCY for u in f[c]["ups"].values())


def tune(rows: list[dict], make, grid: dict[str, tuple]) -> tuple[dict, dict[tuple, float]]:
    names = list(grid)
    scores = {}
    best, best_score = None, -1.0
    for k in KS:
        for values in itertools.product(*(grid[n] for n in names)):
            options = dict(zip(names, values))
            s = score(figures(rows, make(k, **options)))
            scores[(k, *values)] = s
            if s > best_score:
                best, best_score = dict(options, k=k), s
    assert best is not None
    return best, scores


def arctic_chain_tps(rows: list[dict], k: int) -> tuple[float, float] | None:
    """Arctic's suffix decoding as vLLM runs it (``use_tree_spec=False``: a chain of at most
    ``k`` tokens; the other settings the peer's, Arctic's vLLM defaults), tokens per verify
    step and draft tokens per step, requests one after another (its replay protocol); None
    where it does not build."""
    try:
        from benchmarks.peers import arctic
        from benchmarks.peers.replay import replay

        stats = replay(arctic.ArcticProposer(max_spec_tokens=k, use_tree_spec=False), rows)
    except Exception as e:  # the peer is optional: cmake, g++ and the sdist
        print(f"(Arctic unavailable: {e})")
        return None
    steps = sum(s.emitted.size for s in stats)
    return (sum(int(s.emitted.sum()) for s in stats) / steps,
            sum(int(s.real.sum()) for s in stats) / steps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--arctic", action="store_true", help="also Arctic's chains")
    args = parser.parse_args()
    parts = load_parts()
    tune_rows, hold = parts["tune"], parts["holdout"]
    print(f"tuning part {len(tune_rows)} requests, hold-out part {len(hold)} requests\n")
    chain_best, chain_scores = tune(tune_rows, chain_config, CHAIN_GRID)
    vllm_best, _ = tune(tune_rows, vllm_config, VLLM_GRID)
    print("### Tuning part: ngramspec's chains, mean predicted speed-up (engine vllm, "
          "drafting excluded)\n")
    print("| k | min_token_prob | max_spec_factor | score |\n|---:|---:|---:|---:|")
    for (k, p, f), s in sorted(chain_scores.items(), key=lambda kv: -kv[1])[:8]:
        print(f"| {k} | {p:g} | {f:g} | {s:.3f} |")
    print(f"\nchain winner: {chain_best}; vLLM's n-gram winner: {vllm_best}\n")
    opts = {k: v for k, v in chain_best.items() if k != "k"}
    print(f"### Hold-out part ({len(hold)} requests): tokens per verify step (draft tokens "
          "per step), same k\n")
    head = "| k | concurrency | vLLM n-gram 5/5 | vLLM n-gram tuned | ngramspec chain | ratio |"
    print(head + "\n|---:|---:|---:|---:|---:|---:|")
    for k in KS:
        v5 = figures(hold, vllm_config(k, (5, 5)))
        vt = figures(hold, vllm_config(k, vllm_best["lookup"]))
        ch = figures(hold, chain_config(k, **opts))
        for c in CONCURRENCY:
            cell = lambda f: f"{f[c]['tps']:.3f} ({f[c]['drafts']:.2f})"  # noqa: E731
            ratio = ch[c]["tps"] / max(v5[c]["tps"], vt[c]["tps"])
            print(f"| {k} | {c} | {cell(v5)} | {cell(vt)} | {cell(ch)} | {ratio:.2f} |")
    print("\n### Hold-out part: predicted speed-up of each side's tuned winner (engine vllm, "
          "drafting excluded)\n")
    print("| cost | concurrency | vLLM n-gram | ngramspec chain |\n|---|---:|---:|---:|")
    vf = figures(hold, vllm_config(vllm_best["k"], vllm_best["lookup"]))
    cf = figures(hold, chain_config(chain_best["k"], **opts))
    for label, _ in COSTS:
        for c in CONCURRENCY:
            print(f"| {label} | {c} | {vf[c]['ups'][label]:.3f}x | {cf[c]['ups'][label]:.3f}x |")
    if args.arctic:
        print("\n### Hold-out part: Arctic's suffix decoding in its chain mode, requests one "
              "after another, against ngramspec's chains at concurrency 1: tokens per verify "
              "step (draft tokens per step)\n")
        print("| k | Arctic chain | ngramspec chain | ratio |\n|---:|---:|---:|---:|")
        for k in KS:
            arctic = arctic_chain_tps(hold, k)
            if arctic is None:
                break
            ours = figures(hold, chain_config(k, **opts))[1]
            print(f"| {k} | {arctic[0]:.3f} ({arctic[1]:.2f}) | {ours['tps']:.3f} "
                  f"({ours['drafts']:.2f}) | {ours['tps'] / arctic[0]:.2f} |")


if __name__ == "__main__":
    main()
