"""The adapter's common step (``NgramCorpus._next_step``: the same requests as the last draft,
each continuing it, read without per-request Python) gives what its checked path gives, call
for call, and hands everything else to that path."""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.integrations.sglang import NgramCorpus
from ngramspec.integrations.sglang_replay import replay_worker
from ngramspec.streams import embedded_streams_path


def _rows(n: int) -> list[dict]:
    rows = ns.read_streams(embedded_streams_path())
    rows = rows[::len(rows) // n][:n]
    return [dict(r, prompt_ids=r["prompt_ids"][-300:], output_ids=r["output_ids"][:120])
            for r in rows]


class _Recorded:
    """A corpus whose batch_get outputs are kept (and which says how many took the common
    step)."""

    def __init__(self, corpus: NgramCorpus) -> None:
        self.corpus, self.gets, self.fast = corpus, [], 0
        step = corpus._next_step

        def counted(*args):
            out = step(*args)
            self.fast += out is not None
            return out

        corpus._next_step = counted

    def batch_get(self, *args):
        out = self.corpus.batch_get(*args)
        self.gets.append(tuple(a.copy() for a in out))
        return out

    def __getattr__(self, name):
        return getattr(self.corpus, name)


@pytest.mark.parametrize("concurrency", [1, 5])
@pytest.mark.parametrize("options", [{}, {"exact_counts": False},
                                     {"min_expected_accept": 2.0}],
                         ids=["recommended", "local-windows", "draft-nothing"])
def test_common_step_equals_the_checked_path(options, concurrency):
    cfg = ns.NgramConfig.recommended(capacity=50_000, **options)
    rows = _rows(8)
    kw = dict(max_trie_depth=cfg.max_trie_depth, draft_token_num=cfg.draft_token_num)
    runs = []
    for fast in (True, False):
        corpus = _Recorded(NgramCorpus(**kw, config=cfg))
        if not fast:
            corpus.corpus._next_step = lambda *args: None
        emitted = replay_worker(corpus, [r["prompt_ids"] for r in rows],
                                [r["output_ids"] for r in rows], concurrency=concurrency,
                                hooks=True, **kw)
        runs.append((corpus, emitted))
    (a, ea), (b, eb) = runs
    assert a.fast > len(a.gets) // 2 and b.fast == 0
    assert len(a.gets) == len(b.gets)
    for x, y in zip(a.gets, b.gets):
        assert_array_equal(x[0], y[0])
        assert_array_equal(x[1], y[1])
    for x, y in zip(ea, eb):
        assert_array_equal(x, y)


def test_anything_else_takes_the_checked_path():
    """A new request, a request whose tokens are no path of its tree (restarted, with the
    checked path's warning), a length that went back: the common step declines them."""
    cfg = ns.NgramConfig.recommended(capacity=10_000)
    corpus = NgramCorpus(max_trie_depth=24, draft_token_num=16, config=cfg)
    seq = [5, 6, 7, 5, 6, 7, 5, 6, 7, 5, 6]
    corpus.batch_get(["a"], [seq], [len(seq)])
    assert corpus._next_step(["a", "b"], [seq, seq], [len(seq), len(seq)]) is None
    assert corpus._next_step(["a"], [seq], [len(seq)]) is None  # nothing emitted
    assert corpus._next_step(["a"], [seq + [99, 98]], [len(seq) + 2]) is None  # no path
    assert corpus._drafter.pending == ["a"]  # nothing was changed
    t, _ = corpus.batch_get(["a"], [seq + [7]], [len(seq) + 1])  # 7 is drafted after 6
    assert corpus._drafter.steps("a") == [1]
    assert t.reshape(1, 16)[0, 0] == 7
