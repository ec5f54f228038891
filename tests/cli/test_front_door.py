"""The command line's front door (issue 28): what a user types first, checked before any work,
and the settings that come out of a sweep go back in unchanged."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cli_helpers import few_streams, run

import ngramspec as ns
from ngramspec.cli import _parser, main
from ngramspec.cli._options import base_options, config_options, make_config
from ngramspec.streams import embedded_streams_path
from ngramspec.sweep import ResultsFile, ResultsFileError

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    rows = ns.read_streams(embedded_streams_path())[::11]
    return few_streams(tmp_path_factory, rows), rows


def cli_config(*argv: str) -> ns.NgramConfig:
    """The configuration ``ngramspec simulate ARGV`` runs (its layers: preset, file, flags)."""
    args = _parser().parse_args(["simulate", *argv])
    return make_config(base_options(args), config_options(args), args)


def settings_lines(text: str) -> list[str]:
    """The configuration's lines of a TOML (its [ranking] table, how a sweep ranked it, is not
    a setting)."""
    lines = text.split("\n[ranking]\n")[0].splitlines()
    return [line for line in lines if line and not line.startswith("#")]


def no_run(*args, **kwargs):
    raise AssertionError("a setting ran before the inputs were checked")


# --- 1. sweep --best-as toml goes back in with --preset P --config FILE -------------------


def test_best_as_toml_holds_what_differs_from_the_preset(streams, tmp_path):
    path, _ = streams
    report = tmp_path / "r.json"
    code, text = run(["sweep", str(path), "--preset", "recommended", "--draft-token-num", "4,8",
                      "--min-token-prob", "0.3", "--best-as", "toml", "--jobs", "1",
                      "--json", str(report), "--no-progress"])
    assert code == 0
    winner = json.loads(report.read_text())["results"][0]["options"]
    best = ns.NgramConfig.recommended(**winner)
    toml = text.split("alone or with --preset recommended):\n")[1]
    assert settings_lines(toml) == ['preset = "recommended"',
                                    f"draft_token_num = {winner['draft_token_num']}",
                                    "min_token_prob = 0.3"]
    (tmp_path / "best.toml").write_text(toml)
    best_toml = str(tmp_path / "best.toml")
    # The documented flow reproduces the winner exactly; so does the file alone.
    assert cli_config("--preset", "recommended", "--config", best_toml) == best
    assert cli_config("--config", best_toml) == best
    assert ns.NgramConfig.from_toml(Path(best_toml)) == best


def test_best_of_a_sweep_without_preset_refuses_another_preset(streams, tmp_path, capsys):
    path, _ = streams
    best_toml, report = tmp_path / "best.toml", tmp_path / "r.json"
    code, _ = run(["sweep", str(path), "--match-type", "BFS,PROB", "--draft-token-num", "4,8",
                   "--best-out", str(best_toml), "--jobs", "1", "--json", str(report),
                   "--no-progress"])
    assert code == 0
    winner = json.loads(report.read_text())["results"][0]["options"]
    assert settings_lines(best_toml.read_text()) == (
        ['preset = "sglang"', f"draft_token_num = {winner['draft_token_num']}"]
        + (['match_type = "PROB"'] if winner["match_type"] == "PROB" else []))
    best = cli_config("--config", str(best_toml))
    assert best == ns.NgramConfig(**winner)
    assert cli_config("--preset", "sglang", "--config", str(best_toml)) == best
    capsys.readouterr()
    # Before: every field repeated, so --preset recommended was silently turned off.
    code, out = run(["simulate", "--limit", "2", "--preset", "recommended", "--config",
                     str(best_toml)])
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == (
        f"ngramspec: error: --config {best_toml} is written over preset sglang (its line "
        'preset = "sglang"), not over --preset recommended: give --preset sglang, or leave '
        "--preset out\n")


def test_a_config_file_changing_what_the_preset_sets_is_named(tmp_path, capsys):
    toml = tmp_path / "c.toml"
    toml.write_text("min_token_prob = 0.3\ndraft_token_num = 16\ncapacity = 5000\n")
    code, _ = run(["simulate", "--limit", "2", "--preset", "recommended", "--config", str(toml),
                   "--no-progress"])
    assert code == 0
    assert capsys.readouterr().err == (
        f"ngramspec: warning: --config {toml} overrides what --preset recommended sets: "
        "min_token_prob 0.5 -> 0.3 (the file's values apply)\n")
    # A file that names the preset it was written over changes it on purpose: no warning.
    toml.write_text('preset = "recommended"\nmin_token_prob = 0.3\n')
    code, _ = run(["simulate", "--limit", "2", "--preset", "recommended", "--config", str(toml),
                   "--no-progress"])
    assert code == 0 and capsys.readouterr().err == ""
    assert cli_config("--config", str(toml)) == ns.NgramConfig.recommended(min_token_prob=0.3)


# --- 2. --best-out FILE --------------------------------------------------------------------


def test_best_out_writes_the_winner(streams, tmp_path):
    path, _ = streams
    report, best_toml, flags = tmp_path / "r.json", tmp_path / "best.toml", tmp_path / "f.txt"
    code, text = run(["sweep", str(path), "--draft-token-num", "4,8", "--best-out",
                      str(best_toml), "--jobs", "1", "--json", str(report), "--no-progress"])
    assert code == 0
    winner = ns.NgramConfig(**json.loads(report.read_text())["results"][0]["options"])
    assert best_toml.read_text() == winner.to_toml(preset="sglang") + \
        '\n[ranking]\nengine = "none"\nconcurrency = 1\n'
    assert text.endswith(f"best setting written to {best_toml} (TOML; ngramspec simulate "
                         f"--config {best_toml} runs it)\n")
    assert "best setting as TOML" not in text
    code, text = run(["sweep", str(path), "--draft-token-num", "4,8", "--best-as", "sglang",
                      "--engine", "sglang", "--step-ms", "12", "--token-ms", "0.1",
                      "--best-out", str(flags), "--jobs", "1", "--no-progress"])
    assert code == 0
    printed = text.split("best setting as SGLang server flags:\n")[1].splitlines()[0]
    assert flags.read_text() == printed + "\n"
    assert printed.startswith("--speculative-algorithm NGRAM ")


@pytest.mark.parametrize("where,message", [
    ("dir", "{p}: is a directory; give a file name"),
    ("no/best.toml", "{p}: no such directory {folder!r}"),
    ("file/best.toml", "{p}: no such directory {folder!r}"),
])
def test_best_out_refused_up_front(monkeypatch, capsys, tmp_path, where, message):
    import ngramspec.cli.sweep as sweep_cmd

    (tmp_path / "dir").mkdir()
    (tmp_path / "file").write_text("x")
    p = tmp_path / where
    monkeypatch.setattr(sweep_cmd, "run_sweep", no_run)
    code, out = run(["sweep", "--limit", "2", "--draft-token-num", "4,8", "--best-out", str(p)])
    assert (code, out) == (2, "")
    shown = message.format(p=p, folder=str(p.parent))
    assert capsys.readouterr().err == f"ngramspec: error: --best-out {shown}\n"


# --- 3. sweep (and simulate) check every input before the first setting runs -------------


def test_sweep_checks_the_cost_table_before_any_setting(tmp_path, capsys):
    table = tmp_path / "ct.csv"
    table.write_text("batch,tokens,ms\n1,1,10\n1,4,12\n2,1,11\n2,4,14\n")
    results = tmp_path / "r.jsonl"
    t0 = time.perf_counter()
    code, out = run(["sweep", "--limit", "5", "--cost-table", str(table), "--draft-token-num",
                     "4,8", "--concurrency", "1,4", "--jobs", "1", "--out", str(results),
                     "--no-progress"])
    assert time.perf_counter() - t0 < 5
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == (
        f"ngramspec: error: cost table {table} has no point for batch=4 (measured batch 1..2); "
        "measure it, or allow extrapolation (--extrapolate); the settings asked for need batch "
        "1..4 (--concurrency, clamped to the requests) and tokens 1..8 (--draft-token-num)\n")
    assert sorted(os.listdir(tmp_path)) == ["ct.csv"]  # no results file, no lock left behind


def test_simulate_checks_the_cost_table_before_the_replay(monkeypatch, tmp_path, capsys):
    import ngramspec.cli.simulate as simulate_cmd

    table = tmp_path / "ct.csv"
    table.write_text("batch,tokens,ms\n1,1,10\n1,4,12\n2,1,11\n2,4,14\n")
    monkeypatch.setattr(simulate_cmd, "simulate", no_run)
    code, out = run(["simulate", "--limit", "5", "--cost-table", str(table), "--concurrency",
                     "2"])
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == (
        f"ngramspec: error: cost table {table} has no point for tokens=12 (measured tokens "
        "1..4); measure it, or allow extrapolation (--extrapolate); the settings asked for need "
        "batch 1..2 (--concurrency, clamped to the requests) and tokens 1..12 "
        "(--draft-token-num)\n")


@pytest.mark.parametrize("command", ["sweep", "simulate"])
def test_plot_without_matplotlib_is_refused_up_front(monkeypatch, capsys, tmp_path, command):
    import ngramspec.cli.simulate as simulate_cmd
    import ngramspec.cli.sweep as sweep_cmd

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib fails
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    monkeypatch.setattr(sweep_cmd, "run_sweep", no_run)
    monkeypatch.setattr(simulate_cmd, "simulate", no_run)
    grid = ["--draft-token-num", "4,8"] if command == "sweep" else []
    code, out = run([command, "--limit", "2", *grid, "--decode-ms", "12", "--verify-ms", "30",
                     "--plot", str(tmp_path / "p.png")])
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == ("ngramspec: error: --plot needs matplotlib: pip install "
                                       "'ngramspec[plot]'\n")


@pytest.mark.parametrize("flag", ["--plot", "--json"])
@pytest.mark.parametrize("command", ["sweep", "simulate"])
def test_outputs_that_cannot_be_written_are_refused_up_front(monkeypatch, capsys, tmp_path,
                                                             command, flag):
    import ngramspec.cli.simulate as simulate_cmd
    import ngramspec.cli.sweep as sweep_cmd

    if flag == "--plot":
        pytest.importorskip("matplotlib")
    monkeypatch.setattr(sweep_cmd, "run_sweep", no_run)
    monkeypatch.setattr(simulate_cmd, "simulate", no_run)
    target = tmp_path / "missing" / "out.file"
    grid = ["--draft-token-num", "4,8"] if command == "sweep" else []
    code, out = run([command, "--limit", "2", *grid, "--decode-ms", "12", "--verify-ms", "30",
                     flag, str(target)])
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == (f"ngramspec: error: {flag} {target}: no such directory "
                                       f"{str(target.parent)!r}\n")
    code, out = run([command, "--limit", "2", *grid, "--decode-ms", "12", "--verify-ms", "30",
                     flag, str(tmp_path)])
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == (f"ngramspec: error: {flag} {tmp_path}: is a directory; "
                                       "give a file name\n")


def test_corpus_files_are_checked_before_the_replay(monkeypatch, capsys, tmp_path):
    import ngramspec.cli.simulate as simulate_cmd

    monkeypatch.setattr(simulate_cmd, "simulate", no_run)
    good = tmp_path / "docs.jsonl"
    good.write_text("[1, 2, 3]\n")
    missing = tmp_path / "nope.jsonl"
    code, out = run(["simulate", "--limit", "2", "--external-sam-budget", "4", "--corpus",
                     str(good), "--corpus", str(missing)])
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == f"ngramspec: error: --corpus {missing}: no such file\n"
    code, out = run(["simulate", "--limit", "2", "--external-sam-budget", "4", "--corpus",
                     str(tmp_path)])
    assert (code, out) == (2, "")
    assert capsys.readouterr().err == (f"ngramspec: error: --corpus {tmp_path}: is a directory, "
                                       "not a file\n")


# --- 4. one writer per results file -------------------------------------------------------


def test_a_results_file_has_one_writer(tmp_path):
    p = tmp_path / "r.jsonl"
    first = ResultsFile(p, sweep="s", resume=False)
    assert (tmp_path / "r.jsonl.lock").read_text() == f"{os.getpid()}\n"
    with pytest.raises(ResultsFileError) as e:
        ResultsFile(p, sweep="s", resume=True)
    assert str(e.value) == (f"--out {p}: another sweep is writing this results file (pid "
                            f"{os.getpid()}); wait for it to finish, or give another --out")
    first.close()
    assert not (tmp_path / "r.jsonl.lock").exists()
    with ResultsFile(p, sweep="s", resume=True) as again:
        assert again.keys() == set()
    assert not (tmp_path / "r.jsonl.lock").exists()


def test_without_fcntl_an_exclusive_lock_file(monkeypatch, tmp_path):
    from ngramspec.sweep import results

    monkeypatch.setattr(results, "fcntl", None)
    p = tmp_path / "r.jsonl"
    first = ResultsFile(p, sweep="s", resume=False)
    lock = tmp_path / "r.jsonl.lock"
    assert lock.read_text() == f"{os.getpid()}\n"
    with pytest.raises(ResultsFileError) as e:
        ResultsFile(p, sweep="s", resume=True)
    assert str(e.value) == (f"--out {p}: another sweep is writing this results file (pid "
                            f"{os.getpid()}); wait for it to finish, or give another --out; "
                            f"if no sweep is running, delete {lock}")
    first.close()
    assert not lock.exists()
    ResultsFile(p, sweep="s", resume=True).close()


def test_a_second_sweep_on_one_results_file_is_refused(streams, tmp_path, capsys):
    path, _ = streams
    out = tmp_path / "r.jsonl"
    argv = ["sweep", str(path), "--draft-token-num", "4,8", "--jobs", "1", "--out", str(out),
            "--resume", "--no-progress"]
    script = ("import sys\nfrom ngramspec.sweep import ResultsFile\n"
              f"f = ResultsFile({str(out)!r}, sweep='other', resume=True)\n"
              "print('held', flush=True)\nsys.stdin.read()\nf.close()\n")
    holder = subprocess.Popen([sys.executable, "-c", script], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert holder.stdout.readline() == "held\n"
        code, text = run(argv)
        assert (code, text) == (2, "")
        assert capsys.readouterr().err == (
            f"ngramspec: error: --out {out}: another sweep is writing this results file (pid "
            f"{holder.pid}); wait for it to finish, or give another --out\n")
        assert not out.exists()
    finally:
        holder.communicate("", timeout=60)
    code, text = run(argv)
    assert code == 0 and f"results in {out} (2 settings)" in text
    assert len(out.read_text().splitlines()) == 2
    assert not (tmp_path / "r.jsonl.lock").exists()


# --- 5. a report without costs says what to do next ---------------------------------------

NEXT = ("next: measure forward times (ngramspec calibrate MODEL_DIR --out costs.csv) and rerun "
        "with --cost-table costs.csv --concurrency 1,4,16 for the predicted speed-up and a "
        "verdict (or price steps with --decode-ms and --verify-ms)")


def test_a_report_without_costs_ends_with_the_next_step(tmp_path):
    report = tmp_path / "r.json"
    code, text = run(["simulate", "--limit", "3", "--json", str(report), "--no-progress"])
    assert code == 0
    assert text.endswith("\n\n" + NEXT + "\n")
    assert "next:" not in report.read_text()
    json.loads(report.read_text())
    code, text = run(["simulate", "--limit", "3", "--decode-ms", "12", "--verify-ms", "30",
                      "--no-progress"])
    assert code == 0 and "next:" not in text


# --- 6. --help is plain text ---------------------------------------------------------------


def test_help_is_plain_text(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = capsys.readouterr().out
    assert "\nngramspec simulate, sweep, calibrate, check: will speculation pay off for me?\n" \
        in text
    for command in ("simulate", "sweep", "streams", "calibrate", "check"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        text += capsys.readouterr().out
    assert "``" not in text and ":func:" not in text and ":class:" not in text
