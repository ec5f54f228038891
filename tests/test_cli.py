"""The ``ngramspec`` command, run in-process."""

from __future__ import annotations

import io
import json
import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.cli import ProgressBar, main
from ngramspec.streams import embedded_streams_path, write_streams


def run(argv):
    out = io.StringIO()
    code = main(argv, stdout=out)
    return code, out.getvalue()


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    rows = ns.read_streams(embedded_streams_path())[::11]
    path = tmp_path_factory.mktemp("s") / "few.jsonl.gz"
    write_streams(rows, path)
    return path, rows


def test_simulate_table_and_json(streams, tmp_path):
    path, rows = streams
    report = tmp_path / "r.json"
    code, text = run(["simulate", str(path), "--match-type", "PROB", "--draft-token-num", "8",
                      "--concurrency", "2", "--by", "task", "--json", str(report),
                      "--decode-ms", "12.2", "--verify-ms", "30", "--no-progress"])
    assert code == 0
    cfg = ns.NgramConfig(match_type="PROB", draft_token_num=8)
    want = ns.simulate(rows, config=cfg, concurrency=2)
    assert f"{want.tokens_per_step:.3f}" in text
    for task in {r["task"] for r in rows}:
        assert f"  {task}" in text
    assert "speed-up" in text and "SLOWER" in text
    data = json.loads(report.read_text())
    assert set(data) == {"config", "summary", "groups", "requests", "cost_table", "prediction",
                         "verdict"}
    assert data["config"]["match_type"] == "PROB" and data["config"]["draft_token_num"] == 8
    assert data["summary"]["tokens_per_step"] == want.tokens_per_step
    assert data["summary"]["concurrency"] == 2
    assert [r["id"] for r in data["requests"]] == [r["id"] for r in rows]
    for got, r in zip(data["requests"], want.emitted):
        assert all(isinstance(x, int) for x in got["emitted"])
        assert_array_equal(np.asarray(got["emitted"]), r)
    assert data["prediction"][0]["concurrency"] == 2
    assert data["prediction"][0]["speed_up"] < 1


def test_simulate_default_corpus_limit():
    code, text = run(["simulate", "--limit", "5"])
    assert code == 0 and "5 requests" in text and "qwen2.5-coder-0.5b-greedy" in text


@pytest.mark.parametrize("argv,message", [
    (["simulate", "--limit", "2", "--max-bfs-breadth", "0"], "max_bfs_breadth"),
    (["simulate", "--limit", "2", "--decode-ms", "3"], "needs both decode_ms and verify_ms"),
    (["simulate", "--limit", "2", "--draft-ms", "3"], "--draft-ms needs a cost model"),
    (["simulate", "no-such-file.jsonl"], "no such file"),
    (["simulate", "--limit", "2", "--by", "colour"], "no request has that field"),
    (["simulate", "--limit", "0"], "--limit must be >= 1"),
    (["sweep", "--limit", "2", "--draft-token-num", "4,x"],
     "--draft-token-num: 'x' is not an integer"),
    (["sweep", "--limit", "2", "--match-type", "BFS,DFS"], "'DFS' is not one of BFS, PROB"),
    (["sweep", "--limit", "2", "--jobs", "0"], "--jobs must be >= 1"),
])
def test_errors_name_the_flag(capsys, argv, message):
    code, _ = run(argv)
    assert code == 2
    assert message in capsys.readouterr().err


def test_sweep_ranks_and_plots(streams, tmp_path):
    path, rows = streams
    report, png = tmp_path / "sweep.json", tmp_path / "sweep.png"
    argv = ["sweep", str(path), "--match-type", "BFS,PROB", "--draft-token-num", "4,12",
            "--jobs", "2", "--step-ms", "10", "--token-ms", "0.05", "--json", str(report),
            "--no-progress"]
    if _has_matplotlib():
        argv += ["--plot", str(png)]
    code, text = run(argv)
    assert code == 0
    data = json.loads(report.read_text())["results"]
    assert len(data) == 4
    speedups = [r["speedup"] for r in data]
    assert speedups == sorted(speedups, reverse=True)
    for r in data:
        want = ns.simulate(rows, config=ns.NgramConfig(**r["options"]))
        assert r["tokens_per_step"] == want.tokens_per_step
    assert "rank" in text and "speed-up" in text
    if _has_matplotlib():
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def _has_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def test_progress_bar():
    buf = io.StringIO()
    bar = ProgressBar("x", stream=buf, force=True, delay=0.0, width=10)
    bar(5, 10)
    bar(10, 10)
    bar.close()
    assert "[#####.....]  50.0% 5/10" in buf.getvalue()
    assert buf.getvalue().endswith("100.0% 10/10\n")
    quiet = io.StringIO()
    ProgressBar("x", stream=quiet)(1, 2)  # not a terminal: nothing
    assert quiet.getvalue() == ""


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "ngramspec", "simulate", "--limit", "2"],
                         capture_output=True, text=True, check=True)
    assert "tokens/step" in out.stdout
