"""When a finished request reaches the shared trie (``local_index`` with ``exact_counts``):
after the next ``propose`` has drafted, in the cache's insert thread, so that no step waits for
it on the serving thread; every draft is the same whatever the threads' timing, the compiled
replay drafts the same, and a read of the cache in between sees the request at once."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.cache.inserts import BackgroundInserts
from ngramspec.integrations.sglang import NgramCorpus
from ngramspec.integrations.sglang_replay import replay_worker

TAUGHT = list(range(1000, 1040))  # distinct tokens: only the finished request knows them


def _first_two_drafts(backend: str, read_between: bool = False) -> list[int]:
    cfg = ns.NgramConfig.recommended(capacity=100_000)
    drafter = ns.Drafter(config=cfg, backend=backend)
    drafter.add_request("a", TAUGHT, first_token=7)
    drafter.propose(["a"])
    drafter.accept({"a": [8]})
    drafter.finish("a")
    if read_between:
        assert int(drafter.cache.match([TAUGHT[10:12]]).num_drafts[0]) > 0
    # b's own index knows nothing after 1011 or 1012: only the shared trie can draft them
    drafter.add_request("b", [5, 1010], first_token=1011)
    first = drafter.propose(["b"])
    drafter.accept({"b": [1012]})  # nothing drafted: the bonus token alone
    second = drafter.propose(["b"])
    return [int(first.num_drafts[0]), int(second.num_drafts[0])]


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_a_finished_request_teaches_the_shared_trie_after_the_next_propose(backend):
    first, second = _first_two_drafts(backend)
    assert first == 0 and second > 0


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_a_read_between_sees_the_finished_request_at_once(backend):
    first, second = _first_two_drafts(backend, read_between=True)
    assert first > 0 and second > 0


def _streams(limit: int) -> list[dict]:
    rows = ns.read_streams(Path(ns.__file__).parent / "data" /
                           "qwen2.5-coder-0.5b-greedy.jsonl.gz")
    return rows[::max(1, len(rows) // limit)][:limit]


def _drop_in(cfg: ns.NgramConfig, rows: list[dict], concurrency: int) -> list[np.ndarray]:
    corpus = NgramCorpus(max_trie_depth=cfg.max_trie_depth,
                         draft_token_num=cfg.draft_token_num, config=cfg, warm=False)
    return replay_worker(corpus, [r["prompt_ids"] for r in rows],
                         [r["output_ids"] for r in rows], concurrency=concurrency,
                         max_trie_depth=cfg.max_trie_depth,
                         draft_token_num=cfg.draft_token_num, hooks=True)


def test_drafts_do_not_depend_on_the_insert_threads_timing(monkeypatch):
    """The drop-in on SGLang's worker loop with the insert thread 3 ms late for every batch:
    the same tokens at every step as with it on time, and as the compiled replay."""
    cfg = ns.NgramConfig.recommended(capacity=200_000)
    rows = _streams(12)
    sim = ns.simulate(rows, config=cfg, concurrency=4)
    on_time = _drop_in(cfg, rows, 4)
    original = BackgroundInserts._insert_queued

    def late(self, batch, counts):
        time.sleep(0.003)
        original(self, batch, counts)

    monkeypatch.setattr(BackgroundInserts, "_insert_queued", late)
    slow = _drop_in(cfg, rows, 4)
    for a, b, c in zip(on_time, slow, sim.emitted):
        assert_array_equal(a, c)
        assert_array_equal(b, c)


def test_the_drop_in_hands_finished_requests_to_the_insert_thread_at_batch_put():
    """A departure seen by ``batch_get`` is queued by the next ``batch_put`` (where SGLang
    queues its own inserts), not inside ``batch_get``."""
    cfg = ns.NgramConfig.recommended(capacity=100_000)
    corpus = NgramCorpus(max_trie_depth=24, draft_token_num=16, config=cfg, warm=False)
    cache = corpus.cache
    corpus.note_prompts(["a", "b"], [TAUGHT, [5, 6, 7]])
    corpus.batch_get(["a", "b"], [TAUGHT[-23:] + [7], [5, 6, 7, 8]], [41, 4])
    corpus.batch_put([TAUGHT[-23:] + [7], [5, 6, 7, 8]])
    queued = cache._queued
    corpus.synchronize()
    corpus.batch_get(["b"], [[5, 6, 7, 8, 9]], [5])  # "a" left the batch
    assert cache._queued == queued and len(cache._due) == 1
    corpus.batch_put([[5, 6, 7, 8, 9]])
    assert cache._queued == queued + 1 and not cache._due
    corpus.synchronize()
    assert int(cache.match([TAUGHT[10:12]]).num_drafts[0]) > 0
