"""Where a first run's compile time goes: every Numba compile of a command, per kernel.

Each scenario runs in a fresh process on an empty Numba cache (``NUMBA_CACHE_DIR``), with a
listener on Numba's compile events: per kernel (``module.function``) the number of
specialisations compiled and the seconds spent compiling it, its own share (the time of the
kernels it calls, compiled inside it, excluded) and in all.  Then the scenario's wall time
and the kernels that took most of it.

    python -m benchmarks.studies.compile_time                       # every scenario
    python -m benchmarks.studies.compile_time --scenario main --top 25
    python -m benchmarks.studies.compile_time --json out.json

Scenarios: ``main`` (the README's ``ngramspec simulate --by task``), ``prediction`` (the
README's ``--step-ms 12 --token-ms 0.1 --concurrency 1,4,16,48``), ``recommended``
(``--preset recommended``), ``dropin`` (SGLang's drop-in with ``recommended()``: construction
and its warm-up), ``vllm`` (the vLLM proposer with its default configuration).  Wall time:
run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]

SCENARIOS = {
    "main": "from ngramspec.cli import main; main(['simulate', '--by', 'task'])",
    "prediction": ("from ngramspec.cli import main; main(['simulate', '--step-ms', '12', "
                   "'--token-ms', '0.1', '--concurrency', '1,4,16,48'])"),
    "recommended": "from ngramspec.cli import main; main(['simulate', '--preset', 'recommended'])",
    "dropin": ("import ngramspec as ns\n"
               "from ngramspec.integrations.sglang import NgramCorpus\n"
               "c = ns.NgramConfig.recommended()\n"
               "NgramCorpus(max_trie_depth=c.max_trie_depth, draft_token_num=c.draft_token_num,"
               " config=c)._ready()"),  # (the background warm-up, waited for)
    "vllm": ("import types\nfrom ngramspec.integrations.vllm import Proposer\n"
             "sn = types.SimpleNamespace\n"
             "p = Proposer(sn(speculative_config=sn(num_speculative_tokens=3), "
             "scheduler_config=sn(max_num_seqs=4), model_config=sn(max_model_len=64)))\n"
             "p._warming.wait()"),
}

# Run in the child: the scenario under a listener of Numba's compile events.
_CHILD = r'''
import json, sys, time
from numba.core import event
stack, kernels = [], {}
class Recorder(event.Listener):
    def on_start(self, ev):
        d = ev.data["dispatcher"]
        stack.append([f"{d.py_func.__module__}.{d.py_func.__qualname__}", time.perf_counter(), 0.0])
    def on_end(self, ev):
        name, t0, inner = stack.pop()
        took = time.perf_counter() - t0
        k = kernels.setdefault(name, [0, 0.0, 0.0])
        k[0] += 1; k[1] += took - inner; k[2] += took
        if stack:
            stack[-1][2] += took
t0 = time.perf_counter()
with event.install_listener("numba:compile", Recorder()):
    exec(compile(sys.argv[2], "<scenario>", "exec"))
json.dump({"wall": time.perf_counter() - t0, "kernels": kernels}, open(sys.argv[1], "w"))
'''


def run(scenario: str) -> dict:
    """One scenario in a fresh process on an empty cache: its wall time and, per kernel,
    ``[specialisations, own seconds, seconds in all]``."""
    with tempfile.TemporaryDirectory() as cache:
        out = Path(cache) / "compiles.json"
        env = dict(os.environ, NUMBA_CACHE_DIR=cache, NGRAMSPEC_NUMBA_CACHE="1",
                   NGRAMSPEC_COMPILE_NOTICE="0")
        env.pop("NUMBA_DISABLE_JIT", None)
        subprocess.run([sys.executable, "-c", _CHILD, str(out), SCENARIOS[scenario]],
                       cwd=HERE, env=env, check=True, stdout=subprocess.DEVNULL)
        return json.loads(out.read_text())


def report(name: str, got: dict, top: int) -> None:
    ks = got["kernels"]
    own = sum(v[1] for v in ks.values())
    ours = {k: v for k, v in ks.items() if k.startswith("ngramspec.")}
    print(f"\n{name}: {got['wall']:.1f} s wall, {own:.1f} s compiling, {sum(v[0] for v in ks.values())} "
          f"compiles of {len(ks)} functions ({len(ours)} of ngramspec's, "
          f"{sum(v[0] for v in ours.values())} compiles)")
    print(f"  {'kernel':58} {'compiles':>8} {'own s':>7} {'in all s':>8}")
    for k, (n, mine, total) in sorted(ks.items(), key=lambda kv: -kv[1][1])[:top]:
        print(f"  {k[-58:]:58} {n:8d} {mine:7.2f} {total:8.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenario", nargs="+", choices=list(SCENARIOS), default=list(SCENARIOS))
    ap.add_argument("--top", type=int, default=12, help="kernels listed per scenario")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    results = {}
    for name in args.scenario:
        results[name] = run(name)
        report(name, results[name], args.top)
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
