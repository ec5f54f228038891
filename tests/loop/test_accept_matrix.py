"""``Drafter.accept_matrix``: the emitted tokens of the pending requests as one matrix.

Run side by side with the mapping form of ``accept`` on the same steps (drafts proposed by two
drafters fed alike, what a greedy verifier against the recording emits), it must leave the
same state (the next drafts, every request's steps, token for token); what it refuses it
refuses before anything is recorded.
"""

from __future__ import annotations

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns

ROWS = ns.read_streams(ns.streams.embedded_streams_path())[:8]


def _verify(tree: ns.DraftBatch, recs: list[np.ndarray]) -> list[np.ndarray]:
    """What greedy verification emits when the target predicts request ``b``'s recording
    ``recs[b]`` (each slot predicts the recorded token at its depth), cut to the recording."""
    depth = tree.mask.sum(axis=2) - 1
    preds = np.zeros(tree.tokens.shape, np.int64)
    for b, rec in enumerate(recs):
        padded = np.append(rec, np.zeros(tree.tokens.shape[1], rec.dtype))
        preds[b] = padded[depth[b]]
    return [e[:rec.size] for e, rec in zip(ns.verify_greedy(tree, preds).emitted, recs)]


@pytest.mark.parametrize("preset", ["sglang", "recommended"])
def test_the_matrix_form_equals_the_mapping_form(preset):
    cfg = ns.NgramConfig.preset(preset, capacity=200_000)
    one, two = ns.Drafter(config=cfg), ns.Drafter(config=cfg)
    reqs = {i: (np.asarray(r["prompt_ids"], np.int32), np.asarray(r["output_ids"], np.int32))
            for i, r in enumerate(ROWS) if len(r["output_ids"]) > 2}
    pos = {}
    for rid, (prompt, out) in reqs.items():
        for d in (one, two):
            d.add_request(rid, prompt, int(out[0]))
        pos[rid] = 1
    steps = 0
    while pos:
        rids = sorted(pos)
        a, b = one.propose(rids), two.propose(rids)
        assert_array_equal(a.tokens, b.tokens)
        assert_array_equal(a.mask, b.mask)
        em = _verify(a, [reqs[rid][1][pos[rid]:] for rid in rids])
        width = max(e.size for e in em)
        matrix = np.full((len(rids), width + 2), 7, np.int32)  # padding is never read
        for j, e in enumerate(em):
            matrix[j, :e.size] = e
        one.accept({rid: e for rid, e in zip(rids, em)})
        two.accept_matrix(matrix, np.array([e.size for e in em], np.int64))
        for rid, e in zip(rids, em):
            pos[rid] += e.size
            if pos[rid] >= len(reqs[rid][1]):
                assert one.steps(rid) == two.steps(rid)
                one.finish(rid)
                two.finish(rid)
                del pos[rid]
        steps += 1
    assert steps > 20


def _pending(n: int = 2) -> tuple[ns.Drafter, ns.DraftBatch]:
    d = ns.Drafter(config=ns.NgramConfig.recommended(draft_token_num=4, capacity=1000))
    for rid in range(n):
        d.add_request(rid, [5, 6, 7, 5, 6], first_token=7)
    return d, d.propose(list(range(n)))


@pytest.mark.parametrize("tokens,lengths,kind,message", [
    ([[5, 6, 9]], [3], ValueError, "tokens has 1 rows but 2 requests are pending"),
    ([[5, 6, 9], [5, 9, 0]], np.array([3, 0]), ValueError,
     r"lengths\[1\] = 0: each row emits 1 \.\. 3"),
    ([[5, 6, 9], [5, 9, 0]], [3, 0], ValueError, r"lengths\[1\] = 0; lengths must be >= 1"),
    ([[5, 6, 9], [5, 9, 0]], [3, 4], ValueError, r"lengths\[1\] = 4: each row emits 1 \.\. 3"),
    ([5, 6, 9], [3, 1], ValueError, "tokens must be a 2-D matrix"),
    ([[5.0, 6.0], [5.0, 9.0]], [2, 2], TypeError, "tokens must hold integer token ids"),
    (np.array([[5, 2**40], [5, 9]]), [2, 2], ValueError, "int32"),
    ([[5, 6, 9], [6, 9, 0]], [3, 2], ValueError, "is not a path of its proposed tree"),
    ([[5, 6, 9], [5, -1, 0]], [3, 2], ValueError, "negative"),
])
def test_refusals_name_the_argument_and_record_nothing(tokens, lengths, kind, message):
    d, _ = _pending()
    with pytest.raises(kind, match=message):
        d.accept_matrix(tokens, lengths)
    assert d.pending == [0, 1] and d.steps(0) == [] and d.steps(1) == []
    d.accept_matrix([[5, 6, 9], [5, 9, 0]], [3, 2])  # lists are read too
    assert d.pending == [] and d.steps(0) == [3] and d.steps(1) == [2]


def test_nothing_pending_is_refused():
    d = ns.Drafter(config=ns.NgramConfig(draft_token_num=4, capacity=1000))
    d.add_request(0, [5, 6, 7], first_token=5)
    with pytest.raises(ValueError, match="nothing is pending"):
        d.accept_matrix(np.zeros((1, 1), np.int32), np.ones(1, np.int64))


def test_rows_follow_pending_after_a_finish():
    d, _ = _pending(3)
    d.finish(1)
    assert d.pending == [0, 2]
    d.accept_matrix(np.array([[5, 6, 9], [5, 1, 0]], np.int32), np.array([3, 2]))
    assert d.steps(0) == [3] and d.steps(2) == [2]
