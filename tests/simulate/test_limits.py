"""Sizes that cannot fit are refused before anything is allocated, naming the option, the
estimate and what fits (issue: a draft_token_num of 100000 ran for minutes, a max_trie_depth
of 100000 failed with a MemoryError)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import ngramspec as ns
from ngramspec.simulate.limits import check_fits, replay_bytes

GIB = 2**30


def test_the_estimate_is_the_replays_arrays():
    # masks: 2 x n^2 bytes per request; insert paths: 12 x depth x (2 depth - 1 + n) bytes
    assert replay_bytes(18, 8, 4) == (4 * 2 * 64, 4 * 12 * 18 * (17 + 8 + 18))


def test_too_many_draft_tokens_name_what_fits():
    cfg = ns.NgramConfig(draft_token_num=100_000)
    with pytest.raises(ValueError, match=r"draft_token_num=100000 needs ~18\.6 GiB of "
                                         r"draft-tree masks .* 16\.0 GiB available, a run may "
                                         r"use half: draft_token_num <= 32768 fits"):
        check_fits(cfg, 1, available=16 * GIB)
    with pytest.raises(ValueError, match="draft_token_num <= 8192 fits"):
        check_fits(cfg, 1, available=16 * GIB, request_steps=10**6)  # an hour at most
    check_fits(ns.NgramConfig(), 48, available=GIB)  # the defaults fit anywhere


def test_too_deep_a_trie_names_what_fits():
    with pytest.raises(ValueError, match=r"max_trie_depth=100000 needs ~\d+\.\d GiB of insert "
                                         r"paths .* max_trie_depth <= \d+ fits"):
        check_fits(ns.NgramConfig(max_trie_depth=100_000), 1, available=16 * GIB)
    with pytest.raises(ValueError, match="lower --concurrency"):
        check_fits(ns.NgramConfig(max_trie_depth=4), 10**9, available=GIB)


def test_too_broad_a_tree_names_what_fits():
    # 20 x 10^9 x 18 x 13 bytes of heap (depth 18, draft_token_num 12)
    with pytest.raises(ValueError, match=r"max_bfs_breadth=1000000000 needs ~4358\.6 GiB of "
                                         r"tree-builder heap .* max_bfs_breadth <= \d+ fits"):
        check_fits(ns.NgramConfig(max_bfs_breadth=10**9), 1, available=16 * GIB)


@pytest.mark.parametrize("flag,value", [("--draft-token-num", "100000"),
                                        ("--max-trie-depth", "100000"),
                                        ("--max-bfs-breadth", "1000000000")])
def test_the_cli_refuses_them_at_once(flag, value):
    out = subprocess.run([sys.executable, "-m", "ngramspec", "simulate", flag, value],
                         capture_output=True, text=True, timeout=120, check=False)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and "unexpected" not in out.stderr
    assert f"{flag[2:].replace('-', '_')}={value} needs ~" in out.stderr
