"""``Drafter`` (the serving-loop bookkeeping) and the engine-facing exports of ``DraftBatch``."""

from __future__ import annotations

import gzip
import json
from importlib.resources import files

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import brute_force_links, build, recorded_streams, scenarios


def recorded_argmax(drafts: ns.DraftBatch, b: int, output: list[int], done: int) -> np.ndarray:
    """The greedy target's argmax at every slot of row ``b``: the recorded next token where
    the slot's path follows the recording, else -1 (a token no draft carries)."""
    n = drafts.draft_token_num
    pred = np.full(n, -1, dtype=np.int64)
    for i in range(n):
        path = [int(drafts.tokens[b, j]) for j in range(1, i + 1) if drafts.mask[b, i, j]]
        end = done + len(path)
        if end < len(output) and output[done:end] == path:
            pred[i] = output[end]
    return pred


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


def replay_with_drafter(cfg: ns.NgramConfig, rows: list[dict], concurrency: int,
                        backend: str = "numba", check: bool = False):
    """The serving loop through ``Drafter``; ``check``: the tries' integrity as requests end."""
    drafter = ns.Drafter(config=cfg, backend=backend)
    queue, running, steps, drafts_log = list(rows), [], {}, []
    by_id = {r["id"]: r for r in rows}
    while queue or running:
        while queue and len(running) < concurrency:
            row = queue.pop(0)
            steps[row["id"]] = []
            if len(row["output_ids"]) > 1:
                drafter.add_request(row["id"], row["prompt_ids"], row["output_ids"][0])
                running.append(row["id"])
        if not running:
            continue
        drafts = drafter.propose(running)
        drafts_log.append(drafts.tokens.copy())
        emitted = {}
        for b, rid in enumerate(running):
            out = by_id[rid]["output_ids"]
            done = len(drafter.output(rid))
            pred = recorded_argmax(drafts, b, out, done)[None]
            one = ns.DraftBatch(drafts.tokens[b:b + 1].copy(), drafts.mask[b:b + 1].copy(),
                                drafts.num_drafts[b:b + 1].copy())
            emitted[rid] = ns.verify_greedy(one, pred).emitted[0][:len(out) - done]
        drafter.accept(emitted)
        for rid in list(running):
            steps[rid].append(len(emitted[rid]))
            if len(drafter.output(rid)) == len(by_id[rid]["output_ids"]):
                assert_array_equal(drafter.output(rid), by_id[rid]["output_ids"])
                assert drafter.steps(rid) == steps[rid]
                own = drafter._requests[rid].local
                if check and own is not None:
                    own.check_integrity()
                drafter.finish(rid)
                running.remove(rid)
    assert drafter.requests == [] and drafter.pending == []
    if check:
        drafter.cache.check_integrity()
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
    drafter.accept({7: [15, 16]})
    twin = ns.NgramCache(config=cfg, backend="reference")
    twin.insert([[12, 13, 14]])
    probe = [[12], [13], [14], [15], [12, 13]]
    assert_array_equal(drafter.cache.match(probe).tokens, twin.match(probe).tokens)
    assert drafter.sequence(7).tolist() == [10, 11, 12, 13, 14, 15, 16]
    assert drafter.output(7).tolist() == [14, 15, 16]
    assert drafter.total_len(7) == 7


def test_drafter_errors_leave_state_unchanged():
    drafter = ns.Drafter(config=ns.NgramConfig(capacity=1000))
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
    with pytest.raises(ValueError, match="no pending proposal"):
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
