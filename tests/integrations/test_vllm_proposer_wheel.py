"""``ngramspec.integrations.vllm.Proposer`` loaded by vLLM 0.33's own loader: the wheel's
``create_custom_proposer(vllm_config)`` (``vllm/v1/spec_decode/custom_class_proposer.py``, run
unchanged through :mod:`benchmarks.peers.vllm`) with ``speculative_config.method =
"custom_class"`` and ``model = "ngramspec.integrations.vllm.Proposer"`` builds our class, and
its ``propose``, called as the model runner calls a custom class (rows appended, freed and
condensed: :class:`benchmarks.studies.vllm_proposer.BatchSim`), returns at most ``k`` ints per
request; on the shipped streams it emits at least as many tokens per verify step as the
wheel's ``NgramProposer`` at the same ``k``, driven identically.

Opt-in: ``python -m pytest -m vllm``.  Skips when the wheel cannot be downloaded here.
"""

from __future__ import annotations

import numpy as np
import pytest

import ngramspec as ns
from benchmarks.studies.vllm_proposer import BatchSim
from ngramspec.integrations.vllm import Proposer
from ngramspec.streams import embedded_streams_path

pytestmark = pytest.mark.vllm

PATH = "ngramspec.integrations.vllm.Proposer"
STREAMS = ns.read_streams(embedded_streams_path())[:24]


@pytest.mark.parametrize("k, concurrency", [(3, 1), (5, 8)])
def test_wheel_loader_builds_the_proposer(wheel, monkeypatch, k, concurrency):
    monkeypatch.delenv("NGRAMSPEC_VLLM_CONFIG", raising=False)
    monkeypatch.delenv("NGRAMSPEC_VLLM_PRESET", raising=False)
    monkeypatch.delenv("NGRAMSPEC_VLLM_COSTS", raising=False)
    cfg = wheel.make_config(0, 0, k, max_model_len=2048, max_num_seqs=concurrency, model=PATH)
    assert cfg.speculative_config.method == "custom_class"
    proposer = wheel.create_custom_proposer()(cfg)
    assert type(proposer) is Proposer and proposer.num_speculative_tokens == k
    assert proposer.config.chain and proposer.config.draft_token_num == k + 1
    # BatchSim checks every answer: one list per row, at most k ints, none past max_model_len.
    ours = BatchSim(STREAMS, concurrency=concurrency, partial_prefill=0.3,
                    max_output=200, seed=k).run(proposer.propose, k)
    ngram = wheel.ngram_proposer(5, 5, k, 2048, max_num_seqs=concurrency)
    theirs = BatchSim(STREAMS, concurrency=concurrency, partial_prefill=0.3,
                      max_output=200, seed=k).run(
        lambda s, n, c: ngram.propose(k, s, n, c), k)
    assert len(ours.emitted) > 0 and max(ours.sent) <= k
    assert ours.tokens_per_step >= theirs.tokens_per_step
    assert np.sum(ours.emitted) == np.sum(theirs.emitted)  # the same tokens in the end


def test_wheel_loader_reports_our_config_errors(wheel, monkeypatch):
    """A bad NGRAMSPEC_VLLM_CONFIG reaches vLLM's loader as its RuntimeError, our message
    inside."""
    monkeypatch.setenv("NGRAMSPEC_VLLM_CONFIG", "draft_token_num = 9")
    monkeypatch.delenv("NGRAMSPEC_VLLM_PRESET", raising=False)
    cfg = wheel.make_config(0, 0, 4, max_model_len=512, model=PATH)
    with pytest.raises(RuntimeError, match="NGRAMSPEC_VLLM_CONFIG: draft_token_num = 9"):
        wheel.create_custom_proposer()(cfg)
