"""``ngramspec warmup``: compile the kernels of some configurations into Numba's disk cache."""

from __future__ import annotations

import argparse
import os
import time
from typing import TextIO

from ..config import PRESETS, NgramConfig

HELP = "compile the kernels of some configurations now (container images, CI)"
DESCRIPTION = ("Compile into Numba's disk cache what the given configurations run: the "
               "compiled replay of simulate, the step API a prediction times, SGLang's "
               "worker on the drop-in NgramCorpus (SGLang profiles) and vLLM's custom "
               "proposer (chains), so that later runs, servers included, start without "
               "compiling.  The cache is NUMBA_CACHE_DIR if set, else beside the package.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    from ..integrations.warmup import PARTS

    p.add_argument("--preset", action="append", choices=PRESETS, metavar="NAME",
                   help=f"a preset to compile (repeatable; default: sglang and recommended); "
                        f"one of {', '.join(PRESETS)}")
    p.add_argument("--config", action="append", default=[], metavar="FILE.toml",
                   help="a configuration file to compile (repeatable)")
    p.add_argument("--parts", default=",".join(PARTS), metavar="LIST",
                   help=f"what to compile, comma-separated (default: all of "
                        f"{','.join(PARTS)})")


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..integrations.warmup import warm_everything

    parts = tuple(p.strip() for p in args.parts.split(",") if p.strip())
    configs = [(name, NgramConfig.preset(name)) for name in (
        args.preset or ([] if args.config else ["sglang", "recommended"]))]
    configs += [(path, NgramConfig.from_toml(path)) for path in args.config]
    where = os.environ.get("NUMBA_CACHE_DIR") or "beside the package's sources"
    out.write(f"compiling into Numba's cache ({where})\n")
    out.flush()
    start = time.perf_counter()
    for name, cfg in configs:
        def report(part: str, seconds: float, name: str = name) -> None:
            out.write(f"  {name}: {part} {seconds:.1f} s\n")
            out.flush()

        warm_everything(cfg, parts, report)
    out.write(f"done in {time.perf_counter() - start:.1f} s\n")
    return 0
