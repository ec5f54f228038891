"""The Drafter's remembered state (``ngramspec.engine.serving.remembered``: remembered insert paths,
own tries kept with touch stamps, the batch-1 match and window insert in one call, a drafter's
own trie keeping its LRU order as stamps until it could evict) drafts exactly what the
reference backend drafts, step by step, and leaves the same trie (nodes, counts and LRU order)."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import assert_same_content, recorded_argmax, recorded_streams
from numpy.testing import assert_array_equal

import ngramspec as ns

OPTIONS = {
    "sglang": {},
    "prob-exact": {"match_type": "PROB", "exact_counts": True, "index_prompt": True},
    "recommended": dict(index_prompt=True, exact_counts=True, local_index=True,
                        match_type="ADAPTIVE", min_token_prob=0.5, max_spec_factor=1.0,
                        shared_pseudo_count=2.0, max_trie_depth=24, draft_token_num=16),
    "local-windows": dict(local_index=True, match_type="ADAPTIVE", min_token_prob=0.1),
    # a finished request teaches the shared trie only its prompt's last 40 tokens
    "short-shared-prompt": dict(index_prompt=True, exact_counts=True, local_index=True,
                                shared_prompt_window=40, match_type="ADAPTIVE",
                                min_token_prob=0.5, max_spec_factor=1.0,
                                shared_pseudo_count=2.0, max_trie_depth=24, draft_token_num=16),
    "adaptive-shared": dict(match_type="ADAPTIVE", exact_counts=True, min_token_prob=0.1),
}


def _loop(cfg: ns.NgramConfig, rows: list[dict], concurrency: int, backend: str,
          check_at: int | None, reserve: bool = False):
    """The serving loop through the public calls; per step the drafts; the drafter."""
    drafter = ns.Drafter(config=cfg, backend=backend, reserve=reserve)
    if reserve:  # the shared trie: allocated whole, never to grow
        trie = drafter.cache._backend.trie
        assert trie.alloc == cfg.capacity

        def grow():
            raise AssertionError("a reserved trie grew")
        trie.grow = grow
    queue, running, log, step = list(rows), [], [], 0
    outputs = {r["id"]: r["output_ids"] for r in rows}
    while queue or running:
        while queue and len(running) < concurrency:
            row = queue.pop(0)
            drafter.add_request(row["id"], row["prompt_ids"], row["output_ids"][0])
            running.append(row["id"])
        d = drafter.propose(running)
        log.append((d.tokens.copy(), d.mask.copy(), d.num_drafts.copy()))
        done = [len(drafter.output(r)) for r in running]
        pred = np.stack([recorded_argmax(d, b, outputs[r], done[b])
                         for b, r in enumerate(running)])
        pred[pred < 0] = 0  # past the recording: any token (the output is cut)
        left = [len(outputs[r]) - done[b] for b, r in enumerate(running)]
        drafter.accept(ns.verify_greedy(d, pred), max_tokens=left)
        for r in list(running):
            if len(drafter.output(r)) == len(outputs[r]):
                assert_array_equal(drafter.output(r), outputs[r])
                drafter.finish(r)
                running.remove(r)
        step += 1
        if step == check_at:  # the LRU order read mid-run (a drafter's own trie: the list now)
            drafter.cache.check_integrity()
    return log, drafter


@pytest.mark.parametrize("capacity", [400, 6_000, 1_000_000], ids=["evicting", "fills", "big"])
@pytest.mark.parametrize("concurrency", [1, 3])
@pytest.mark.parametrize("name", list(OPTIONS))
def test_remembered_state_drafts_as_the_reference(name, concurrency, capacity):
    cfg = ns.NgramConfig(**OPTIONS[name], capacity=capacity)
    rows = [dict(r, output_ids=r["output_ids"][:120]) for r in recorded_streams(5)]
    check_at = 9 if concurrency == 3 else None
    got, fast = _loop(cfg, rows, concurrency, "numba", check_at)
    want, ref = _loop(cfg, rows, concurrency, "reference", check_at)
    assert len(got) == len(want)
    for k, (a, b) in enumerate(zip(got, want)):
        for x, y in zip(a, b):
            assert_array_equal(x, y, err_msg=f"step {k}")
    assert sum(int(n.sum()) for _, _, n in got) > 0
    fast.cache.check_integrity()
    assert_same_content(fast.cache, ref.cache)  # nodes, counts and the LRU order


@pytest.mark.parametrize("capacity", [400, 6_000], ids=["evicting", "fills"])
@pytest.mark.parametrize("name", ["sglang", "recommended"])
def test_a_reserved_trie_drafts_the_same_and_never_grows(name, capacity):
    """Drafter(reserve=True): the whole capacity allocated at once, drafts and the trie's
    content equal to those of the trie that grows as it fills."""
    cfg = ns.NgramConfig(**OPTIONS[name], capacity=capacity)
    rows = [dict(r, output_ids=r["output_ids"][:120]) for r in recorded_streams(5)]
    got, reserved = _loop(cfg, rows, 3, "numba", 9, reserve=True)
    want, grown = _loop(cfg, rows, 3, "numba", 9)
    for k, (a, b) in enumerate(zip(got, want, strict=True)):
        for x, y in zip(a, b):
            assert_array_equal(x, y, err_msg=f"step {k}")
    reserved.cache.check_integrity()
    assert_same_content(reserved.cache, grown.cache)
    reserved.cache.reset()
    assert reserved.cache._backend.trie.alloc == capacity


def test_own_tries_are_checked_and_sized():
    """A request's own trie (local_index) keeps its LRU order as stamps; checking it makes the
    list (the drafts stay the reference's after that), and it is grown at admission."""
    cfg = ns.NgramConfig.recommended(capacity=100_000)
    rows = recorded_streams(2)
    drafter = ns.Drafter(config=cfg)
    twin = ns.Drafter(config=cfg, backend="reference")
    for d in (drafter, twin):
        for r in rows:
            d.add_request(r["id"], r["prompt_ids"], r["output_ids"][0])
    own = drafter._local[drafter._slot[rows[0]["id"]]]
    assert len(own) > 1
    for k in range(1, 30):
        if k == 10:
            own.check_integrity()
        ids = [r["id"] for r in rows]
        a, b = drafter.propose(ids), twin.propose(ids)
        assert_array_equal(a.tokens, b.tokens)
        emitted = {r["id"]: [r["output_ids"][k]] for r in rows}
        drafter.accept(emitted)
        twin.accept(emitted)
    own.check_integrity()


def test_a_shared_cache_keeps_its_lru_list():
    """A cache handed to the Drafter (cache=) is anyone's: its LRU order stays the list."""
    cache = ns.NgramCache(config=ns.NgramConfig(capacity=10_000))
    drafter = ns.Drafter(cache=cache)
    assert cache._backend.lru[0] == 1  # LRU_LIST
    own = ns.Drafter(config=ns.NgramConfig(capacity=10_000))
    assert own.cache._backend.lru[0] == 0  # LRU_STAMPS
    drafter.add_request("a", [1, 2, 3, 1, 2], 3)
    drafter.propose(["a"])
    drafter.accept({"a": [9]})
    assert cache._backend.lru[0] == 1


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_shared_prompt_window_bounds_what_a_finished_request_teaches(backend):
    """A finished request's n-grams reach the shared trie from the last shared_prompt_window
    prompt tokens on: a prompt token before them is unknown to it, the last ones are known."""
    prompt = list(range(1000, 1300))  # distinct tokens: every n-gram occurs once
    nodes = {}
    for window in (None, 10, 0):
        cfg = ns.NgramConfig.recommended(shared_prompt_window=window, capacity=100_000)
        drafter = ns.Drafter(config=cfg, backend=backend)
        drafter.add_request("a", prompt, first_token=7)
        drafter.propose(["a"])
        drafter.accept({"a": [8]})
        drafter.finish("a")
        cache = drafter.cache
        nodes[window] = len(cache)
        early = cache.match([list(range(1090, 1101))])  # -> 1101: 199 tokens before the end
        late = cache.match([list(range(1285, 1296))])   # -> 1296: within the last 10
        assert (int(early.num_drafts[0]) > 0) == (window is None)
        assert (int(late.num_drafts[0]) > 0) == (window != 0)
    assert nodes[None] > nodes[10] > nodes[0] > 0


def test_shared_prompt_window_is_checked():
    with pytest.raises(ValueError, match=r"shared_prompt_window must be in \[0, 2147483647\]"):
        ns.NgramConfig.recommended(shared_prompt_window=-1)
    with pytest.raises(TypeError, match="shared_prompt_window must be an integer"):
        ns.NgramConfig.recommended(shared_prompt_window=2.5)
    assert ns.NgramConfig.recommended().shared_prompt_window == 2048
