"""ngramspec's NgramCorpus against SGLang 0.5.23's own NgramCorpus class (the wheel's Python
files, unchanged, over the C++ core built from the wheel: benchmarks.peers.sglang_corpus),
driven by the NGRAM worker's call sequence on recorded streams: every batch_get output equal.

Opt-in: ``python -m pytest -m sglang``.  Skips when the peer cannot be built here (no g++, no
package index, no torch).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from benchmarks.peers import sglang_corpus
from ngramspec.integrations.sglang import SEPARATOR_TOKEN, NgramCorpus
from ngramspec.integrations.sglang_replay import replay_worker

pytestmark = pytest.mark.sglang

ROOT = Path(__file__).resolve().parents[2]
KEYS = ("max_trie_depth", "min_bfs_breadth", "max_bfs_breadth", "draft_token_num",
        "match_type", "capacity")


@pytest.fixture(scope="module")
def sglang_cls():
    try:
        return sglang_corpus.corpus_class()
    except sglang_corpus.PeerUnavailable as e:
        pytest.skip(f"SGLang's NgramCorpus unavailable: {e}")


def _streams(limit: int, offset: int = 0) -> list[dict]:
    rows = ns.read_streams(ROOT / "ngramspec" / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz")
    return rows[offset::max(1, len(rows) // limit)][:limit]


def _random_configs(n: int, seed: int = 2026) -> list[dict]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        depth = int(rng.choice([2, 3, 5, 8, 12, 18, 24]))
        lo = int(rng.integers(1, 6))
        out.append({"max_trie_depth": depth, "min_bfs_breadth": lo,
                    "max_bfs_breadth": lo + int(rng.integers(0, 12)),
                    "draft_token_num": int(rng.choice([1, 2, 4, 8, 12, 16, 24])),
                    "match_type": str(rng.choice(["BFS", "PROB"])),
                    "capacity": int(rng.choice([depth + 1 + int(rng.integers(0, 50)),
                    2_000, 200_000])),
                    "concurrency": int(rng.choice([1, 3, 8, 16]))})
    return out


def _differential(sglang_cls, kw: dict, concurrency: int, rows: list[dict],
                  corpora: dict | None = None) -> int:
    ours, theirs = NgramCorpus(**kw), sglang_cls(**kw)
    for corpus_id, chunks in (corpora or {}).items():
        for c in (ours, theirs):
            c.commit_external_corpus_load(corpus_id, c.load_external_corpus_named(corpus_id,
                                                                                  chunks))
        assert ours.list_external_corpora() == theirs.list_external_corpora()
    outs = {"ours": [], "theirs": []}
    emitted = {}
    for name, corpus in (("ours", ours), ("theirs", theirs)):
        emitted[name] = replay_worker(
            corpus, [r["prompt_ids"] for r in rows], [r["output_ids"] for r in rows],
            concurrency=concurrency, max_trie_depth=ours.config.max_trie_depth,
            draft_token_num=theirs.draft_token_num,
            on_get=lambda ids, t, m, out=outs[name]: out.append((ids, t, m)))
    assert len(outs["ours"]) == len(outs["theirs"])
    for (ids, t, m), (ids2, t2, m2) in zip(outs["ours"], outs["theirs"]):
        assert ids == ids2
        assert t.dtype == t2.dtype == np.int64 and m.dtype == m2.dtype == np.int64
        assert_array_equal(t, t2)
        assert_array_equal(m, m2)
    for a, b in zip(emitted["ours"], emitted["theirs"]):
        assert_array_equal(a, b)
    return len(outs["ours"])


def test_sglang_defaults_equal_sglangs_class(sglang_cls):
    server = ns.NgramConfig()  # the server's defaults (the class's own differ: below)
    kw = {k: getattr(server, k) for k in KEYS}
    assert _differential(sglang_cls, kw, 8, _streams(24)) > 100
    assert _differential(sglang_cls, {}, 4, _streams(12, offset=1)) > 50  # the class's


@pytest.mark.parametrize("case", _random_configs(20), ids=lambda c: "-".join(
    f"{v}" for v in c.values()))
def test_random_sglang_exact_configs_equal_sglangs_class(sglang_cls, case):
    case = dict(case)
    concurrency = case.pop("concurrency")
    _differential(sglang_cls, case, concurrency, _streams(8, offset=3))


def test_external_corpus_equal_sglangs_class(sglang_cls):
    docs = [r["output_ids"] for r in _streams(6, offset=5)]
    stream = []
    for i, d in enumerate(docs):
        stream += ([SEPARATOR_TOKEN] if i else []) + list(d)
    chunks = [stream[i:i + 4096] for i in range(0, len(stream), 4096)]
    kw = {"max_trie_depth": 12, "draft_token_num": 8, "capacity": 100_000, "external_sam_budget": 3,
          "external_corpus_max_tokens": 1_000_000}
    _differential(sglang_cls, kw, 4, _streams(10, offset=5), corpora={"docs": chunks})


def test_bad_match_type_gets_sglangs_error(sglang_cls):
    with pytest.raises(ValueError) as theirs:
        sglang_cls(match_type="DFS")
    with pytest.raises(ValueError) as ours:
        NgramCorpus(match_type="DFS")
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("case", _random_configs(6, seed=59), ids=lambda c: "-".join(
    f"{v}" for v in c.values()))
def test_legacy_ngramcache_equals_sglang_059s_class(case):
    """SGLang 0.5.9's own NgramCache (the wheel's file over the 0.5.9 core) against ours, driven
    by that worker's calls (stateless batch_get, windows put after appending)."""
    from ngramspec.integrations.sglang_legacy import NgramCache as Legacy

    try:
        theirs_cls = sglang_corpus.legacy_cache_class()
    except sglang_corpus.PeerUnavailable as e:
        pytest.skip(f"SGLang 0.5.9's NgramCache unavailable: {e}")
    branch = max(case["max_trie_depth"], 3)
    window = int(np.clip(branch // 2, 1, branch - 1))
    kw = {"branch_length": branch, "min_match_window_size": 1,
          "max_match_window_size": window, "min_bfs_breadth": case["min_bfs_breadth"],
          "max_bfs_breadth": case["max_bfs_breadth"], "draft_token_num": case["draft_token_num"],
          "match_type": "BFS", "capacity": max(case["capacity"], branch + 1)}
    rows = _streams(8, offset=7)
    outs = {"ours": [], "theirs": []}
    emitted = {}
    for name, corpus in (("ours", Legacy(**kw)), ("theirs", theirs_cls(**kw))):
        emitted[name] = replay_worker(
            corpus, [r["prompt_ids"] for r in rows], [r["output_ids"] for r in rows],
            concurrency=case["concurrency"], max_trie_depth=window,
            draft_token_num=kw["draft_token_num"], legacy_branch_length=branch,
            on_get=lambda ids, t, m, out=outs[name]: out.append((t, m)))
    assert len(outs["ours"]) == len(outs["theirs"]) > 0
    for (t, m), (t2, m2) in zip(outs["ours"], outs["theirs"]):
        assert t.dtype == t2.dtype == np.int64 and m.dtype == m2.dtype == np.int64
        assert_array_equal(t, t2)
        assert_array_equal(m, m2)
