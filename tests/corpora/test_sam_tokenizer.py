"""``--tokenizer`` with a real Hugging Face tokenizer directory (opt-in: ``-m hf``): a small
byte-level BPE trained here and saved through transformers' ``PreTrainedTokenizerFast``
(no download).  SGLang's JSONL corpora hold strings, tokenised without special tokens."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.cli import main
from ngramspec.cache import cache_from_sglang_args
from ngramspec.cache.corpora import read_corpus
from ngramspec.streams import embedded_streams_path

pytestmark = pytest.mark.hf


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    pytest.importorskip("transformers")
    tokenizers = pytest.importorskip("tokenizers")
    from transformers import PreTrainedTokenizerFast

    rows = ns.read_streams(embedded_streams_path())[:40]
    texts = [r["prompt_text"] for r in rows] + [r["output_text"] for r in rows]
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = tokenizers.decoders.ByteLevel()
    tok.post_processor = tokenizers.processors.TemplateProcessing(  # a BOS special token,
        single="<|bos|> $A", special_tokens=[("<|bos|>", 0)])        # which must not be added
    trainer = tokenizers.trainers.BpeTrainer(
        vocab_size=500, show_progress=False, special_tokens=["<|bos|>", "<|endoftext|>"],
        initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    directory = tmp_path_factory.mktemp("tok")
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<|bos|>",
                            eos_token="<|endoftext|>").save_pretrained(str(directory))
    return directory


@pytest.fixture(scope="module")
def texts():
    rows = [r for r in ns.read_streams(embedded_streams_path()) if r["task"] == "code_edit"]
    return rows[:4], [r["output_text"] for r in rows[:4]] + ["", "def f(x):\n    return x"]


def test_simulate_with_a_text_corpus_and_a_local_tokenizer(tokenizer_dir, texts, tmp_path):
    from transformers import AutoTokenizer

    rows, docs = texts
    tok = AutoTokenizer.from_pretrained(str(tokenizer_dir), local_files_only=True)
    assert tok("x")["input_ids"][0] == 0  # the tokenizer adds <|bos|> by default
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in docs), encoding="utf-8")
    want = [tok.encode(d, add_special_tokens=False) for d in docs]
    got = read_corpus(corpus, tokenizer=tok)
    # SGLang's reader: every non-blank line, tokenised without special tokens (the empty
    # string stays an empty document, which the corpus then skips).
    assert got == want and 0 not in {t for d in got for t in d}
    streams = tmp_path / "s.jsonl"
    streams.write_text("".join(json.dumps({k: r[k] for k in ("id", "prompt_ids", "output_ids")})
                               + "\n" for r in rows))
    report = tmp_path / "r.json"
    code = main(["simulate", str(streams), "--external-sam-budget", "4", "--corpus", str(corpus),
                 "--tokenizer", str(tokenizer_dir), "--no-progress", "--json", str(report)],
                stdout=io.StringIO())
    assert code == 0
    expected = ns.simulate(str(streams), config=ns.NgramConfig(external_sam_budget=4),
                           corpora={str(corpus): want})
    summary = json.loads(report.read_text())["summary"]
    assert summary["verify_steps"] == expected.summary.verify_steps
    assert summary["tokens_per_step"] == expected.tokens_per_step
    # The same through SGLang's server arguments.
    cache = cache_from_sglang_args({"speculative_ngram_external_sam_budget": 4,
                                    "speculative_ngram_external_corpus_path": str(corpus)},
                                   tokenizer=tok)
    ref = ns.NgramCache(external_sam_budget=4)
    ref.add_corpus(str(corpus), want)
    assert cache.corpora() == ref.corpora()
    ctx = [np.asarray(w[:5], np.int32) for w in want if len(w) >= 5]
    assert_array_equal(cache.match(ctx).tokens, ref.match(ctx).tokens)


def test_text_corpus_without_a_tokenizer_says_so(texts, tmp_path, capsys):
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(json.dumps("some text") + "\n")
    assert main(["simulate", "--limit", "1", "--no-progress", "--external-sam-budget", "4",
                 "--corpus", str(corpus)], stdout=io.StringIO()) == 2
    assert "is text: pass a tokenizer" in capsys.readouterr().err
