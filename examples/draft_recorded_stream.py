"""Draft on real recorded LLM output with SGLang's NGRAM settings, and see what gets accepted.

The package ships 133 requests recorded from Qwen2.5-Coder-0.5B-Instruct under greedy decoding
(prompt ids and the target's output ids).  Because the target is greedy, its argmax at any
point along the recorded path is simply the next recorded token, so SGLang's serving loop can
be replayed exactly without the model (concurrency 1, one shared trie across requests):

    out = [first output token]                  # prefill emits it; prefill neither matches nor inserts
    until out is complete:
        context = last max_trie_depth tokens of prompt + out
        drafts  = cache.match([context], request_ids=[rid], total_lens=[len(prompt + out)])
        emitted = greedy verify of the tree against the recording (accepted drafts + bonus)
        cache.insert([context])                 # the same window, as SGLang's worker does
        out    += emitted

Run:  python examples/draft_recorded_stream.py --requests 6 --match-type PROB
"""

from __future__ import annotations

import argparse
import gzip
import json
from importlib.resources import files

import numpy as np

import ngramspec as ns

STREAMS = "qwen2.5-coder-0.5b-greedy.jsonl.gz"


def load_streams(limit: int) -> list[dict]:
    with gzip.open(files("ngramspec") / "data" / STREAMS, "rt") as f:
        rows = [json.loads(line) for line in f]
    # A few of each task, in file order.
    by_task: dict[str, list[dict]] = {}
    for row in rows:
        by_task.setdefault(row["task"], []).append(row)
    picked = []
    while len(picked) < limit and any(by_task.values()):
        for task in list(by_task):
            if by_task[task] and len(picked) < limit:
                picked.append(by_task[task].pop(0))
    return picked


def recorded_argmax(drafts: ns.DraftBatch, output: list[int], done: int) -> np.ndarray:
    """The greedy target's argmax at every slot: the recorded next token where the slot's path
    follows the recording, else -1 (a token that no draft carries)."""
    n = drafts.draft_token_num
    pred = np.full((1, n), -1, dtype=np.int64)
    for i in range(n):
        path = [int(drafts.tokens[0, j]) for j in range(1, i + 1) if drafts.mask[0, i, j]]
        end = done + len(path)
        if end < len(output) and output[done:end] == path:
            pred[0, i] = output[end]
    return pred


def replay(cache: ns.NgramCache, row: dict, show: int) -> tuple[int, int]:
    prompt, output = row["prompt_ids"], row["output_ids"]
    depth = cache.config.max_trie_depth
    out = output[:1]
    steps = 0
    while len(out) < len(output):
        seq = prompt + out
        context = seq[-depth:]
        drafts = cache.match([context], request_ids=[row["id"]], total_lens=[len(seq)])
        result = ns.verify_greedy(drafts, recorded_argmax(drafts, output, len(out)))
        emitted = result.emitted[0][: len(output) - len(out)].tolist()
        if steps < show:
            k = int(drafts.num_drafts[0])
            print(f"    step {steps}: drafted {drafts.tokens[0, 1:k + 1].tolist()} "
                  f"-> emitted {emitted}")
        cache.insert([context])
        out += emitted
        steps += 1
    cache.erase([row["id"]])
    assert out == output, "greedy verification must reproduce the recorded output"
    return steps, len(output) - 1


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=4, help="requests to replay (default 4)")
    parser.add_argument("--match-type", choices=["BFS", "PROB"], default="BFS")
    parser.add_argument("--show", type=int, default=3, help="steps to print per request")
    args = parser.parse_args()
    if args.requests < 1:
        parser.error("--requests must be at least 1")

    cache = ns.NgramCache(match_type=args.match_type, capacity=1_000_000)  # SGLang defaults
    print(f"{cache.config}\n")
    total_steps = total_tokens = 0
    for row in load_streams(args.requests):
        print(f"{row['id']} ({row['task']}):")
        steps, tokens = replay(cache, row, args.show)
        total_steps += steps
        total_tokens += tokens
        print(f"    {tokens} decoded tokens in {steps} verify steps: "
              f"{tokens / max(steps, 1):.2f} tokens per step\n")
    print(f"overall: {total_tokens} tokens in {total_steps} steps = "
          f"{total_tokens / max(total_steps, 1):.2f} tokens per verify step "
          f"({args.match_type}; 1.00 would mean speculation never helped)")


if __name__ == "__main__":
    main()
