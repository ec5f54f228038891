"""The command line over drawn bad input: option values (huge, zero, negative, float,
non-numeric) and stream files (empty, negative or out-of-vocabulary ids, truncated gzip, not
JSON).  Every run ends within seconds with exit status 0 or 2, and an error is one line that
is neither a traceback nor an "unexpected" failure."""

from __future__ import annotations

import gzip
import json
import time

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ngramspec.cli import main

SIZE_FLAGS = ["--draft-token-num", "--external-sam-budget", "--external-corpus-max-tokens", "--max-trie-depth", "--max-bfs-breadth", "--min-bfs-breadth",
              "--capacity", "--concurrency", "--limit", "--shared-prompt-window",
              "--decode-ms", "--min-token-prob"]
VALUES = st.one_of(
    st.sampled_from(["0", "-1", "-100000", "1.5", "abc", "", "1e9", "nan", "inf"]),
    st.integers(-10**12, 10**12).map(str),
    st.sampled_from([str(2**31), str(2**63), "100000", "1000000"]),
)
GOOD = {"id": "a", "prompt_ids": [1, 2, 3, 1, 2], "output_ids": [3, 1, 2, 3, 1, 2]}


def _stream_file(tmp_path, kind: str) -> str:
    path = tmp_path / f"{kind}.jsonl"
    if kind == "empty":
        path.write_text("")
    elif kind == "negative":
        path.write_text(json.dumps(dict(GOOD, prompt_ids=[4, -5, 6])) + "\n")
    elif kind == "vocab":
        path.write_text(json.dumps(dict(GOOD, vocab_size=3)) + "\n")
    elif kind == "not-json":
        path.write_text("{id: a}\n")
    elif kind == "truncated-gzip":
        blob = gzip.compress((json.dumps(GOOD) + "\n").encode() * 50)
        path = tmp_path / "t.jsonl.gz"
        path.write_bytes(blob[: len(blob) // 2])
    else:
        path.write_text(json.dumps(GOOD) + "\n" + json.dumps(dict(GOOD, id="b")) + "\n")
    return str(path)


def _run(argv: list[str], capsys) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    try:
        code = main(argv)
    except SystemExit as e:  # argparse's own refusals
        code = e.code if isinstance(e.code, int) else 2
    return code, capsys.readouterr().err, time.perf_counter() - t0


@settings(max_examples=int(__import__("os").environ.get("CLI_EXAMPLES", "60")), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(flag=st.sampled_from(SIZE_FLAGS), value=VALUES,
       stream=st.sampled_from(["good", "empty", "negative", "vocab", "not-json",
                               "truncated-gzip"]))
def test_bad_input_ends_fast_with_a_one_line_error(tmp_path, capsys, flag, value, stream):
    argv = ["simulate", _stream_file(tmp_path, stream), "--no-progress", flag, value]
    code, err, seconds = _run(argv, capsys)
    assert code in (0, 2), (argv, code, err)
    assert "Traceback" not in err and "unexpected" not in err, (argv, err)
    if code == 2:
        assert err.strip(), argv
    if stream != "good":  # a bad file is refused whatever the options say
        assert code == 2, (argv, err)
    assert seconds < 30, (argv, seconds)


def test_the_harness_runs_good_input(tmp_path, capsys):
    """The same call with good values succeeds (so the property above tests the values)."""
    good = _stream_file(tmp_path, "good")
    for flag, value in (("--draft-token-num", "8"), ("--concurrency", "1000000"),
                        ("--max-trie-depth", "64")):
        code, err, _ = _run(["simulate", good, "--no-progress", flag, value], capsys)
        assert code == 0, err
