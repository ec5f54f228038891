"""The speculative decode loop with no deep-learning framework: a NumPy n-gram "model".

The target here is a deterministic 4-gram language model (with back-off) estimated from the
real token streams shipped with ngramspec.  Its "forward pass" over a draft tree gives, at
every slot, the argmax next token for the context prompt + output + the slot's path, which is
exactly what a transformer computes with tree attention.  The loop is the one you would write
around any model:

    drafter.add_request(rid, prompt, first_token)        # after prefill
    while not done:
        drafts  = drafter.propose([rid])
        argmax  = model.tree_argmax(context, drafts)      # one "forward" over the whole tree
        result  = ns.verify_greedy(drafts, argmax)
        drafter.accept(result)
    drafter.finish(rid)

Run:  python examples/numpy_speculative_greedy.py --check
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import Counter, defaultdict
from importlib.resources import files

import numpy as np

import ngramspec as ns
from _lossless import LosslessTable


class NgramLM:
    """Greedy 4-gram LM with back-off to shorter contexts; ties go to the smaller token id."""

    def __init__(self, corpus: list[list[int]], order: int = 4) -> None:
        self.order = order
        counts: dict[tuple[int, ...], Counter] = defaultdict(Counter)
        for seq in corpus:
            for i in range(len(seq)):
                for k in range(order):
                    if i - k >= 0:
                        counts[tuple(seq[i - k:i])][seq[i]] += 1
        self.best = {ctx: min(c, key=lambda t: (-c[t], t)) for ctx, c in counts.items()}

    def next_token(self, context: list[int]) -> int:
        for k in range(self.order - 1, -1, -1):
            if k <= len(context):
                tok = self.best.get(tuple(context[len(context) - k:]))
                if tok is not None:
                    return tok
        raise AssertionError("the empty context always has a prediction")

    def tree_argmax(self, context: list[int], drafts: ns.DraftBatch) -> np.ndarray:
        """(1, n) argmax at every slot of row 0: the "forward pass" over the draft tree."""
        n = drafts.draft_token_num
        out = np.empty((1, n), np.int64)
        for i in range(n):
            path = [int(drafts.tokens[0, j]) for j in range(1, i + 1) if drafts.mask[0, i, j]]
            out[0, i] = self.next_token(context + path)
        return out


def load(limit: int) -> list[dict]:
    with gzip.open(files("ngramspec") / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz", "rt") as f:
        rows = [json.loads(line) for line in f]
    return rows[:limit]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompts", type=int, default=6)
    parser.add_argument("--new-tokens", type=int, default=96)
    parser.add_argument("--check", action="store_true",
                        help="exit non-zero unless every output equals plain greedy decoding")
    args = parser.parse_args(argv)
    if args.prompts < 1 or args.new_tokens < 1:
        parser.error("--prompts and --new-tokens must be at least 1")

    rows = load(args.prompts)
    model = NgramLM([r["prompt_ids"] + r["output_ids"] for r in rows])
    drafter = ns.Drafter(config=ns.NgramConfig(capacity=200_000))
    table = LosslessTable([("request", "<34")], forwards="model")
    for row in rows:
        prompt = row["prompt_ids"]
        plain = [model.next_token(prompt)]
        while len(plain) < args.new_tokens:
            plain.append(model.next_token(prompt + plain))

        drafter.add_request(row["id"], prompt, model.next_token(prompt))
        forwards = 0
        while len(drafter.output(row["id"])) < args.new_tokens:
            drafts = drafter.propose([row["id"]])
            context = drafter.sequence(row["id"]).tolist()
            result = ns.verify_greedy(drafts, model.tree_argmax(context, drafts))
            left = args.new_tokens - len(drafter.output(row["id"]))
            drafter.accept(result, max_tokens=left)
            forwards += 1
        spec = drafter.output(row["id"]).tolist()
        steps = drafter.steps(row["id"])
        drafter.finish(row["id"])

        # Forwards: one per plain token (the prefill's included); the speculative steps and
        # the prefill.
        table.add([row["id"]], plain, spec, len(plain), forwards + 1, steps)
    return table.finish(check=args.check)


if __name__ == "__main__":
    sys.exit(main())
