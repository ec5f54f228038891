"""Differential tests against SGLang's own C++ core, built from the PyPI wheel at test time.

Opt-in: ``python -m pytest -m sglang`` (CI runs it).

Covers what the golden file does not: the server defaults (depth 18, 12 draft tokens), stateless
calls, negative and large ids, contexts longer than the depth.  Skips when the peer cannot be
built here (no g++ or no package index).  Capacities stay small: the C++ preallocates 176 bytes
per node.
"""

from __future__ import annotations


import pytest
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import PEER_VOCABS, peer_fixture, peer_tree_options, random_ops_vs_peer

from benchmarks.peers import sglang as sglang_peer

pytestmark = pytest.mark.sglang


peer_built = peer_fixture(sglang_peer.build)


@st.composite
def peer_configs(draw):
    depth = draw(st.sampled_from([2, 3, 5, 8, 12, 18, 20]))
    return dict(max_trie_depth=depth, **peer_tree_options(draw, depth))


VOCABS = PEER_VOCABS


@random_ops_vs_peer(peer_configs(), VOCABS)
def test_random_ops_equal_sglang(backend, cfg, vocab, data):
    ours = ns.NgramCache(**cfg, backend=backend)
    peer = sglang_peer.SglangPeer(**cfg)
    tok = st.integers(*vocab)
    active: dict[str, int] = {}
    for _ in range(data.draw(st.integers(1, 10))):
        op = data.draw(st.sampled_from(["insert", "insert", "match", "stateless", "erase",
                                        "reset"]))
        if op == "insert":
            batch = data.draw(st.lists(st.lists(tok, max_size=40), min_size=1, max_size=3))
            ours.insert(batch)
            peer.insert(batch)
        elif op in ("match", "stateless"):
            ctxs = data.draw(st.lists(st.lists(tok, min_size=1, max_size=cfg["max_trie_depth"]
                                               + 5), min_size=1, max_size=3))
            if op == "stateless":
                got = ours.match(ctxs)
                want = peer.match(ctxs)
            else:
                ids = data.draw(st.lists(st.sampled_from("abcd"), min_size=len(ctxs),
                                         max_size=len(ctxs), unique=True))
                lens = []
                for rid, c in zip(ids, ctxs):
                    active[rid] = max(len(c), active.get(rid, 0) + data.draw(st.integers(-1, 3)))
                    lens.append(active[rid])
                got = ours.match(ctxs, request_ids=ids, total_lens=lens)
                want = peer.match(ctxs, request_ids=ids, total_lens=lens)
            assert_array_equal(got.tokens, want[0])
            assert_array_equal(got.mask, want[1])
        elif op == "erase":
            ids = data.draw(st.lists(st.sampled_from("abcdz"), max_size=2, unique=True))
            ours.erase(ids)
            peer.erase(ids)
            for rid in ids:
                active.pop(rid, None)
        else:
            ours.reset()
            peer.reset()
            active.clear()


def test_server_defaults_on_a_recorded_stream():
    """SGLang's serving loop on one real request, server defaults, exact drafts every step."""
    import gzip
    import json
    from importlib.resources import files

    with gzip.open(files("ngramspec") / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz", "rt") as f:
        rows = [json.loads(next(f)) for _ in range(3)]
    for match_type in ("BFS", "PROB"):
        ours = ns.NgramCache(match_type=match_type, capacity=200_000)
        peer = sglang_peer.SglangPeer(match_type=match_type, capacity=200_000)
        for row in rows:
            seq = row["prompt_ids"] + row["output_ids"][:1]
            for tok in row["output_ids"][1:]:
                ctx = seq[-18:]
                got = ours.match([ctx], request_ids=[row["id"]], total_lens=[len(seq)])
                want = peer.match([ctx], request_ids=[row["id"]], total_lens=[len(seq)])
                assert_array_equal(got.tokens, want[0])
                assert_array_equal(got.mask, want[1])
                ours.insert([ctx])
                peer.insert([ctx])
                seq.append(tok)
