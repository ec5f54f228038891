"""Helpers of the tests that run the ``ngramspec`` command in-process (CLI, executors)."""

from __future__ import annotations

import io
from pathlib import Path

from ngramspec.cli import main
from ngramspec.streams import write_streams


def run(argv: list[str]) -> tuple[int, str]:
    """``ngramspec ARGV`` in this process: (exit status, what it printed on stdout)."""
    out = io.StringIO()
    code = main(argv, stdout=out)
    return code, out.getvalue()


def few_streams(tmp_path_factory, rows: list[dict]) -> Path:
    """``rows`` written to a fresh stream file (for a module-scoped fixture)."""
    path = tmp_path_factory.mktemp("s") / "few.jsonl.gz"
    write_streams(rows, path)
    return path
