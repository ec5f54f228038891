"""``Drafter`` (the serving-loop bookkeeping) and the engine-facing exports of ``DraftBatch``."""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.errors import UnknownRequestError
from helpers import (brute_force_links, build, recorded_argmax, recorded_streams,
                     replay_with_drafter, scenarios)


def replay_by_hand(cfg: ns.NgramConfig, rows: list[dict], concurrency: int):
    """SGLang 0.5.23's serving loop written out against the cache itself."""
    cache = ns.NgramCache(config=cfg)
    queue, running, outs, steps = list(rows), [], {}, {}
    drafts_log = []
    while queue or running:
        while queue and len(running) < concurrency:
            row = queue.pop(0)
            outs[row["id"]] = row["output_ids"][:1]
            steps[row["id"]] = []
            if len(row["output_ids"]) > 1:
                running.append(row)
        if not running:
            continue
        seqs = [r["prompt_ids"] + outs[r["id"]] for r in running]
        contexts = [s[-cfg.max_trie_depth:] for s in seqs]
        drafts = cache.match(contexts, request_ids=[r["id"] for r in running],
                             total_lens=[len(s) for s in seqs])
        drafts_log.append(drafts.tokens.copy())
        pred = np.stack([recorded_argmax(drafts, b, r["output_ids"], len(outs[r["id"]]))
                         for b, r in enumerate(running)])
        result = ns.verify_greedy(drafts, pred)
        cache.insert(contexts)
        for b, r in enumerate(running):
            left = len(r["output_ids"]) - len(outs[r["id"]])
            emitted = result.emitted[b][:left].tolist()
            outs[r["id"]] += emitted
            steps[r["id"]].append(len(emitted))
        done = [r for r in running if len(outs[r["id"]]) == len(r["output_ids"])]
        cache.erase([r["id"] for r in done])
        running = [r for r in running if r not in done]
    return steps, drafts_log


@pytest.mark.parametrize("match_type", ["BFS", "PROB"])
@pytest.mark.parametrize("concurrency", [1, 4])
def test_drafter_is_sglangs_serving_loop(match_type, concurrency):
    rows = recorded_streams(8)
    cfg = ns.NgramConfig(match_type=match_type, capacity=200_000)
    want_steps, want_drafts = replay_by_hand(cfg, rows, concurrency)
    got_steps, got_drafts = replay_with_drafter(cfg, rows, concurrency)
    assert got_steps == want_steps
    assert len(got_drafts) == len(want_drafts)
    for got, want in zip(got_drafts, want_drafts):
        assert_array_equal(got, want)
    # Speculation did something on real data (the comparison is not between two empty loops).
    assert sum(map(sum, got_steps.values())) > sum(map(len, got_steps.values()))


def test_drafter_backends_agree():
    rows = recorded_streams(3)
    cfg = ns.NgramConfig(capacity=5_000)  # small: eviction on the way
    assert replay_with_drafter(cfg, rows, 2, "reference")[0] == \
        replay_with_drafter(cfg, rows, 2, "numba")[0]


def test_drafter_windows_and_lengths():
    """propose matches the last max_trie_depth tokens with total_len = full length; accept
    inserts that window (not the emitted tokens) before appending."""
    cfg = ns.NgramConfig(max_trie_depth=3, draft_token_num=4, capacity=100)
    drafter = ns.Drafter(config=cfg, backend="reference")
    drafter.add_request(7, [10, 11, 12, 13], first_token=14)
    assert drafter.total_len(7) == 5
    drafter.propose([7])
    drafter.accept({7: [15]})  # no drafts: the bonus token alone
    twin = ns.NgramCache(config=cfg, backend="reference")
    twin.insert([[12, 13, 14]])
    probe = [[12], [13], [14], [15], [12, 13]]
    assert_array_equal(drafter.cache.match(probe).tokens, twin.match(probe).tokens)
    assert drafter.sequence(7).tolist() == [10, 11, 12, 13, 14, 15]
    assert drafter.output(7).tolist() == [14, 15]
    assert drafter.total_len(7) == 6


def test_drafter_errors_leave_state_unchanged():
    # Inserting at accept (not early): the trie holds nothing until a proposal is accepted.
    drafter = ns.Drafter(config=ns.NgramConfig(capacity=1000), early_insert=False)
    drafter.add_request("a", [1, 2, 3], 4)
    drafter.add_request("b", [], 5)
    with pytest.raises(ValueError, match="already in flight"):
        drafter.add_request("a", [1], 2)
    with pytest.raises(TypeError, match="rid"):
        drafter.add_request(1.5, [1], 2)
    with pytest.raises(TypeError, match="prompt_ids"):
        drafter.add_request("c", [1, "x"], 2)
    with pytest.raises(ValueError, match="int32"):
        drafter.add_request("c", [1], 2**40)
    with pytest.raises(KeyError, match="unknown request 'zz'"):
        drafter.propose(["a", "zz"])
    with pytest.raises(ValueError, match="empty"):
        drafter.propose([])
    with pytest.raises(TypeError, match="sequence"):
        drafter.propose("a")
    assert drafter.pending == []
    drafter.propose(["a", "b"])
    with pytest.raises(ValueError, match="not accepted yet"):
        drafter.propose(["a"])
    with pytest.raises(ValueError, match="lacks pending"):
        drafter.accept({"a": [1]})
    with pytest.raises(UnknownRequestError, match="unknown request 'c'"):
        drafter.accept({"a": [1], "b": [2], "c": [3]})
    with pytest.raises(ValueError, match="empty"):
        drafter.accept({"a": [1], "b": []})
    with pytest.raises(TypeError, match="mapping"):
        drafter.accept([("a", [1])])
    assert len(drafter.cache) == 1 and drafter.pending == ["a", "b"]
    drafter.finish("b")  # drops its pending window
    drafter.accept({"a": [9]})
    assert drafter.sequence("a").tolist() == [1, 2, 3, 4, 9]
    assert len(drafter.cache) > 1
    with pytest.raises(KeyError):
        drafter.finish("b")
    with pytest.raises(ValueError, match="not both"):
        ns.Drafter(config=ns.NgramConfig(), cache=drafter.cache)


def test_unknown_requests_get_one_error_everywhere():
    """propose, accept, finish and the getters: the same exception type and words."""
    drafter = ns.Drafter(config=ns.NgramConfig(capacity=1000))
    drafter.add_request("a", [1, 2, 3], 4)
    drafter.propose(["a"])
    messages = []
    for call in (lambda: drafter.propose(["zz"]), lambda: drafter.accept({"zz": [1]}),
                 lambda: drafter.finish("zz"), lambda: drafter.sequence("zz"),
                 lambda: drafter.steps("zz")):
        with pytest.raises(UnknownRequestError) as info:
            call()
        assert isinstance(info.value, KeyError)
        messages.append(str(info.value))
    assert len(set(messages)) == 1 and messages[0].startswith("unknown request 'zz'")
    assert drafter.pending == ["a"]


def test_accept_takes_only_a_path_of_the_tree_plus_a_bonus():
    drafter = ns.Drafter(config=ns.NgramConfig(draft_token_num=4, capacity=1000))
    drafter.add_request("a", [5, 1, 2, 3, 7, 1], 2)
    drafter.propose(["a"])
    drafter.accept({"a": [8]})  # inserts 5 1 2 3 7 1 2 (the matched window)
    d = drafter.propose(["a"])  # context ... 1 2 8: nothing; the root 8
    assert int(d.num_drafts[0]) == 0
    for bad in ([8, 1], [0, 0, 0], list(range(50))):
        with pytest.raises(ValueError, match="not a path|emits at most"):
            drafter.accept({"a": bad})
        assert drafter.pending == ["a"]
    drafter.accept({"a": [0, 5]})  # the token-0 padding child, then a bonus: a path
    drafter.add_request("b", [4, 1, 2], 3)
    d = drafter.propose(["b"])  # 1 2 -> 3 7 1 / 8 0 ...: a real tree
    assert int(d.num_drafts[0]) > 0
    path = [int(t) for t in d.tokens[0, 1:d.num_drafts[0] + 1]]
    with pytest.raises(ValueError, match="position 1"):
        drafter.accept({"b": [path[0], 12345, 1]})
    r = ns.verify_greedy(d, np.full((1, d.draft_token_num), 12345))
    drafter.accept(r)  # no draft accepted: the bonus 12345 alone
    assert drafter.output("b").tolist() == [3, 12345]


def test_accept_of_a_result_with_max_tokens_and_a_finished_request():
    cfg = ns.NgramConfig(draft_token_num=6, capacity=1000)
    drafter = ns.Drafter(config=cfg)
    for rid in "abc":
        drafter.add_request(rid, [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 1, 2], 3)
    drafter.propose(list("abc"))
    drafter.accept({r: [4] for r in "abc"})
    d = drafter.propose(list("abc"))  # ... 3 4: drafts 5 1 2 ...
    r = ns.verify_greedy(d, _chain_argmax(d))
    drafter.finish("b")
    drafter.accept(r, max_tokens=[2, 3])  # rows a and c of the result
    assert drafter.output("a").tolist() == [3, 4] + r.emitted[0][:2].tolist()
    assert drafter.output("c").tolist() == [3, 4] + r.emitted[2][:3].tolist()
    assert drafter.steps("c") == [1, 3]
    with pytest.raises(ValueError, match="nothing was proposed"):
        drafter.accept(r)


def _chain_argmax(d):
    """The argmax after every slot: its token's successor in the cycle 1 2 3 4 5."""
    return (d.tokens % 5) + 1


def test_early_insert_drafts_as_inserting_at_accept():
    """Queuing the matched windows at propose (the default) drafts exactly as inserting them
    in accept, on the shipped streams at concurrency 4."""
    rows = ns.read_streams(ns.streams.embedded_streams_path())[:12]
    logs = []
    for early in (True, False):
        drafter = ns.Drafter(config=ns.NgramConfig(capacity=100_000), early_insert=early)
        assert drafter.early_insert is early
        outs = {r["id"]: np.asarray(r["output_ids"], np.int32) for r in rows}
        queue, running, log = list(rows), [], []
        while queue or running:
            while queue and len(running) < 4:
                r = queue.pop(0)
                drafter.add_request(r["id"], r["prompt_ids"], r["output_ids"][0])
                running.append(r["id"])
            d = drafter.propose(running)
            log.append(d.tokens.copy())
            done = [len(drafter.output(rid)) for rid in running]
            pred = recorded_argmax_batch(d, [outs[rid].tolist() for rid in running], done)
            left = [outs[rid].size - k for rid, k in zip(running, done)]
            drafter.accept(ns.verify_greedy(d, pred), max_tokens=left)
            for rid in list(running):
                if len(drafter.output(rid)) == outs[rid].size:
                    assert_array_equal(drafter.output(rid), outs[rid])
                    drafter.finish(rid)
                    running.remove(rid)
        logs.append(log)
    assert len(logs[0]) == len(logs[1])
    for a, b in zip(*logs):
        assert_array_equal(a, b)


def recorded_argmax_batch(d, outs, done):
    pred = np.zeros(d.tokens.shape, np.int64)
    for b in range(d.batch_size):
        pred[b] = recorded_argmax(d, b, outs[b], done[b])
    return np.where(pred < 0, 0, pred)  # -1 where the recording ended: any token


def test_drafter_shares_a_cache():
    cache = ns.NgramCache(capacity=1000, backend="reference")
    one, two = ns.Drafter(cache=cache), ns.Drafter(cache=cache)
    one.add_request("x", [1, 2, 3, 4, 5], 6)
    one.propose(["x"])
    one.accept({"x": [7]})
    two.add_request("y", [9, 3, 4], 5)
    assert two.propose(["y"]).tokens[0, 1] == 6  # learnt from the other drafter's request


# --- engine-facing exports ---------------------------------------------------------------

@given(scenarios(), st.data())
def test_attention_masks(scenario, data):
    cfg, inserts, contexts = scenario
    d = build("numba", cfg, inserts).match(contexts)
    pre = np.asarray(data.draw(st.lists(st.integers(0, 7), min_size=len(contexts),
                                        max_size=len(contexts))))
    full = d.attention_mask(pre)
    n, p = d.draft_token_num, int(pre.max())
    assert full.shape == (len(contexts), n, p + n)
    flat = []
    for b in range(len(contexts)):
        # SGLang's per-request mask (spec 4.3): ones over the prefix, then the tree mask.
        sglang = np.concatenate([np.ones((n, pre[b]), bool), d.mask[b]], axis=1)
        assert_array_equal(full[b, :, p - pre[b]:], sglang)
        assert not full[b, :, :p - pre[b]].any()  # left padding is masked
        flat.append(sglang.ravel())
    assert_array_equal(d.custom_mask(pre), np.concatenate(flat))
    add = d.additive_attention_mask(pre)
    assert add.shape == (len(contexts), 1, n, p + n) and add.dtype == np.float32
    assert_array_equal(add[:, 0] == 0, full)
    assert_array_equal(np.isneginf(add[:, 0]), ~full)


@given(scenarios())
def test_chain_is_the_heaviest_path(scenario):
    cfg, inserts, contexts = scenario
    d = build("numba", cfg, inserts).match(contexts)
    for b, (slots, toks) in enumerate(zip(d.chain_slots(), d.chain())):
        k = int(d.num_drafts[b])
        _, parent, _, _ = brute_force_links(d.mask[b])
        assert_array_equal(toks, d.tokens[b, slots])
        assert np.all(slots >= 1) and np.all(slots <= k)  # real drafts only, no padding
        prev = 0
        for s in slots:
            assert parent[s] == prev
            siblings = [i for i in range(1, k + 1) if parent[i] == prev]
            subtree = {i: sum(1 for j in range(1, k + 1) if d.mask[b, j, i])
                       for i in siblings}
            best = max(subtree.values())
            assert s == min(i for i in siblings if subtree[i] == best)
            prev = s
        assert not any(parent[i] == prev for i in range(1, k + 1))  # ends at a leaf


@given(scenarios(), st.data())
def test_verify_from_logits_equals_argmax(scenario, data):
    cfg, inserts, contexts = scenario
    d = build("numba", cfg, inserts).match(contexts)
    b, n = d.tokens.shape
    logits = np.asarray(data.draw(st.lists(st.integers(-3, 3), min_size=b * n * 5,
                                           max_size=b * n * 5)), np.float64).reshape(b, n, 5)
    want = ns.verify_greedy(d, logits.argmax(-1))
    for form in (logits, logits.reshape(b * n, 5)):
        got = ns.verify_greedy_logits(d, form)
        assert_array_equal(got.accept_index, want.accept_index)
        assert_array_equal(got.accept_lens, want.accept_lens)
    with pytest.raises(ValueError, match="logits must have shape"):
        ns.verify_greedy_logits(d, np.zeros((b, n + 1, 5)))


def test_early_insert_and_a_request_finished_before_accept():
    """The one documented difference of early inserts: a request finished between propose
    and accept has had its matched window inserted already."""
    counts = []
    for early in (True, False):
        drafter = ns.Drafter(config=ns.NgramConfig(capacity=1000), early_insert=early)
        drafter.add_request("a", [1, 2, 3], 4)
        drafter.add_request("b", [7, 8, 9], 6)
        drafter.propose(["a", "b"])
        drafter.finish("b")
        drafter.accept({"a": [5]})
        counts.append(len(drafter.cache))
    early_nodes, late_nodes = counts
    # 1 2 3 4 and 7 8 9 6: 10 suffix nodes each + the root; without early insert "b" is dropped
    assert late_nodes == 1 + 10 and early_nodes == 1 + 20
