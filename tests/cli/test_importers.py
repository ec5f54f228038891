"""``ngramspec streams import``: chat logs through the model's own chat template, and logs
with token ids, into stream files."""

from __future__ import annotations

import contextlib
import gzip
import io
import json
import os
from pathlib import Path

import pytest

import ngramspec as ns
from ngramspec.cli import main
from ngramspec.streams.importers import import_streams
from ngramspec.streams import StreamError, embedded_streams_path

# A ChatML-like template: system and tools kept, one block per message.
TEMPLATE = r"""
{%- if tools %}{{- '<|im_start|>system\n' }}{%- if messages[0].role == 'system' %}
{{- messages[0].content + '\n\n' }}{%- endif %}{{- 'Tools:\n' }}{%- for t in tools %}
{{- t | tojson }}{{- '\n' }}{%- endfor %}{{- '<|im_end|>\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}{%- endif %}
{%- for m in messages %}{%- if not (m.role == 'system' and loop.first) %}
{{- '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{%- endif %}{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\n' }}{%- endif %}
""".strip()


def run(argv):
    out = io.StringIO()
    return main(argv, stdout=out), out.getvalue()


def build_tokenizer(directory: Path, *, template: str | None = TEMPLATE) -> Path:
    """A small byte-level BPE trained here on texts of the shipped recorded streams, saved
    with a chat template (needs tokenizers and transformers)."""
    from benchmarks.common import train_chat_tokenizer

    rows = ns.read_streams(embedded_streams_path())[:40]
    texts = [r["prompt_text"] for r in rows] + [r["output_text"] for r in rows]
    return train_chat_tokenizer(directory, texts, vocab_size=600, chat_template=template)


CONVERSATIONS = [
    {"id": "c1", "tenant": "a", "messages": [
        {"role": "system", "content": "You are a careful coder."},
        {"role": "user", "content": "Write add(a, b) in Python."},
        {"role": "assistant", "content": "def add(a, b):\n    return a + b"},
        {"role": "user", "content": "Now subtract."},
        {"role": "assistant", "content": "def sub(a, b):\n    return a - b"}]},
    {"id": "c2", "tenant": "b",
     "tools": [{"type": "function", "function": {"name": "search", "parameters": {}}}],
     "messages": [
         {"role": "user", "content": "Find the docs of numpy.sort, please."},
         {"role": "assistant", "content": "Calling search(\"numpy.sort\")."},
         {"role": "tool", "content": "numpy.sort(a, axis=-1, kind=None)"},
         {"role": "assistant", "content": "It sorts along the last axis by default."}]},
    {"tenant": "a", "messages": [
        {"role": "user", "content": "héllo — ünïcode ✓"},
        {"role": "assistant", "content": "Bonjour ✓"}]},
]


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    pytest.importorskip("tokenizers")
    return build_tokenizer(tmp_path_factory.mktemp("tok"))


def _jsonl(path: Path, records) -> Path:
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records),
                    encoding="utf-8")
    return path


def _expected(tok, conversations):
    """Streams from the tokenizer's own apply_chat_template, per assistant message."""
    want = []
    for line, conv in enumerate(conversations, 1):
        msgs, tools = conv["messages"], conv.get("tools")
        turns = [k for k, m in enumerate(msgs) if m["role"] == "assistant" and k > 0]
        for n, k in enumerate(turns):
            prompt = tok.apply_chat_template(msgs[:k], tools=tools, add_generation_prompt=True,
                                             tokenize=True, return_dict=False)
            want.append((conv.get("id"), line, n, list(prompt), msgs[k]["content"]))
    return want


@pytest.mark.hf
def test_openai_chat_prompts_are_the_templates_own(tokenizer_dir, tmp_path):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    src = _jsonl(tmp_path / "chat.jsonl", CONVERSATIONS)
    out = tmp_path / "s.jsonl.gz"
    code, text = run(["streams", "import", str(src), "--format", "openai-chat", "--tokenizer",
                      str(tokenizer_dir), "--out", str(out), "--no-progress"])
    assert code == 0, text
    assert "5 streams from 3 records" in text
    rows = ns.read_streams(out)
    want = _expected(tok, CONVERSATIONS)
    assert len(rows) == len(want) == 5
    eos = tok.convert_tokens_to_ids("<|im_end|>")
    for row, (cid, line, n, prompt, content) in zip(rows, want):
        assert row["prompt_ids"] == prompt
        assert row["id"] == f"{cid if cid else f'{src}:{line}'}#{n}"
        assert row["turn"] == n
        # The assistant turn as rendered, end-of-turn token included, nothing after it.
        assert row["output_ids"][-1] == eos
        assert tok.decode(row["output_ids"]) == content + "<|im_end|>"
    assert [r["tenant"] for r in rows] == ["a", "a", "b", "b", "a"]
    # The tools reach the template.
    assert b"search" in tok.decode(rows[2]["prompt_ids"]).encode()
    # The file replays.
    assert ns.simulate(rows, config=ns.NgramConfig()).summary.requests == 5


@pytest.mark.hf
def test_sharegpt_and_hf_dataset_give_the_same_streams(tokenizer_dir, tmp_path):
    pa = pytest.importorskip("pyarrow")
    pq = pytest.importorskip("pyarrow.parquet")
    convs = [c for c in CONVERSATIONS if "tools" not in c]
    back = {"user": "human", "assistant": "gpt", "system": "system", "tool": "tool"}
    share = [{"id": c.get("id", f"x{i}"), "conversations": [
        {"from": back[m["role"]], "value": m["content"]} for m in c["messages"]]}
        for i, c in enumerate(convs)]
    chat = [dict(c, id=c.get("id", f"x{i}")) for i, c in enumerate(convs)]
    outs = {}
    sources = {
        "openai-chat": [_jsonl(tmp_path / "chat.jsonl", chat)],
        "sharegpt": [tmp_path / "share.json"],
        "sharegpt-jsonl": [_jsonl(tmp_path / "share.jsonl", share)],
        "hf-parquet": [tmp_path / "d.parquet"],
        "hf-saved": [tmp_path / "saved"],
    }
    (tmp_path / "share.json").write_text(json.dumps(share, indent=1))
    table = pa.Table.from_pylist([{"id": r["id"], "conversations": r["conversations"]}
                                  for r in share])
    pq.write_table(table, tmp_path / "d.parquet")
    saved = tmp_path / "saved"
    saved.mkdir()
    with pa.OSFile(str(saved / "data-00000-of-00001.arrow"), "wb") as f, \
            pa.ipc.new_stream(f, table.schema) as w:
        w.write_table(table)
    (saved / "state.json").write_text(json.dumps(
        {"_data_files": [{"filename": "data-00000-of-00001.arrow"}]}))
    for name, paths in sources.items():
        fmt = {"openai-chat": "openai-chat", "hf-parquet": "hf-dataset",
               "hf-saved": "hf-dataset"}.get(name, "sharegpt")
        out = tmp_path / f"{name}.jsonl"
        report = import_streams(paths, out, format=fmt, tokenizer=str(tokenizer_dir))
        assert report.skipped == {}
        outs[name] = [(r["id"], r["prompt_ids"], r["output_ids"]) for r in ns.read_streams(out)]
    first = outs.pop("openai-chat")
    assert len(first) == 3
    for name, got in outs.items():
        assert got == first, name


@pytest.mark.hf
def test_junk_is_skipped_and_named(tokenizer_dir, tmp_path, capsys):
    lines = [json.dumps(CONVERSATIONS[0]),
             '{"messages": [{"role": "user", "content": "hi"}',  # malformed, line 2
             json.dumps({"messages": [{"content": "no role"}, {"role": "assistant",
                                                               "content": "x"}]}),
             json.dumps({"messages": []}),
             json.dumps({"messages": [{"role": "user", "content": "no answer"}]}),
             json.dumps({"messages": [{"role": "wizard", "content": "?"}]}),
             json.dumps([1, 2]),
             json.dumps({"prompt": "not a chat"})]
    src = tmp_path / "junk.jsonl"
    src.write_text("\n".join(lines) + "\n")
    out = tmp_path / "s.jsonl"
    code, text = run(["streams", "import", str(src), "--format", "openai-chat", "--tokenizer",
                      str(tokenizer_dir), "--out", str(out), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 0
    assert "2 streams from 8 records" in text and "skipped 7" in text
    for want in (f"{src}:2: not valid JSON", f"{src}:3: field 'messages[0].role' is missing",
                 f"{src}:4: field 'messages' is empty",
                 f"{src}:5: no assistant message", f"{src}:6: field 'messages[0].role' = "
                 "'wizard' is not a chat role", f"{src}:7: a record must be a JSON object",
                 f"{src}:8: field 'messages' is missing"):
        assert f"ngramspec: skipped: {want}" in err
    assert len(ns.read_streams(out)) == 2
    # --strict: the first bad line is an error and the existing output stays as it was.
    before = out.read_bytes()
    code, _ = run(["streams", "import", str(src), "--format", "openai-chat", "--tokenizer",
                   str(tokenizer_dir), "--out", str(out), "--strict"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"ngramspec: error: {src}:2: not valid JSON")
    assert out.read_bytes() == before
    # Nothing importable: an error, no file.
    bad = _jsonl(tmp_path / "bad.jsonl", [{"messages": []}])
    code, _ = run(["streams", "import", str(bad), "--format", "sharegpt", "--tokenizer",
                   str(tokenizer_dir), "--out", str(tmp_path / "none.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "nothing to write" in err and "field 'conversations' is missing" in err
    assert not (tmp_path / "none.jsonl").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.jsonl", "junk.jsonl",
                                                          "s.jsonl"]  # no temporary left


@pytest.mark.hf
def test_tokenizer_errors(tmp_path, capsys):
    pytest.importorskip("transformers")
    plain = build_tokenizer(tmp_path / "plain", template=None)
    src = _jsonl(tmp_path / "c.jsonl", CONVERSATIONS)
    for tok_dir, message in ((plain, "the tokenizer has no chat template"),
                             (tmp_path / "nowhere", "not a directory"),
                             (tmp_path, "no tokenizer could be loaded from there")):
        code, _ = run(["streams", "import", str(src), "--format", "openai-chat", "--tokenizer",
                       str(tok_dir), "--out", str(tmp_path / "o.jsonl")])
        err = capsys.readouterr().err
        assert code == 2 and message in err and err.count("\n") == 1
        assert not (tmp_path / "o.jsonl").exists()
    # A template given beside it works.
    (tmp_path / "t.jinja").write_text(TEMPLATE)
    code, text = run(["streams", "import", str(src), "--format", "openai-chat", "--tokenizer",
                      str(plain), "--chat-template", str(tmp_path / "t.jinja"), "--out",
                      str(tmp_path / "o.jsonl")])
    assert code == 0 and "5 streams" in text


def test_token_ids_vllm_layouts_and_field_mapping(tmp_path, capsys):
    recs = [{"request_id": "r1", "prompt_token_ids": [1, 2, 3],
             "outputs": [{"token_ids": [4, 5], "text": "..."}], "day": "mon"},
            {"id": 7, "prompt_token_ids": [3], "token_ids": [9, 9, 2]},
            {"prompt_ids": [1], "output_ids": [2]}]
    src = _jsonl(tmp_path / "v.jsonl", recs)
    out = tmp_path / "s.jsonl.gz"
    code, text = run(["streams", "import", str(src), "--format", "token-ids", "--out",
                      str(out)])
    assert code == 0 and "3 streams from 3 records" in text
    rows = ns.read_streams(out)
    assert [(r["id"], r["prompt_ids"], r["output_ids"]) for r in rows] == [
        ("r1", [1, 2, 3], [4, 5]), (7, [3], [9, 9, 2]), (f"{src}:3", [1], [2])]
    assert rows[0]["day"] == "mon" and "outputs" not in rows[0]
    with gzip.open(out, "rt") as f:
        assert len(f.read().splitlines()) == 3
    # Another layout, mapped.
    src2 = _jsonl(tmp_path / "sg.jsonl", [{"rid": "a", "input_ids": [5, 6],
                                           "meta": {"output_ids": [7]}},
                                          {"rid": "b", "input_ids": [5, "x"],
                                           "meta": {"output_ids": [7]}},
                                          {"rid": "c", "input_ids": [5]}])
    code, text = run(["streams", "import", str(src2), "--format", "token-ids", "--out",
                      str(tmp_path / "m.jsonl"), "--field", "prompt_ids=input_ids", "--field",
                      "output_ids=meta.output_ids", "--field", "id=rid"])
    err = capsys.readouterr().err
    assert code == 0 and "1 streams from 3 records" in text
    assert f"{src2}:2: prompt_ids[1] must be an integer token id" in err
    assert f"{src2}:3: field 'meta.output_ids' is missing" in err
    assert ns.read_streams(tmp_path / "m.jsonl")[0]["prompt_ids"] == [5, 6]


@pytest.mark.parametrize("argv,message", [
    (["--format", "csv"], "--format must be one of openai-chat, sharegpt, hf-dataset, "
                          "token-ids"),
    (["--format", "openai-chat"], "--format openai-chat needs --tokenizer DIR"),
    (["--format", "token-ids", "--field", "prompt"], "--field must be NAME=PATH"),
    (["--format", "token-ids", "--field", "colour=x"], "--field colour=...: unknown field"),
    (["--format", "token-ids", "--tokenizer", "x"], "do not apply"),
    (["--format", "token-ids", "--trust-remote-code"], "--trust-remote-code do not apply"),
])
def test_import_argument_errors(tmp_path, capsys, argv, message):
    src = _jsonl(tmp_path / "v.jsonl", [{"prompt_ids": [1], "output_ids": [2]}])
    code, _ = run(["streams", "import", str(src), "--out", str(tmp_path / "o.jsonl"), *argv])
    err = capsys.readouterr().err
    assert code == 2 and message in err and err.count("\n") == 1
    assert sorted(os.listdir(tmp_path)) == ["v.jsonl"]


def test_import_progress_and_duplicates(tmp_path, capsys):
    recs = [{"id": i % 5, "prompt_ids": [1], "output_ids": [2]} for i in range(10)]
    src = _jsonl(tmp_path / "v.jsonl", recs)
    code, text = run(["streams", "import", str(src), "--format", "token-ids", "--out",
                      str(tmp_path / "o.jsonl"), "--progress"])
    err = capsys.readouterr().err
    assert code == 0 and "5 streams from 10 records" in text and "5 duplicate id" in text
    assert "import [" in err and "100.0%" in err
    assert f"{src}:6: field 'id': duplicate id 0" in err
    with pytest.raises(StreamError, match="nothing to write"):
        import_streams([_jsonl(tmp_path / "e.jsonl", [{"x": 1}])], tmp_path / "n.jsonl",
                       format="token-ids")


@pytest.mark.parametrize("name", ["ngramspec.streams.importers", "ngramspec.cli"])
def test_docstring_examples(name):
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module(name),
                             optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    assert result.failed == 0 and result.attempted > 0


@pytest.mark.hf
def test_chunks_keep_order(tokenizer_dir, tmp_path, monkeypatch):
    """Chunks rendered while the previous one is encoded are written in input order."""
    import ngramspec.streams.importers as imp
    convs = [dict(c, id=f"{i}-{j}") for i in range(7) for j, c in enumerate(CONVERSATIONS)]
    convs.insert(5, {"messages": []})
    src = _jsonl(tmp_path / "c.jsonl", convs)
    whole = import_streams([src], tmp_path / "a.jsonl", format="openai-chat",
                           tokenizer=str(tokenizer_dir))
    monkeypatch.setattr(imp, "_CHUNK", 2)
    parts = import_streams([src], tmp_path / "b.jsonl", format="openai-chat",
                           tokenizer=str(tokenizer_dir))
    assert (tmp_path / "a.jsonl").read_bytes() == (tmp_path / "b.jsonl").read_bytes()
    # The fast paths were taken (and so are what the exactness test checked).
    from transformers import AutoTokenizer
    from ngramspec.streams.chat_template import _Renderer
    r = _Renderer(AutoTokenizer.from_pretrained(str(tokenizer_dir)), set())
    r.streams([("x", CONVERSATIONS[0]["messages"], None, 2)])
    assert r.template is not None and r.backend is not None
    assert r.render_checked == {True, False} and r.encode_checked
    assert whole.streams == parts.streams == 35 and parts.skipped == {"empty conversation": 1}


def test_output_is_a_plain_file(tmp_path):
    src = _jsonl(tmp_path / "v.jsonl", [{"prompt_ids": [1], "output_ids": [2]}])
    out = tmp_path / "o.jsonl"
    import_streams([src], out, format="token-ids")
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o666 & ~umask
    with pytest.raises(OSError):
        import_streams([src], tmp_path / "no-dir" / "o.jsonl", format="token-ids")


def test_without_transformers_the_error_names_the_extra(tmp_path, capsys, monkeypatch):
    import sys
    monkeypatch.setitem(sys.modules, "transformers", None)
    src = _jsonl(tmp_path / "c.jsonl", CONVERSATIONS)
    code, _ = run(["streams", "import", str(src), "--format", "openai-chat", "--tokenizer",
                   str(tmp_path), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and "needs transformers: pip install 'ngramspec[import]'" in err


# --- tokenizers with code of their own, and no third-party banner lines ----------------------

ROOT = Path(__file__).resolve().parents[2]

# The Python file a custom-code tokenizer ships beside its tokenizer_config.json (as the
# tokenizers of some large MoE models do).  It marks that it ran in the file named by an
# environment variable.
CUSTOM_TOKENIZER_PY = '''\
"""A tokenizer class of its own, named by tokenizer_config.json's auto_map."""
import os

from transformers import PreTrainedTokenizerFast

if os.environ.get("NGRAMSPEC_TEST_CUSTOM_CODE_RAN"):
    with open(os.environ["NGRAMSPEC_TEST_CUSTOM_CODE_RAN"], "w") as f:
        f.write("ran")


class ShardTokenizer(PreTrainedTokenizerFast):
    """The plain fast tokenizer under another name, which transformers does not know."""
'''

# Run in a child process: torch hidden from every import (whether installed or not), then
# ngramspec's command line with the remaining arguments.
NO_TORCH_MAIN = '''\
import importlib.util
import sys


class _NoTorch:
    """A meta-path finder in front of another that finds no torch package."""

    def __init__(self, inner):
        self.inner = inner

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0].startswith("torch"):
            return None
        find = getattr(self.inner, "find_spec", None)
        return None if find is None else find(name, path, target)

    def __getattr__(self, attr):
        return getattr(self.inner, attr)


sys.meta_path[:] = [_NoTorch(f) for f in sys.meta_path]
assert importlib.util.find_spec("torch") is None and "torch" not in sys.modules
from ngramspec.cli import main
sys.exit(main(sys.argv[1:]))
'''


def custom_code_tokenizer(tokenizer_dir: Path, directory: Path) -> Path:
    """A copy of ``tokenizer_dir`` whose tokenizer class is defined by a Python file in it."""
    import shutil

    shutil.copytree(tokenizer_dir, directory)
    config_path = directory / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "ShardTokenizer"
    config["auto_map"] = {"AutoTokenizer": [None, "shard_tokenizer.ShardTokenizer"]}
    config_path.write_text(json.dumps(config), encoding="utf-8")
    (directory / "shard_tokenizer.py").write_text(CUSTOM_TOKENIZER_PY, encoding="utf-8")
    return directory


def run_child(argv, tmp_path, *, marker=None):
    """``ngramspec ARGV`` in a child process without torch, stdin closed: (code, out, err)."""
    import subprocess
    import sys

    env = dict(os.environ, NGRAMSPEC_COMPILE_NOTICE="0", HF_MODULES_CACHE=str(tmp_path / "hf"),
               HF_HUB_OFFLINE="1", PYTHONPATH=os.pathsep.join(
                   [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p]))
    for key in ("TRANSFORMERS_NO_ADVISORY_WARNINGS", "TRANSFORMERS_VERBOSITY"):
        env.pop(key, None)  # transformers as a user has it: advisory lines on
    if marker is not None:
        env["NGRAMSPEC_TEST_CUSTOM_CODE_RAN"] = str(marker)
    proc = subprocess.run([sys.executable, "-c", NO_TORCH_MAIN, *map(str, argv)], cwd=tmp_path,
                          env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True,
                          timeout=300)
    return proc.returncode, proc.stdout, proc.stderr


def _help(argv) -> str:
    """The --help text of ``ngramspec ARGV``, whitespace collapsed."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit):
        main(argv)
    return " ".join(out.getvalue().split())


@pytest.mark.hf
def test_custom_code_tokenizer_is_refused_without_the_flag(tokenizer_dir, tmp_path, capsys,
                                                            monkeypatch):
    import builtins

    from ngramspec.streams.importers import load_chat_tokenizer

    custom = custom_code_tokenizer(tokenizer_dir, tmp_path / "custom")
    src = _jsonl(tmp_path / "c.jsonl", CONVERSATIONS)
    marker = tmp_path / "ran"
    monkeypatch.setenv("NGRAMSPEC_TEST_CUSTOM_CODE_RAN", str(marker))
    prompts = []

    def no_input(prompt=""):  # a question on stdin would hang a job without a terminal
        prompts.append(prompt)
        raise EOFError

    monkeypatch.setattr(builtins, "input", no_input)
    code, text = run(["streams", "import", str(src), "--format", "openai-chat", "--tokenizer",
                      str(custom), "--out", str(tmp_path / "o.jsonl")])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and text == "", err
    assert err.startswith(f"ngramspec: error: --tokenizer {custom}: ")
    assert "--trust-remote-code" in err and "shard_tokenizer.ShardTokenizer" in err
    assert prompts == [] and not marker.exists() and not (tmp_path / "o.jsonl").exists()
    # From Python: the keyword is named.
    with pytest.raises(ValueError, match="trust_remote_code=True"):
        load_chat_tokenizer(custom)
    assert prompts == [] and not marker.exists()


@pytest.mark.hf
def test_trust_remote_code_runs_the_tokenizers_own_code(tokenizer_dir, tmp_path):
    custom = custom_code_tokenizer(tokenizer_dir, tmp_path / "custom")
    src = _jsonl(tmp_path / "c.jsonl", CONVERSATIONS)
    code, text = run(["streams", "import", str(src), "--format", "openai-chat", "--tokenizer",
                      str(tokenizer_dir), "--out", str(tmp_path / "plain.jsonl")])
    assert code == 0, text
    marker = tmp_path / "ran"
    code, out, err = run_child(["streams", "import", src, "--format", "openai-chat",
                                "--tokenizer", custom, "--trust-remote-code", "--out",
                                tmp_path / "custom.jsonl"], tmp_path, marker=marker)
    assert code == 0 and err == "", err
    assert "5 streams from 3 records" in out
    assert marker.read_text() == "ran"  # the directory's own code made the tokenizer
    assert ns.read_streams(tmp_path / "custom.jsonl") == ns.read_streams(tmp_path / "plain.jsonl")
    assert "--trust-remote-code" in _help(["streams", "import", "--help"])


@pytest.mark.hf
def test_no_third_party_banner_without_torch(tokenizer_dir, tmp_path):
    src = _jsonl(tmp_path / "c.jsonl", CONVERSATIONS)
    code, out, err = run_child(["streams", "import", src, "--format", "openai-chat",
                                "--tokenizer", tokenizer_dir, "--out", tmp_path / "s.jsonl"],
                               tmp_path)
    assert code == 0, err
    assert err == ""  # transformers says "PyTorch was not found ..." on import without torch
    assert out.splitlines()[0].startswith("5 streams from 3 records") and "PyTorch" not in out
    # The user's own transformers settings are as they were after the import.
    code = ("import os, sys; from ngramspec.streams.chat_template import load_chat_tokenizer; "
            f"load_chat_tokenizer({str(tokenizer_dir)!r}); "
            "assert 'TRANSFORMERS_NO_ADVISORY_WARNINGS' not in os.environ; "
            "from transformers.utils import logging; "
            "assert logging.get_verbosity() == logging.WARNING, logging.get_verbosity()")
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("TRANSFORMERS_")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=300)
    assert proc.returncode == 0, proc.stderr
