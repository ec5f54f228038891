"""The drop-in and the vLLM proposer compile in a background thread from construction; the
first call that runs a kernel waits for it, and an error there reaches that call."""

from __future__ import annotations

import threading
import types

import numpy as np
import pytest

import ngramspec as ns
from ngramspec.integrations import sglang as sglang_mod
from ngramspec.integrations.sglang import NgramCorpus


def _drafts(corpus: NgramCorpus) -> list[list[int]]:
    corpus.note_prompts(["a"], [[1, 2, 3, 4, 1, 2, 3]])
    corpus.synchronize()
    tokens, _ = corpus.batch_get(["a"], [[1, 2, 3, 4, 1, 2, 3, 4]], [8])
    return tokens.reshape(1, -1).tolist()


@pytest.mark.parametrize("preset", ["sglang", "recommended"])
def test_the_first_call_waits_for_the_warm_up_and_drafts_the_same(preset, monkeypatch):
    cfg = ns.NgramConfig.preset(preset)
    kw = dict(max_trie_depth=cfg.max_trie_depth, draft_token_num=cfg.draft_token_num,
              config=cfg, capacity=4096)
    gate = threading.Event()
    ran = []
    real = sglang_mod.warm_corpus

    def slow(*args):
        gate.wait(10)
        real(*args)
        ran.append(args[1])  # (args: the corpus class, the config, ...)

    monkeypatch.setattr("ngramspec.integrations.sglang.warm_corpus", slow)
    corpus = NgramCorpus(**kw)
    assert corpus.warming  # construction returned while the compile runs
    gate.set()
    got = _drafts(corpus)
    assert ran == [corpus.config] and not corpus.warming
    assert got == _drafts(NgramCorpus(**kw, warm=False))  # the warm-up changed nothing


def test_a_failed_warm_up_is_raised_by_the_first_call(monkeypatch):
    def broken(*args):
        raise ValueError("a kernel that does not compile")

    monkeypatch.setattr("ngramspec.integrations.sglang.warm_corpus", broken)
    corpus = NgramCorpus(max_trie_depth=12, draft_token_num=8, capacity=4096)
    with pytest.raises(RuntimeError, match="compiling the drafter's kernels failed") as e:
        corpus.synchronize()
    assert isinstance(e.value.__cause__, ValueError)


def test_warm_is_checked():
    with pytest.raises(TypeError, match="warm"):
        NgramCorpus(max_trie_depth=12, draft_token_num=8, capacity=4096, warm="yes")


def test_the_vllm_proposer_waits_for_its_warm_up(monkeypatch):
    from ngramspec.integrations.vllm import Proposer

    gate = threading.Event()
    real = Proposer._warm

    def slow(self, *args):
        gate.wait(10)
        real(self, *args)

    monkeypatch.setattr(Proposer, "_warm", slow)
    sn = types.SimpleNamespace
    vcfg = sn(speculative_config=sn(num_speculative_tokens=3),
              scheduler_config=sn(max_num_seqs=4), model_config=sn(max_model_len=64))
    p = Proposer(vcfg, environ={"NGRAMSPEC_VLLM_PRESET": "sglang"})
    assert not p._warming.done
    gate.set()
    ctx = np.zeros((4, 64), np.int32)
    ctx[0, :9] = [1, 2, 3, 4, 5, 1, 2, 3, 4]
    assert p.propose([[4]], np.array([9, 0, 0, 0]), ctx) == [[]]
    assert p._warming is None and p._entries
