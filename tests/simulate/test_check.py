"""``ngramspec check``: the prediction held against a real (tiny, random) transformers model.

The decoding tests are opt-in (``-m hf``; need torch and transformers); argument errors that
are found before any model runs are checked without them.
"""

from __future__ import annotations

import dataclasses
import gzip
import io
import json

import numpy as np
import pytest

from ngramspec.cli import main
from ngramspec.streams import embedded_streams_path

STREAMS = str(embedded_streams_path())


def run(argv):
    out = io.StringIO()
    code = main(argv, stdout=out)
    return code, out.getvalue()


def _table(path, batches=(1, 2, 3), tokens=(1, 12)):
    path.write_text("batch,tokens,ms\n" + "".join(
        f"{b},{n},{1.0 + 0.5 * b + 0.2 * n}\n" for b in batches for n in tokens))
    return path


def _one_line_error(capsys, code, *parts):
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and err.startswith("ngramspec: error: "), err
    for p in parts:
        assert p in err, err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", ["no model dir", "no streams", "empty streams",
                                  "bad concurrency", "table too small", "bad max-requests"])
def test_errors_before_any_model_runs(tmp_path, capsys, case):
    model = tmp_path / "model"
    model.mkdir()
    table = _table(tmp_path / "t.csv")
    streams, extra, want = STREAMS, [], []
    if case == "no model dir":
        model = tmp_path / "nope"
        want = ["no such directory"]
    elif case == "no streams":
        streams = str(tmp_path / "missing.jsonl")
        want = ["missing.jsonl"]
    elif case == "empty streams":
        empty = tmp_path / "empty.jsonl"
        empty.write_text("")
        streams = str(empty)
        want = ["empty.jsonl", "holds no records"]
    elif case == "bad concurrency":
        extra = ["--concurrency", "1,x"]
        want = ["--concurrency: 'x' is not an integer"]
    elif case == "table too small":
        table = _table(tmp_path / "small.csv", batches=(1,), tokens=(1, 4))
        extra = ["--concurrency", "1,2"]
        want = ["no point for"]
    else:
        extra = ["--max-requests", "0"]
        want = ["--max-requests must be >= 1"]
    code, _ = run(["check", str(model), streams, "--cost-table", str(table), "--max-requests",
                   "3", "--max-output", "8", "--no-progress"] + extra)
    _one_line_error(capsys, code, *want)


def test_missing_json_folder_and_bad_preset(tmp_path, capsys):
    (tmp_path / "m").mkdir()
    table = _table(tmp_path / "t.csv")
    code, _ = run(["check", str(tmp_path / "m"), STREAMS, "--cost-table", str(table),
                   "--json", str(tmp_path / "no" / "r.json")])
    _one_line_error(capsys, code, "--json", "no such directory")
    code, _ = run(["check", str(tmp_path / "m"), STREAMS, "--cost-table", str(table),
                   "--preset", "nope"])
    _one_line_error(capsys, code, "--preset: unknown preset 'nope'")


def test_an_unknown_engine_is_refused(tmp_path, capsys):
    from ngramspec.measure.check import check_against_model
    from ngramspec.costs import CostTable

    table = CostTable([(1, 1, 2.0), (1, 12, 3.0)])
    # Refused first, before the streams are read or the model directory looked for.
    with pytest.raises(ValueError) as e:
        check_against_model(tmp_path / "nope", STREAMS, cost_table=table, engine="trt")
    assert str(e.value) == "engine must be one of custom, sglang, vllm, got 'trt'"
    (tmp_path / "m").mkdir()
    with pytest.raises(SystemExit) as e:
        run(["check", str(tmp_path / "m"), STREAMS, "--cost-table",
             str(_table(tmp_path / "t.csv")), "--engine", "trt"])
    assert e.value.code == 2
    err = capsys.readouterr().err
    assert "argument --engine: invalid choice: 'trt'" in err, err
    assert "custom" in err and "sglang" in err and "vllm" in err, err


# --- on a model -----------------------------------------------------------------------------


def _save(path, vocab, hidden, dtype="float32", seed=0):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(
        "qwen2", vocab_size=vocab, hidden_size=hidden, intermediate_size=2 * hidden,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=4096, tie_word_embeddings=False)
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(cfg).to(getattr(torch, dtype))
    model.save_pretrained(path)
    return model


@pytest.fixture(scope="module")
def shipped_vocab_model(tmp_path_factory):
    """A tiny random model whose vocabulary covers the shipped streams."""
    path = tmp_path_factory.mktemp("check") / "tiny"
    _save(path, vocab=151646, hidden=32)
    return path


@pytest.mark.hf
def test_check_on_the_shipped_streams(tmp_path, capsys, shipped_vocab_model):
    table = _table(tmp_path / "t.csv")
    report = tmp_path / "r.json"
    code, text = run(["check", str(shipped_vocab_model), STREAMS, "--cost-table", str(table),
                      "--max-requests", "4", "--max-output", "20", "--concurrency", "1,3",
                      "--threads", "1", "--json", str(report), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert "emitted tokens equal the recording: yes" in text
    assert "realised/predicted" in text
    data = json.loads(report.read_text())
    assert [r["concurrency"] for r in data["rows"]] == [1, 3]
    for r in data["rows"]:
        for key in ("steps", "simulated_steps", "tokens", "predicted_speed_up",
                    "realised_speed_up", "ratio", "plain_ms", "speculative_ms"):
            assert key in r
        assert r["steps"] == r["simulated_steps"] and r["plain_steps"] >= r["steps"]
        assert r["tokens"] > 0 and r["realised_speed_up"] > 0
        assert f"{r['steps']}/{r['simulated_steps']}" in text
    assert data["config"]["draft_token_num"] == 12
    assert data["cost_table"]["points"][0] == [1, 1, 1.7]
    assert data["emitted_equal_recording"] is True
    assert data["engine"] == "custom"
    assert "\nengine: custom, a custom loop (real ADAPTIVE trees, plain decodes without " \
           "drafts): the loop's forwards and the prediction alike; the prediction's " \
           "drafting: the step API, timed\n" in text
    assert {r["predicted_draft_source"] for r in data["rows"]} == {"the step API, timed"}


@pytest.mark.hf
def test_check_engine_sglang_on_the_command_line(tmp_path, capsys, shipped_vocab_model):
    table = _table(tmp_path / "t.csv", tokens=(1, 16))
    report = tmp_path / "r.json"
    code, text = run(["check", str(shipped_vocab_model), STREAMS, "--cost-table", str(table),
                      "--max-requests", "3", "--max-output", "20", "--concurrency", "2",
                      "--preset", "recommended", "--engine", "sglang", "--threads", "1",
                      "--json", str(report), "--no-progress"])
    assert code == 0, capsys.readouterr().err
    assert "\nengine: sglang, SGLang's NGRAM worker (draft_token_num slots per request, every " \
           "step): the loop's forwards and the prediction alike; the prediction's drafting: " \
           "SGLang's worker calls on the drop-in NgramCorpus, timed\n" in text
    assert "emitted tokens equal the recording: yes" in text
    assert "note:" not in text  # every step at 16 slots: no tree size interpolated
    data = json.loads(report.read_text())
    assert data["engine"] == "sglang"
    assert data["config"]["match_type"] == "ADAPTIVE"
    (row,) = data["rows"]
    assert row["steps"] == row["simulated_steps"]
    assert row["predicted_draft_source"] == "SGLang's worker calls on the drop-in NgramCorpus, " \
                                            "timed"
    assert row["interpolated"] == {"batches": [], "tokens": [], "plain_steps": 0.0,
                                   "speculative_steps": 0.0}


@pytest.mark.hf
def test_token_ids_beyond_the_vocabulary_and_bad_device(tmp_path, capsys):
    model = tmp_path / "small"
    _save(model, vocab=256, hidden=32)
    table = _table(tmp_path / "t.csv")
    capsys.readouterr()  # the saving's own progress bar
    code, _ = run(["check", str(model), STREAMS, "--cost-table", str(table),
                   "--max-requests", "2", "--no-progress"])
    _one_line_error(capsys, code, "beyond the model's vocabulary (256)")
    code, _ = run(["check", str(model), STREAMS, "--cost-table", str(table),
                   "--max-requests", "2", "--device", "nonsense", "--no-progress"])
    _one_line_error(capsys, code, "device 'nonsense'")
    (tmp_path / "notamodel").mkdir()
    code, _ = run(["check", str(tmp_path / "notamodel"), STREAMS, "--cost-table", str(table),
                   "--max-requests", "2", "--no-progress"])
    _one_line_error(capsys, code, "cannot be loaded")


@pytest.mark.hf
@pytest.mark.parametrize("preset", ["sglang", "recommended"])
def test_the_model_agrees_with_its_own_recording_when_batched(tmp_path, preset):
    """Streams recorded from the model itself (float64): the batched loop's own argmax, over
    left-padded ragged caches and tree masks, equals the recording on every accepted slot."""
    torch = pytest.importorskip("torch")
    from ngramspec import NgramConfig
    from ngramspec.measure.check import check_against_model
    from ngramspec.costs import CostTable

    model_dir = tmp_path / "m"
    model = _save(model_dir, vocab=64, hidden=64, dtype="float64", seed=1).eval()
    rng = np.random.default_rng(0)
    rows = []
    with torch.no_grad():
        for i, length in enumerate([9, 23, 14, 30]):
            phrase = rng.integers(1, 64, size=5).tolist()
            prompt = (phrase * 8)[:length]
            ids = list(prompt)
            for _ in range(14 + 3 * i):
                ids.append(int(model(torch.tensor([ids])).logits[0, -1].argmax()))
            rows.append({"id": i, "prompt_ids": prompt, "output_ids": ids[len(prompt):]})
    streams = tmp_path / "own.jsonl.gz"
    with gzip.open(streams, "wt") as f:
        f.writelines(json.dumps(r) + "\n" for r in rows)
    table = CostTable([(b, n, 1.0 + b + n) for b in (1, 2, 3) for n in (1, 4)])
    rep = check_against_model(model_dir, streams, cost_table=table, concurrency=[1, 3],
                              dtype="float64", threads=1,
                              config=NgramConfig.preset(preset, draft_token_num=4))
    assert rep.identical
    for r in rep.rows:
        assert r.agreement == 1.0, r
        assert r.steps == r.simulated_steps and r.steps < r.plain_steps


def _repetitive_rows(vocab, lengths, seed=0):
    """Streams whose outputs repeat phrases of their prompts: drafts of every size occur."""
    rng = np.random.default_rng(seed)
    rows = []
    for i, (p, o) in enumerate(lengths):
        phrase = rng.integers(1, vocab, size=6).tolist()
        noise = rng.integers(1, vocab, size=o).tolist()
        out = [t if k % 7 else noise[k] for k, t in enumerate((phrase * 20)[p % 6:][:o])]
        rows.append({"id": i, "prompt_ids": (phrase * 8)[:p], "output_ids": out})
    return rows


@pytest.mark.hf
@pytest.mark.parametrize("preset,engine", [("recommended", "sglang"), ("sglang", "sglang"),
                                           ("recommended", "custom")])
def test_the_loop_sends_what_the_engine_verifies(tmp_path, monkeypatch, preset, engine):
    """Every speculative forward, exactly: with engine="sglang" each request sends
    draft_token_num slots at every step (the DraftBatch as propose returns it, SGLang's
    padding included; never a plain decode), as schedule(sim, engine="sglang") prices it; a
    custom loop sends ADAPTIVE's real slots and decodes plainly without drafts.  The step
    counts are the simulator's and the prediction is predict_serving(..., engine=engine)."""
    pytest.importorskip("torch")
    import ngramspec.measure.torch_loop as tl
    from ngramspec import Drafter, NgramConfig, simulate
    from ngramspec.measure import check as chk
    from ngramspec.costs import CostTable, bootstrap, predict_serving, schedule
    from ngramspec.simulate.results import SimulationResult

    n = 6
    config = NgramConfig.preset(preset, draft_token_num=n)
    model_dir = tmp_path / "m"
    _save(model_dir, vocab=64, hidden=32, seed=2)
    rows = _repetitive_rows(64, [(9, 30), (20, 41), (14, 2), (30, 25)])
    table = CostTable([(b, t, 1.0 + b + 0.5 * t) for b in (1, 2, 3) for t in (1, n)])
    # The drafting figure the prediction adds, fixed so that the prediction is exact.
    monkeypatch.setattr(SimulationResult, "sglang_ms_per_step", property(lambda self: 0.125))
    monkeypatch.setattr(SimulationResult, "step_api_ms_per_step", property(lambda self: 0.25))

    runs: list[list[tuple]] = []  # per _speculative call: one entry per forward
    proposed: list = []
    inside = [False]
    speculative, step, propose = chk._speculative, tl.Stepper.step, Drafter.propose

    def spy_speculative(*args, **kwargs):
        runs.append([])
        inside[0] = True
        try:
            return speculative(*args, **kwargs)
        finally:
            inside[0] = False

    def spy_step(self, tokens, kv_lens, drafts=None):
        if inside[0]:
            sent = drafts is not None and drafts is proposed[-1]
            runs[-1].append((tokens.shape, drafts is not None, sent,
                             None if drafts is None else drafts.num_drafts.copy()))
        return step(self, tokens, kv_lens, drafts)

    def spy_propose(self, *args, **kwargs):
        proposed.append(propose(self, *args, **kwargs))
        return proposed[-1]

    monkeypatch.setattr(chk, "_speculative", spy_speculative)
    monkeypatch.setattr(tl.Stepper, "step", spy_step)
    monkeypatch.setattr(Drafter, "propose", spy_propose)
    rep = chk.check_against_model(model_dir, rows, cost_table=table, config=config,
                                  concurrency=[1, 3], threads=1, engine=engine)
    assert rep.identical and rep.engine == engine and rep.to_dict()["engine"] == engine
    assert len(runs) == 3  # the warm-up, then one run per level
    padding = 0
    for r, forwards in zip(rep.rows, runs[1:]):
        sim = simulate(rows, config=config, concurrency=r.run_at)
        sched = schedule(sim, engine=engine)
        assert r.steps == r.simulated_steps == len(forwards) == sched.batch.size
        assert [shape for shape, *_ in forwards] == \
            [(int(b), int(t)) for b, t in zip(sched.batch, sched.tokens)]
        if engine == "sglang":
            assert [shape[1] for shape, *_ in forwards] == [n] * r.steps
            assert all(tree and sent for _, tree, sent, _ in forwards)  # propose's own batch
            padding += sum(int((d + 1 < n).sum()) for *_, d in forwards)
            assert r.interpolated == {"batches": [], "tokens": [], "plain_steps": 0.0,
                                      "speculative_steps": 0.0}
        else:  # ADAPTIVE's real slots; a plain decode (no tree) where nothing is drafted
            assert [tree for _, tree, *_ in forwards] == [t > 1 for t in sched.tokens]
            assert 1 in sched.tokens and any(1 < t < n for t in sched.tokens)
            assert r.interpolated["tokens"] == sorted(set(sched.tokens.tolist()) - {1, n})
        want = predict_serving(sim, table, engine=engine)
        want = dataclasses.replace(want, interval=bootstrap(sim, table, engine=engine,
                                                            draft_ms=want.draft_ms))
        assert r.prediction == want and r.predicted_speed_up == want.speed_up
        assert r.prediction.engine == engine
    if engine == "sglang" and preset == "recommended":
        assert padding > 0  # ADAPTIVE's short trees went out padded to n slots
