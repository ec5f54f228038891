"""Many threads on one cache: no crash, no torn state, results equal to a serial order."""

import threading

import numpy as np
from numpy.testing import assert_array_equal

import ngramspec as ns


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

    @property
    def node_count(self):
        return self.backend.node_count


def test_concurrent_calls_equal_a_serial_replay():
    cfg = dict(max_trie_depth=6, draft_token_num=8, capacity=60, match_type="PROB")
    cache = ns.NgramCache(**cfg)
    rec = Recorder(cache._backend)
    cache._backend = rec

    def worker(seed):
        rng = np.random.default_rng(seed)
        total = 0
        for step in range(150):
            ctx = rng.integers(0, 5, size=rng.integers(1, 8))
            total += len(ctx)
            cache.match([ctx], request_ids=[f"t{seed}"], total_lens=[total])
            cache.insert([rng.integers(0, 5, size=12)])
            if step % 40 == 39:
                cache.erase([f"t{seed}"])
                total = 0

    threads = [threading.Thread(target=worker, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(cache) <= cfg["capacity"]

    serial = ns.NgramCache(**cfg)
    matches = 0
    for kind, args, out in rec.log:
        if kind == "insert":
            serial.insert(args)
        elif kind == "erase":
            serial.erase(args)
        else:
            ctxs, keys, lens = args
            d = serial.match(ctxs, request_ids=keys, total_lens=lens)
            assert_array_equal(d.tokens, out[0])
            assert_array_equal(d.mask, out[1])
            matches += 1
    assert matches == 4 * 150
