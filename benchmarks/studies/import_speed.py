"""Speed of ``ngramspec streams import`` on short OpenAI-chat conversations.

Builds a small byte-level BPE tokenizer (trained here on texts of the shipped recorded
streams) with a ChatML-like chat template, writes N short conversations (a system, a user and
an assistant message of 10-60 words each), and times the import, in this process, a few times
(the tokenizer loaded once, untimed).  Prints conversations per second (median of the runs)
and per CPU-second (all threads; a measure less sensitive to other work on the machine).

    python -m benchmarks.import_speed [--n 100000] [--repeats 3]

Needs the ``import`` extra (transformers, tokenizers).
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from pathlib import Path

import ngramspec as ns
from ngramspec.streams.importers import import_streams

from benchmarks.common import train_chat_tokenizer

TEMPLATE = (
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' }}"
    "{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="conversations (default 100000)")
    ap.add_argument("--repeats", type=int, default=3, help="timed imports (default 3)")
    args = ap.parse_args()
    rows = ns.read_streams(ns.streams.embedded_streams_path())
    texts = [r["prompt_text"] for r in rows] + [r["output_text"] for r in rows]
    words = " ".join(texts).split()
    rng = random.Random(0)
    with tempfile.TemporaryDirectory() as d:
        d = Path(d)
        train_chat_tokenizer(d / "tok", texts, vocab_size=4000, chat_template=TEMPLATE)

        def say(lo: int, hi: int) -> str:
            i = rng.randrange(len(words) - hi)
            return " ".join(words[i:i + rng.randint(lo, hi)])

        src = d / "chat.jsonl"
        with open(src, "w", encoding="utf-8") as f:
            for i in range(args.n):
                f.write(json.dumps({"id": i, "messages": [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": say(10, 60)},
                    {"role": "assistant", "content": say(10, 60)}]}) + "\n")
        from ngramspec.streams.importers import load_chat_tokenizer
        tok = load_chat_tokenizer(d / "tok")  # loading transformers is not timed
        times, cpu = [], []
        for _ in range(args.repeats):
            t0, c0 = time.perf_counter(), time.process_time()
            report = import_streams([src], d / "out.jsonl.gz", format="openai-chat",
                                    tokenizer=tok)
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
            assert report.streams == args.n, report.summary()
        med, med_cpu = statistics.median(times), statistics.median(cpu)
        print(f"{args.n:,} conversations: median {med:.2f} s of {args.repeats} "
              f"({', '.join(f'{t:.2f}' for t in times)}): {args.n / med:,.0f} conversations/s; "
              f"CPU time (all threads) median {med_cpu:.2f} s: "
              f"{args.n / med_cpu:,.0f} conversations per CPU-second")


if __name__ == "__main__":
    main()
