"""``ngramspec costs import``: cost tables from SGLang's own records (issue 34, item 3).

The files below are written the way SGLang 0.5.23's code writes them, read in its wheel
(``pip download sglang==0.5.23 --no-deps``):

- ``sglang/benchmark/one_batch.py``: ``latency_test_run_once()`` fills a result dict
  (run_name, batch_size, input_len, output_len, prefill_latency, prefill_throughput,
  median_decode_latency and median_decode_throughput when output_len > 1, total_latency,
  overall_throughput; times in seconds of ``time.perf_counter()``, the decode one
  ``np.median`` of the decode steps), and ``latency_test()`` appends each result to
  ``--result-filename`` as ``json.dumps(result) + "\\n"``.
- ``sglang/srt/entrypoints/http_server.py``: ``server_info()`` (``/get_server_info``) returns
  the resolved server arguments (``build_server_info`` in ``sglang/srt/utils/common.py``, flat
  fields such as speculative_algorithm, speculative_num_draft_tokens, decode_log_interval)
  with ``internal_states``, one per scheduler, plus version; a scheduler's state
  (``sglang/srt/managers/scheduler_components/internal_state.py``, ``get_internal_state``
  and ``_add_step_times``) is its resolved arguments plus ``step_time_dict``, which
  ``report_decode_stats()`` in ``metrics_reporter.py`` fills under
  ``SGLANG_RECORD_STEP_TIME=1``: ``step_time_dict[len(batch.reqs)].append(gap_latency /
  decode_log_interval)``, seconds.  The HTTP response is JSON, so its integer batch-size keys
  arrive as strings, as ``json.dumps`` writes them here.

Every expected value is the median, computed here from the raw lists with
:func:`statistics.median`, of the values converted to milliseconds.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from ngramspec.costs import CostTable, CostTableError
from ngramspec.costs.records import RecordsError, import_records, merge_records, read_records
from cli_helpers import run

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "sglang-records"


def one_batch_result(batch_size, median_decode_latency, *, input_len=1024, output_len=16,
                     run_name="default"):
    """One run's result, with the fields ``latency_test_run_once`` sets."""
    prefill, total = 0.05 * batch_size, 0.05 * batch_size + 0.3
    result = {"run_name": run_name, "batch_size": batch_size, "input_len": input_len,
              "output_len": output_len, "prefill_latency": prefill,
              "prefill_throughput": input_len * batch_size / prefill}
    if output_len > 1:
        result["median_decode_latency"] = median_decode_latency
        result["median_decode_throughput"] = batch_size / median_decode_latency
    result["total_latency"] = total
    result["overall_throughput"] = (input_len + output_len) * batch_size / total
    return result


def write_one_batch(path, results):
    with open(path, "a") as fout:  # appended, one JSON object a line
        for result in results:
            fout.write(json.dumps(result) + "\n")
    return str(path)


def server_info(step_times, *, algorithm=None, draft_tokens=None, interval=40):
    """A ``/get_server_info`` dump: ``step_times`` holds one ``{batch: [seconds]}`` per
    scheduler (None: recorded nothing, the variable unset)."""
    args = {"model_path": "some/model", "tp_size": 8, "dp_size": len(step_times),
            "speculative_algorithm": algorithm, "speculative_num_draft_tokens": draft_tokens,
            "decode_log_interval": interval, "max_running_requests": 48}
    states = []
    for recorded in step_times:
        state = dict(args, world_size=8, last_gen_throughput=0.0)
        if recorded is not None:
            state["step_time_dict"] = {int(b): list(ts) for b, ts in recorded.items()}
        states.append(state)
    return dict(args, launch_command="python -m sglang.launch_server ...", startup_time=1.0,
                internal_states=states, version="0.5.23", frontend="python")


def write_json(path, obj):
    Path(path).write_text(json.dumps(obj))
    return str(path)


def ms(seconds):
    """The median of a list of times in seconds, in milliseconds (the expected point)."""
    return statistics.median([s * 1000 for s in seconds])


DECODE_1 = [0.0121, 0.0123]        # two runs at batch 1 (input_len 512 and 1024)
DECODE_8 = [0.0139]
PLAIN_1 = [0.0124, 0.0126, 0.0125, 0.0131]          # a plain server's steps, scheduler 0
PLAIN_1_DP1 = [0.0127, 0.0122, 0.0129]              # scheduler 1 (data parallel)
VERIFY_1 = [0.0301, 0.0297, 0.0312, 0.0305]
VERIFY_8 = [0.0331, 0.0322, 0.0340]


@pytest.fixture()
def bench(tmp_path):
    return write_one_batch(tmp_path / "result.jsonl", [
        one_batch_result(1, DECODE_1[0], input_len=512), one_batch_result(1, DECODE_1[1]),
        one_batch_result(8, DECODE_8[0]),
        one_batch_result(1, None, output_len=1)])   # prefill only: no decode latency


@pytest.fixture()
def ngram(tmp_path):
    info = server_info([{1: VERIFY_1, 8: VERIFY_8}], algorithm="NGRAM", draft_tokens=16)
    return write_json(tmp_path / "server_info.json", info)


# --- each format ------------------------------------------------------------------------------

def test_bench_one_batch_gives_decode_points(bench):
    rec = read_records(bench)
    assert rec.format == "bench_one_batch" and not rec.drafting_included
    assert rec.values == {(1, 1): tuple(s * 1000 for s in DECODE_1), (8, 1): (DECODE_8[0] * 1000,)}
    costs = merge_records([rec])
    assert costs.points == ((1, 1, ms(DECODE_1)), (8, 1, ms(DECODE_8)))
    assert costs.missing == () and costs.warnings == ()
    assert any("line 4: output_len 1 times no decode step: skipped" in n for n in costs.notes)
    assert any("batch 1 pools runs of input_len/output_len 1024/16, 512/16" in n
               for n in costs.notes)


def test_plain_server_step_times_give_decode_points_pooled_over_schedulers(tmp_path):
    path = write_json(tmp_path / "plain.json",
                      server_info([{1: PLAIN_1}, {1: PLAIN_1_DP1, 4: [0.0133]}]))
    rec = read_records(path)
    assert rec.format == "server_step_times" and not rec.drafting_included
    costs = merge_records([rec])
    assert costs.points == ((1, 1, ms(PLAIN_1 + PLAIN_1_DP1)), (4, 1, ms([0.0133])))
    assert not costs.drafting_included and costs.table().drafting_included is False
    assert any("pools the step times of 2 schedulers" in n for n in costs.notes)
    assert "plain decode, each value the mean of 40 steps" in rec.summary()


def test_ngram_server_step_times_give_verify_points_with_drafting(ngram):
    rec = read_records(ngram)
    assert rec.drafting_included
    assert rec.values == {(1, 16): tuple(s * 1000 for s in VERIFY_1),
                          (8, 16): tuple(s * 1000 for s in VERIFY_8)}
    assert "NGRAM, 16 draft tokens" in rec.summary()


def test_files_merge_into_a_full_grid_that_keeps_drafting_included(bench, ngram):
    costs = import_records([bench, ngram])
    want = [(1, 1, ms(DECODE_1)), (1, 16, ms(VERIFY_1)), (8, 1, ms(DECODE_8)),
            (8, 16, ms(VERIFY_8))]
    assert list(costs.points) == want and costs.missing == () and costs.drafting_included
    table = costs.table()
    assert table.points() == want and table.drafting_included
    assert any(n.startswith("drafting included") for n in costs.notes)
    # Round trips: CSV (six significant digits, the table format) and JSON (exact).
    back = CostTable.parse(costs.to_csv())
    assert back.drafting_included
    assert back.points() == [(b, n, float(f"{v:.6g}")) for b, n, v in want]
    from_json = CostTable.parse(table.to_json())
    assert from_json.points() == want and from_json.drafting_included


# --- the flag on CostTable ------------------------------------------------------------------

def test_drafting_included_defaults_to_false_and_is_checked():
    grid = [(1, 1, 10.0), (1, 8, 14.0)]
    assert CostTable(grid).drafting_included is False
    assert CostTable.parse("batch,tokens,ms\n1,1,10\n1,8,14\n").drafting_included is False
    assert CostTable.parse(json.dumps([{"batch": 1, "tokens": 1, "ms": 10}])
                           ).drafting_included is False
    assert "drafting" not in repr(CostTable(grid))
    assert CostTable.parse(CostTable(grid).to_json()).drafting_included is False
    with pytest.raises(TypeError, match="drafting_included must be a bool"):
        CostTable(grid, drafting_included=1)
    with pytest.raises(CostTableError, match="drafting_included must be true or false"):
        CostTable.parse(json.dumps({"points": [], "drafting_included": "yes"}))


def test_the_csv_mark_keeps_line_numbers_in_errors():
    text = "# drafting included in verify rows\nbatch,tokens,ms\n1,1,10\n1,8,zero\n"
    with pytest.raises(CostTableError, match=r"line 4: ms must be a number"):
        CostTable.parse(text)
    # Only the exact mark is read: any other comment line is still a header error.
    with pytest.raises(CostTableError, match="missing column"):
        CostTable.parse("# some note\nbatch,tokens,ms\n1,1,10\n")


# --- duplicates, conflicts, holes -----------------------------------------------------------

def test_a_file_given_twice_is_a_duplicate_with_its_own_value(bench):
    costs = import_records([bench, bench])
    assert costs.points == import_records([bench]).points and costs.warnings == ()
    dup = [n for n in costs.notes if "given twice or more, equal" in n]
    assert len(dup) == 2 and all(n.count(bench) == 2 for n in dup)


def test_conflicting_points_pool_their_values_and_warn_naming_both_files(tmp_path, bench):
    other = write_one_batch(tmp_path / "other.jsonl", [one_batch_result(1, 0.0150)])
    costs = import_records([bench, other])
    assert dict(((b, n), v) for b, n, v in costs.points)[(1, 1)] == ms(DECODE_1 + [0.0150])
    (warning,) = costs.warnings
    assert warning.startswith("batch=1 tokens=1 differs between ")
    assert f"{bench} ({ms(DECODE_1):.4g} ms)" in warning and f"{other} (15 ms)" in warning


def test_holes_are_noted_written_and_refused_by_simulate(tmp_path, bench, capsys):
    ngram_1 = write_json(tmp_path / "ngram1.json",
                         server_info([{1: VERIFY_1}], algorithm="NGRAM", draft_tokens=16))
    costs = import_records([bench, ngram_1])
    assert costs.missing == ((8, 16),)
    assert any("not a full grid: missing batch=8 tokens=16" in n for n in costs.notes)
    with pytest.raises(CostTableError, match="not a full grid"):
        costs.table()
    out = tmp_path / "holes.csv"
    code, printed = run(["costs", "import", bench, ngram_1, "--out", str(out)])
    assert code == 0 and "note: not a full grid: missing batch=8 tokens=16" in printed
    assert "1 point(s) missing" in printed
    assert out.read_text() == costs.to_csv()
    capsys.readouterr()
    code, _ = run(["simulate", "--cost-table", str(out), "--concurrency", "1", "--limit", "5"])
    assert code == 2 and "not a full grid: missing batch=8 tokens=16" in capsys.readouterr().err


def test_only_verify_rows_say_that_decode_rows_are_missing(ngram):
    costs = import_records([ngram])
    assert costs.missing == ((1, 1), (8, 1))
    assert any(n.startswith("no decode rows (tokens = 1)") for n in costs.notes)


# --- bad files ------------------------------------------------------------------------------

def _bench_line(**changes):
    result = one_batch_result(4, 0.0125)
    result.update(changes)
    return json.dumps({k: v for k, v in result.items() if v is not ...}) + "\n"


def _info(**changes):
    info = server_info([{1: VERIFY_1}], algorithm="NGRAM", draft_tokens=16)
    info.update(changes)
    return json.dumps({k: v for k, v in info.items() if v is not ...})


BAD = {
    "empty": ("", "empty file"),
    "not JSON": ("batch,tokens,ms\n1,1,10\n", "unknown format: not JSON or JSON Lines"),
    "unknown object": ('{"points": []}', "unknown format: a JSON object with fields points"),
    "a JSON list": ("[1, 2]", "unknown format: JSON list"),
    "no batch_size": (_bench_line(batch_size=...), "line 1: missing field batch_size"),
    "batch_size 2.5": (_bench_line(batch_size=2.5),
                       "line 1: field batch_size: must be a whole number >= 1, got 2.5"),
    "no median": (_bench_line(median_decode_latency=...),
                  "line 1: missing field median_decode_latency"),
    "text median": (_bench_line(median_decode_latency="fast"),
                    "line 1: field median_decode_latency: not a number of seconds: 'fast'"),
    "negative median": (_bench_line(median_decode_latency=-0.01),
                        "line 1: field median_decode_latency: must be a time > 0 seconds"),
    "broken line 2": (_bench_line() + "{oops\n", "line 2: not valid JSON"),
    "mixed formats": (_bench_line() + _info() + "\n", "line 2: not a sglang.benchmark.one_batch"),
    "not recorded": (json.dumps(server_info([None])),
                     "missing field internal_states[*].step_time_dict (start the server with "
                     "SGLANG_RECORD_STEP_TIME=1)"),
    "nothing logged yet": (json.dumps(server_info([{}])), "holds no step time yet"),
    "no algorithm": (_info(speculative_algorithm=...), "missing field speculative_algorithm"),
    "no draft tokens": (_info(speculative_num_draft_tokens=None),
                        "field speculative_num_draft_tokens: must be a whole number >= 2, got "
                        "None"),
    "EAGLE": (_info(speculative_algorithm="EAGLE"), "field speculative_algorithm is 'EAGLE'"),
    "no states": (_info(internal_states=[]), "field internal_states must be a non-empty list"),
    "text step time": (json.dumps(server_info([{1: [0.03, "x"]}])),
                       "internal_states[0].step_time_dict['1'][1]: not a number of seconds"),
    "batch key": (json.dumps(server_info([{}])).replace('"step_time_dict": {}',
                                                        '"step_time_dict": {"one": [0.03]}'),
                  "internal_states[0].step_time_dict['one']: the key must be a batch size"),
    "one_batch_server": (json.dumps({"run_name": "x", "batch_size": 4, "input_len": 8,
                                     "output_len": 8, "latency": 1.2, "last_ttft": 0.1,
                                     "acc_length": -1}) + "\n",
                         "a sglang.benchmark.one_batch_server result holds whole-request "
                         "latency"),
    "vllm latency": (json.dumps({"avg_latency": 1.5, "std_latency": 0.1, "latencies": [1.5],
                                 "percentiles": {"50": 1.5}}, indent=4),
                     "a 'vllm bench latency' result holds whole-batch latencies"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_a_bad_file_is_one_line_naming_the_file_and_field(tmp_path, case, capsys):
    text, message = BAD[case]
    path = tmp_path / "bad.json"
    path.write_text(text)
    with pytest.raises(RecordsError) as err:
        read_records(path)
    assert str(err.value).startswith(f"{path}: ") and message in str(err.value)
    code, printed = run(["costs", "import", str(path), "--out", str(tmp_path / "c.csv")])
    err_text = capsys.readouterr().err
    assert code == 2 and printed == "" and not (tmp_path / "c.csv").exists()
    assert err_text == f"ngramspec: error: {err.value}\n"


def test_unreadable_files(tmp_path):
    binary = tmp_path / "x.bin"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(RecordsError, match=f"^{binary}: not UTF-8 text"):
        read_records(binary)
    with pytest.raises(RecordsError, match="missing.json: cannot be read"):
        read_records(tmp_path / "missing.json")
    with pytest.raises(RecordsError, match="^no files to import$"):
        import_records([])


# --- the command ----------------------------------------------------------------------------

def test_command_writes_the_table_and_reports(tmp_path, bench, ngram):
    out = tmp_path / "costs.csv"
    code, printed = run(["costs", "import", bench, ngram, "--out", str(out)])
    assert code == 0
    lines = printed.splitlines()
    assert lines[0] == (f"read {bench}: sglang.benchmark.one_batch result: decode (tokens=1) "
                        "at batch 1, 8 (3 runs)")
    assert lines[1] == (f"read {ngram}: SGLang server step times (SGLang 0.5.23, NGRAM, 16 "
                        "draft tokens, each value the mean of 40 steps): verify (tokens=16) at "
                        "batch 1, 8 (7 step times)")
    assert any(x.startswith("note: drafting included") for x in lines)
    assert lines[-1] == (f"wrote {out}: 4 points, batch [1, 8] x tokens [1, 16] (a full grid)")
    table = CostTable.read(out)
    assert table.drafting_included
    want = [(1, 1, ms(DECODE_1)), (1, 16, ms(VERIFY_1)), (8, 1, ms(DECODE_8)),
            (8, 16, ms(VERIFY_8))]
    assert table.points() == [(b, n, float(f"{v:.6g}")) for b, n, v in want]


def test_command_prints_to_stdout_with_the_report_on_stderr(bench, capsys):
    code, printed = run(["costs", "import", bench, "--out", "-"])
    assert code == 0 and printed == import_records([bench]).to_csv()
    assert capsys.readouterr().err.startswith(f"read {bench}: ")


def test_command_refuses_an_unwritable_out_before_reading(tmp_path, bench, capsys):
    code, _ = run(["costs", "import", bench, "--out", str(tmp_path / "no" / "c.csv")])
    assert code == 2 and "--out " in capsys.readouterr().err


def test_simulate_runs_on_an_imported_full_grid(tmp_path, bench, ngram):
    out = tmp_path / "costs.csv"
    assert run(["costs", "import", bench, ngram, "--out", str(out)])[0] == 0
    code, printed = run(["simulate", "--cost-table", str(out), "--concurrency", "1",
                         "--limit", "5"])
    assert code == 0 and "verdict:" in printed


# --- the shipped examples -------------------------------------------------------------------

def test_shipped_examples_import_to_their_medians():
    bench, info = EXAMPLES / "bench_one_batch.jsonl", EXAMPLES / "server_info_ngram.json"
    runs = [json.loads(line) for line in bench.read_text().splitlines()]
    steps = json.loads(info.read_text())["internal_states"][0]["step_time_dict"]
    costs = import_records([bench, info])
    want = sorted([(r["batch_size"], 1, ms([r["median_decode_latency"]])) for r in runs]
                  + [(int(b), 16, ms(ts)) for b, ts in steps.items()])
    assert list(costs.points) == want and costs.missing == () and costs.drafting_included
    assert dict(((b, n), v) for b, n, v in costs.points)[(1, 16)] == 30.0
    assert f"{ms([0.0122]):.6g}" == "12.2"
    assert (EXAMPLES / "README.md").read_text().count("illustrative") >= 1

