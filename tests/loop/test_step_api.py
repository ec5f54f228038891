"""The step API's compiled paths against their readable definitions.

- ``verify_greedy`` (compiled walk) equals ``reference.verify.verify_greedy`` on real draft
  trees of every match type and on random predictions that follow them for a while;
- ``Drafter.accept`` takes exactly what verification can emit (greedy or sampled) and refuses
  what no path of the tree + bonus gives;
- CPU torch tensors are read where NumPy arrays are.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.reference.verify import verify_greedy as verify_reference

ROWS = ns.read_streams(ns.streams.embedded_streams_path())[:6]


def _trees(match_type: str, seed: int) -> list[ns.DraftBatch]:
    """Draft batches of a cache fed with the shipped streams, at random points of them."""
    cfg = ns.NgramConfig(match_type=match_type, draft_token_num=10, capacity=200_000)
    cache = ns.NgramCache(config=cfg)
    seqs = [np.asarray(r["prompt_ids"] + r["output_ids"], np.int32) for r in ROWS]
    cache.insert(seqs)
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(20):
        ctxs = []
        for _ in range(int(rng.integers(1, 6))):
            s = seqs[rng.integers(len(seqs))]
            end = int(rng.integers(2, s.size))
            ctxs.append(s[max(0, end - 18):end])
        out.append(cache.match(ctxs))
    return out


def _predictions(d: ns.DraftBatch, rng: np.random.Generator) -> np.ndarray:
    """The argmax after each slot: mostly a child's token (so that paths get accepted), else
    a random token."""
    b, n = d.tokens.shape
    pred = rng.integers(0, 50, size=(b, n))
    kids = d.retrieve_next_token
    for r in range(b):
        for i in range(n):
            c = kids[r, i]
            if c >= 0 and rng.random() < 0.8:
                # some child of slot i, walking a random number of siblings
                for _ in range(int(rng.integers(0, 3))):
                    nxt = d.retrieve_next_sibling[r, c]
                    c = nxt if nxt >= 0 else c
                pred[r, i] = d.tokens[r, c]
    return pred


@pytest.mark.parametrize("match_type", ["BFS", "PROB", "ADAPTIVE"])
def test_compiled_greedy_walk_equals_the_reference(match_type):
    rng = np.random.default_rng(1)
    compared = accepted = 0
    for d in _trees(match_type, seed=2):
        for _ in range(5):
            pred = _predictions(d, rng)
            r = ns.verify_greedy(d, pred)
            idx, lens, emitted = verify_reference(d.tokens, d.retrieve_next_token,
                                                  d.retrieve_next_sibling, pred)
            assert_array_equal(r.accept_index, idx)
            assert_array_equal(r.accept_lens, lens)
            assert len(r.emitted) == len(emitted)
            for a, b in zip(r.emitted, emitted):
                assert_array_equal(a, b)
            compared += 1
            accepted += int((lens > 1).sum())
    assert compared == 100 and accepted > 50  # the walks did go down the trees


def test_the_walk_reads_drafts_held_as_views():
    """A DraftBatch whose arrays are views of wider ones (the first slots only, as a loop that
    sends ADAPTIVE's real slots makes them; not C-ordered) is walked as its copy is: the
    compiled walk's fast entry is for C-ordered arrays only."""
    rng = np.random.default_rng(4)
    walked = strided = 0
    for d in _trees("ADAPTIVE", seed=5) + _trees("BFS", seed=6):
        w = 5  # of 10 slots: a prefix of a tree in level order is a tree
        num = np.minimum(d.num_drafts, w - 1)
        view = ns.DraftBatch._trusted(d._tokens[:, :w], d._mask[:, :w, :w], num)
        copy = ns.DraftBatch(d.tokens[:, :w], d.mask[:, :w, :w], num)
        strided += int(not view._tokens.flags.c_contiguous)  # (one row is contiguous)
        pred = _predictions(copy, rng)
        ns.verify_greedy(copy, pred)  # (the fast entry made first)
        a, b = ns.verify_greedy(view, pred), ns.verify_greedy(copy, pred)
        assert_array_equal(a.accept_index, b.accept_index)
        assert_array_equal(a.accept_lens, b.accept_lens)
        assert_array_equal(a._matrix(), b._matrix())
        walked += int((b.accept_lens > 1).sum())
    assert walked > 20 and strided > 20


def test_prediction_range_and_shape_errors():
    d = _trees("BFS", seed=3)[0]
    b, n = d.tokens.shape
    with pytest.raises(ValueError, match="int32"):
        ns.verify_greedy(d, np.full((b, n), 2**40))
    with pytest.raises(ValueError, match="shape"):
        ns.verify_greedy(d, np.zeros((b, n + 1), np.int64))
    with pytest.raises(TypeError, match="integer"):
        ns.verify_greedy(d, np.zeros((b, n)))


@pytest.mark.parametrize("how", ["greedy", "sampling"])
def test_accept_takes_whatever_verification_emits(how):
    """Every emitted row of greedy or sampling verification is accepted (a path + bonus), and
    changing one of its draft tokens to a token no sibling carries is refused."""
    rng = np.random.default_rng(5)
    cfg = ns.NgramConfig(draft_token_num=8, capacity=100_000)
    phrases = [rng.integers(1, 64, size=6) for _ in range(4)]  # repetitive: trees branch
    prompts = [np.concatenate([phrases[i] for i in rng.integers(0, 4, size=30)])
               for _ in range(6)]
    for early in (True, False):
        drafter = ns.Drafter(config=cfg, early_insert=early)
        for i, p in enumerate(prompts):
            drafter.add_request(i, p, int(p[0]))
        ids = list(range(len(prompts)))
        refused = 0
        for _ in range(40):
            d = drafter.propose(ids)
            if how == "greedy":
                res = ns.verify_greedy(d, _predictions(d, rng))
            else:
                probs = rng.dirichlet(np.full(64, 0.05), size=(len(ids), d.draft_token_num))
                res = ns.verify_sampling(d, probs, rng=rng)
            bad = [e.copy() for e in res.emitted]
            k = next((i for i, e in enumerate(bad) if e.size > 1), None)
            if k is not None:
                bad[k][0] = 10**6  # no draft carries it
                with pytest.raises(ValueError, match="not a path"):
                    drafter.accept({rid: e for rid, e in zip(ids, bad)})
                refused += 1
            drafter.accept(res)
        assert refused > 0


@pytest.mark.parametrize("name", ["sglang", "recommended"])
def test_a_max_tokens_below_one_is_refused_and_nothing_recorded(name):
    """Every form of ``max_tokens`` (int, list, int32 or int64 array, with a request finished
    between propose and accept) refuses a cap below 1, names it and records nothing; the
    same accept with valid caps then goes through."""
    cfg = ns.NgramConfig(capacity=10_000) if name == "sglang" else \
        ns.NgramConfig.recommended().replace(capacity=10_000)
    prompt = np.tile(np.arange(1, 9, dtype=np.int32), 6)
    for cap, finish in [(0, False), ([2, 0, 3], False), (np.array([2, 3, -1], np.int32), False),
                        (np.array([2, 0], np.int64), True)]:
        drafter = ns.Drafter(config=cfg)
        for r in range(3):
            drafter.add_request(r, prompt, 1)
        d = drafter.propose([0, 1, 2])
        res = ns.verify_greedy(d, _predictions(d, np.random.default_rng(0)))
        if finish:
            drafter.finish(1)
        before = [drafter.sequence(r).copy() for r in drafter.requests]
        with pytest.raises(ValueError,
                           match=r"max_tokens\[[0-2]\] = -?[0-9]+; lengths must be >= 1"):
            drafter.accept(res, max_tokens=cap)
        for r, seq in zip(drafter.requests, before):
            assert_array_equal(drafter.sequence(r), seq)
        ok = np.ones_like(cap) if isinstance(cap, np.ndarray) else 1
        drafter.accept(res, max_tokens=ok)
        assert [drafter.total_len(r) for r in drafter.requests] == \
            [seq.size + 1 for seq in before]


def test_verify_and_accept_is_verify_then_accept():
    cfg = ns.NgramConfig(draft_token_num=6, capacity=10_000)
    one, two = ns.Drafter(config=cfg), ns.Drafter(config=cfg)
    rng = np.random.default_rng(7)
    for dr in (one, two):
        for r in ROWS[:3]:
            dr.add_request(r["id"], r["prompt_ids"], r["output_ids"][0])
    ids = [r["id"] for r in ROWS[:3]]
    for _ in range(30):
        d1, d2 = one.propose(ids), two.propose(ids)
        assert_array_equal(d1.tokens, d2.tokens)
        pred = _predictions(d1, rng)
        r1 = one.verify_and_accept(d1, pred, max_tokens=3)
        r2 = ns.verify_greedy(d2, pred)
        two.accept(r2, max_tokens=3)
        assert_array_equal(r1.accept_lens, r2.accept_lens)
    for rid in ids:
        assert_array_equal(one.sequence(rid), two.sequence(rid))
        assert max(one.steps(rid)) <= 3
    with pytest.raises(ValueError, match="DraftBatch the last"):
        one.verify_and_accept(d1, pred)


def test_torch_cpu_tensors_are_read_like_arrays():
    torch = pytest.importorskip("torch")
    d = _trees("BFS", seed=9)[1]
    rng = np.random.default_rng(9)
    pred = _predictions(d, rng)
    want = ns.verify_greedy(d, pred)
    got = ns.verify_greedy(d, torch.from_numpy(pred))
    assert_array_equal(got.accept_index, want.accept_index)
    b, n = d.tokens.shape
    v = int(pred.max()) + 1
    logits = torch.zeros((b, n, v), dtype=torch.bfloat16)
    logits.scatter_(2, torch.from_numpy(pred)[..., None], 1.0)
    got = ns.verify_greedy_logits(d, logits)
    assert_array_equal(got.accept_index, want.accept_index)
    got = ns.verify_greedy_logits(d, logits.reshape(b * n, v))
    assert_array_equal(got.accept_lens, want.accept_lens)
    with pytest.raises(ValueError, match="logits must have shape"):
        ns.verify_greedy_logits(d, logits[:, :2])


def test_time_drafting_times_the_step_api_and_predictions_add_it():
    rows = ROWS[:4]
    r = ns.simulate(rows, config=ns.NgramConfig(capacity=100_000), concurrency=2,
                    step_api_steps=16)
    # A result is values: reading a field runs nothing; an untimed result is refused by a
    # prediction that would add its drafting, with the call that times it.
    assert r.step_api_ms_per_step is None and not r.step_api_timed
    assert r.to_dict()["summary"]["step_api_ms_per_step"] is None and not r.step_api_timed
    table = ns.CostTable([(1, 1, 10.0), (1, 12, 12.0), (2, 1, 11.0), (2, 12, 14.0)])
    with pytest.raises(ValueError, match=r"call ngramspec\.time_drafting\(result, "
                                         r"engine='custom'\) first, or pass draft_ms="):
        ns.predict_serving(r, table)
    assert ns.predict_serving(r, table, draft_ms=0).draft_ms == 0
    ms = ns.time_drafting(r)
    assert ms == r.step_api_ms_per_step > 0 and r.step_api_steps == 16 and r.step_api_timed
    assert ns.time_drafting(r) == ms  # timed once: the stored figure afterwards
    assert r.to_dict()["summary"]["step_api_ms_per_step"] == r.step_api_ms_per_step
    assert ns.predict_serving(r, table).draft_ms == r.step_api_ms_per_step
    off = ns.simulate(rows, config=ns.NgramConfig(capacity=100_000), concurrency=2,
                      step_api_steps=0)
    assert ns.time_drafting(off) is None and off.step_api_ms_per_step is None
    assert ns.predict_serving(off, table).draft_ms == off.draft_ms_per_step
    assert [e.tolist() for e in off.emitted] == [e.tolist() for e in r.emitted]
    for bad in (-1, 1.5, True):
        with pytest.raises(ValueError, match="step_api_steps"):
            ns.simulate(rows, step_api_steps=bad)


_LOADS_WHILE_TIMED = """
import importlib

import numba.core.dispatcher as nd

import ngramspec as ns

sw = importlib.import_module("ngramspec.simulate.stepwise")

timed, passes = [False], []  # passes: the kernels added in each timed pass
add = nd.Dispatcher.add_overload


def spy_add(self, cres):  # a kernel compiled or loaded from the disk cache in this process
    if timed[0] and self.py_func.__module__.startswith("ngramspec."):
        passes[-1].append(self.py_func.__qualname__)
    return add(self, cres)


replay = sw._replay_stepwise


def spy_replay(*args, **kwargs):
    timed[0] = kwargs.get("timing") is not None
    if timed[0]:
        passes.append([])
    try:
        return replay(*args, **kwargs)
    finally:
        timed[0] = False


nd.Dispatcher.add_overload = spy_add
sw._replay_stepwise = spy_replay
rows = ns.read_streams(ns.streams.embedded_streams_path())[:4]
for config in (ns.NgramConfig(capacity=100_000), ns.NgramConfig.preset("recommended")):
    for concurrency in (1, 3):
        r = ns.simulate(rows, config=config, concurrency=concurrency, step_api_steps=8)
        assert ns.time_drafting(r) > 0  # the pass whose time is reported comes last
        print(config.match_type, concurrency, sorted(set(passes[-1])))
"""


@pytest.mark.slow
def test_the_step_api_timing_counts_no_kernel_compile_or_load():
    # A first run's prediction once added ten seconds of compiling the one-request match
    # kernel (concurrency 1) to the drafting time: the warm-up ran two requests at once.  In a
    # fresh process every kernel the timed iterations call must already be in memory.
    out = subprocess.run([sys.executable, "-c", _LOADS_WHILE_TIMED], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["BFS 1 []", "BFS 3 []", "ADAPTIVE 1 []", "ADAPTIVE 3 []"]


def test_len_contains_and_prepare_many():
    """The collection view of the requests in flight, and ``prepare_many`` as ``prepare`` of
    each (the same drafts as requests added without preparing)."""
    cfg = ns.NgramConfig.recommended(capacity=10_000)
    ready, plain = ns.Drafter(config=cfg), ns.Drafter(config=cfg)
    prompts = {"a": [1, 2, 3, 4, 1, 2, 3], 7: [5, 6, 7, 5, 6, 9, 5, 6]}
    ready.prepare_many(list(prompts), list(prompts.values()))
    assert ready.prepared == ["a", 7] and len(ready) == 0 and "a" not in ready
    for rid, p in prompts.items():
        ready.add_request(rid, p, first_token=p[-3])
        plain.add_request(rid, p, first_token=p[-3])
    assert len(ready) == 2 and "a" in ready and 7 in ready and 8 not in ready
    assert [1] not in ready  # an unhashable id is no request, not an error
    a, b = ready.propose(["a", 7]), plain.propose(["a", 7])
    assert_array_equal(a.tokens, b.tokens)
    assert_array_equal(a.mask, b.mask)
    with pytest.raises(ValueError, match="already in flight"):
        ready.prepare_many(["a"], [[1, 2]])
    ready.finish("a")
    assert len(ready) == 1 and "a" not in ready


def test_the_serving_port_says_why_a_backend_serves_uncompiled():
    fast = ns.NgramCache(config=ns.NgramConfig.recommended())
    slow = ns.NgramCache(config=ns.NgramConfig.recommended(), backend="reference")
    assert fast.port.compiled and fast.port.why_not_compiled is None
    assert not slow.port.compiled
    assert "backend 'reference'" in slow.port.why_not_compiled
    with fast.port.settled() as backend:  # the queued inserts applied, the lock held
        assert backend is fast.port.backend
        assert not fast._lock.acquire(blocking=False)
    assert fast._lock.acquire(blocking=False)
    fast._lock.release()
