"""Save a small Qwen2-style causal LM with random weights: a model for ``calibrate`` and
``check`` without any download.

Its vocabulary covers the shipped streams' token ids (Qwen2.5's 151,936 by default), so that
``ngramspec check`` can decode them; the weights are random, which does not matter there
(decoding is teacher-forced: the recording decides, the forwards run for real).  The figures in
the docs were made with::

    python -m benchmarks.studies.random_model rand-model --layers 2 --hidden 256
    ngramspec calibrate rand-model --threads 1 --out rand-costs.csv
    ngramspec check rand-model $(python -c "import ngramspec.streams as s; \\
        print(s.embedded_streams_path())") --cost-table rand-costs.csv \\
        --max-requests 8 --concurrency 1,4 --threads 1

Needs torch and transformers (``pip install 'ngramspec[calibrate]'``).
"""

from __future__ import annotations

import argparse
import sys


def save_random_model(path: str, *, layers: int = 2, hidden: int = 256, vocab: int = 151936,
                      heads: int = 4, kv_heads: int = 2, dtype: str = "float32",
                      seed: int = 0) -> None:
    """Write a random Qwen2-style causal LM (and its config) to the directory ``path``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    cfg = AutoConfig.for_model(
        "qwen2", vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=layers, num_attention_heads=heads, num_key_value_heads=kv_heads,
        max_position_embeddings=32768, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg).to(getattr(torch, dtype))
    model.save_pretrained(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("path", metavar="DIR", help="where to save the model")
    ap.add_argument("--layers", type=int, default=2, help="decoder layers (default 2)")
    ap.add_argument("--hidden", type=int, default=256, help="hidden size (default 256)")
    ap.add_argument("--vocab", type=int, default=151936,
                    help="vocabulary (default 151936, Qwen2.5's: covers the shipped streams)")
    ap.add_argument("--heads", type=int, default=4, help="attention heads (default 4)")
    ap.add_argument("--kv-heads", type=int, default=2, help="key/value heads (default 2)")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    if min(args.layers, args.hidden, args.vocab, args.heads, args.kv_heads) < 1:
        ap.error("--layers, --hidden, --vocab, --heads and --kv-heads must be >= 1")
    if args.hidden % args.heads or args.heads % args.kv_heads:
        ap.error("--hidden must be a multiple of --heads, and --heads of --kv-heads")
    save_random_model(args.path, layers=args.layers, hidden=args.hidden, vocab=args.vocab,
                      heads=args.heads, kv_heads=args.kv_heads, dtype=args.dtype,
                      seed=args.seed)
    print(f"random Qwen2-style model ({args.layers} layers, hidden {args.hidden}, vocab "
          f"{args.vocab}, {args.dtype}) saved to {args.path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
