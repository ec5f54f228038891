"""Executors (local processes, Ray), results files and resume of ``ngramspec sweep``.

The Ray tests are opt-in (``-m ray``; they need ``pip install 'ngramspec[ray]'``) and run on a
local cluster of 2 CPUs started once for the module.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import ngramspec as ns
from cli_helpers import few_streams, run
from ngramspec.sweep import (RESULT_FIELDS, TIMING_FIELDS, LocalExecutor, ResultsFile,
                             ResultsFileError, make_executor)
from ngramspec.streams import embedded_streams_path, write_streams

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    return few_streams(tmp_path_factory, ns.read_streams(embedded_streams_path())[:40])


# Task functions (module level: pickled by name).
def square_plus(task, shared):
    if task == "boom":
        raise RuntimeError("this setting is broken")
    return task * task + shared


def die_once(task, shared):
    flag = Path(shared) / f"died-{task}"
    if not flag.exists():
        flag.write_text("x")
        os._exit(3)  # the worker process dies, as from a crash or an OOM kill
    return task


def always_die(task, shared):
    os._exit(3)


def stable(records):
    """Records keyed by configuration, without the fields that change from run to run."""
    out = {}
    for r in records:
        out[r["key"]] = {k: v for k, v in r.items() if k not in TIMING_FIELDS}
    return out


def assert_same_records(a, b):
    sa, sb = stable(a), stable(b)
    assert set(sa) == set(sb)
    for k in sa:
        for f in sa[k]:
            x, y = sa[k][f], sb[k][f]
            if isinstance(x, float) and math.isnan(x):
                assert isinstance(y, float) and math.isnan(y), (k, f)
            else:
                assert x == y, (k, f, x, y)


# --- local executor -----------------------------------------------------------------------


@pytest.mark.parametrize("jobs", [1, 2])
def test_local_results_and_failures(jobs):
    with LocalExecutor(jobs=jobs) as ex:
        got = list(ex.run(square_plus, [1, 2, "boom", 4], shared=10))
    assert sorted(o.index for o in got) == [0, 1, 2, 3]
    by = {o.index: o for o in got}
    assert [by[i].value for i in (0, 1, 3)] == [11, 14, 26]
    assert by[2].value is None and by[2].error.startswith("RuntimeError: this setting is broken")


def test_local_dead_worker_is_retried(tmp_path):
    with LocalExecutor(jobs=2, retries=1) as ex:
        got = {o.index: o for o in ex.run(die_once, [1, 2, 3], shared=str(tmp_path))}
    assert {i: (o.value, o.error) for i, o in got.items()} == {0: (1, None), 1: (2, None),
                                                               2: (3, None)}


def test_local_worker_that_keeps_dying_is_reported(tmp_path):
    with LocalExecutor(jobs=2, retries=1) as ex:
        got = list(ex.run(always_die, [1, 2], shared=None))
    assert sorted(o.index for o in got) == [0, 1]
    assert all(o.error == "WorkerDied: its worker process died 2 times" for o in got)


def test_make_executor_errors():
    with pytest.raises(ValueError, match="--executor must be one of local, ray"):
        make_executor("dask")
    with pytest.raises(ValueError, match="--jobs must be an integer >= 1"):
        make_executor("local", jobs=-1)
    with pytest.raises(ValueError, match="--address names a Ray cluster"):
        make_executor("local", address="localhost:6379")


# --- sweep with a results file ------------------------------------------------------------

GRID = ["--draft-token-num", "4,8", "--match-type", "BFS,PROB", "--no-progress"]


@pytest.mark.parametrize("suffix", [".jsonl", ".parquet"])
def test_sweep_out_and_resume(streams, tmp_path, suffix):
    if suffix == ".parquet":
        pytest.importorskip("pyarrow")
    full = tmp_path / f"full{suffix}"
    code, text = run(["sweep", str(streams), *GRID, "--jobs", "1", "--out", str(full),
                      "--by", "task"])
    assert code == 0 and f"results in {full} (4 settings)" in text
    records = ResultsFile(full, sweep=_sweep_of(full), resume=True).records()
    assert len(records) == 4 and all(set(r) == set(RESULT_FIELDS) for r in records)
    # The figures are simulate's own, per group too.
    r = next(r for r in records if r["options"] == {"draft_token_num": 8, "match_type": "PROB"})
    want = ns.simulate(ns.read_streams(streams),
                       config=ns.NgramConfig(draft_token_num=8, match_type="PROB"))
    assert r["tokens_per_step"] == want.tokens_per_step
    assert r["verify_steps"] == want.summary.verify_steps
    assert r["groups"] == {k: v.to_dict() for k, v in want.by("task").items()}
    assert r["ngramspec_version"] == ns.__version__ and r["config"]["match_type"] == "PROB"
    # Half of the grid first, then the rest resumed: the same records, and the same table.
    part = tmp_path / f"part{suffix}"
    code, _ = run(["sweep", str(streams), "--draft-token-num", "4", "--match-type", "BFS,PROB",
                   "--no-progress", "--jobs", "1", "--out", str(part), "--by", "task"])
    assert code == 0
    code, text2 = run(["sweep", str(streams), *GRID, "--jobs", "1", "--out", str(part),
                       "--by", "task", "--resume"])
    assert code == 0 and "resuming" in text2 and "2 of 4 settings already there" in text2
    assert_same_records(records, ResultsFile(part, sweep=_sweep_of(part), resume=True).records())
    assert _table_of(text) == _table_of(text2)
    # Resuming a complete file runs nothing and prints the same table.
    code, text3 = run(["sweep", str(streams), *GRID, "--jobs", "1", "--out", str(full),
                       "--by", "task", "--resume"])
    assert code == 0 and "4 of 4 settings already there" in text3
    assert _table_of(text3) == _table_of(text)


def _sweep_of(path):
    if path.suffix == ".jsonl":
        return json.loads(path.read_text().splitlines()[0])["sweep"]
    import pyarrow.parquet as pq
    return pq.read_table(sorted(path.iterdir())[0]).to_pylist()[0]["sweep"]


def _table_of(text):
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("rank"))
    return lines[start:start + 6]


def test_results_file_errors(streams, tmp_path):
    out = tmp_path / "r.jsonl"
    assert run(["sweep", str(streams), *GRID, "--jobs", "1", "--out", str(out)])[0] == 0
    # Exists, no --resume.
    code, _ = run(["sweep", str(streams), *GRID, "--jobs", "1", "--out", str(out)])
    assert code == 2
    # Another sweep (other streams) resuming it.
    code, _ = run(["sweep", str(streams), *GRID, "--limit", "5", "--jobs", "1", "--out",
                   str(out), "--resume"])
    assert code == 2
    lines = out.read_text().splitlines()
    sweep = json.loads(lines[0])["sweep"]
    # Another version.
    old = tmp_path / "old.jsonl"
    old.write_text(json.dumps(dict(json.loads(lines[0]), ngramspec_version="0.0.1")) + "\n")
    with pytest.raises(ResultsFileError, match=r"written by ngramspec 0\.0\.1 .* this is "
                                               r"ngramspec " + ns.__version__.replace(".", r"\.")):
        ResultsFile(old, sweep=sweep, resume=True)
    # Foreign columns.
    foreign = tmp_path / "foreign.jsonl"
    rec = json.loads(lines[0])
    rec["colour"] = "blue"
    del rec["groups"]
    foreign.write_text(json.dumps(rec) + "\n")
    with pytest.raises(ResultsFileError, match="foreign columns colour; missing columns groups"):
        ResultsFile(foreign, sweep=sweep, resume=True)
    junk = tmp_path / "junk.jsonl"
    junk.write_text("hello\n")
    with pytest.raises(ResultsFileError, match=r"junk\.jsonl:1: not a results record"):
        ResultsFile(junk, sweep=sweep, resume=True)
    with pytest.raises(ResultsFileError, match=r"must end in \.jsonl or \.parquet"):
        ResultsFile(tmp_path / "r.csv", sweep=sweep, resume=False)


@pytest.mark.parametrize("argv,message", [
    (["--resume"], "--resume continues a results file: give it with --out"),
    (["--address", "localhost:1"], "--address names a Ray cluster: it needs --executor ray"),
    (["--out", "x.csv"], "must end in .jsonl or .parquet"),
    (["--retries", "-1"], "--retries must be >= 0"),
    (["--by", "colour"], "--by colour: no request has that field"),
])
def test_sweep_flag_errors(streams, capsys, argv, message, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    code, _ = run(["sweep", str(streams), *GRID, "--jobs", "1", *argv])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_torn_last_record_is_dropped_on_resume(streams, tmp_path):
    full = tmp_path / "full.jsonl"
    assert run(["sweep", str(streams), *GRID, "--jobs", "1", "--out", str(full)])[0] == 0
    lines = full.read_text().splitlines(keepends=True)
    torn = tmp_path / "torn.jsonl"
    torn.write_text("".join(lines[:2]) + lines[2][:57])  # a record cut mid-write
    code, text = run(["sweep", str(streams), *GRID, "--jobs", "1", "--out", str(torn),
                      "--resume"])
    assert code == 0 and "2 of 4 settings already there" in text
    sweep = json.loads(lines[0])["sweep"]
    assert_same_records(ResultsFile(full, sweep=sweep, resume=True).records(),
                        ResultsFile(torn, sweep=sweep, resume=True).records())


def test_killed_sweep_resumes_to_the_same_file(streams, tmp_path):
    """A sweep killed (SIGKILL) midway, then resumed, gives the uninterrupted run's records."""
    grid = ["--draft-token-num", "2,4,6,8", "--match-type", "BFS,PROB", "--no-progress"]
    full = tmp_path / "full.jsonl"
    assert run(["sweep", str(streams), *grid, "--jobs", "1", "--out", str(full)])[0] == 0
    out = tmp_path / "killed.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    proc = subprocess.Popen([sys.executable, "-m", "ngramspec", "sweep", str(streams), *grid,
                             "--jobs", "1", "--out", str(out)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline and proc.poll() is None:
        if out.exists() and out.read_bytes().count(b"\n") >= 2:
            break
        time.sleep(0.01)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    written = out.read_bytes().count(b"\n")
    assert 2 <= written < 8, f"the sweep was not killed midway ({written} of 8 written)"
    code, text = run(["sweep", str(streams), *grid, "--jobs", "1", "--out", str(out),
                      "--resume"])
    assert code == 0 and f"{written} of 8 settings already there" in text
    sweep = json.loads(full.read_text().splitlines()[0])["sweep"]
    assert_same_records(ResultsFile(full, sweep=sweep, resume=True).records(),
                        ResultsFile(out, sweep=sweep, resume=True).records())


def test_failing_setting_is_reported_and_the_sweep_goes_on(streams, tmp_path, capsys):
    # The hold-out part of tenant-less "task=doc_grounded" requests is replayed like any part;
    # a hold-out part whose requests all have a single output token cannot be simulated.
    rows = ns.read_streams(streams)[:6]
    rows += [{"id": "single", "prompt_ids": [1, 2], "output_ids": [3], "task": "tiny"}]
    path = tmp_path / "s.jsonl"
    write_streams(rows, path)
    out = tmp_path / "r.jsonl"
    code, text = run(["sweep", str(path), *GRID, "--jobs", "2", "--holdout-by", "task=tiny",
                      "--out", str(out)])
    err = capsys.readouterr().err
    assert code == 1
    assert err.count("ngramspec: setting failed:") == 4 and "no verify steps" in err
    assert "4 of 8 settings failed" in text and "rank" in text
    assert len(out.read_text().splitlines()) == 4  # the tuning part's four


# --- Ray (opt-in: -m ray) -----------------------------------------------------------------


@pytest.fixture(scope="module")
def ray_cluster():
    ray = pytest.importorskip("ray")
    from ngramspec.sweep import RayExecutor

    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])
    ex = RayExecutor(jobs=2)  # a local cluster of 2 CPUs, kept for the module
    yield ex
    ex.close()


@pytest.mark.ray
def test_ray_sweep_identical_to_local(ray_cluster, streams, tmp_path):
    local = tmp_path / "local.jsonl"
    on_ray = tmp_path / "ray.jsonl"
    argv = ["sweep", str(streams), *GRID, "--concurrency", "1,4", "--by", "task",
            "--decode-ms", "10", "--verify-ms", "13", "--draft-ms", "0.02"]
    code, text_local = run(argv + ["--jobs", "1", "--out", str(local)])
    assert code == 0
    code, text_ray = run(argv + ["--executor", "ray", "--out", str(on_ray)])
    assert code == 0
    sweep = json.loads(local.read_text().splitlines()[0])["sweep"]
    a = ResultsFile(local, sweep=sweep, resume=True).records()
    b = ResultsFile(on_ray, sweep=sweep, resume=True).records()
    assert len(a) == len(b) == 8
    assert_same_records(a, b)
    assert _table_of(text_local) == _table_of(text_ray)


@pytest.mark.ray
def test_ray_failures_and_dead_workers(ray_cluster, tmp_path):
    got = {o.index: o for o in ray_cluster.run(square_plus, [1, "boom", 3], shared=10)}
    assert got[0].value == 11 and got[2].value == 19
    assert got[1].error.startswith("RuntimeError: this setting is broken")
    got = {o.index: o for o in ray_cluster.run(die_once, [1, 2], shared=str(tmp_path))}
    assert {i: (o.value, o.error) for i, o in got.items()} == {0: (1, None), 1: (2, None)}


@pytest.mark.ray
def test_ray_shards_identical_to_local(ray_cluster, tmp_path):
    rows = ns.read_streams(embedded_streams_path())[:30]
    for k in range(3):
        write_streams([dict(r, tenant=f"t{i % 2}") for i, r in enumerate(rows) if i % 3 == k],
                      tmp_path / f"part-{k}.jsonl")
    argv = ["simulate", "--shard-by", "tenant", str(tmp_path), "--no-progress", "--json"]
    assert run(argv + [str(tmp_path / "l.json"), "--jobs", "1"])[0] == 0
    assert run(argv + [str(tmp_path / "r.json"), "--executor", "ray"])[0] == 0
    a = json.loads((tmp_path / "l.json").read_text())["levels"][0]
    b = json.loads((tmp_path / "r.json").read_text())["levels"][0]
    for d in [a, b, *a["shards"].values(), *b["shards"].values()]:
        for k in ("wall_seconds", "draft_ms_per_step", "output_tokens_per_second"):
            d["summary"].pop(k)
    assert a == b


def test_unreachable_ray_address(streams, capsys):
    pytest.importorskip("ray")
    code, _ = run(["sweep", str(streams), *GRID, "--executor", "ray", "--address",
                   "127.0.0.1:1"])
    assert code == 2
    err = capsys.readouterr().err
    assert "--address 127.0.0.1:1: no Ray cluster reachable there" in err
    assert err.count("\n") == 1


# --- the sweep library's own examples -------------------------------------------------------


@pytest.mark.parametrize("name", ["ngramspec.sweep", "ngramspec.sweep.jobs",
                                  "ngramspec.sweep.plan", "ngramspec.sweep.split",
                                  "ngramspec.sweep.executors", "ngramspec.sweep.results",
                                  "ngramspec.cli", "ngramspec.cli._report"])
def test_docstring_examples(name):
    import doctest
    import importlib

    result = doctest.testmod(importlib.import_module(name),
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0
