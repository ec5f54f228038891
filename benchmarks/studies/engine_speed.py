"""The engine's speed, A/B against another checkout: match, insert and the compiled replay.

    python -m benchmarks.studies.engine_speed                     # this checkout
    python -m benchmarks.studies.engine_speed --against OLD_ROOT --rounds 3

``--against`` times a second checkout of the repository (e.g. ``git worktree add ../old
a4e8a99``) in alternating processes, ``--rounds`` times each, and prints the medians of the
two and their ratio (new / old) per figure.  Each figure is the minimum over its repeats of
this thread's CPU time (the machine may be shared); SGLang's serving-loop windows (every
request advancing by 3 recorded tokens a step) drive match and insert, and ``simulate`` the
replay, on the shipped streams.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]
D = dict(max_trie_depth=18, min_bfs_breadth=1, max_bfs_breadth=10, draft_token_num=12)


def _load(root: Path):
    """The ``ngramspec`` package of checkout ``root``, imported under its own name."""
    init = root / "ngramspec" / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "ngramspec", init, submodule_search_locations=[str(init.parent)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["ngramspec"] = module
    spec.loader.exec_module(module)
    return module


def _best(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.thread_time()
        fn()
        times.append(time.thread_time() - t0)
    return min(times)


def measure(ns, only: str = "") -> dict[str, float]:
    import numpy as np

    from benchmarks.common import trace as _trace  # imports ngramspec: the one loaded
    from ngramspec.streams import embedded_streams_path

    rows = ns.read_streams(embedded_streams_path())
    out: dict[str, float] = {}
    for mt in ("BFS", "PROB"):
        for batch in (1, 48):
            if only not in f"match {mt} b{batch}":
                continue
            cache = ns.NgramCache(**D, match_type=mt, capacity=1_000_000).warmup()
            steps = _trace(rows[:40], batch)
            half = len(steps) // 2
            for ctxs, ids, lens in steps[:half]:
                cache.match(ctxs, request_ids=ids, total_lens=lens)
                cache.insert(ctxs)
            second = steps[half:]
            ids_all = sorted({i for _, ids, _ in second for i in ids}, key=str)

            def one_pass():
                for ctxs, ids, lens in second:
                    cache.match(ctxs, request_ids=ids, total_lens=lens)
                cache.erase(ids_all)

            one_pass()
            out[f"match {mt} b{batch} (us/call)"] = _best(one_pass, 15) / len(second) * 1e6
    for batch in (1, 64):
        if only not in f"insert b{batch}":
            continue
        cache = ns.NgramCache(**D, capacity=1_000_000).warmup()
        steps = _trace(rows[:40], batch)
        for ctxs, _, _ in steps:
            cache.insert(ctxs)
        window = steps[len(steps) // 2][0]

        def insert():
            for _ in range(200):
                cache.insert(window)

        insert()
        out[f"insert b{batch} (us/call)"] = _best(insert, 11) / 200 * 1e6
    toks = [t for r in rows for t in r["prompt_ids"] + r["output_ids"]]
    if only not in "bulk insert 20k":
        toks = []
    if toks:
        seq = np.asarray((toks * (-(-20000 // len(toks))))[:20000], np.int32)
        ns.NgramCache(capacity=100).warmup()
        out["bulk insert 20k (ms)"] = _best(
            lambda: ns.NgramCache(**D, capacity=1_000_000).insert([seq]), 9) * 1e3
    configs = {"BFS": ns.NgramConfig(), "PROB": ns.NgramConfig(match_type="PROB"),
               "recommended": ns.NgramConfig.recommended(),
               "0.5.9": ns.NgramConfig(profile="sglang-0.5.9"),
               "BFS capacity 2000": ns.NgramConfig(capacity=2000)}
    for name, cfg in configs.items():
        for conc in (1, 8):
            if only not in f"replay {name} c{conc}":
                continue
            ns.simulate(rows[:2], config=cfg)
            out[f"replay {name} c{conc} (ms)"] = _best(
                lambda: ns.simulate(rows, config=cfg, concurrency=conc), 5) * 1e3
    return out


def _child(root: Path, only: str) -> dict[str, float]:
    cmd = [sys.executable, "-m", "benchmarks.studies.engine_speed", "--root", str(root), "--json",
           "--only", only]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=HERE, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=HERE, help="the checkout to time")
    ap.add_argument("--against", type=Path, help="another checkout: an A/B in alternation")
    ap.add_argument("--rounds", type=int, default=3, help="alternations (default 3)")
    ap.add_argument("--json", action="store_true", help="print one JSON line (for --against)")
    ap.add_argument("--only", default="", metavar="TEXT",
                    help="only the figures whose name contains TEXT (e.g. 'replay PROB')")
    args = ap.parse_args(argv)
    if args.against is None:
        ns = _load(args.root.resolve())
        result = measure(ns, args.only)
        if args.json:
            print(json.dumps(result))
        else:
            for k, v in result.items():
                print(f"{k:34s} {v:10.2f}")
        return 0
    new, old = [], []
    for i in range(args.rounds):
        for root, runs in ((args.root, new), (args.against, old))[:: 1 if i % 2 == 0 else -1]:
            runs.append(_child(root.resolve(), args.only))
        print(f"round {i + 1}/{args.rounds} done", file=sys.stderr)
    print(f"{'figure':34s} {'old':>10s} {'new':>10s} {'new/old':>8s}   (medians of "
          f"{args.rounds}; {args.root} against {args.against})")
    for k in new[0]:
        a = statistics.median(r[k] for r in old)
        b = statistics.median(r[k] for r in new)
        print(f"{k:34s} {a:10.2f} {b:10.2f} {b / a:8.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
