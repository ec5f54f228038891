"""The tree-proposer replay harness and the drafting peers of ``benchmarks/``.

Hand-checked greedy replays, prompt lookup against a brute force, the ngramspec adapter
against ``ns.simulate``; ArcticInference only under the opt-in ``arctic`` marker.
"""

from __future__ import annotations

import random

import numpy as np
import pytest

import ngramspec as ns

from benchmarks.peers import replay as dr
from benchmarks.peers.prompt_lookup import PromptLookupProposer, prompt_lookup


class Scripted:
    """Proposes fixed trees, one per step, and records what the harness tells it."""

    name = "scripted"

    def __init__(self, trees):
        self.trees = list(trees)
        self.log = []

    def start(self, rid, prompt, first_token):
        self.log.append(("start", rid, prompt.tolist(), first_token))

    def propose(self, rid, context):
        self.log.append(("propose", context.tolist()))
        tokens, parents = self.trees.pop(0)
        return np.asarray(tokens, np.int64), np.asarray(parents, np.int64)

    def on_accept(self, rid, emitted):
        self.log.append(("accept", emitted.tolist()))

    def stop(self, rid):
        self.log.append(("stop", rid))


def test_replay_hand_checked():
    row = {"id": "r", "task": "t", "prompt_ids": [7], "output_ids": [1, 2, 3, 4, 5, 6]}
    trees = [
        # root children 2 and 9; 3 under 2; 4 under 3: accepts 2, 3, 4, bonus 5
        ([2, 9, 3, 4], [-1, -1, 0, 2]),
        # one token left (6): the draft 6 is accepted, its child 7 is not, no bonus is left
        ([6, 7], [-1, 0]),
    ]
    p = Scripted(trees)
    s = dr.replay_request(p, row)
    assert p.log == [("start", "r", [7], 1),
                     ("propose", [7, 1]), ("accept", [2, 3, 4, 5]),
                     ("propose", [7, 1, 2, 3, 4, 5]), ("accept", [6]),
                     ("stop", "r")]
    assert s.emitted.tolist() == [4, 1] and s.sent.tolist() == [4, 2]
    g = dr.pool([s])
    assert (g.steps, g.emitted_tokens, g.tokens_per_step) == (2, 5, 2.5)
    assert g.sent_per_step == 3.0 and g.share_steps_with_draft == 1.0


def test_replay_first_matching_child_and_empty_trees():
    row = {"id": 0, "prompt_ids": [], "output_ids": [1, 2, 3, 4]}
    # two root children carry 2: only the first is followed, and 3 hangs under the second
    p = Scripted([([2, 2, 3], [-1, -1, 1]), ([], [])])
    s = dr.replay_request(p, row)
    # step 1 accepts 2 (the first child), finds no 3 under it: emits 2 + bonus 3;
    # step 2 drafts nothing: emits the bonus 4 alone
    assert [e for e in p.log if e[0] == "accept"] == [("accept", [2, 3]), ("accept", [4])]
    assert s.emitted.tolist() == [2, 1] and s.sent.tolist() == [3, 0]
    g = dr.pool([s])
    assert g.tokens_per_step == 1.5 and g.share_steps_with_draft == 0.5


def test_replay_rejects_bad_trees():
    row = {"id": 0, "prompt_ids": [5], "output_ids": [1, 2]}
    with pytest.raises(ValueError, match="parents"):
        dr.replay_request(Scripted([([2, 3], [-1, 1])]), row)
    with pytest.raises(ValueError, match="equal length"):
        dr.replay_request(Scripted([([2, 3], [-1])]), row)


def brute_lookup(ctx, min_n, max_n, k, latest):
    """Longest suffix n (max_n..min_n) with an earlier occurrence followed by a token."""
    size = len(ctx)
    for n in range(max_n, min_n - 1, -1):
        if n >= size:
            continue
        starts = [j for j in range(size - n) if ctx[j:j + n] == ctx[size - n:]]
        if starts:
            j = starts[-1] if latest else starts[0]
            return ctx[j + n:j + n + k]
    return []


def test_prompt_lookup_examples():
    # vLLM's documented example: [4, 2, 3] is all that follows the match of [2, 3]
    assert prompt_lookup([1, 2, 3, 4, 2, 3], min_n=2, max_n=3, k=4).tolist() == [4, 2, 3]
    assert prompt_lookup([1, 1, 1]).tolist() == [1]            # overlapping occurrence
    assert prompt_lookup([5, 1, 2, 9, 1, 2, 7, 1, 2]).tolist() == [9, 1, 2, 7, 1, 2]
    assert prompt_lookup([5, 1, 2, 9, 1, 2, 7, 1, 2], occurrence="latest").tolist() == [7, 1, 2]
    assert prompt_lookup([1, 2, 3]).tolist() == [] and prompt_lookup([4]).tolist() == []


def test_prompt_lookup_vs_brute_force():
    rng = random.Random(8)
    for _ in range(400):
        ctx = [rng.randrange(rng.choice([2, 3, 5])) for _ in range(rng.randrange(1, 30))]
        min_n = rng.randrange(1, 4)
        max_n = rng.randrange(min_n, 5)
        k = rng.randrange(1, 9)
        for latest in (False, True):
            got = prompt_lookup(ctx, min_n=min_n, max_n=max_n, k=k,
                                occurrence="latest" if latest else "earliest").tolist()
            assert got == brute_lookup(ctx, min_n, max_n, k, latest), (ctx, min_n, max_n, k)


def test_prompt_lookup_proposer_is_a_chain():
    p = PromptLookupProposer(k=3)
    tokens, parents = p.propose("r", np.asarray([1, 2, 3, 4, 1, 2], np.int32))
    assert tokens.tolist() == [3, 4, 1] and parents.tolist() == [-1, 0, 1]
    row = {"id": "r", "prompt_ids": [1, 2, 3, 4, 5], "output_ids": [1, 2, 3, 4, 5, 9]}
    s = dr.replay_request(PromptLookupProposer(), row)
    # step 1: context ends 1 -> draft 2 3 4 5 1 (k cut by the context), accepts 2 3 4 5, bonus 9
    assert s.emitted.tolist() == [5]


def test_ngramspec_adapter_equals_simulate():
    rows = dr.load_rows(4)
    for match_type in ("BFS", "PROB"):
        p = dr.make_proposer("ngramspec", match_type=match_type, check_context=True)
        stats = dr.replay(p, rows)
        sim = ns.simulate(rows, config=ns.NgramConfig(match_type=match_type))
        for s, em, drafts in zip(stats, sim.emitted, sim.drafts):
            assert s.emitted.tolist() == em.tolist()
            assert s.real.tolist() == drafts.tolist()
            assert set(s.sent.tolist()) == {11}            # padding is sent


def test_ngramspec_adapter_send_real_only():
    rows = dr.load_rows(2)
    stats = dr.replay(dr.make_proposer("ngramspec", send="real"), rows)
    for s in stats:
        assert s.sent.tolist() == s.real.tolist()


@pytest.mark.arctic
def test_arctic_on_the_corpus():
    from benchmarks.peers import arctic
    try:
        arctic.build()
    except arctic.PeerUnavailable as e:
        pytest.skip(f"Arctic peer unavailable: {e}")
    p = arctic.ArcticProposer()
    p.start("a", np.asarray([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2], np.int32), 3)
    tokens, parents = p.propose("a", np.asarray([1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2, 3]))
    assert tokens[:4].tolist() == [4, 5, 1, 2] and parents[:4].tolist() == [-1, 0, 1, 2]
    p.stop("a")
    groups = dr.pool_by(dr.replay(arctic.ArcticProposer(), dr.load_rows()))
    assert round(groups["overall"].tokens_per_step, 2) == 3.18
    assert round(groups["code_edit"].tokens_per_step, 2) == 7.01
    assert round(groups["overall"].sent_per_step, 1) == 5.8
