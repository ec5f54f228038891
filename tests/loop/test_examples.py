"""The speculative-decoding examples run and are lossless (identical to plain greedy)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def run_example(name: str, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(EXAMPLES / name), *args], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_numpy_loop_is_lossless():
    out = run_example("numpy_speculative_greedy.py", "--check", "--prompts", "4")
    assert "all identical: yes" in out


@pytest.mark.hf
def test_transformers_tree_attention_is_lossless():
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    out = run_example("hf_speculative_greedy.py", "--check", "--prompts", "3",
                      "--new-tokens", "48")
    assert "all identical: yes" in out
    plain, spec = map(int, re.search(r"target forwards (\d+) plain vs (\d+) speculative",
                                     out).groups())
    assert spec < plain  # the drafts were used, not just verified away
