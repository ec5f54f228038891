"""``ngramspec warmup`` compiles into the disk cache what later runs would compile."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from ngramspec.cli import main

ROOT = Path(__file__).resolve().parents[2]


def test_unknown_parts_are_refused(capsys):
    assert main(["warmup", "--parts", "simulate,everything"]) == 2
    err = capsys.readouterr().err
    assert "'everything' is not one of simulate, step-api, sglang, vllm" in err


def _cli(argv: list[str], cache: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), NGRAMSPEC_NUMBA_CACHE="1")
    for name in ("NUMBA_DISABLE_JIT", "NGRAMSPEC_COMPILE_NOTICE"):
        env.pop(name, None)
    return subprocess.run([sys.executable, "-m", "ngramspec", *argv], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)


@pytest.mark.slow
def test_after_warmup_the_readme_command_and_a_prediction_compile_nothing(tmp_path: Path):
    warm = _cli(["warmup", "--preset", "sglang"], tmp_path)
    assert warm.returncode == 0, warm.stderr
    assert "sglang: simulate" in warm.stdout and "sglang: step-api" in warm.stdout
    for argv in (["simulate", "--by", "task"],
                 ["simulate", "--step-ms", "12", "--token-ms", "0.1", "--concurrency", "1,4"],
                 ["simulate", "--engine", "sglang", "--step-ms", "12", "--token-ms", "0.1"]):
        run = _cli(argv, tmp_path)
        assert run.returncode == 0, run.stderr
        assert "compiling" not in run.stderr, (argv, run.stderr)
