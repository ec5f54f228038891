"""Big sweeps and big corpora: the measurements behind docs/big-sweeps.md.

    python -m benchmarks.studies.big_sweeps scaling --repeats 5   # 16 settings, 2 jobs vs 1
    python -m benchmarks.studies.big_sweeps ray --repeats 5       # Ray overhead per setting
    python -m benchmarks.studies.big_sweeps generate DIR --requests 1000000 --files 10
    python -m benchmarks.studies.big_sweeps stream DIR            # peak memory and tokens/s

``generate`` writes a synthetic corpus cut from the streams shipped with ngramspec: request
``j`` takes shipped request ``j % 133``, a window of its output as the continuation (24 tokens)
and the 32 tokens before it as the prompt, so the n-gram statistics are real ones.  ``stream``
runs ``ngramspec simulate --stream`` on it under ``/usr/bin/time -v`` (peak resident memory)
and compares tokens/s with the in-memory path on the first file.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from ngramspec.streams import embedded_streams_path, read_streams
from ngramspec.sweep import LocalExecutor, RayExecutor, expand_grid, plan_sweep, run_job

# The checkout this file belongs to: the commands below run its copy of ngramspec.
ROOT = Path(__file__).resolve().parents[2]
# Two 16-setting grids: SGLang's BFS/PROB (about 0.1 s per setting on the shipped streams)
# and ADAPTIVE around recommended() (about 0.25 s per setting).
GRIDS = {
    "sglang": ["--draft-token-num", "2,4,6,8,10,12,14,16", "--match-type", "BFS,PROB"],
    "adaptive": ["--preset", "recommended", "--min-token-prob", "0.1,0.2,0.3,0.5",
                 "--max-spec-factor", "1,2,3,4"],
}


def _sweep_seconds(jobs: int, executor: str = "local", grid: str = "sglang") -> float:
    """Wall time of the sweep phase as the command reports it (kernel loading and pool
    start-up included)."""
    cmd = [sys.executable, "-m", "ngramspec", "sweep", *GRIDS[grid], "--jobs", str(jobs),
           "--executor", executor, "--no-progress"]
    text = subprocess.run(cmd, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                          capture_output=True, text=True, check=True).stdout
    return float(re.search(r"\(([\d.]+) s, ", text).group(1))


def scaling(repeats: int) -> None:
    print(f"16 settings per grid, 133 shipped requests, {os.cpu_count()} CPUs, load average "
          f"{os.getloadavg()[0]:.2f} at the start")
    for grid in GRIDS:
        one, two = [], []
        for _ in range(repeats):  # interleaved: load from other work hits both alike
            one.append(_sweep_seconds(1, grid=grid))
            two.append(_sweep_seconds(2, grid=grid))
        m1, m2 = statistics.median(one), statistics.median(two)
        print(f"{grid} grid ({' '.join(GRIDS[grid])})")
        print(f"  1 job : {', '.join(f'{x:.2f}' for x in one)} s (median {m1:.2f})")
        print(f"  2 jobs: {', '.join(f'{x:.2f}' for x in two)} s (median {m2:.2f})")
        print(f"  speed-up (median 1 job / median 2 jobs): {m1 / m2:.2f}x")


def _noop(task, shared):
    return task


def ray_overhead(repeats: int) -> None:
    rows = read_streams(embedded_streams_path())
    plan = plan_sweep(rows, expand_grid({"draft_token_num": list(range(2, 17, 2)),
                                         "match_type": ["BFS", "PROB"]}))
    jobs, parts = plan.jobs, plan.parts
    t0 = time.perf_counter()
    ray_ex = RayExecutor(jobs=2)
    start = time.perf_counter() - t0
    import ray
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])

    def wall(ex):
        t = time.perf_counter()
        outs = list(ex.run(run_job, jobs, shared=parts))
        assert all(o.error is None for o in outs), [o.error for o in outs if o.error]
        return time.perf_counter() - t, sum(o.seconds for o in outs)

    wall(ray_ex)  # warm: the workers load the kernels once
    ray_w, ray_t, loc_w, loc_t = [], [], [], []
    for _ in range(repeats):
        w, t = wall(ray_ex)
        ray_w.append(w)
        ray_t.append(t)
        with LocalExecutor(jobs=2) as ex:
            w, t = wall(ex)
        loc_w.append(w)
        loc_t.append(t)
    n = 64
    t = time.perf_counter()
    list(ray_ex.run(_noop, list(range(n)), shared=parts))
    noop = (time.perf_counter() - t) / n
    ray_ex.close()
    mr, ml = statistics.median(ray_w), statistics.median(loc_w)
    print(f"local Ray cluster start: {start:.1f} s (once per sweep without --address)")
    print(f"16 settings on 2 CPUs, warm workers: Ray {', '.join(f'{x:.2f}' for x in ray_w)} s "
          f"(median {mr:.2f}); local processes {', '.join(f'{x:.2f}' for x in loc_w)} s "
          f"(median {ml:.2f}, pool start-up included)")
    per = [(w - t / 2) / len(jobs) for w, t in zip(ray_w, ray_t)]
    print(f"Ray overhead per setting: (wall - task time / 2 CPUs) / 16 = median "
          f"{statistics.median(per) * 1e3:.0f} ms; vs local processes "
          f"{(mr - ml) / len(jobs) * 1e3:+.0f} ms; a no-op task round trip (64 tasks, corpus "
          f"by reference): {noop * 1e3:.1f} ms")


def generate(out: Path, requests: int, files: int) -> None:
    rows = read_streams(embedded_streams_path())
    out.mkdir(parents=True, exist_ok=True)
    per_file = -(-requests // files)
    j = 0
    for f in range(files):
        with open(out / f"part-{f:02d}.jsonl", "w", encoding="utf-8") as fh:
            buf = io.StringIO()
            for _ in range(min(per_file, requests - j)):
                r = rows[j % len(rows)]
                seq = r["prompt_ids"] + r["output_ids"]
                plen = len(r["prompt_ids"])
                span = len(r["output_ids"]) - 24
                at = plen + ((j // len(rows)) * 7) % max(span, 1)
                buf.write(json.dumps({"id": j, "tenant": f"t{j % 4}",
                                      "task": r.get("task"),
                                      "prompt_ids": seq[max(0, at - 32):at],
                                      "output_ids": seq[at:at + 24]},
                                     separators=(",", ":")) + "\n")
                j += 1
            fh.write(buf.getvalue())
    print(f"{j:,} requests in {files} files under {out}")


def _timed_run(args: list[str]) -> tuple[str, float, int]:
    """stdout, wall seconds and peak resident memory (KiB) of a command."""
    t = time.perf_counter()
    p = subprocess.run(["/usr/bin/time", "-v", sys.executable, *args], cwd=ROOT,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True,
                       text=True, check=True)
    wall = time.perf_counter() - t
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", p.stderr).group(1))
    return p.stdout, wall, rss


def stream(corpus: Path, capacity: int) -> None:
    code = ("import sys, time, ngramspec as ns\n"
            "mode, cap, *src = sys.argv[1:]\n"
            "cfg = ns.NgramConfig(capacity=int(cap))\n"
            "t = time.perf_counter()\n"
            "if mode == 'stream':\n"
            "    r = ns.simulate_stream(src, config=cfg, concurrency=8)\n"
            "    s, tokens = r.summary, r.output_tokens\n"
            "elif mode == 'memory':\n"
            "    r = ns.simulate(ns.read_streams(src), config=cfg, concurrency=8)\n"
            "    s, tokens = r.summary, int(r.output_lens.sum())\n"
            "else:\n"
            "    r = None; s = None; tokens = 0\n"
            "if r is not None:\n"
            "    print(s.requests, s.verify_steps, repr(s.tokens_per_step), tokens,\n"
            "          r.wall_seconds, time.perf_counter() - t)\n")
    files = sorted(str(p) for p in corpus.glob("*.jsonl"))
    _, _, base = _timed_run(["-c", code + "import numba\n", "none", str(capacity)])
    print(f"baseline (python + numpy + numba imported): peak RSS {base / 1024:.0f} MiB")
    for label, mode, src in (("in-memory, first file", "memory", files[:1]),
                             ("streamed, first file", "stream", files[:1]),
                             (f"streamed, all {len(files)} files", "stream", files)):
        out, wall, rss = _timed_run(["-c", code, mode, str(capacity), *src])
        req, steps, tps, tokens, replay_s, total_s = out.split()
        print(f"{label}: {int(req):,} requests, {int(tokens):,} output tokens, "
              f"tokens/step {float(tps):.6f}; replay {float(replay_s):.1f} s "
              f"({int(tokens) / float(replay_s):,.0f} tokens/s), read + replay "
              f"{float(total_s):.1f} s ({int(tokens) / float(total_s):,.0f} tokens/s); "
              f"peak RSS {rss / 1024:.0f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="what", required=True)
    for name in ("scaling", "ray"):
        p = sub.add_parser(name)
        p.add_argument("--repeats", type=int, default=5)
    g = sub.add_parser("generate")
    g.add_argument("out", type=Path)
    g.add_argument("--requests", type=int, default=1_000_000)
    g.add_argument("--files", type=int, default=10)
    s = sub.add_parser("stream")
    s.add_argument("corpus", type=Path)
    s.add_argument("--capacity", type=int, default=2_000_000)
    a = ap.parse_args()
    if a.what == "scaling":
        scaling(a.repeats)
    elif a.what == "ray":
        ray_overhead(a.repeats)
    elif a.what == "generate":
        generate(a.out, a.requests, a.files)
    else:
        stream(a.corpus, a.capacity)


if __name__ == "__main__":
    main()
