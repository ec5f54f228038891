"""``ngramspec sglang-launch`` without SGLang: the refusal that names the plugin, the pasteable
``--print-args`` line (with and without the variable), the one-line error without SGLang, the
``[ranking]`` check of a winner file, and draft_token_num chosen from a cost table
(:func:`ngramspec.sweep.budget.best_budget`)."""

from __future__ import annotations

import doctest
import runpy
import shlex
import sys
from pathlib import Path

import pytest

import ngramspec as ns
from ngramspec.config import PRESETS
from ngramspec.config.toml import render_ranking
from ngramspec.costs import CostModel, CostTable, predict_serving
from ngramspec.integrations import sglang_launch
from ngramspec.integrations.sglang_launch import ENV_CONFIG, launch
from ngramspec.streams import embedded_streams_path, write_streams
from ngramspec.sweep import budget
from ngramspec.sweep.budget import BUDGETS, SGLANG_SLOTS, best_budget

SHIPPED = ns.read_streams(embedded_streams_path())


def _script(out: str) -> tuple[dict[str, str], list[str]]:
    """The pasted line as a shell reads it: its variable assignments and its words."""
    words = shlex.split(out, comments=True)
    env = {}
    while words and "=" in words[0] and not words[0].startswith("-"):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    return env, words


def _flags(words: list[str]) -> dict[str, str]:
    assert words[:3] == ["python", "-m", "sglang.launch_server"]
    rest = words[3:]
    return dict(zip(rest[::2], rest[1::2]))


def _one_line_error(err: str) -> str:
    assert err.count("\n") == 1 and err.startswith("ngramspec sglang-launch: error: "), err
    assert "Traceback" not in err
    return err[len("ngramspec sglang-launch: error: "):-1]


# ---- the refusal names the alternative --------------------------------------------------------

@pytest.mark.parametrize("cfg", [ns.NgramConfig.recommended(),
                                 ns.NgramConfig(index_prompt=True)])
def test_refusal_names_plugin_true(cfg):
    with pytest.raises(ValueError) as e:
        cfg.to_sglang_args()
    assert str(e.value).endswith(
        "; its own flags run SGLang-exact configurations only: to_sglang_args(plugin=True) "
        "gives the flags that run this one on ngramspec's drafter inside SGLang's server "
        "(ngramspec sglang-launch, docs/sglang.md)")


# ---- --print-args: a line to paste --------------------------------------------------------------

def test_print_args_beyond_sglang_carries_the_real_toml(capsys):
    assert launch(["--preset", "recommended", "--print-args", "--", "--model-path",
                   "my model", "--port", "30000"]) == 0
    out = capsys.readouterr().out
    assert "<TOML>" not in out
    env, words = _script(out)
    assert list(env) == [ENV_CONFIG]
    sent = ns.NgramConfig.recommended(draft_token_num=SGLANG_SLOTS)
    assert ns.NgramConfig.from_toml(env[ENV_CONFIG]) == sent
    flags = _flags(words)
    assert flags["--model-path"] == "my model" and flags["--port"] == "30000"
    assert flags["--speculative-num-draft-tokens"] == str(SGLANG_SLOTS)
    assert flags["--speculative-algorithm"] == "NGRAM"
    args = sent.to_sglang_args(plugin=True)
    args.pop("ngramspec_config")
    assert {k: v for k, v in flags.items() if k.startswith("--speculative")} == \
        {"--" + k.replace("_", "-"): str(v) for k, v in args.items()}
    assert f"# {sglang_launch.PLUGIN_NOTE}\n" in out
    assert (f"# draft_token_num {SGLANG_SLOTS}: the slots per request SGLang verifies at every "
            "step (recommended() has 16 for a custom loop; docs/sglang.md); --cost-table T "
            "--concurrency C chooses it for your model and load\n") in out


def test_print_args_sglang_exact_has_no_variable(capsys):
    assert launch(["--preset", "sglang", "--print-args", "--", "--model-path", "m"]) == 0
    out = capsys.readouterr().out
    assert ENV_CONFIG not in out.replace(sglang_launch.EXACT_PASTE, "")
    env, words = _script(out)
    assert env == {}
    flags = _flags(words)
    given = {k[2:].replace("-", "_"): v for k, v in flags.items() if k.startswith("--spec")}
    typed = {k: (v if k.endswith(("algorithm", "match_type")) else int(v))
             for k, v in given.items()}
    assert ns.NgramConfig.from_sglang_args(typed) == ns.NgramConfig()
    assert out.splitlines()[0] == f"# {sglang_launch.EXACT_PASTE}"


def test_a_given_slot_count_is_honoured_without_a_cost_table(capsys):
    argv = ["--print-args", "--", "--speculative-num-draft-tokens", "16"]
    assert launch(["--preset", "recommended", *argv]) == 0
    env, words = _script(capsys.readouterr().out)
    assert ns.NgramConfig.from_toml(env[ENV_CONFIG]) == ns.NgramConfig.recommended()
    assert words.count("--speculative-num-draft-tokens") == 1
    assert launch(["--preset", "recommended", "--draft-token-num", "8", *argv[:1]]) == 0
    out = capsys.readouterr().out
    env, words = _script(out)
    assert ns.NgramConfig.from_toml(env[ENV_CONFIG]) == \
        ns.NgramConfig.recommended(draft_token_num=8)
    assert _flags(words)["--speculative-num-draft-tokens"] == "8"
    assert "# draft_token_num 8: as given (--draft-token-num)\n" in out
    assert launch(argv) == 0  # the default preset (sglang): SGLang's own drafter, 16 slots
    out = capsys.readouterr().out
    env, words = _script(out)
    assert env == {} and words.count("--speculative-num-draft-tokens") == 1
    assert _flags(words)["--speculative-num-draft-tokens"] == "16"
    assert out.splitlines()[0] == f"# {sglang_launch.DEFAULT_NOTE}"


def test_the_settings_flags_and_defaults_are_the_main_clis(capsys):
    """The launcher reads a configuration as ``ngramspec simulate`` does: the same flags
    (``--preset``, ``--config``, one per field), the same default (SGLang's), the same
    layering (the flags over the preset)."""
    from ngramspec.cli import _parser as main_parser

    def settings_flags(parser) -> set[str]:
        groups = [g for g in parser._action_groups
                  if g.title.startswith(("starting point", "drafter settings"))]
        return {o for g in groups for a in g._group_actions for o in a.option_strings}

    sub = next(a for a in main_parser()._actions if a.dest == "command").choices
    theirs = settings_flags(sub["simulate"])
    ours = settings_flags(sglang_launch._parser())
    assert ours == theirs and {"--preset", "--config", "--draft-token-num"} <= ours
    assert launch(["--print-args", "--match-type", "PROB", "--", "--model-path", "m"]) == 0
    out = capsys.readouterr().out
    env, words = _script(out)
    assert env == {}  # SGLang-exact: the default preset, one field changed by its flag
    given = {k[2:].replace("-", "_"): v for k, v in _flags(words).items()
             if k.startswith("--spec")}
    typed = {k: (v if k.endswith(("algorithm", "match_type")) else int(v))
             for k, v in given.items()}
    assert ns.NgramConfig.from_sglang_args(typed) == ns.NgramConfig(match_type="PROB")
    assert launch(["--print-args", "--preset", "recommended", "--max-trie-depth", "12"]) == 0
    env, _ = _script(capsys.readouterr().out)
    assert ns.NgramConfig.from_toml(env[ENV_CONFIG]) == ns.NgramConfig.recommended(
        draft_token_num=SGLANG_SLOTS, max_trie_depth=12)


def test_exact_settings_launch_sglangs_own_drafter(monkeypatch, capsys):
    ran = {}
    monkeypatch.setattr(sglang_launch, "_need_sglang", lambda: None)
    monkeypatch.setattr(sglang_launch, "install", lambda cfg: pytest.fail("installed"))
    monkeypatch.setattr(runpy, "run_module", lambda name, **kw: ran.update(
        name=name, argv=list(sys.argv), env=sglang_launch.os.environ.get(ENV_CONFIG)))
    monkeypatch.setattr(sys, "argv", list(sys.argv))
    monkeypatch.setenv(ENV_CONFIG, "draft_token_num = 4")  # left over: must not switch
    assert launch(["--preset", "sglang", "--", "--model-path", "m"]) == 0
    assert ran["name"] == "sglang.launch_server" and ran["env"] is None
    assert ran["argv"][:3] == ["sglang.launch_server", "--model-path", "m"]
    assert capsys.readouterr().out == f"# {sglang_launch.EXACT_NOTE}\n"


# ---- without SGLang ----------------------------------------------------------------------------

def test_without_sglang_one_line(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "sglang", None)  # import sglang fails
    assert launch(["--preset", "recommended", "--", "--model-path", "m"]) == 2
    assert _one_line_error(capsys.readouterr().err) == (
        "sglang-launch needs SGLang 0.5.23 in this environment (pip install "
        "'sglang==0.5.23'); --print-args prints the command without it")
    from ngramspec.cli import main

    assert main(["sglang-launch", "--", "--model-path", "m"]) == 2
    err = capsys.readouterr().err
    assert _one_line_error(err) == sglang_launch.NO_SGLANG and "unexpected" not in err
    assert launch(["--print-args", "--", "--model-path", "m"]) == 0  # needs no SGLang


@pytest.mark.parametrize("argv,message", [
    (["--model-path", "m"], "unrecognized arguments: --model-path m (SGLang's own arguments "
                            "follow '--')"),
    (["--concurrency", "4"], "--concurrency applies with --cost-table FILE (the costs that "
                             "choose draft_token_num)"),
    (["--cost-table", "t.csv"], "--cost-table needs --concurrency C: the requests your server "
                                "decodes together, which the best draft_token_num depends on"),
    (["--print-args", "--", "--speculative-num-draft-tokens", "x"],
     "--speculative-num-draft-tokens 'x': not an integer"),
    (["--cost-table", "t.csv", "--concurrency", "4", "--", "--speculative-num-draft-tokens",
      "8"], "--speculative-num-draft-tokens (after '--') and --cost-table both set the slots "
            "per request: give one"),
    (["--cost-table", "t.csv", "--concurrency", "4", "--draft-token-num", "8"],
     "--draft-token-num and --cost-table both set the slots per request: give one"),
    (["--print-args", "--draft-token-num", "8", "--", "--speculative-num-draft-tokens", "8"],
     "--speculative-num-draft-tokens (after '--') and --draft-token-num both set the slots "
     "per request: give one"),
    (["--print-args", "--preset", "fast"], "--preset: unknown preset 'fast'; presets: " + ", ".join(PRESETS)),
    (["--print-args", "--max-trie-depth", "x"], "--max-trie-depth: 'x' is not an integer"),
])
def test_errors_are_one_line(capsys, argv, message):
    assert launch(argv) == 2
    assert _one_line_error(capsys.readouterr().err) == message


@pytest.mark.parametrize("argv,start", [
    (["--cost-table", "missing.csv", "--concurrency", "4"], "cost table 'missing.csv'"),
    (["--config", "missing.toml"], "missing.toml: cannot read the config file"),
])
def test_unreadable_files_are_one_line(capsys, argv, start):
    assert launch([*argv, "--print-args"]) == 2
    assert _one_line_error(capsys.readouterr().err).startswith(start)


# ---- a winner's [ranking] ----------------------------------------------------------------------

@pytest.mark.parametrize("engine,how", [
    ("custom", "priced as a custom loop (real ADAPTIVE trees, plain decodes), not as SGLang's "
               "worker"),
    ("none", "by tokens per verify step, without a cost"),
])
def test_a_winner_ranked_for_another_engine_is_refused(tmp_path, capsys, engine, how):
    path = tmp_path / "best.toml"
    path.write_text(ns.NgramConfig.recommended(draft_token_num=12).to_toml()
                    + render_ranking({"engine": engine, "concurrency": 4}))
    assert launch(["--config", str(path), "--print-args"]) == 2
    assert _one_line_error(capsys.readouterr().err) == (
        f"{path}: its [ranking] says it was ranked {how}; rerun the sweep with --engine "
        "sglang and a cost (--cost-table FILE, or --step-ms and --token-ms) to rank it for "
        "SGLang's server (or delete the [ranking] table to launch it as it is)")


@pytest.mark.parametrize("ranking", [{"engine": "sglang", "concurrency": 4, "speed_up": 1.3},
                                     None])
def test_a_winner_ranked_for_sglang_or_a_hand_written_file_is_accepted(tmp_path, capsys,
                                                                       ranking):
    cfg = ns.NgramConfig.recommended(draft_token_num=6)
    path = tmp_path / "best.toml"
    path.write_text(cfg.to_toml() + (render_ranking(ranking) if ranking else ""))
    assert launch(["--config", str(path), "--print-args", "--", "--model-path", "m"]) == 0
    env, words = _script(capsys.readouterr().out)
    assert ns.NgramConfig.from_toml(env[ENV_CONFIG]) == cfg  # the file's slots, kept
    assert _flags(words)["--speculative-num-draft-tokens"] == "6"


# ---- best_budget -------------------------------------------------------------------------------

def test_best_budget_is_the_argmax_of_predict_serving():
    rows = SHIPPED[:24]
    cfg = ns.NgramConfig.recommended()
    cost = CostModel(step_ms=12, token_ms=0.5)
    choice = best_budget(cfg, rows, cost, concurrency=4, draft_ms=0.3)
    speed = {}
    for n in BUDGETS:
        r = ns.simulate(rows, config=cfg.replace(draft_token_num=n), concurrency=4)
        speed[n] = predict_serving(r, cost, draft_ms=0.3, engine="sglang").speed_up
    assert {n: p.speed_up for n, p in choice.predictions.items()} == speed
    best = max(speed.values())
    assert choice.draft_token_num == min(n for n, s in speed.items() if s == best)
    assert choice.config == cfg.replace(draft_token_num=choice.draft_token_num)
    assert choice.speed_up == best and choice.pays == (best > 1.0)
    assert list(choice.predictions) == list(BUDGETS) and choice.concurrency == 4


def test_best_budget_ties_go_to_the_smaller_budget():
    rows = [{"id": i, "prompt_ids": [100 + i], "output_ids": list(range(1000 * i, 1000 * i + 9))}
            for i in range(3)]  # nothing repeats: nothing is ever drafted
    choice = best_budget(ns.NgramConfig(capacity=1000), rows,
                         CostModel(decode_ms=10, verify_ms=10), concurrency=1,
                         budgets=(6, 3, 2), draft_ms=0)
    assert [p.speed_up for p in choice.predictions.values()] == [1.0, 1.0, 1.0]
    assert list(choice.predictions) == [2, 3, 6] and choice.draft_token_num == 2
    assert not choice.pays


@pytest.mark.parametrize("kwargs,kind,message", [
    (dict(budgets=()), ValueError, "budgets is empty: give at least one draft_token_num"),
    (dict(budgets=(4, 8, 4)), ValueError, "budgets lists 4 more than once"),
    (dict(budgets=(0, 4)), ValueError,
     "budgets must be >= 1 (slots per request, the root included), got 0"),
    (dict(budgets="48"), TypeError, "budgets must be a sequence of ints >= 1, got str"),
    (dict(budgets=(4, 1000)), ValueError,
     "budgets: draft_token_num=1000 does not suit the configuration (draft_token_num must be "
     "<= 256 with match_type='ADAPTIVE', got 1000)"),
    (dict(concurrency=0), ValueError,
     "concurrency must be >= 1 (requests decoded together), got 0"),
    (dict(cost=12.0), TypeError, "cost must be a CostTable or a CostModel, got float"),
    (dict(config=ns.NgramConfig(profile="sglang-0.5.9")), ValueError,
     "best_budget prices SGLang 0.5.23's NGRAM worker: the configuration must have profile "
     "'sglang-0.5.23', not 'sglang-0.5.9'"),
])
def test_best_budget_errors(kwargs, kind, message):
    args = dict(config=ns.NgramConfig.recommended(), streams=SHIPPED[:3],
                cost=CostModel(step_ms=12, token_ms=0.1), concurrency=1)
    args.update(kwargs)
    with pytest.raises(kind) as e:
        best_budget(args.pop("config"), args.pop("streams"), args.pop("cost"), **args)
    assert str(e.value) == message


def test_budget_docstring_examples():
    result = doctest.testmod(budget, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0


# ---- sglang-launch --cost-table ----------------------------------------------------------------

def _table(tmp_path: Path, verify) -> Path:
    """A cost table over batch 1..2 and tokens 1..16: decode 10 ms, verify ``verify(n)``."""
    path = tmp_path / "costs.csv"
    path.write_text(CostTable([(b, n, 10.0 + b if n == 1 else verify(n) + b)
                               for b in (1, 2) for n in (1, 2, 16)]).to_csv())
    return path


def _streams(tmp_path: Path) -> Path:
    path = tmp_path / "streams.jsonl"
    write_streams(SHIPPED[:16], path)
    return path


def test_cost_table_chooses_the_slots_on_the_launch_line(tmp_path, capsys):
    table = _table(tmp_path, lambda n: 10.0 + 0.4 * n)
    argv = ["--preset", "recommended", "--cost-table", str(table), "--concurrency", "2",
            "--streams", str(_streams(tmp_path)), "--print-args", "--", "--model-path", "m"]
    assert launch(argv) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    per_budget = [line for line in lines if line.startswith("#   draft_token_num")]
    assert [int(line.split()[2].rstrip(":")) for line in per_budget] == list(BUDGETS)
    chosen = [line for line in per_budget if line.endswith("<- chosen")]
    assert len(chosen) == 1
    n = int(chosen[0].split()[2].rstrip(":"))
    assert f"# draft_token_num {n}: the highest predicted speed-up (" in out
    env, words = _script(out)
    assert _flags(words)["--speculative-num-draft-tokens"] == str(n)
    assert ns.NgramConfig.from_toml(env[ENV_CONFIG]) == \
        ns.NgramConfig.recommended(draft_token_num=n)


def test_a_load_where_nothing_pays_warns_and_exits_1(tmp_path, capsys):
    table = _table(tmp_path, lambda n: 1000.0)  # a verify step 100 times a decode step
    argv = ["--cost-table", str(table), "--concurrency", "2", "--streams",
            str(_streams(tmp_path)), "--print-args", "--", "--model-path", "m"]
    assert launch(argv) == 1
    captured = capsys.readouterr()
    assert "sglang.launch_server" not in captured.out  # nothing to paste
    best = [line for line in captured.out.splitlines()
            if line.startswith("# draft_token_num ") and "highest" in line][0]
    x = best.split("(")[1].split("x at")[0]
    assert float(x) < 1.0
    assert captured.err == (
        f"ngramspec sglang-launch: warning: do not enable speculation at this load (best "
        f"{x}x at concurrency 2); start SGLang without --speculative-algorithm, or add "
        "--force\n")
    assert launch([*argv[:-3], "--force", *argv[-3:]]) == 0
    forced = capsys.readouterr()
    assert "launching anyway (--force)" in forced.err and "sglang.launch_server" in forced.out
