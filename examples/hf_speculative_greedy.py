"""Speculative greedy decoding of a Hugging Face causal LM with ngramspec's drafts: lossless.

For each prompt, decode greedily twice: plainly (one forward per token) and with ngramspec's
n-gram draft trees verified in one forward each (tree attention through a 4-D mask, position
ids from the tree depths, a KV cache kept across steps in which only the accepted path's entries
survive).  Prints, per prompt, whether the outputs are identical, the target forward passes of
each, and the mean accept length.

By default the model is a small Qwen2-style transformer with random weights from a fixed seed
(no downloads), run in float64 so that argmax near-ties cannot flip between a tree pass and a
one-token decode.  ``--model DIR`` loads a local model directory (and its tokenizer) instead.

One verify step, in the notation of ngramspec:

    drafts  = drafter.propose([rid])               # slot 0: the last token (not yet in the KV cache)
    kv      = drafter.total_len(rid) - 1           # tokens in the KV cache
    logits  = model(drafts.tokens, position_ids=drafts.positions([kv]),
                    attention_mask=drafts.additive_attention_mask([kv]), cache=cache)
    result  = ns.verify_greedy_logits(drafts, logits)
    keep KV rows kv + result.accept_index (accepted slots, root first); drop the rest
    drafter.accept(result)                         # accepted drafts + bonus

Run:  python examples/hf_speculative_greedy.py --check
Needs: pip install torch transformers   (CPU is fine)
"""

from __future__ import annotations

import argparse
import inspect
import sys
import time

import numpy as np

import ngramspec as ns
from _lossless import LosslessTable

try:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM
except ImportError:  # pragma: no cover - the message is the point
    sys.exit("this example needs torch and transformers: pip install torch transformers")


def tiny_model(vocab: int, seed: int, layers: int, hidden: int):
    cfg = AutoConfig.for_model(
        "qwen2", vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, attn_implementation="eager")
    return model.to(torch.float64).eval()


def repetitive_prompts(vocab: int, count: int, seed: int) -> list[list[int]]:
    """Token prompts with structure an n-gram drafter can use: repeated phrases with edits."""
    rng = np.random.default_rng(seed)
    prompts = []
    for _ in range(count):
        phrases = [rng.integers(1, vocab, size=rng.integers(3, 8)).tolist() for _ in range(3)]
        prompt: list[int] = []
        for _ in range(rng.integers(4, 8)):
            phrase = list(phrases[rng.integers(len(phrases))])
            if rng.random() < 0.3:
                phrase[rng.integers(len(phrase))] = int(rng.integers(1, vocab))
            prompt += phrase
        prompts.append(prompt)
    return prompts


def forward(model, input_ids, cache=None, **kwargs):
    """``model(...)`` with the KV cache passed and returned under this transformers' name
    (``cache`` since 5.x, ``past_key_values`` before)."""
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else \
        "past_key_values"
    out = model(input_ids, use_cache=True, **kwargs, **({name: cache} if cache else {}))
    return out.logits, getattr(out, name)


def kv_keep(cache, rows: torch.Tensor) -> None:
    """Keep only these sequence positions of every layer's keys and values."""
    if hasattr(cache, "layers"):
        for layer in cache.layers:
            layer.keys = layer.keys.index_select(-2, rows)
            layer.values = layer.values.index_select(-2, rows)
    else:  # older DynamicCache
        for i in range(len(cache.key_cache)):
            cache.key_cache[i] = cache.key_cache[i].index_select(-2, rows)
            cache.value_cache[i] = cache.value_cache[i].index_select(-2, rows)


@torch.no_grad()
def greedy(model, prompt: list[int], new_tokens: int) -> tuple[list[int], int]:
    logits, cache = forward(model, torch.tensor([prompt]))
    tok, forwards = int(logits[0, -1].argmax()), 1
    result = [tok]
    while len(result) < new_tokens:
        logits, cache = forward(model, torch.tensor([[tok]]), cache)
        tok = int(logits[0, -1].argmax())
        forwards += 1
        result.append(tok)
    return result, forwards


@torch.no_grad()
def speculative(model, drafter: ns.Drafter, rid: str, prompt: list[int],
                new_tokens: int) -> tuple[list[int], int, list[int]]:
    logits, cache = forward(model, torch.tensor([prompt]))  # prefill: no drafting
    forwards = 1
    drafter.add_request(rid, prompt, int(logits[0, -1].argmax()))
    accept_lens = []
    while len(drafter.output(rid)) < new_tokens:
        drafts = drafter.propose([rid])
        kv = drafter.total_len(rid) - 1
        logits, cache = forward(
            model, torch.from_numpy(drafts.tokens.astype(np.int64)), cache,
            position_ids=torch.from_numpy(drafts.positions([kv])),
            attention_mask=torch.from_numpy(drafts.additive_attention_mask([kv],
                                                                          dtype=np.float64)))
        forwards += 1
        result = ns.verify_greedy_logits(drafts, logits)  # argmax in torch, (B, n) copied
        # Only the accepted path's KV entries survive: the root (slot 0) and accepted slots.
        slots = result.accept_index[0][result.accept_index[0] >= 0]
        kv_keep(cache, torch.cat([torch.arange(kv), kv + torch.from_numpy(slots.astype(np.int64))]))
        left = new_tokens - len(drafter.output(rid))
        accept_lens.append(min(int(result.accept_lens[0]), left))
        drafter.accept(result, max_tokens=left)  # accepted drafts + bonus, cut at the end
    output = drafter.output(rid).tolist()
    drafter.finish(rid)
    return output, forwards, accept_lens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", metavar="DIR", help="a local model directory (default: a "
                        "tiny random Qwen2-style model)")
    parser.add_argument("--prompts", type=int, default=4, help="prompts to decode (default 4)")
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens per prompt")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layers", type=int, default=2, help="layers of the tiny model")
    parser.add_argument("--hidden", type=int, default=64, help="hidden size of the tiny model")
    parser.add_argument("--vocab", type=int, default=256, help="vocabulary of the tiny model")
    parser.add_argument("--draft-token-num", type=int, default=12,
                        help="draft tree slots, root included (SGLang's default 12)")
    parser.add_argument("--check", action="store_true",
                        help="exit non-zero unless every output equals plain greedy decoding")
    args = parser.parse_args(argv)
    if args.prompts < 1 or args.new_tokens < 1:
        parser.error("--prompts and --new-tokens must be at least 1")

    torch.set_num_threads(1)
    if args.model:
        from transformers import AutoTokenizer
        model = AutoModelForCausalLM.from_pretrained(args.model, torch_dtype=torch.float64,
                                                     attn_implementation="eager").eval()
        tok = AutoTokenizer.from_pretrained(args.model)
        texts = ["def add(a, b):\n    return a + b\n\ndef sub(a, b):\n    return a - b\n\n"
                 "def mul(a, b):\n", "Repeat after me: the quick brown fox. " * 3,
                 "1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11,", "a b c a b c a b"]
        prompts = [tok(t)["input_ids"] for t in texts][:args.prompts]
    else:
        model = tiny_model(args.vocab, args.seed, args.layers, args.hidden)
        prompts = repetitive_prompts(args.vocab, args.prompts, args.seed)

    drafter = ns.Drafter(config=ns.NgramConfig(draft_token_num=args.draft_token_num,
                                               capacity=100_000))
    t0 = time.perf_counter()
    table = LosslessTable([("prompt", ">6"), ("tokens", ">6")], forwards="target")
    for i, prompt in enumerate(prompts):
        plain, plain_fwd = greedy(model, prompt, args.new_tokens)
        spec, spec_fwd, lens = speculative(model, drafter, f"p{i}", prompt, args.new_tokens)
        table.add([i, len(plain)], plain, spec, plain_fwd, spec_fwd, lens)
    return table.finish(check=args.check, note=f" ({time.perf_counter() - t0:.1f} s)")


if __name__ == "__main__":
    sys.exit(main())
