"""``ngramspec calibrate``: a cost table measured on a tiny random transformers model (CPU).

The measuring test is opt-in (``-m hf``; needs torch and transformers); argument errors are
checked without them.
"""

from __future__ import annotations

import io
import sys

import numpy as np
import pytest

from ngramspec.cli import main
from ngramspec.costs import CostTable


def run(argv):
    out = io.StringIO()
    code = main(argv, stdout=out)
    return code, out.getvalue()


@pytest.mark.parametrize("argv,message", [
    (["--batch", "1,0"], "--batch: 0 is not >= 1"),
    (["--tokens", "4,x"], "--tokens: 'x' is not an integer"),
    (["--context", "0"], "--context must be >= 1"),
    (["--repeats", "0"], "--repeats must be >= 1"),
])
def test_argument_errors(tmp_path, capsys, argv, message):
    code, _ = run(["calibrate", str(tmp_path), "--out", str(tmp_path / "c.csv")] + argv)
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1


def test_without_torch_the_error_says_what_to_install(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch -> ImportError
    code, _ = run(["calibrate", str(tmp_path), "--out", str(tmp_path / "c.csv")])
    assert code == 2
    assert "pip install 'ngramspec[calibrate]'" in capsys.readouterr().err


@pytest.mark.hf
def test_calibrate_fills_the_table_of_a_tiny_model(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(
        "qwen2", vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    model_dir = tmp_path / "tiny"
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(model_dir)
    out = tmp_path / "costs.csv"
    code, text = run(["calibrate", str(model_dir), "--batch", "1,2,4", "--tokens", "1,4,8",
                      "--context", "64", "--repeats", "3", "--threads", "1", "--out", str(out),
                      "--no-progress"])
    assert code == 0, capsys.readouterr().err
    table = CostTable.read(out)
    assert table.batches.tolist() == [1, 2, 4] and table.tokens.tolist() == [1, 4, 8]
    assert np.isfinite(table.grid).all() and (table.grid > 0).all()
    assert "batch \\ tokens" in text and f"--cost-table {out}" in text
    for b, n, ms in table.points():
        assert f"{ms:.3f}" in text
    # The table feeds the prediction.
    code, text = run(["simulate", "--limit", "8", "--cost-table", str(out), "--concurrency",
                      "1,2,4", "--draft-token-num", "8", "--no-progress"])
    assert code == 0 and "verdict: " in text


@pytest.mark.hf
def test_bad_model_dir_is_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    code, _ = run(["calibrate", str(tmp_path / "nope"), "--out", str(tmp_path / "c.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "no such directory" in err and err.count("\n") == 1
    (tmp_path / "empty").mkdir()
    code, _ = run(["calibrate", str(tmp_path / "empty"), "--out", str(tmp_path / "c.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "cannot be loaded" in err and err.count("\n") == 1


def test_docstring_examples():
    import doctest

    import ngramspec.calibrate as module  # imports torch only when measuring
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
