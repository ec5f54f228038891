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


@pytest.fixture(scope="module")
def tiny_model_dir(tmp_path_factory):
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    cfg = transformers.AutoConfig.for_model(
        "qwen2", vocab_size=256, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
        tie_word_embeddings=False)
    torch.manual_seed(0)
    model_dir = tmp_path_factory.mktemp("calibrate") / "tiny"
    transformers.AutoModelForCausalLM.from_config(cfg).save_pretrained(model_dir)
    return model_dir


FAST = ["--context", "64", "--repeats", "2", "--warmup", "1", "--threads", "1",
        "--no-progress"]


@pytest.mark.hf
def test_calibrate_fills_the_table_of_a_tiny_model(tmp_path, capsys, tiny_model_dir):
    out = tmp_path / "costs.csv"
    code, text = run(["calibrate", str(tiny_model_dir), "--batch", "1,2,4", "--tokens",
                      "1,4,8", "--out", str(out)] + FAST)
    assert code == 0, capsys.readouterr().err
    table = CostTable.read(out)
    assert table.batches.tolist() == [1, 2, 4] and table.tokens.tolist() == [1, 4, 8]
    assert np.isfinite(table.grid).all() and (table.grid > 0).all()
    assert "batch \\ tokens" in text and f"--cost-table {out}" in text
    assert "loop timing" in text
    for b, n, ms in table.points():
        assert f"{ms:.3f}" in text
    # Steadiness: the first point measured again at the end.
    assert "steadiness: batch 1, tokens 1 measured again at the end" in text
    # The table feeds the prediction.
    code, text = run(["simulate", "--limit", "8", "--cost-table", str(out), "--concurrency",
                      "1,2,4", "--draft-token-num", "8", "--no-progress"])
    assert code == 0 and "verdict: " in text


@pytest.mark.hf
def test_forward_timing_still_works(tmp_path, capsys, tiny_model_dir):
    out = tmp_path / "costs.csv"
    code, text = run(["calibrate", str(tiny_model_dir), "--batch", "1,2", "--tokens", "1,4",
                      "--timing", "forward", "--out", str(out)] + FAST)
    assert code == 0, capsys.readouterr().err
    assert "forward timing" in text
    assert CostTable.read(out).points().__len__() == 4


def _failing_forward(monkeypatch, fails):
    import ngramspec.measure.torch_loop as tl

    real = tl.forward

    def forward(model, input_ids, cache=None, **kwargs):
        if fails(input_ids.shape[0], input_ids.shape[1], cache is None):
            raise RuntimeError("CUDA out of memory. Tried to allocate 30.00 GiB\nmore text")
        return real(model, input_ids, cache, **kwargs)

    monkeypatch.setattr(tl, "forward", forward)


@pytest.mark.hf
def test_a_failing_point_keeps_the_rest(tmp_path, capsys, monkeypatch, tiny_model_dir):
    _failing_forward(monkeypatch, lambda b, n, prefill: b == 2 and n == 4 and not prefill)
    out = tmp_path / "costs.csv"
    code, text = run(["calibrate", str(tiny_model_dir), "--batch", "1,2,3", "--tokens", "1,4",
                      "--out", str(out)] + FAST)
    assert code == 0, capsys.readouterr().err
    warning = [line for line in text.splitlines() if line.startswith("warning: 1 point")]
    assert len(warning) == 1 and "batch 2, tokens 4: RuntimeError: CUDA out of memory" in \
        warning[0] and "leaves out batch 2" in warning[0]
    table = CostTable.read(out)
    assert table.batches.tolist() == [1, 3] and table.tokens.tolist() == [1, 4]


@pytest.mark.hf
def test_a_failing_batch_row_and_nothing_measured(tmp_path, capsys, monkeypatch,
                                                  tiny_model_dir):
    _failing_forward(monkeypatch, lambda b, n, prefill: b == 2)  # its prefill fails
    out = tmp_path / "costs.csv"
    code, text = run(["calibrate", str(tiny_model_dir), "--batch", "1,2", "--tokens", "1,4",
                      "--out", str(out)] + FAST)
    assert code == 0, capsys.readouterr().err
    assert "warning: 2 point(s) failed (batch 2, tokens 1: prefill: RuntimeError" in text
    assert CostTable.read(out).batches.tolist() == [1]
    _failing_forward(monkeypatch, lambda b, n, prefill: True)
    out2 = tmp_path / "none.csv"
    code, _ = run(["calibrate", str(tiny_model_dir), "--batch", "1", "--tokens", "1,4",
                   "--out", str(out2)] + FAST)
    err = capsys.readouterr().err
    assert code == 2 and "no point could be measured" in err and err.count("\n") == 1
    assert not out2.exists()


def test_drift_warning_and_atomic_write(tmp_path, monkeypatch):
    from ngramspec.measure import calibrate

    def fake(model, **kw):
        return calibrate.Measurements([(1, 1, 1.0, 1.0, 1.0), (1, 4, 2.0, 2.0, 2.0)],
                                      drift=(1, 1, 1.0, 1.3))

    monkeypatch.setattr(calibrate, "measure", fake)
    out = tmp_path / "c.csv"
    code, text = run(["calibrate", str(tmp_path), "--out", str(out), "--no-progress"])
    assert code == 0
    assert "1.000 then 1.300 ms (+30.0%)" in text
    assert [line for line in text.splitlines() if line.startswith("warning: timings drifted")]
    assert CostTable.read(out).points() == [(1, 1, 1.0), (1, 4, 2.0)]
    assert [p.name for p in tmp_path.iterdir()] == ["c.csv"]  # no temporary file left


def test_missing_output_folder_is_refused_before_measuring(tmp_path, capsys):
    code, _ = run(["calibrate", str(tmp_path), "--out", str(tmp_path / "no" / "c.csv")])
    err = capsys.readouterr().err
    assert code == 2 and "--out" in err and "no such directory" in err


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

    import ngramspec.measure.calibrate as module  # imports torch only when measuring
    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert result.failed == 0 and result.attempted > 0
