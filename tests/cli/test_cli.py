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
from cli_helpers import few_streams, run
from ngramspec.cli import ProgressBar
from ngramspec.streams import embedded_streams_path


@pytest.fixture(scope="module")
def streams(tmp_path_factory):
    rows = ns.read_streams(embedded_streams_path())[::11]
    return few_streams(tmp_path_factory, rows), rows


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
                         "engine", "verdict", "interval"}
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


def test_every_command_dispatches_to_its_own_row(monkeypatch):
    """main() runs the row of the command named, never another (no fall-through)."""
    import dataclasses

    import ngramspec.cli as cli

    seen = []
    rows = tuple(dataclasses.replace(c, run=lambda args, out, name=c.name: seen.append(
        (name, args.command)) or 7) for c in cli.COMMANDS)
    monkeypatch.setattr(cli, "COMMANDS", rows)
    required = {"streams": ["import", "f", "--format", "token-ids", "--out", "o"],
                "calibrate": ["m", "--out", "o.csv"], "check": ["m", "s", "--cost-table", "c"],
                "costs": ["import", "f", "--out", "o.csv"]}
    for c in rows:
        assert cli.main([c.name, *required.get(c.name, [])]) == 7
    assert seen == [(c.name, c.name) for c in rows]
    assert [c.name for c in rows][:5] == ["simulate", "sweep", "streams", "calibrate", "check"]


def test_a_command_that_reads_its_own_arguments_is_one_row(monkeypatch, capsys):
    import ngramspec.cli as cli

    row = cli.forward("count-args", "builtins:len", help="exit status: how many arguments")
    monkeypatch.setattr(cli, "COMMANDS", cli.COMMANDS + (row,))
    assert cli.main(["count-args", "--model-path", "x", "--help"]) == 3
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "{simulate,sweep,calibrate,check,streams,costs,warmup,sglang-launch,count-args}" in out
    assert "exit status: how many arguments" in out


def test_python_dash_m():
    out = subprocess.run([sys.executable, "-m", "ngramspec", "simulate", "--limit", "2"],
                         capture_output=True, text=True, check=True)
    assert "tokens/step" in out.stdout


# --- presets, config files, hold-out sweeps, settings out ---------------------------------


def _config_line(text):
    return next(line for line in text.splitlines() if line.startswith("config: "))


def test_simulate_preset_and_config_file_layers(streams, tmp_path):
    path, rows = streams
    code, text = run(["simulate", str(path), "--preset", "recommended", "--no-progress"])
    assert code == 0
    want = ns.simulate(rows, config=ns.NgramConfig.recommended())
    assert f"{want.tokens_per_step:.3f}" in text
    toml = tmp_path / "c.toml"
    toml.write_text('match_type = "PROB"\ndraft_token_num = 8\nmax_bfs_breadth = 4\n')
    code, text = run(["simulate", str(path), "--config", str(toml), "--draft-token-num", "6",
                      "--no-progress"])
    assert code == 0
    cfg = ns.NgramConfig(match_type="PROB", draft_token_num=6, max_bfs_breadth=4)
    assert _config_line(text).split()[1:8] == [
        f"{n}={getattr(cfg, n)}" for n in ("max_trie_depth", "min_bfs_breadth",
                                           "max_bfs_breadth", "draft_token_num", "match_type",
                                           "capacity", "profile")]
    assert f"{ns.simulate(rows, config=cfg).tokens_per_step:.3f}" in text
    # The file over the preset, the flags over the file.
    toml.write_text("min_token_prob = 0.3\n")
    code, text = run(["simulate", str(path), "--preset", "recommended-cost-aware", "--config",
                      str(toml), "--max-trie-depth", "12", "--no-progress"])
    assert code == 0
    cfg = ns.NgramConfig.recommended(min_expected_accept=4.0, min_token_prob=0.3,
                                     max_trie_depth=12)
    assert f"{ns.simulate(rows, config=cfg).tokens_per_step:.3f}" in text
    assert "min_token_prob=0.3" in text and "min_expected_accept=4.0" in text


@pytest.mark.parametrize("toml_text,argv,message", [
    (None, ["--preset", "fast"], "--preset: unknown preset 'fast'; presets: sglang, "
                                 "recommended, recommended-cost-aware"),
    ("draft_tokens = 8\n", [], "c.toml: unknown field 'draft_tokens'"),
    ('draft_token_num = "8"\n', [], "c.toml: field 'draft_token_num' must be an integer"),
    ("capacity = 5\n", [], "(settings from --config"),
    ("draft_token_num = [\n", [], "c.toml: not valid TOML"),
    (None, ["--config", "no-such.toml"], "no-such.toml: cannot read the config file"),
    (None, ["--preset", "recommended", "--match-type", "BFS"],
     "local_index=True drafts through match_type='ADAPTIVE'"),
])
@pytest.mark.parametrize("command", ["simulate", "sweep"])
def test_preset_and_config_errors(capsys, tmp_path, command, toml_text, argv, message):
    if toml_text is not None:
        (tmp_path / "c.toml").write_text(toml_text)
        argv = argv + ["--config", str(tmp_path / "c.toml")]
    code, out = run([command, "--limit", "2", *argv])
    err = capsys.readouterr().err
    assert code == 2 and out == ""
    assert err.startswith("ngramspec: error: ") and err.count("\n") == 1
    assert message in err


def test_holdout_split_deterministic():
    from ngramspec.sweep import sweep_holdout as holdout_split
    rows = [{"id": f"r{i}", "prompt_ids": [], "output_ids": [1], "day": i % 3}
            for i in range(50)]
    tune, hold, what = holdout_split(rows, fraction=0.2)
    assert len(hold) == 10 and len(tune) == 40 and "10 of 50" in what
    assert [r["id"] for r in tune + hold] != [r["id"] for r in rows]  # really a mix
    assert [r["id"] for r in tune] == [r["id"] for r in rows if r not in hold]  # file order
    # The split depends on the ids only: a reversed file holds out the same requests.
    _, hold_rev, _ = holdout_split(rows[::-1], fraction=0.2)
    assert sorted(r["id"] for r in hold_rev) == sorted(r["id"] for r in hold)
    tune, hold, _ = holdout_split(rows, by="day=1,2")
    assert [r["id"] for r in hold] == [r["id"] for r in rows if r["day"] != 0]


def test_sweep_holdout_reports_both_parts(streams, tmp_path):
    from ngramspec.sweep import sweep_holdout as holdout_split
    path, rows = streams
    report = tmp_path / "r.json"
    code, text = run(["sweep", str(path), "--draft-token-num", "4,8", "--holdout", "0.4",
                      "--jobs", "1", "--json", str(report), "--no-progress"])
    assert code == 0
    tune, hold, _ = holdout_split(rows, fraction=0.4)
    assert f"ranked on {len(tune)} of {len(rows)} requests" in text
    assert "hold-out tokens/step" in text
    data = json.loads(report.read_text())
    for r in data["results"]:
        cfg = ns.NgramConfig(**r["options"])
        assert r["tokens_per_step"] == ns.simulate(tune, config=cfg).tokens_per_step
        assert r["holdout"]["tokens_per_step"] == ns.simulate(hold, config=cfg).tokens_per_step
    best = data["results"][0]
    assert best["tokens_per_step"] == max(r["tokens_per_step"] for r in data["results"])
    assert (f"winner on the tuning part ({len(tune)} requests): "
            f"draft_token_num={best['options']['draft_token_num']}") in text
    assert f"{best['holdout']['tokens_per_step']:.3f}" in text.split("winner")[1]


def test_sweep_holdout_by_field(streams, capsys):
    path, rows = streams
    task = rows[0]["task"]
    code, text = run(["sweep", str(path), "--draft-token-num", "4,8", "--holdout-by",
                      f"task={task}", "--jobs", "1", "--no-progress"])
    n_held = sum(r["task"] == task for r in rows)
    assert code == 0 and f"task in {{{task}}}: {n_held} of {len(rows)} requests" in text
    code, _ = run(["sweep", str(path), "--holdout", "0.5", "--holdout-by", "task=x"])
    assert code == 2 and "not both" in capsys.readouterr().err


def test_sweep_best_as(streams, tmp_path, capsys):
    path, rows = streams
    code, text = run(["sweep", str(path), "--draft-token-num", "4,8", "--match-type",
                      "BFS,PROB", "--best-as", "sglang", "--engine", "sglang", "--step-ms", "12",
                      "--token-ms", "0.1", "--jobs", "1", "--no-progress"])
    assert code == 0
    flags = text.split("best setting as SGLang server flags:\n")[1].split()
    args = dict(zip(flags[::2], flags[1::2]))
    cfg = ns.NgramConfig.from_sglang_args({k: int(v) if v.isdigit() else v
                                           for k, v in args.items()})
    table = text.splitlines()
    first = table[table.index(next(line for line in table if line.startswith("----"))) + 1]
    assert first.split()[1:3] == [str(cfg.draft_token_num), cfg.match_type]
    code, text = run(["sweep", str(path), "--draft-token-num", "4,8", "--preset", "recommended",
                      "--best-as", "toml", "--jobs", "1", "--no-progress"])
    assert code == 0
    toml = text.split("--config FILE, alone or with --preset recommended):\n")[1]
    (tmp_path / "best.toml").write_text(toml)
    best = ns.NgramConfig.from_toml(tmp_path / "best.toml")
    assert best == ns.NgramConfig.recommended(draft_token_num=best.draft_token_num)
    # The file runs as it was ranked.
    code, again = run(["simulate", str(path), "--config", str(tmp_path / "best.toml"),
                       "--no-progress"])
    assert code == 0
    assert f"{ns.simulate(rows, config=best).tokens_per_step:.3f}" in again
    code, _ = run(["sweep", str(path), "--preset", "recommended", "--best-as", "sglang"])
    err = capsys.readouterr().err
    assert code == 2 and "--best-as sglang chooses the setting for SGLang's server" in err
    assert "add --engine sglang" in err


@pytest.mark.parametrize("with_out", [True, False])
def test_an_interrupted_sweep_says_how_to_continue(monkeypatch, capsys, tmp_path, with_out):
    import ngramspec.cli.sweep as sweep_cmd
    from ngramspec.cli import main

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt
        yield  # a generator, as run_sweep is

    monkeypatch.setattr(sweep_cmd, "run_sweep", interrupted)
    out = ["--out", str(tmp_path / "r.jsonl")] if with_out else []
    code = main(["sweep", "--limit", "2", "--draft-token-num", "4,8", "--no-progress", *out])
    err = capsys.readouterr().err
    assert code == 130
    assert "sweep interrupted" in err and "--resume" in err
    assert ("r.jsonl" in err) == with_out
