"""Streamed corpora: iter_streams over shards and globs, the replay admitting requests from an
iterator, simulate_stream and ``simulate --stream / --shard-by``; all equal to the in-memory
path exactly."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.cli import main
from ngramspec.engine.serving.replay import replay, replay_stream
from ngramspec.simulate import pool_results
from ngramspec.streams import StreamError, embedded_streams_path, iter_streams, write_streams

ROWS = ns.read_streams(embedded_streams_path())

CONFIGS = [
    ns.NgramConfig(),
    ns.NgramConfig(capacity=300, draft_token_num=6),  # evicts from the start
    ns.NgramConfig(match_type="PROB", capacity=2_000),
    ns.NgramConfig(profile="sglang-0.5.9", capacity=500),
    ns.NgramConfig(match_type="ADAPTIVE", local_index=True, exact_counts=True, capacity=400),
    ns.NgramConfig(index_prompt=True, capacity=800),
    ns.NgramConfig(exact_counts=True, capacity=1_000),
    ns.NgramConfig.recommended(capacity=2_000),
    ns.NgramConfig.preset("calibrated", capacity=2_000, min_expected_accept="auto"),
]
FLAT = ns.CostModel(decode_ms=12.2, verify_ms=30.0)


def run(argv):
    out = io.StringIO()
    code = main(argv, stdout=out)
    return code, out.getvalue()


@pytest.mark.slow
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c.match_type}-{c.capacity}")
def test_replay_stream_equals_replay(cfg):
    rows = ROWS[:45]
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    # A request with a single output token: admitted, never run.
    prompts.insert(3, np.asarray([1, 2], np.int32))
    outputs.insert(3, np.asarray([7], np.int32))
    costs = FLAT if cfg.min_expected_accept == "auto" else None
    for conc in (1, 3, 100):
        want = replay(prompts, outputs, cfg, concurrency=conc, costs=costs)
        for chunk in (1, 7):
            got = {}
            out = replay_stream(zip(prompts, outputs), cfg, concurrency=conc, chunk=chunk,
                                on_finish=lambda i, e, d: got.setdefault(i, (e, d)),
                                costs=costs)
            assert sorted(got) == list(range(len(prompts)))
            for i in range(len(prompts)):
                assert_array_equal(got[i][0], want.emitted[i])
                assert_array_equal(got[i][1], want.drafts[i])
            assert out.batch_steps == want.batch_steps
            assert out.concurrency == want.concurrency


@pytest.mark.parametrize("conc", [1, 8, 500])
def test_simulate_stream_equals_simulate(conc):
    cfg = ns.NgramConfig(capacity=3_000, match_type="PROB")
    want = ns.simulate(ROWS, config=cfg, concurrency=conc)
    got = {}
    res = ns.simulate_stream(iter(ROWS), config=cfg, concurrency=conc, by="task", chunk=16,
                             on_request=lambda rid, e, d: got.setdefault(rid, (e, d)))
    assert res.summary == want.summary  # every figure, exactly
    assert res.groups == want.by("task") and list(res.groups) == list(want.by("task"))
    assert res.batch_steps == want.batch_steps and res.concurrency == want.concurrency
    assert res.decoding == want.decoding
    assert res.output_tokens == int(want.output_lens.sum())
    for i, rid in enumerate(want.ids):
        assert_array_equal(got[rid][0], want.emitted[i])
        assert_array_equal(got[rid][1], want.drafts[i])
    d = res.to_dict()
    assert d["summary"]["tokens_per_step"] == want.tokens_per_step and "groups" in d


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """The shipped corpus as three shards (JSONL, gzipped JSONL, Parquet when available),
    with a tenant field."""
    d = tmp_path_factory.mktemp("shards")
    rows = [dict(r, tenant=f"t{i % 2}") for i, r in enumerate(ROWS)]
    names = ["a.jsonl", "b.jsonl.gz", "c.jsonl"]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
        names[2] = "c.parquet"
    except ImportError:
        pq = None
    parts = [rows[k::3] for k in range(3)]
    for name, part in zip(names, parts):
        if name.endswith(".parquet"):
            pq.write_table(pa.Table.from_pylist(part), d / name)
        else:
            write_streams(part, d / name)
    return d, [r for part in parts for r in part]


def test_directory_and_glob_of_shards(shards):
    d, rows = shards

    def tokens(records):  # Parquet adds the fields other rows have, as nulls
        return [(r["id"], r["prompt_ids"], r["output_ids"], r["tenant"]) for r in records]

    want = tokens(rows)
    assert tokens(ns.read_streams(d)) == want
    assert tokens(iter_streams(str(d / "*"))) == want
    assert tokens(iter_streams([d / "a.jsonl", str(d / "b.*")])) == \
        want[:len(ROWS[0::3]) + len(ROWS[1::3])]
    cfg = ns.NgramConfig()
    assert ns.simulate_stream(d, config=cfg, concurrency=4).summary == \
        ns.simulate(rows, config=cfg, concurrency=4).summary


def test_parquet_is_read_in_batches(tmp_path):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq
    rows = [{"id": i, "prompt_ids": [i % 7], "output_ids": [1, 2, i % 5]} for i in range(2500)]
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet", row_group_size=700)
    assert list(iter_streams(tmp_path / "s.parquet")) == rows
    bad = rows[:1500] + [{"id": 9999, "prompt_ids": [1], "output_ids": []}]
    pq.write_table(pa.Table.from_pylist(bad), tmp_path / "bad.parquet")
    with pytest.raises(StreamError, match=r"bad\.parquet: row 1500: field 'output_ids' is empty"):
        list(iter_streams(tmp_path / "bad.parquet"))


def test_stream_errors(tmp_path, shards):
    d, rows = shards
    with pytest.raises(StreamError, match=r"the pattern '.*nothing-\*\.jsonl' matches no file"):
        iter_streams(str(tmp_path / "nothing-*.jsonl"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(StreamError, match="is a directory holding no stream files"):
        ns.read_streams(tmp_path / "empty")
    clash = tmp_path / "clash"
    clash.mkdir()
    write_streams(ROWS[:3], clash / "x.jsonl")
    write_streams(ROWS[2:4], clash / "y.jsonl")
    with pytest.raises(StreamError, match=rf"duplicate id {ROWS[2]['id']!r} \(requests 2 and 3 "
                                          r"in .*x\.jsonl and .*y\.jsonl\).*must not share ids"):
        list(iter_streams(clash))
    cfg = ns.NgramConfig()
    with pytest.raises(ValueError, match="streams holds no requests with tenant = 'zz'"):
        ns.simulate_stream(d, config=cfg, where=("tenant", "zz"))
    with pytest.raises(ValueError, match="no verify steps to simulate"):
        ns.simulate_stream([{"id": 1, "prompt_ids": [], "output_ids": [3]}], config=cfg)
    with pytest.raises(KeyError, match="no request has that field"):
        ns.simulate_stream(ROWS[:3], config=cfg, by="colour")


def test_cli_stream_and_shards(shards, tmp_path, capsys):
    d, rows = shards
    cfg = ns.NgramConfig(draft_token_num=8)
    code, text = run(["simulate", "--stream", str(d), "--draft-token-num", "8",
                      "--concurrency", "1,4", "--no-progress", "--by", "task"])
    assert code == 0
    for c in (1, 4):
        want = ns.simulate(rows, config=cfg, concurrency=c)
        assert f"{want.summary.verify_steps:,}" in text
        assert f"{want.tokens_per_step:.3f}" in text
    report = tmp_path / "shards.json"
    code, text = run(["simulate", "--shard-by", "tenant", str(d / "*"), "--draft-token-num",
                      "8", "--concurrency", "2", "--jobs", "2", "--no-progress", "--json",
                      str(report)])
    assert code == 0 and "2 shards by tenant" in text and "pooled" in text
    level = json.loads(report.read_text())["levels"][0]
    per = []
    for t in ("t0", "t1"):
        part = [r for r in rows if r["tenant"] == t]
        want = ns.simulate(part, config=cfg, concurrency=2)
        assert level["shards"][t]["summary"]["tokens_per_step"] == want.tokens_per_step
        assert level["shards"][t]["summary"]["verify_steps"] == want.summary.verify_steps
        per.append(ns.simulate_stream(part, config=cfg, concurrency=2))
    pooled = pool_results(per).summary
    assert level["summary"]["verify_steps"] == pooled.verify_steps
    assert level["summary"]["tokens_per_step"] == pooled.tokens_per_step
    steps = sum(p.summary.verify_steps for p in per)
    emitted = sum(p.summary.emitted_tokens for p in per)
    assert pooled.verify_steps == steps and pooled.tokens_per_step == emitted / steps


@pytest.mark.parametrize("argv,message", [
    (["--stream", "--decode-ms", "3", "--verify-ms", "4"], "needs the in-memory path"),
    (["--shard-by", "tenant", "--limit", "3"], "--limit applies to one corpus"),
    (["--shard-by", "colour"], "--shard-by colour: no request has that field"),
    (["--jobs", "2"], "--jobs applies to --shard-by"),
    (["--stream", "nothing-*.jsonl"], "matches no file"),
])
def test_cli_stream_errors(argv, message, capsys):
    code, _ = run(["simulate", *argv, "--no-progress"])
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_cli_clashing_shards(tmp_path, capsys):
    write_streams(ROWS[:3], tmp_path / "x.jsonl")
    write_streams([dict(r, tenant="b") for r in ROWS[1:2]], tmp_path / "y.jsonl")
    code, _ = run(["simulate", "--shard-by", "tenant", str(tmp_path), "--no-progress"])
    assert code == 2
    assert "must not share ids" in capsys.readouterr().err
