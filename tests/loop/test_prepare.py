"""``Drafter.prepare`` (a prompt's own index built in the background during its prefill) drafts
exactly what ``add_request`` alone drafts, step by step, whatever the thread's timing; a
prompt that changed is indexed afresh; ``finish`` forgets a prepared request; the SGLang
drop-in prepares the prompts its worker hook tells."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import recorded_argmax, recorded_streams
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.errors import UnknownRequestError
from ngramspec.integrations import sglang as adapter
from ngramspec.integrations import sglang_hooks

CONFIGS = {
    "recommended": {},
    "prompt-unindexed": {"index_prompt": False},
    # own_window = max(capacity // 2, 4 * depth) = 200: prepared builds that re-index
    "small-window": {"capacity": 400},
}


def _run(cfg: ns.NgramConfig, rows: list[dict], prepare: bool, concurrency: int = 3):
    """The step API over ``rows``; with ``prepare``, every prompt prepared a step before it is
    added (as a server's prefill runs between); per step the drafts."""
    drafter = ns.Drafter(config=cfg)
    queue, running, log = list(rows), [], []
    outputs = {r["id"]: r["output_ids"] for r in rows}
    if prepare and queue:
        drafter.prepare(queue[0]["id"], queue[0]["prompt_ids"])
    while queue or running:
        while queue and len(running) < concurrency:
            row = queue.pop(0)
            if prepare and queue:  # the next one's prefill starts
                drafter.prepare(queue[0]["id"], queue[0]["prompt_ids"])
            drafter.add_request(row["id"], row["prompt_ids"], row["output_ids"][0])
            running.append(row["id"])
        d = drafter.propose(running)
        log.append((d.tokens.copy(), d.mask.copy(), d.num_drafts.copy()))
        done = [len(drafter.output(r)) for r in running]
        pred = np.stack([recorded_argmax(d, b, outputs[r], done[b])
                         for b, r in enumerate(running)])
        pred[pred < 0] = 0
        left = [len(outputs[r]) - done[b] for b, r in enumerate(running)]
        drafter.accept(ns.verify_greedy(d, pred), max_tokens=left)
        for r in list(running):
            if len(drafter.output(r)) == len(outputs[r]):
                drafter.finish(r)
                running.remove(r)
    return log, drafter


@pytest.mark.parametrize("name", CONFIGS)
def test_prepared_prompts_draft_as_added_ones(name):
    cfg = ns.NgramConfig.recommended(**CONFIGS[name])
    rows = recorded_streams(8)
    for r in rows[::2]:  # prompts longer than the small window: the prepared build re-indexes
        r["prompt_ids"] = list(r["prompt_ids"]) * 3
    plain, _ = _run(cfg, rows, prepare=False)
    prepared, drafter = _run(cfg, rows, prepare=True)
    assert drafter.prepared == [] and len(plain) == len(prepared)
    for (t0, m0, n0), (t1, m1, n1) in zip(plain, prepared):
        assert_array_equal(t1, t0)
        assert_array_equal(m1, m0)
        assert_array_equal(n1, n0)
    assert sum(int(n.sum()) for _, _, n in plain) > 0  # the drafts compared are not all empty


def test_a_changed_prompt_is_indexed_afresh():
    cfg = ns.NgramConfig.recommended()
    a, b = ns.Drafter(config=cfg), ns.Drafter(config=cfg)
    a.prepare("r", [5, 6, 7, 5, 6, 7, 5, 6])
    a.add_request("r", [1, 2, 3, 1, 2], first_token=3)  # not the prepared prompt
    b.add_request("r", [1, 2, 3, 1, 2], first_token=3)
    assert a.prepared == []
    da, db = a.propose(["r"]), b.propose(["r"])
    assert_array_equal(da.tokens, db.tokens)
    assert_array_equal(da.num_drafts, db.num_drafts)
    assert int(da.num_drafts[0]) > 0 and 5 not in da.tokens[0, :int(da.num_drafts[0]) + 1]


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_prepare_is_checked_and_finish_forgets_it(backend):
    drafter = ns.Drafter(config=ns.NgramConfig.recommended(), backend=backend)
    drafter.prepare("p", [1, 2, 3])
    drafter.prepare(7, np.array([4, 5]))
    assert drafter.prepared == ["p", 7]
    drafter.finish(7)
    assert drafter.prepared == ["p"] and drafter.requests == []
    with pytest.raises(UnknownRequestError):
        drafter.finish(7)
    with pytest.raises(ValueError, match="prompt_ids"):
        drafter.prepare("q", [1, -2])
    drafter.add_request("p", [1, 2, 3], first_token=1)
    with pytest.raises(ValueError, match="already in flight"):
        drafter.prepare("p", [1, 2, 3])
    assert drafter.prepared == [] and drafter.requests == ["p"]


def test_the_drop_in_prepares_the_noted_prompts(monkeypatch):
    rec = ns.NgramConfig.recommended()
    kw = dict(max_trie_depth=rec.max_trie_depth, draft_token_num=rec.draft_token_num)
    corpus = adapter.NgramCorpus(**kw, config=rec)
    prompt = [7, 8, 9] * 20 + [1, 2, 3, 4, 5, 6] + [0] * 30
    corpus.note_prompts(["a", "b"], [prompt, [4, 4, 4]])
    corpus.note_prompts(["a"], [prompt])  # told again unchanged: nothing new
    assert corpus._drafter.prepared == ["a", "b"]
    corpus.erase_match_state(["b"])  # never drafted: its prepared prompt goes
    assert corpus._drafter.prepared == ["a"]
    tokens, _ = corpus.batch_get(["a"], [(prompt + [1])[-rec.max_trie_depth:]], [len(prompt) + 1])
    assert tokens[:2].tolist() == [1, 2] and corpus._drafter.prepared == []
    monkeypatch.setattr(sglang_hooks, "NOTED_MAX", 2)
    corpus.note_prompts(["c", "d", "e"], [[1], [2], [3]])
    # "a" is in flight and stays noted; of the others the oldest is forgotten
    assert corpus._drafter.prepared == ["d", "e"]


@pytest.mark.parametrize("backend", ["numba", "reference"])
def test_add_prepared_drafts_as_add_request(backend):
    cfg = ns.NgramConfig.recommended()
    rows = recorded_streams(4)
    a, b = ns.Drafter(config=cfg, backend=backend), ns.Drafter(config=cfg, backend=backend)
    ids = [r["id"] for r in rows]
    # int64 prompts: checked by prepare, converted in the indexing thread
    a.prepare_many(ids, [np.asarray(r["prompt_ids"], np.int64) for r in rows])
    for r in rows:
        a.add_prepared(r["id"], r["output_ids"][0])
        b.add_request(r["id"], r["prompt_ids"], r["output_ids"][0])
    assert a.prepared == [] and a.requests == b.requests == ids
    for r in rows:
        assert_array_equal(a.sequence(r["id"]), b.sequence(r["id"]))
    da, db = a.propose(ids), b.propose(ids)
    assert_array_equal(da.tokens, db.tokens)
    assert_array_equal(da.mask, db.mask)
    assert_array_equal(da.num_drafts, db.num_drafts)
    assert int(da.num_drafts.sum()) > 0


def test_add_prepared_refuses_what_was_not_prepared():
    drafter = ns.Drafter(config=ns.NgramConfig.recommended())
    with pytest.raises(UnknownRequestError, match="'x': not prepared .*0 prepared, 0 in "):
        drafter.add_prepared("x", 1)
    drafter.prepare("p", [1, 2, 3])
    with pytest.raises(ValueError, match="first_token = -1 is a negative token id"):
        drafter.add_prepared("p", -1)
    assert drafter.prepared == ["p"]  # (a refused call changes nothing)
    drafter.add_prepared("p", 4)
    with pytest.raises(UnknownRequestError, match="not prepared"):
        drafter.add_prepared("p", 4)  # added: no longer prepared
    assert drafter.requests == ["p"] and drafter.sequence("p").tolist() == [1, 2, 3, 4]


@pytest.mark.parametrize("prompt, exc, message", [
    (np.array([1, -2, 3], np.int64), ValueError, r"prompt_ids\[1\] = -2 is a negative"),
    (np.array([1, 2**31], np.int64), ValueError, r"prompt_ids holds token ids outside int32"),
    (np.array([1, 2**32], np.uint64), ValueError, r"prompt_ids holds token ids outside int32"),
    (np.array([1.0, 2.0]), TypeError, "prompt_ids must hold integer token ids"),
    ([1, True], TypeError, "prompt_ids must hold integer token ids"),
])
def test_prepare_checks_wide_prompts_without_converting_them(prompt, exc, message):
    drafter = ns.Drafter(config=ns.NgramConfig.recommended())
    with pytest.raises(exc, match=message):
        drafter.prepare("q", prompt)
    assert drafter.prepared == []


def test_the_drop_in_adds_noted_int64_prompts_as_prepared():
    rec = ns.NgramConfig.recommended()
    kw = dict(max_trie_depth=rec.max_trie_depth, draft_token_num=rec.draft_token_num)
    rows = recorded_streams(3)
    noted, plain = (adapter.NgramCorpus(**kw, config=rec) for _ in range(2))
    ids = [r["id"] for r in rows]
    prompts = [np.asarray(r["prompt_ids"], np.int64) for r in rows]
    noted.note_prompts(ids, prompts)
    contexts = [(list(r["prompt_ids"]) + [r["output_ids"][0]])[-rec.max_trie_depth:]
                for r in rows]
    lens = [len(r["prompt_ids"]) + 1 for r in rows]
    got = noted.batch_get(ids, contexts, lens)
    assert noted._drafter.prepared == []
    # the same drafts as a drafter given the whole prompts at add_request
    for r in rows:
        plain._drafter.add_request(r["id"], r["prompt_ids"], r["output_ids"][0])
    want = plain._drafter.propose(ids)
    assert_array_equal(got[0].reshape(len(ids), -1), want.tokens)
    for r in rows:
        assert_array_equal(noted._drafter.sequence(r["id"]), plain._drafter.sequence(r["id"]))
    with pytest.raises(ValueError, match=r"prompts\[1\]\[0\] = -5 is a negative token id"):
        noted.note_prompts(["x", "y"], [[1, 2], np.array([-5, 3], np.int64)])
    assert "x" not in noted._drafter.prepared


def test_prepared_rows_are_given_back_and_never_overwritten():
    """A prepared prompt's row is claimed at ``prepare`` and written by the indexing thread:
    a request finished before it is added, or added with another prompt, gives its row back
    (once the thread is done with it), and the rows in use are never written by it."""
    cfg = ns.NgramConfig.recommended()
    rows = recorded_streams(6)
    drafter, plain = ns.Drafter(config=cfg), ns.Drafter(config=cfg)
    for round_ in range(5):  # prepared and dropped, while others run
        ids = [f"{round_}-{r['id']}" for r in rows]
        drafter.prepare_many(ids, [r["prompt_ids"] for r in rows])
        for i in ids[::2]:
            drafter.finish(i)
        for i, r in zip(ids[1::2], rows[1::2]):
            drafter.add_request(i, [7] + list(r["prompt_ids"]), 1)  # another prompt
            drafter.finish(i)
    drafter.prepare_many([r["id"] for r in rows], [r["prompt_ids"] for r in rows])
    for r in rows:
        drafter.add_prepared(r["id"], r["output_ids"][0])
        plain.add_request(r["id"], r["prompt_ids"], r["output_ids"][0])
        assert_array_equal(drafter.sequence(r["id"]), plain.sequence(r["id"]))
    ids = [r["id"] for r in rows]
    d, p = drafter.propose(ids), plain.propose(ids)
    assert_array_equal(d.tokens, p.tokens)
    assert_array_equal(d.num_drafts, p.num_drafts)
    for i in ids:
        drafter.finish(i)
    drafter._indexer.shutdown(wait=True)  # (every release done)
    store = drafter._store
    assert sorted(store.free) == list(range(store.size.size))  # no row lost or doubled


def test_prepare_many_returns_the_prompts_as_held_and_checks_lengths():
    drafter = ns.Drafter(config=ns.NgramConfig.recommended())
    wide = np.array([5, 6, 7], np.int64)
    held = drafter.prepare_many(["a", "b"], [wide, [1, 2]])
    assert held[0] is wide  # checked, not copied: the indexing thread makes the int32 copy
    assert held[1].dtype == np.int32 and held[1].tolist() == [1, 2]
    with pytest.raises(ValueError, match="2 rids but 1 prompts"):
        drafter.prepare_many(["c", "d"], [[1]])
    assert drafter.prepared == ["a", "b"]


def test_the_drop_in_names_a_bad_noted_prompt_by_its_place_and_changes_nothing():
    rec = ns.NgramConfig.recommended()
    corpus = adapter.NgramCorpus(max_trie_depth=rec.max_trie_depth,
                                 draft_token_num=rec.draft_token_num, config=rec)
    corpus.note_prompts(["a"], [[1, 2, 3]])
    # "a" noted again unchanged (skipped), "b" new, "c" new and bad: named prompts[2]
    with pytest.raises(ValueError, match=r"prompts\[2\]\[1\] = -4 is a negative token id"):
        corpus.note_prompts(["a", "b", "c"], [[1, 2, 3], [4, 5], np.array([6, -4], np.int64)])
    with pytest.raises(TypeError, match=r"prompts\[1\] must hold integer token ids"):
        corpus.note_prompts(["b", "c"], [[4, 5], [6.0, 7.0]])
    assert corpus._drafter.prepared == ["a"]
    corpus.note_prompts(["a", "b"], [[1, 2, 3, 9], [4, 5]])  # "a" changed: prepared afresh
    assert corpus._drafter.prepared == ["a", "b"]
