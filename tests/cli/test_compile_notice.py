"""A first run says on stderr, as it starts, that it is compiling kernels, and what."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

from ngramspec.cli import main

ROOT = Path(__file__).resolve().parents[2]


def _first_stderr_lines(argv: list[str], cache: Path, count: int, timeout: float) -> list[str]:
    """The first ``count`` stderr lines of ``python -m ngramspec ARGV`` on an empty Numba
    cache, output piped; the process is stopped once they arrived (no waiting for the
    compile)."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(cache), NGRAMSPEC_NUMBA_CACHE="1")
    for name in ("NUMBA_DISABLE_JIT", "NGRAMSPEC_COMPILE_NOTICE"):
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "ngramspec", *argv], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    lines: list[str] = []

    def read() -> None:
        for line in proc.stderr:
            lines.append(line.rstrip("\n"))
            if len(lines) >= count:
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(timeout)
    stdout_so_far = ""
    proc.kill()
    try:
        stdout_so_far = proc.communicate(timeout=30)[0]
    finally:
        proc.wait()
    assert stdout_so_far == "", "the notice must come before any of the report"
    return lines


def test_the_first_run_announces_the_compile_piped(tmp_path):
    # Before the notice a first run printed nothing at all while it compiled (piped: no
    # progress bar either).  The generous timeout is for loaded machines: what is checked is
    # that the notice comes at the start of the compile, not after it (it takes ~20 s).
    lines = _first_stderr_lines(["simulate", "--by", "task"], tmp_path / "numba", 2,
                                timeout=60)
    assert lines == [
        "ngramspec: compiling kernels on first use (cached on disk: later runs skip this)",
        "ngramspec: compiling the serving-loop replay for this configuration ...",
    ]


def test_no_notice_without_a_compile(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("NGRAMSPEC_COMPILE_NOTICE", "1")
    # The second run in a process finds its kernels compiled: nothing about compiling.
    rows = tmp_path / "s.jsonl"
    rows.write_text('{"id": "a", "prompt_ids": [1, 2, 3], "output_ids": [1, 2, 3, 1, 2, 3]}\n')
    assert main(["simulate", str(rows)]) == 0
    capsys.readouterr()
    assert main(["simulate", str(rows)]) == 0
    assert "compil" not in capsys.readouterr().err


def test_the_notice_can_be_silenced(tmp_path):
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"), NGRAMSPEC_COMPILE_NOTICE="0")
    env.pop("NUMBA_DISABLE_JIT", None)
    code = ("import numpy as np, ngramspec as ns\n"
            "c = ns.NgramCache()\n"
            "c.insert([[1, 2, 3, 1, 2]])\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
