"""A first run (empty Numba cache) predicts what the second run predicts: compile time never
counts as drafting cost, for every engine ``simulate`` prices (opt-in: ``-m slow``)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PRICING = ["--step-ms", "12", "--token-ms", "0.1", "--concurrency", "1,8,32"]
ROW = re.compile(r"^\s*(\d+)\s.*?\s([\d.]+)x \(([\d.]+)–([\d.]+)\)", re.M)
DRAFTING = re.compile(r"drafting CPU time: ([\d,.]+) µs per serving step")


def _run(argv: list[str], cache: Path) -> str:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), NGRAMSPEC_NUMBA_CACHE="1",
               NGRAMSPEC_COMPILE_NOTICE="0")
    env.pop("NUMBA_DISABLE_JIT", None)
    out = subprocess.run([sys.executable, "-m", "ngramspec", "simulate", *argv, *PRICING],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _verdict(text: str) -> str:
    line = next(line for line in text.splitlines() if line.startswith("verdict:"))
    return re.sub(r"[\d.]+x", "Nx", line)  # the figure in it is a speed-up, compared below


@pytest.mark.slow
@pytest.mark.parametrize("argv", [["--preset", "vllm", "--engine", "vllm"],
                                  ["--preset", "chain", "--engine", "vllm"],
                                  ["--engine", "custom"],
                                  ["--engine", "sglang"]], ids=lambda a: " ".join(a))
def test_cold_and_warm_runs_agree(argv: list[str], tmp_path: Path) -> None:
    cold = _run(argv, tmp_path / "numba")
    warm = _run(argv, tmp_path / "numba")
    assert _verdict(cold) == _verdict(warm)
    rows_cold, rows_warm = ROW.findall(cold), ROW.findall(warm)
    assert [r[0] for r in rows_cold] == [r[0] for r in rows_warm] == ["1", "8", "32"]
    for (_, x, _, _), (conc, _, lo, hi) in zip(rows_cold, rows_warm):
        # the cold speed-up within the warm run's stated 90% interval
        assert float(lo) <= float(x) <= float(hi), (conc, cold, warm)
    # The replay's own drafting time: the same order (the machine's noise, not 20-40x).
    d_cold, d_warm = (float(DRAFTING.search(t).group(1).replace(",", "")) for t in (cold, warm))
    assert d_cold < 3 * d_warm + 5.0, (d_cold, d_warm)
