"""``ngramspec calibrate``: measure a cost table for a transformers model on this machine."""

from __future__ import annotations

import argparse
from typing import TextIO

from ..costs import CostTable, parse_concurrency
from ._options import add_model, add_progress, add_torch_flags, check_out_dir, write_atomic
from ._report import ProgressBar, format_table

HELP = "measure a cost table for a transformers model"
DESCRIPTION = ("Measure step times of a transformers causal LM on this machine (KV cache of "
               "--context tokens per request, --tokens query tokens under a draft-tree mask; by "
               "default everything a decoding loop pays per step: inputs built and uploaded, "
               "forward, verdict read back, accepted KV rows kept) and write the cost table "
               "(batch,tokens,ms) for --cost-table.")


def add_arguments(cal: argparse.ArgumentParser) -> None:
    add_model(cal)
    cal.add_argument("--batch", default="1,2,3,4,16,48", metavar="LIST",
                     help="batch sizes (default 1,2,3,4,16,48: simulate's 1,4,16,48 and the "
                          "batches of 2 and 3 that concurrency 4 drains through)")
    cal.add_argument("--tokens", default=",".join(map(str, range(1, 17))), metavar="LIST",
                     help="query tokens per request; 1 = plain decode (default 1 to 16: every "
                          "tree size up to the recommended preset's 16, as ADAPTIVE trees vary)")
    cal.add_argument("--context", type=int, default=1024, metavar="N",
                     help="tokens in each request's KV cache (default 1024)")
    cal.add_argument("--repeats", type=int, default=5, metavar="N",
                     help="timed forwards per point; the median is kept (default 5)")
    cal.add_argument("--warmup", type=int, default=2, metavar="N",
                     help="untimed forwards before each point (default 2)")
    cal.add_argument("--timing", default="loop", choices=["loop", "forward"],
                     help="loop: everything a decoding loop pays per step (default); "
                          "forward: the forward alone")
    cal.add_argument("--out", required=True, metavar="FILE.csv", help="where to write the table")
    add_torch_flags(cal, threads="default: torch's; 1 is steadier on a busy machine")
    cal.add_argument("--seed", type=int, default=0, help="seed of the random token ids")
    add_progress(cal)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..measure.calibrate import measure

    batch = parse_concurrency(args.batch, flag="--batch")
    tokens = parse_concurrency(args.tokens, flag="--tokens")
    for name, v in (("--context", args.context), ("--repeats", args.repeats)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    check_out_dir("--out", args.out)
    bar = ProgressBar("calibrate", force=args.progress, delay=0.0)
    try:
        points = measure(args.model, batch=batch, tokens=tokens, context=args.context,
                          repeats=args.repeats, warmup=args.warmup, device=args.device,
                          dtype=args.dtype, seed=args.seed, threads=args.threads,
                          timing=args.timing, progress=bar)
    finally:
        bar.close()
    table = CostTable([p[:3] for p in points], source=f"calibrated {args.model}")
    write_atomic(args.out, table.to_csv())
    if points.failed:
        shown = "; ".join(f"batch {b}, tokens {n}: {why}" for b, n, why in points.failed[:3])
        more = f" and {len(points.failed) - 3} more" if len(points.failed) > 3 else ""
        gone = [f"batch {', '.join(map(str, points.left_out[k]))}" if k == "batch" else
                f"tokens {', '.join(map(str, points.left_out[k]))}"
                for k in ("batch", "tokens") if points.left_out[k]]
        out.write(f"warning: {len(points.failed)} point(s) failed ({shown}{more}); the table "
                  f"leaves out {' and '.join(gone) or 'nothing'}\n")
    out.write(f"cost table for {args.model} on {args.device} (context {args.context} tokens, "
              f"{args.timing} timing, median of {args.repeats}), written to {args.out}:\n")
    cols = ["batch \\ tokens"] + [str(int(n)) for n in table.tokens]
    rows = [[str(int(b))] + [f"{table.grid[i, j]:.3f}" for j in range(table.tokens.size)]
            for i, b in enumerate(table.batches)]
    out.write("\n".join(format_table(cols, rows)) + "\n")
    noisy = [(b, n, lo, hi) for b, n, _, lo, hi in points if hi > 1.5 * lo]
    if noisy:
        b, n, lo, hi = max(noisy, key=lambda p: p[3] / p[2])
        out.write(f"warning: noisy timings at {len(noisy)} of {len(points)} points (e.g. batch "
                  f"{b}, tokens {n}: {lo:.3g} to {hi:.3g} ms); other work on this machine? "
                  "try --threads 1 or more --repeats\n")
    if points.drift is not None:
        b, n, first, last = points.drift
        spread = 100 * points.spread
        out.write(f"steadiness: batch {b}, tokens {n} measured again at the end: {first:.3f} "
                  f"then {last:.3f} ms ({spread:+.1f}%)\n")
        if abs(spread) > 10:
            out.write(f"warning: timings drifted {spread:+.1f}% during the run; other work on "
                      "this machine? try --threads 1, or measure again\n")
    out.write(f"use it: ngramspec simulate --cost-table {args.out} --concurrency "
              f"{','.join(str(int(b)) for b in table.batches)}\n"
              f"check it: ngramspec check {args.model} STREAMS --cost-table {args.out} "
              "--concurrency 1,4\n")
    return 0
