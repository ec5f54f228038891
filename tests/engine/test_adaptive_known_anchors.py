"""ADAPTIVE trees drafted from known own-trie anchors (what the compiled replay hands over
from its remembered inserts) equal the trees whose anchors are walked from the root."""

from __future__ import annotations

import numpy as np
import pytest

import ngramspec as ns
from ngramspec.engine.adaptive import adaptive_scratch, draft_tree
from ngramspec.engine.backend import EngineBackend
from ngramspec.engine.tree import BUCKET_COUNTS
from ngramspec.engine.trie import Trie, child_of


def _suffix_nodes(trie, ctx, top, out):
    """The node of each context suffix of ``d <= top`` tokens (-1: not a path), at ``out[d]``."""
    for d in range(1, top + 1):
        node = 0
        for tk in ctx[ctx.size - d:]:
            node = child_of(trie.ht, trie.par, trie.tok, node, int(tk))
            if node == -1:
                break
        out[d] = node


@pytest.mark.parametrize("seed", range(4))
def test_known_anchors_draft_the_walked_tree(seed):
    rng = np.random.default_rng(seed)
    cfg = ns.NgramConfig(match_type="ADAPTIVE", max_trie_depth=6, draft_token_num=8,
                         min_token_prob=0.1, shared_pseudo_count=1.0, local_index=True,
                         exact_counts=True)
    own, shared = EngineBackend(cfg), EngineBackend(cfg)
    seq = rng.integers(0, 5, 300).astype(np.int32)
    shared.insert([rng.integers(0, 5, 400).astype(np.int32)])
    own.insert_counted([seq], [0])
    params = (cfg.trie_depth, cfg.budget, float(cfg.min_token_prob),
              float(cfg.max_spec_factor), 0.0, float(cfg.shared_pseudo_count))
    cal = np.zeros(0, np.float64)
    n = cfg.draft_token_num
    sc = adaptive_scratch(cfg.budget, cfg.trie_depth)
    local, glob = Trie(*own.trie.bundle), Trie(*shared.trie.bundle)
    drafted = 0
    for end in range(1, seq.size + 1, 7):
        ctx = np.ascontiguousarray(seq[max(0, end - cfg.trie_depth):end])
        rows = []
        for known in (False, True):
            if known:
                _suffix_nodes(local, ctx, min(ctx.size, cfg.trie_depth), sc.l_nodes)
            tokens, mask = np.empty(n, np.int32), np.empty((n, n), np.bool_)
            probs = np.empty(n, np.float64)
            used = draft_tree(ctx, params, local, glob, BUCKET_COUNTS, sc, tokens, mask, probs,
                              cal, known)
            rows.append((used, tokens, mask, probs))
        (u0, t0, m0, p0), (u1, t1, m1, p1) = rows
        assert u0 == u1
        np.testing.assert_array_equal(t0, t1)
        np.testing.assert_array_equal(m0, m1)
        np.testing.assert_array_equal(p0, p1)
        drafted += u0
    assert drafted > 0  # the contexts did draft trees
