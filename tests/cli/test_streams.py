"""Reading recorded streams: formats, metadata, and errors that name the file and line."""

from __future__ import annotations

import doctest
import gzip
import importlib
import json

import pytest

import ngramspec as ns
from ngramspec.streams import StreamError, embedded_streams_path, write_streams

GOOD = {"id": "r1", "prompt_ids": [1, 2, 3], "output_ids": [4, 5], "task": "t", "extra": {"a": 1}}


def write_lines(path, lines, gz=False):
    opener = gzip.open if gz else open
    with opener(path, "wt") as f:
        f.write("\n".join(lines) + "\n")
    return path


def test_embedded_corpus():
    rows = ns.read_streams(embedded_streams_path())
    assert len(rows) == 133
    assert {r["task"] for r in rows} == {"code_complete", "code_edit", "chat_multiturn",
                                         "doc_grounded"}
    assert sum(len(r["output_ids"]) for r in rows) == 29_426


@pytest.mark.parametrize("gz", [False, True])
def test_jsonl_round_trip_keeps_metadata(tmp_path, gz):
    other = dict(GOOD, id=7)
    path = write_lines(tmp_path / ("s.jsonl.gz" if gz else "s.jsonl"),
                       [json.dumps(GOOD), "", json.dumps(other)], gz=gz)
    rows = ns.read_streams(path)
    assert rows == [GOOD, other]
    # A list of paths is read in order; records may be mixed in.
    rows2 = ns.read_streams([str(path), {"id": "x", "prompt_ids": [], "output_ids": [9]}])
    assert [r["id"] for r in rows2] == ["r1", 7, "x"]


def test_write_streams(tmp_path):
    assert write_streams([GOOD], tmp_path / "w.jsonl") == 1
    assert ns.read_streams(tmp_path / "w.jsonl") == [GOOD]


def test_parquet(tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    table = pa.Table.from_pylist([{k: v for k, v in GOOD.items() if k != "extra"},
                                  {"id": "r2", "prompt_ids": [], "output_ids": [8],
                                   "task": "u"}])
    pq.write_table(table, tmp_path / "s.parquet")
    rows = ns.read_streams(tmp_path / "s.parquet")
    assert rows[0]["output_ids"] == [4, 5] and rows[1]["task"] == "u"
    bad = pa.Table.from_pylist([{"id": "a", "prompt_ids": [1]}])
    pq.write_table(bad, tmp_path / "bad.parquet")
    with pytest.raises(StreamError, match=r"bad\.parquet: row 0: missing required field\(s\) "
                                          r"'output_ids'"):
        ns.read_streams(tmp_path / "bad.parquet")


@pytest.mark.parametrize("line,message", [
    ('{"id": "a", "prompt_ids": [1], "output_ids": [2]', r"s\.jsonl:2: not valid JSON"),
    ('{"id": "a", "prompt_ids": [1]}', r"s\.jsonl:2: missing required field\(s\) 'output_ids'"),
    ('[1, 2]', r"s\.jsonl:2: a record must be a JSON object"),
    ('{"id": 1.5, "prompt_ids": [1], "output_ids": [2]}', r"s\.jsonl:2: field 'id' must be a str"),
    ('{"id": "a", "prompt_ids": "12", "output_ids": [2]}',
     r"s\.jsonl:2: field 'prompt_ids' must be a list of integer token ids, got str"),
    ('{"id": "a", "prompt_ids": [1], "output_ids": [2, 3.0]}',
     r"s\.jsonl:2: output_ids\[1\] must be an integer token id, got float"),
    ('{"id": "a", "prompt_ids": [true], "output_ids": [2]}',
     r"s\.jsonl:2: prompt_ids\[0\] must be an integer token id, got bool"),
    ('{"id": "a", "prompt_ids": [1], "output_ids": [4294967296]}',
     r"s\.jsonl:2: output_ids\[0\] = 4294967296 is not a token id \(ids are integers in "
     r"\[0, 2147483647\]"),
    ('{"id": "a", "prompt_ids": [4, -5, 6], "output_ids": [2]}',
     r"s\.jsonl:2: prompt_ids\[1\] = -5 is not a token id .*not negative"),
    ('{"id": "a", "prompt_ids": [4], "output_ids": [2, 10], "vocab_size": 10}',
     r"s\.jsonl:2: output_ids\[1\] = 10 is outside the record's vocabulary \(vocab_size 10: "
     r"ids 0\.\.9\)"),
    ('{"id": "a", "prompt_ids": [4], "output_ids": [2], "vocab_size": 0}',
     r"s\.jsonl:2: field 'vocab_size' \(optional\) must be an integer >= 1"),
    ('{"id": "a", "prompt_ids": [1], "output_ids": []}',
     r"s\.jsonl:2: field 'output_ids' is empty"),
    ('{"id": "r1", "prompt_ids": [1], "output_ids": [2]}',
     r"duplicate id 'r1' \(requests 0 and 1\)"),
])
def test_malformed_line_names_file_and_line(tmp_path, line, message):
    path = write_lines(tmp_path / "s.jsonl", [json.dumps(GOOD), line])
    with pytest.raises(StreamError, match=message):
        ns.read_streams(path)


def test_other_errors(tmp_path):
    with pytest.raises(StreamError, match="no such file"):
        ns.read_streams(tmp_path / "missing.jsonl")
    (tmp_path / "e").mkdir()
    (tmp_path / "e" / "empty.jsonl").write_text("")
    with pytest.raises(StreamError, match=r"empty\.jsonl' holds no records"):
        ns.read_streams(tmp_path / "e" / "empty.jsonl")
    with pytest.raises(StreamError, match="is a directory"):
        ns.read_streams(tmp_path)
    (tmp_path / "bin.jsonl.gz").write_bytes(b"\x1f\x8b\x08garbage")
    with pytest.raises(StreamError, match=r"bin\.jsonl\.gz: cannot be read"):
        ns.read_streams(tmp_path / "bin.jsonl.gz")
    with pytest.raises(TypeError, match="streams must be a path"):
        ns.read_streams(42)
    with pytest.raises(TypeError, match="streams must be a path"):
        ns.read_streams(GOOD)
    with pytest.raises(StreamError, match=r"record 1: missing required field"):
        ns.read_streams([GOOD, {"id": 2}])
    assert issubclass(StreamError, ValueError)


@pytest.mark.parametrize("name", ["ngramspec.streams.files", "ngramspec.simulate.runs",
                                  "ngramspec.costs.model", "ngramspec.cli"])
def test_docstring_examples(name):
    result = doctest.testmod(importlib.import_module(name),
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0
    assert result.attempted > 0


def test_streams_check_reports_every_problem_at_once(tmp_path, capsys):
    from ngramspec.cli import main
    from ngramspec.streams import check_streams

    bad = write_lines(tmp_path / "bad.jsonl", [
        json.dumps({"id": 1, "prompt_ids": [4, -5], "output_ids": [6]}),
        json.dumps({"id": 2, "prompt_ids": [4], "output_ids": []}),
        "not json",
        json.dumps({"id": 3, "prompt_ids": [4], "output_ids": [7]}),
        json.dumps({"id": 3, "prompt_ids": [4], "output_ids": [7]}),
        json.dumps({"id": 4, "prompt_ids": [4], "output_ids": [7], "vocab_size": 5})])
    (tmp_path / "empty.jsonl").write_text("")
    blob = gzip.compress((json.dumps(GOOD) + "\n").encode() * 200)
    (tmp_path / "cut.jsonl.gz").write_bytes(blob[:len(blob) // 2])
    good, problems = check_streams([bad, tmp_path / "empty.jsonl", tmp_path / "cut.jsonl.gz"])
    assert [p.split(": ")[0] for p in problems[:5]] == [f"{bad}:{k}" for k in (1, 2, 3, 5, 6)]
    assert "prompt_ids[1] = -5" in problems[0] and "'output_ids' is empty" in problems[1]
    assert "not valid JSON" in problems[2] and "duplicate id 3" in problems[3]
    assert "vocab_size 5" in problems[4] and "holds no records" in problems[5]
    assert "cut.jsonl.gz: cannot be read" in problems[6] and len(problems) == 7
    assert good == 1  # line 4 of bad.jsonl (the cut gzip fails before its first line)
    assert main(["streams", "check", str(bad)]) == 1
    out = capsys.readouterr().out.splitlines()
    assert out[-1] == "1 good record(s), 5 problem(s)" and len(out) == 6
    ok = write_lines(tmp_path / "ok.jsonl", [json.dumps(GOOD)])
    assert main(["streams", "check", str(ok)]) == 0
    assert capsys.readouterr().out == "1 good record(s), 0 problem(s)\n"
