"""The engine's canonical content: engine -> canonical -> engine round trips, the rebuilt engine
drafts exactly as the reference backend does, and the content equals what the reference
backend's cache writes to a file."""

from __future__ import annotations

import json
import os

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec._canonical import CanonicalContent
from ngramspec.engine import EngineBackend
from ngramspec.reference.backend import ReferenceBackend
from ngramspec.testing.strategies import configs, token_sequences

_ARRAYS = ("node_token", "node_parent", "node_freq", "state_epoch", "state_processed_len",
           "state_count", "state_refs")


def assert_same_content(a: CanonicalContent, b: CanonicalContent) -> None:
    assert a.epoch == b.epoch
    assert a.request_ids == b.request_ids
    for name in _ARRAYS:
        x, y = getattr(a, name), getattr(b, name)
        assert x.dtype == y.dtype, name
        assert_array_equal(x, y, err_msg=name)


def _arr(seq) -> np.ndarray:
    return np.asarray(seq, np.int32)


def _same_drafts(ref, eng, ctxs, keys, lens) -> None:
    a = ref.match(ctxs, keys, lens)
    b = eng.match(ctxs, keys, lens)
    for x, y in zip(a, b):
        assert_array_equal(x, y)


@settings(max_examples=60)
@given(configs(), st.sampled_from([(0, 3), (0, 40), (-(2**31), 2**31 - 1)]), st.data())
def test_round_trip_drafts_as_the_reference(cfg, vocab, data):
    config = cfg
    ref, eng = ReferenceBackend(config), EngineBackend(config)
    # Ids of both kinds, so that the canonical order (ints first, then strings) matters.
    ids = ["b", 3, "a", 1]
    lens = {k: 0 for k in ids}

    def step(backends):
        batch = [_arr(s) for s in data.draw(st.lists(token_sequences(vocab), min_size=1,
                                                     max_size=3))]
        for b in backends:
            b.insert(batch)
        keys = data.draw(st.lists(st.sampled_from(ids), min_size=1, max_size=3, unique=True))
        contexts = token_sequences(vocab, min_size=1, max_size=cfg.max_trie_depth + 3)
        ctxs = [_arr(s) for s in data.draw(st.lists(contexts,
                                                    min_size=len(keys), max_size=len(keys)))]
        for k, c in zip(keys, ctxs):
            lens[k] = max(lens[k], c.size) + data.draw(st.integers(0, 2))
        total = np.asarray([lens[k] for k in keys], np.int64)
        first = backends[0].match(ctxs, keys, total)
        for b in backends[1:]:
            for x, y in zip(first, b.match(ctxs, keys, total)):
                assert_array_equal(x, y)
        if data.draw(st.integers(0, 5)) == 0:
            gone = data.draw(st.sampled_from(ids))
            for b in backends:
                b.erase([gone])

    for _ in range(data.draw(st.integers(0, 6))):
        step([ref, eng])
    if data.draw(st.booleans()):
        ref.reset()
        eng.reset()
        step([ref, eng])
    content = eng.to_canonical()
    assert content.request_ids == sorted(content.request_ids,
                                         key=lambda k: (isinstance(k, str), k))
    back = EngineBackend.from_canonical(config, content)
    back.check_integrity()
    assert back.node_count == eng.node_count
    assert_same_content(back.to_canonical(), content)
    for _ in range(data.draw(st.integers(1, 4))):
        step([ref, eng, back])
    back.check_integrity()
    assert_same_content(back.to_canonical(), eng.to_canonical())


def _filled(backend: str, **options) -> ns.NgramCache:
    cache = ns.NgramCache(max_trie_depth=5, capacity=30, draft_token_num=6, backend=backend,
                          **options)
    rng = np.random.default_rng(7)
    for step in range(12):
        cache.insert([rng.integers(0, 6, size=9).tolist()])
        if cache.config.stateful:
            cache.match([rng.integers(0, 6, size=4).tolist() for _ in range(2)],
                        request_ids=[step % 3, f"s{step % 2}"], total_lens=[4 + step, 4 + step])
    return cache


def _file_content(path: str) -> CanonicalContent:
    with np.load(path, allow_pickle=False) as npz:
        members = {k: npz[k] for k in npz.files}
    header = json.loads(members.pop("header").tobytes().decode())
    ids = [k if kind == "str" else int(k) for kind, k in header["request_ids"]]
    return CanonicalContent(epoch=header["epoch"], request_ids=ids,
                            **{name: members[name] for name in _ARRAYS})


def test_content_equals_the_reference_backends_file(tmp_path):
    # Evictions (capacity 30) leave stale references (-2) in the states.
    for options in (dict(match_type="BFS"), dict(match_type="PROB")):
        ref = _filled("reference", **options)
        eng = _filled("numba", **options)
        path = os.path.join(tmp_path, "ref.npz")
        ref.save(path)
        expected = _file_content(path)
        got = eng._backend.to_canonical()
        assert_same_content(got, expected)
        assert (got.state_refs == -2).any()


def test_legacy_profile_round_trip():
    config = ns.NgramConfig(profile="sglang-0.5.9", branch_length=6, max_match_window_size=4,
                            capacity=40, draft_token_num=6)
    ref, eng = ReferenceBackend(config), EngineBackend(config)
    rng = np.random.default_rng(3)
    for _ in range(10):
        batch = [_arr(rng.integers(0, 5, size=11))]
        ref.insert(batch)
        eng.insert(batch)
    content = eng.to_canonical()
    assert content.request_ids == [] and content.state_refs.shape == (0, config.trie_depth)
    back = EngineBackend.from_canonical(config, content)
    back.check_integrity()
    ctxs = [_arr(rng.integers(0, 5, size=4)) for _ in range(5)]
    _same_drafts(ref, back, ctxs, None, None)
