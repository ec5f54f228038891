"""A newcomer's first run: ``ngramspec simulate --by task`` with Numba's disk cache empty.

    python -m benchmarks.studies.first_run                       # this checkout
    python -m benchmarks.studies.first_run --against OLD_ROOT --rounds 3

Each round runs the command in a fresh process with an empty cache directory
(``NUMBA_CACHE_DIR``), output piped as in a script or CI log, and then once more on the cache
it filled.  Printed per checkout: the medians of the cold run's wall time, of when its first
line reached stderr (the compile notice, where there is one) and of the warm run's wall time;
with ``--against`` (a second checkout, e.g. ``git worktree add ../old 788a3de``, run in
alternating processes) the ratios new / old.  Wall time, so run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]


def run_once(root: Path, argv: list[str], cache: str) -> tuple[float, float | None, str]:
    """One ``python -m ngramspec ARGV`` in checkout ``root``: (wall seconds, seconds to the
    first stderr line or None, the first stderr line)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=cache, NGRAMSPEC_NUMBA_CACHE="1")
    env.pop("NUMBA_DISABLE_JIT", None)
    t0 = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "ngramspec", *argv], cwd=root, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    first: list = []

    def read_stderr() -> None:
        for line in proc.stderr:
            if not first:
                first.extend([time.perf_counter() - t0, line.rstrip()])

    reader = threading.Thread(target=read_stderr)
    reader.start()
    proc.stdout.read()
    proc.wait()
    reader.join()
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"{root}: ngramspec {' '.join(argv)} exited {proc.returncode}")
    return wall, (first[0] if first else None), (first[1] if first else "")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--against", type=Path, help="a second checkout to time in the same run")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--command", default="simulate --by task",
                    help="the ngramspec command line (default: %(default)s)")
    args = ap.parse_args()
    argv = args.command.split()
    roots = {"this": HERE}
    if args.against is not None:
        roots["against"] = args.against.resolve()
    cold: dict[str, list[float]] = {k: [] for k in roots}
    notice: dict[str, list[float]] = {k: [] for k in roots}
    warm: dict[str, list[float]] = {k: [] for k in roots}
    lines: dict[str, str] = {}
    for r in range(args.rounds):
        for name, root in roots.items():
            with tempfile.TemporaryDirectory() as cache:
                wall, at, line = run_once(root, argv, cache)
                cold[name].append(wall)
                if at is not None:
                    notice[name].append(at)
                lines[name] = line
                warm[name].append(run_once(root, argv, cache)[0])
            print(f"round {r + 1} {name}: cold {wall:.1f} s, first stderr line at "
                  f"{'-' if at is None else f'{at:.1f} s'}, warm {warm[name][-1]:.1f} s",
                  file=sys.stderr)
    med = statistics.median
    print(f"ngramspec {args.command}: medians of {args.rounds} round(s), output piped")
    print(f"{'checkout':10} {'cold run':>10} {'1st stderr':>11} {'warm run':>10}  first stderr line")
    for name in roots:
        at = f"{med(notice[name]):.1f} s" if notice[name] else "none"
        print(f"{name:10} {med(cold[name]):8.1f} s {at:>11} {med(warm[name]):8.1f} s  "
              f"{lines[name][:70]}")
    if "against" in roots:
        print(f"ratio this / against: cold {med(cold['this']) / med(cold['against']):.2f}, "
              f"warm {med(warm['this']) / med(warm['against']):.2f}")


if __name__ == "__main__":
    main()
