"""External corpora in the Drafter, the simulator and ``ngramspec simulate --corpus``."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import stream_records, write_jsonl
from ngramspec.cli import main
from ngramspec.cache.corpora import read_corpus, tree_paths
from ngramspec.streams import embedded_streams_path


@pytest.fixture(scope="module")
def rows():
    return [r for r in ns.read_streams(embedded_streams_path()) if r["task"] == "code_edit"][:6]


def test_simulate_with_corpora_backends_agree_and_corpus_helps(rows):
    cfg = ns.NgramConfig(external_sam_budget=4)
    corpus = {"outputs": [r["output_ids"] for r in rows]}
    plain = ns.simulate(rows, config=cfg)
    ref = ns.simulate(rows, config=cfg, corpora=corpus, backend="reference")
    fast = ns.simulate(rows, config=cfg, corpora=corpus)
    for a, b in zip(ref.emitted, fast.emitted):
        assert_array_equal(a, b)
    for a, b in zip(ref.drafts, fast.drafts):
        assert_array_equal(a, b)
    # A corpus holding the very outputs: drafts from it are accepted.
    assert fast.tokens_per_step > plain.tokens_per_step


def test_simulate_with_corpora_is_the_drafter_step_by_step(rows):
    """simulate(corpora=...) equals a Drafter on a cache with the corpora loaded first."""
    cfg = ns.NgramConfig(external_sam_budget=3, draft_token_num=8)
    docs = [r["prompt_ids"] for r in rows]
    result = ns.simulate(rows[:2], config=cfg, corpora={"p": docs})
    cache = ns.NgramCache(config=cfg)
    cache.add_corpus("p", docs)
    drafter = ns.Drafter(cache=cache)
    for k, r in enumerate(rows[:2]):
        out = np.asarray(r["output_ids"], np.int32)
        drafter.add_request(r["id"], r["prompt_ids"], int(out[0]))
        done, steps = 1, []
        while done < out.size:
            d = drafter.propose([r["id"]])
            v = ns.verify_greedy(d, _argmax(d, out, done))
            e = min(int(v.accept_lens[0]), out.size - done)
            steps.append(e)
            drafter.accept({r["id"]: out[done:done + e]})
            done += e
        drafter.finish(r["id"])
        assert_array_equal(result.emitted[k], steps)


def _argmax(d, out, done):
    """The recorded greedy output as the target's argmax at every slot of the tree."""
    n = d.tokens.shape[1]
    pred = np.zeros((1, n), np.int64)
    mask = d.mask[0]
    for i in range(n):
        depth = int(mask[i].sum()) - 1
        pos = done + depth
        pred[0, i] = out[pos] if pos < out.size else 0
    return pred


def test_simulate_corpora_errors(rows):
    with pytest.raises(ValueError, match="external_sam_budget is 0"):
        ns.simulate(rows[:1], config=ns.NgramConfig(), corpora={"c": [[1, 2]]})
    with pytest.raises(TypeError, match="corpora must be a mapping"):
        ns.simulate(rows[:1], config=ns.NgramConfig(external_sam_budget=2), corpora=[[1, 2]])


def test_read_corpus_and_its_errors(tmp_path):
    good = tmp_path / "c.jsonl"
    good.write_text('[1, 2, 3]\n\n  \n[7]\n"text"\n')
    with pytest.raises(ValueError, match="line 5 is text: pass a tokenizer"):
        read_corpus(good)
    assert read_corpus(good, tokenizer=lambda s: [ord(c) for c in s]) == [
        [1, 2, 3], [7], [116, 101, 120, 116]]
    bad = tmp_path / "b.jsonl"
    bad.write_text("[1]\n{not json\n")
    with pytest.raises(ValueError, match="line 2: not JSON"):
        read_corpus(bad)
    bad.write_text('[1, "x"]\n')
    with pytest.raises(ValueError, match="line 1: a document must be"):
        read_corpus(bad)


def test_cli_simulate_with_corpus(rows, tmp_path):
    streams = write_jsonl(tmp_path / "s.jsonl", stream_records(rows[:3]))
    corpus = write_jsonl(tmp_path / "corpus.jsonl", [r["output_ids"] for r in rows[:3]])
    out = io.StringIO()
    report = tmp_path / "r.json"
    code = main(["simulate", str(streams), "--external-sam-budget", "4", "--corpus", str(corpus),
                 "--no-progress", "--json", str(report)], stdout=out)
    assert code == 0
    expected = ns.simulate(str(streams), config=ns.NgramConfig(external_sam_budget=4),
                           corpora={str(corpus): read_corpus(corpus)})
    assert json.loads(report.read_text())["summary"]["verify_steps"] == (
        expected.summary.verify_steps)


@pytest.mark.parametrize("extra, message", [
    (["--corpus", "missing.jsonl", "--external-sam-budget", "4"], "missing.jsonl"),
    (["--corpus", "CORPUS"], "external_sam_budget is 0"),
    (["--corpus", "CORPUS", "--external-sam-budget", "12"], "external_sam_budget must be in"),
    (["--corpus", "CORPUS", "--external-sam-budget", "4", "--tokenizer", "no-such-dir"],
     "--tokenizer"),
])
def test_cli_corpus_errors(rows, tmp_path, capsys, extra, message):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("[1, 2, 3]\n")
    argv = ["simulate", "--limit", "1", "--no-progress"] + [
        str(corpus) if a == "CORPUS" else a for a in extra]
    assert main(argv, stdout=io.StringIO()) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_last_parts_hold_the_merged_trees(backend):
    cache = ns.NgramCache(max_trie_depth=4, max_bfs_breadth=3, draft_token_num=6,
                          external_sam_budget=2, capacity=100, backend=backend)
    cache.insert([[1, 2, 3, 4]])
    cache.add_corpus("docs", [[1, 2, 3, 9, 9], [7, 1, 2, 5]])
    fused = cache.match([[1, 2]])
    cache._corpora.record_parts = True
    d = cache.match([[1, 2]])
    assert_array_equal(d.tokens, fused.tokens)
    assert_array_equal(d.mask, fused.mask)
    parts = cache._corpora.last_parts
    assert [cid for cid, _ in parts] == ["", "docs"]
    trie = tree_paths(parts[0][1][0][0], parts[0][1][1][0])
    corpus = tree_paths(parts[1][1][0][0], parts[1][1][1][0])
    assert (trie, corpus) == ({(3,), (3, 4)}, {(5,)})
    assert tree_paths(d.tokens[0], d.mask[0]) == trie | corpus


# --- the compiled replay with corpora ---------------------------------------------------------

_REPLAY_CASES = [
    (dict(external_sam_budget=4), 1, ("prompts",)),
    (dict(external_sam_budget=4, match_type="PROB"), 3, ("prompts", "outputs")),
    (dict(external_sam_budget=6, draft_token_num=8, max_trie_depth=6), 4,
     ("prompts", "outputs", "both")),
    (dict(external_sam_budget=2, draft_token_num=6), 2, ("prompts", "outputs", "both")),  # per 0
    (dict(external_sam_budget=3, index_prompt=True), 2, ("outputs",)),
    (dict(external_sam_budget=3, exact_counts=True, capacity=400), 3, ("prompts", "outputs")),
    (dict(external_sam_budget=5, capacity=60, max_trie_depth=5, match_type="PROB"), 2,
     ("outputs", "prompts")),
]


@pytest.mark.parametrize("kw, concurrency, names", _REPLAY_CASES)
def test_compiled_replay_with_corpora_equals_the_drafter(rows, kw, concurrency, names):
    """The compiled replay with corpora loaded before the traffic = the Drafter replay (the
    same cache, step by step), per request and per step: tokens emitted, draft sizes, batch
    steps."""
    from ngramspec.simulate import _replay_stepwise

    cfg = ns.NgramConfig(**kw)
    sources = {"prompts": [r["prompt_ids"] for r in rows],
               "outputs": [r["output_ids"][::2] for r in rows],
               "both": [r["prompt_ids"][-50:] + r["output_ids"][:40] for r in rows]}
    corpora = {name: sources[name] for name in names}
    fast = ns.simulate(rows, config=cfg, corpora=corpora, concurrency=concurrency)
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    emitted, drafts, _, steps, _ = _replay_stepwise(
        prompts, outputs, cfg, concurrency, "numba", [r["id"] for r in rows], None, corpora)
    assert fast.batch_steps == steps
    for a, b in zip(fast.emitted, emitted):
        assert_array_equal(a, b)
    for a, b in zip(fast.drafts, drafts):
        assert_array_equal(a, b)
