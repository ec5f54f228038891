"""Differential tests against SGLang 0.5.9's window-era C++ core, built from the PyPI wheel at
test time (profile ``"sglang-0.5.9"``).

Opt-in: ``python -m pytest -m sglang`` (CI runs it).  Skips when the peer cannot be built here
(no g++ or no package index).  Capacities stay small: the C++ preallocates about 168 bytes per
node.
"""

from __future__ import annotations

import gzip
import json
from importlib.resources import files

import pytest
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import PEER_VOCABS, peer_fixture, peer_tree_options, random_ops_vs_peer

from benchmarks.peers import sglang as sglang_peer

pytestmark = pytest.mark.sglang

PROFILE = "sglang-0.5.9"


peer_built = peer_fixture(sglang_peer.build, sglang_peer.LEGACY_VERSION)


@st.composite
def peer_configs(draw):
    branch = draw(st.sampled_from([2, 3, 5, 8, 12, 18, 20]))
    max_w = draw(st.integers(1, branch - 1))
    return dict(branch_length=branch, min_match_window_size=draw(st.integers(1, max_w)),
                max_match_window_size=max_w, **peer_tree_options(draw, branch))


VOCABS = PEER_VOCABS


def assert_equal(got: ns.DraftBatch, want) -> None:
    assert_array_equal(got.tokens, want[0])
    assert_array_equal(got.mask, want[1])


@random_ops_vs_peer(peer_configs(), VOCABS)
def test_random_ops_equal_sglang_059(backend, cfg, vocab, data):
    ours = ns.NgramCache(**cfg, profile=PROFILE, backend=backend)
    peer = sglang_peer.SglangLegacyPeer(**cfg)
    tok = st.integers(*vocab)
    for _ in range(data.draw(st.integers(1, 10))):
        op = data.draw(st.sampled_from(["insert", "insert", "match", "reset"]))
        if op == "insert":
            batch = data.draw(st.lists(st.lists(tok, max_size=40), min_size=1, max_size=3))
            ours.insert(batch)
            peer.insert(batch)
        elif op == "match":
            ctxs = data.draw(st.lists(st.lists(tok, min_size=1, max_size=cfg["branch_length"]
                                               + 5), min_size=1, max_size=3))
            assert_equal(ours.match(ctxs), peer.match(ctxs))
        else:
            ours.reset()
            peer.reset()


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_server_defaults_059_worker_loop_on_recorded_streams(backend):
    """0.5.9's serving loop (legacy spec 7.2) on real requests at the server defaults, except
    capacity: match the last 12 tokens; after the step's token is appended, insert the last 18.
    Exact drafts at every step, BFS and PROB."""
    with gzip.open(files("ngramspec") / "data" / "qwen2.5-coder-0.5b-greedy.jsonl.gz", "rt") as f:
        rows = [json.loads(next(f)) for _ in range(3)]
    for match_type in ("BFS", "PROB"):
        ours = ns.NgramCache(profile=PROFILE, match_type=match_type, capacity=200_000,
                             backend=backend)
        cfg = ours.config
        peer = sglang_peer.SglangLegacyPeer(match_type=match_type, capacity=200_000)
        for row in rows:
            seq = row["prompt_ids"] + row["output_ids"][:1]
            for tok in row["output_ids"][1:]:
                ctx = seq[-cfg.match_length:]
                assert_equal(ours.match([ctx]), peer.match([ctx]))
                seq.append(tok)
                ours.insert([seq[-cfg.insert_length:]])
                peer.insert([seq[-cfg.insert_length:]])


def test_invalid_parameters_are_rejected_as_sglang_does():
    """Every constructor check of 0.5.9 (legacy spec 1.3) fails in the C++ and in ours."""
    bad = [dict(branch_length=1, max_match_window_size=1, min_match_window_size=1),
           dict(min_match_window_size=0), dict(min_match_window_size=5, max_match_window_size=4),
           dict(max_match_window_size=18), dict(min_bfs_breadth=0),
           dict(min_bfs_breadth=5, max_bfs_breadth=4), dict(draft_token_num=0)]
    for kw in bad:
        with pytest.raises(ValueError):
            sglang_peer.SglangLegacyPeer(**{"capacity": 100, **kw})
        with pytest.raises(ValueError):
            ns.NgramCache(profile=PROFILE, **{"capacity": 100, **kw})
