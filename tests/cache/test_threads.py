"""Many threads on one cache: no crash, no torn state, results equal to a serial order; and
background inserts (insert(wait=False) + synchronize) without SGLang 0.5.9's race."""

import threading
import time

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from helpers import canonical as _canonical


class Recorder:
    """Wraps a backend; called under the cache's lock, so the log is the serial order."""

    def __init__(self, backend):
        self.backend = backend
        self.log = []

    def insert(self, seqs):
        self.log.append(("insert", [s.copy() for s in seqs], None))
        return self.backend.insert(seqs)

    def match(self, ctxs, keys, lens):
        out = self.backend.match(ctxs, keys, lens)
        self.log.append(("match", ([c.copy() for c in ctxs], keys, lens), out))
        return out

    def erase(self, keys):
        self.log.append(("erase", keys, None))
        return self.backend.erase(keys)

    def reset(self):
        self.log.append(("reset", None, None))
        return self.backend.reset()

    def __getattr__(self, name):  # node_count, check_integrity, trie, ...
        return getattr(self.backend, name)


@pytest.mark.parametrize("backend, steps", [("numba", 100), ("reference", 40)])
def test_concurrent_calls_equal_a_serial_replay(backend, steps):
    cfg = dict(max_trie_depth=6, draft_token_num=8, capacity=60, match_type="PROB")
    cache = ns.NgramCache(**cfg, backend=backend)
    rec = Recorder(cache._backend)
    cache._backend = rec

    def worker(seed):
        rng = np.random.default_rng(seed)
        total = 0
        for step in range(steps):
            ctx = rng.integers(0, 5, size=rng.integers(1, 8))
            total += len(ctx)
            cache.match([ctx], request_ids=[f"t{seed}"], total_lens=[total])
            cache.insert([rng.integers(0, 5, size=12)], wait=bool(step % 3 == 0))
            if step % 40 == 39:
                cache.erase([f"t{seed}"])
                total = 0
            if seed == 0 and step == steps // 2:
                cache.reset()

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cache.synchronize()
    assert len(cache) <= cfg["capacity"]
    cache.check_integrity()

    serial = ns.NgramCache(**cfg, backend=backend)
    matches = 0
    for kind, args, out in rec.log:
        if kind == "insert":
            serial.insert(args)
        elif kind == "erase":
            serial.erase(args)
        elif kind == "reset":
            serial.reset()
        else:
            ctxs, keys, lens = args
            d = serial.match(ctxs, request_ids=keys, total_lens=lens)
            assert_array_equal(d.tokens, out[0])
            assert_array_equal(d.mask, out[1])
            matches += 1
    assert matches == 4 * steps
    assert sum(kind == "insert" for kind, _, _ in rec.log) == 4 * steps
    # The final content too, not just the outputs along the way.
    ea, xa, ka = _canonical(cache)
    eb, xb, kb = _canonical(serial)
    assert (ea, ka) == (eb, kb)
    for name in xa:
        assert_array_equal(xa[name], xb[name])


class Gate:
    """A backend wrapper whose inserts wait for ``go`` and can be told to fail."""

    def __init__(self, backend, fail_on=None):
        self.backend = backend
        self.go = threading.Event()
        self.finished = 0
        self.fail_on = fail_on

    def insert(self, seqs):
        self.go.wait(10)
        if self.fail_on is not None and seqs[0].tolist() == self.fail_on:
            raise RuntimeError("disk on fire")
        time.sleep(0.01)  # a slow insert: finishing matters, not dequeuing
        self.backend.insert(seqs)
        self.finished += 1

    def __getattr__(self, name):
        return getattr(self.backend, name)


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_synchronize_waits_until_queued_inserts_have_finished(backend):
    cache = ns.NgramCache(max_trie_depth=4, capacity=100, backend=backend)
    gate = Gate(cache._backend)
    cache._backend = gate
    for k in range(5):
        cache.insert([[k, k + 1, k + 2]], wait=False)
    seen = []
    waiter = threading.Thread(target=lambda: (cache.synchronize(), seen.append(gate.finished)))
    waiter.start()
    waiter.join(0.3)
    assert waiter.is_alive() and not seen  # blocked while inserts are pending
    gate.go.set()
    waiter.join(10)
    assert seen == [5]  # returned only once every insert had FINISHED


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_background_inserts_are_fifo_and_seen_by_the_next_call(backend):
    rng = np.random.default_rng(3)
    batches = [rng.integers(0, 4, size=(2, 9)) for _ in range(30)]
    bg = ns.NgramCache(max_trie_depth=5, capacity=25, backend=backend)
    fg = ns.NgramCache(max_trie_depth=5, capacity=25, backend=backend)
    for k, b in enumerate(batches):
        bg.insert(b, wait=False)
        fg.insert(b)
        if k % 10 == 9:  # match, erase, len and save implicitly synchronize first
            ctx = b[0, -3:]
            assert_array_equal(bg.match([ctx], request_ids=["r"], total_lens=[k + 3]).tokens,
                               fg.match([ctx], request_ids=["r"], total_lens=[k + 3]).tokens)
            assert len(bg) == len(fg)
    bg.insert(batches[0], wait=False)
    bg.reset()  # waits for the queue, then empties
    assert len(bg) == 1
    bg.check_integrity()


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_background_insert_errors_surface_once_never_lost(backend):
    cache = ns.NgramCache(max_trie_depth=4, capacity=100, backend=backend)
    gate = Gate(cache._backend, fail_on=[6, 6])
    gate.go.set()
    cache._backend = gate
    cache.insert([[1, 2]], wait=False)
    cache.insert([[6, 6]], wait=False)
    cache.insert([[3, 4]], wait=False)
    with pytest.raises(ns.BackgroundInsertError, match="disk on fire") as info:
        cache.synchronize()
    assert isinstance(info.value.__cause__, RuntimeError)
    assert gate.finished == 2  # the batches queued after the failure were still inserted
    cache.synchronize()  # reported once
    # At the next call that reads the cache, if nobody synchronized.
    cache.insert([[6, 6]], wait=False)
    with pytest.raises(ns.BackgroundInsertError):
        cache.match([[1]])
    assert cache.match([[1]]).tokens[0, 1] == 2
    # Bad input is rejected in the caller's thread, before anything is queued.
    with pytest.raises(TypeError, match="sequences"):
        cache.insert([[1.5]], wait=False)
    cache.synchronize()


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_queued_exact_count_inserts_equal_waiting_ones(backend):
    rng = np.random.default_rng(8)
    cfg = dict(max_trie_depth=4, capacity=40, exact_counts=True, backend=backend)
    bg, fg = ns.NgramCache(**cfg), ns.NgramCache(**cfg)
    for _ in range(25):
        seqs = [rng.integers(0, 4, size=int(rng.integers(1, 9))) for _ in range(2)]
        first = [int(rng.integers(0, s.size + 1)) for s in seqs]
        bg.insert(seqs, count_from=first, wait=False)
        fg.insert(seqs, count_from=first)
        if rng.random() < 0.3:
            bg.insert([seqs[0]], wait=False)  # plain and counted inserts keep their order
            fg.insert([seqs[0]])
    bg.synchronize()
    bg.check_integrity()
    ea, xa, ka = _canonical(bg)
    eb, xb, kb = _canonical(fg)
    assert (ea, ka) == (eb, kb)
    for name in xa:
        assert_array_equal(xa[name], xb[name])


def test_the_insert_thread_lingers_without_keeping_its_cache():
    """Between batches the insert thread holds its cache by a weak reference: a cache nobody
    holds is freed while its thread still waits for more (then the thread exits)."""
    import gc
    import weakref

    cache = ns.NgramCache(max_trie_depth=4, draft_token_num=4)
    cache.insert([[1, 2, 3, 4, 5]], wait=False)
    cache.synchronize()
    threads = [t for t in threading.enumerate() if t.name == "ngramspec-insert"]
    assert threads and cache._worker_running  # still there, waiting for the next batch
    ref = weakref.ref(cache)
    del cache
    gc.collect()
    assert ref() is None
    cache = ns.NgramCache(max_trie_depth=4, draft_token_num=4)
    cache.insert([[1, 2, 3, 4, 5]], wait=False)  # a new cache, its own thread: still correct
    assert cache.match([[1, 2]]).tokens[0, :3].tolist() == [2, 3, 4]
