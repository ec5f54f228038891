"""``ngramspec check``: the prediction held against a real (tiny, random) transformers model.

The decoding tests are opt-in (``-m hf``; need torch and transformers); argument errors that
are found before any model runs are checked without them.
"""

from __future__ import annotations

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
        want = ["no requests"]
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
    from ngramspec.check import check_against_model
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
