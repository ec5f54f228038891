"""save()/load() with external corpora: format version 2 (corpora written), version 1 files
(written before corpora were saved) still load, and a loaded cache continues exactly."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

import ngramspec as ns
from ngramspec.cache import persist
from helpers import rewrite_cache_file

BACKENDS = ("numba", "reference")
DATA = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data")


def _operations(backend):
    """The operations behind tests/data/cache-format1-corpora-numba.npz (saved by the code
    before corpora were persisted: format 1, corpora not written)."""
    cache = ns.NgramCache(max_trie_depth=5, draft_token_num=8, max_bfs_breadth=3, capacity=80,
                          external_sam_budget=4, backend=backend)
    cache.add_corpus("docs", [[1, 2, 3, 4, 5, 1, 2, 6], [3, 4, 7]])
    cache.add_corpus("code", [[2, 3, 4, 4, 5, 2, 3]])
    rng = np.random.default_rng(17)
    for step in range(12):
        cache.insert([rng.integers(0, 8, size=10).tolist()])
        cache.match([rng.integers(0, 8, size=5).tolist(), rng.integers(0, 8, size=3).tolist()],
                    request_ids=[f"r{step % 3}", step % 2], total_lens=[5 + step, 3 + step])
        if step == 8:
            cache.erase(["r1"])
    return cache


def _future(cache, seed=5):
    rng = np.random.default_rng(seed)
    out = []
    for step in range(10):
        cache.insert([rng.integers(0, 8, size=7).tolist()])
        rid = ["r0", "r1", "r2", 0, 1][step % 5]
        d = cache.match([rng.integers(0, 8, size=4).tolist()], request_ids=[rid],
                        total_lens=[30 + step])
        out.append((d.tokens.tolist(), d.mask.tolist()))
        if step == 4:  # where a new corpus lands depends on the saved corpus table
            cache.add_corpus("late", [[3, 4, 5, 6, 7]])
            out.append(list(cache.corpora()))
    return out


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_version_1_file_with_a_corpus_config_loads_without_corpora(backend):
    path = os.path.join(DATA, "cache-format1-corpora-numba.npz")
    with zipfile.ZipFile(path) as z:
        header = json.loads(np.load(z.open("header.npy")).tobytes())
    assert header["format_version"] == 1 and "corpora" not in header
    loaded = ns.NgramCache.load(path, backend=backend)
    rebuilt = _operations(backend)
    assert loaded.config == rebuilt.config and loaded.corpora() == {}
    assert len(loaded) == len(rebuilt)
    # Format 1 kept no corpora: with them added again, it continues as the original.
    for cid, docs in (("docs", [[1, 2, 3, 4, 5, 1, 2, 6], [3, 4, 7]]),
                      ("code", [[2, 3, 4, 4, 5, 2, 3]])):
        loaded.add_corpus(cid, docs)
    assert _future(loaded) == _future(rebuilt)


@pytest.mark.parametrize("saver", BACKENDS)
@pytest.mark.parametrize("loader", BACKENDS)
def test_corpora_survive_save_and_load_exactly(tmp_path, saver, loader):
    cache = _operations(saver)
    # A history that moves the corpus table off its fresh state: 14 corpora held at once
    # (29 buckets), then most removed.
    for i in range(12):
        cache.add_corpus(f"extra{i}", [[i % 8, (i + 1) % 8, 2]])
    for i in range(12):
        if i % 3:
            cache.remove_corpus(f"extra{i}")
    cache.save(tmp_path / "c.npz")
    with zipfile.ZipFile(tmp_path / "c.npz") as z:
        header = json.loads(np.load(z.open("header.npy")).tobytes())
    assert header["format_version"] == 2 and header["corpus_table"][0] == 29
    loaded = ns.NgramCache.load(tmp_path / "c.npz", backend=loader)
    assert loaded.corpora() == cache.corpora()
    assert loaded.corpus_info() == cache.corpus_info()
    assert _future(loaded) == _future(cache)


def test_a_cache_without_corpora_still_writes_version_1(tmp_path):
    cache = ns.NgramCache(capacity=100, external_sam_budget=2)
    cache.insert([[1, 2, 3]])
    cache.save(tmp_path / "c.npz")
    with zipfile.ZipFile(tmp_path / "c.npz") as z:
        header = json.loads(np.load(z.open("header.npy")).tobytes())
        assert header["format_version"] == 1 and sorted(z.namelist()) == sorted(
            [f"{m}.npy" for m in persist._ARRAYS] + ["header.npy"])


def test_bad_corpus_content_is_refused(tmp_path):
    cache = _operations("numba")
    good = tmp_path / "good.npz"
    cache.save(good)
    bad = tmp_path / "bad.npz"
    sep = -(2**31)
    cases = [
        (dict(drop=["corpus_1"]), "corpus members"),
        (dict(header=lambda h: h["corpora"][0].update(tokens=3)), "must hold 3 tokens"),
        (dict(arrays={"corpus_0": np.array([1, sep, sep, 2], np.int32)},
              header=lambda h: h["corpora"][0].update(tokens=4)), "single separators"),
        (dict(arrays={"corpus_0": np.array([sep, 2], np.int32)},
              header=lambda h: h["corpora"][0].update(tokens=2)), "single separators"),
        (dict(header=lambda h: h["corpora"][1].update(id=h["corpora"][0]["id"])), "repeat"),
        (dict(header=lambda h: h["corpora"][0].update(id="")), "malformed corpus entry"),
        (dict(header=lambda h: h.update(corpus_table=[1])), "malformed corpus_table"),
        (dict(header=lambda h: h["config"].update(external_sam_budget=0)),
         "external_sam_budget is 0"),
        (dict(header=lambda h: h["config"].update(external_corpus_max_tokens=5)),
         "more tokens than external_corpus_max_tokens"),
        (dict(header=lambda h: h.pop("corpora")), "'corpora' is missing"),
        (dict(arrays={"corpus_0": np.array([1, 2], np.int64)}), "expected dtype <i4"),
        (dict(header=lambda h: h.update(format_version=3)), "format version 3"),
    ]
    for kwargs, message in cases:
        rewrite_cache_file(good, bad, **kwargs)
        with pytest.raises(ns.CacheFileError, match=message):
            ns.NgramCache.load(bad)
    with np.load(good) as f:  # a flipped corpus byte fails its checksum
        data = dict(f)
    data["corpus_0"] = data["corpus_0"].copy()
    data["corpus_0"][0] ^= 1
    np.savez(bad, **data)
    with pytest.raises(ns.CacheFileError, match="'corpus_0' fails its sha256"):
        ns.NgramCache.load(bad)


def test_an_impossible_corpus_order_is_refused(tmp_path):
    from ngramspec.cache.corpora import string_hash

    # Three ids, two sharing a bucket of 13: "a" and "d" share bucket 1 (spec example 5).
    ids = ["a", "d", "x"]
    assert string_hash("a") % 13 == string_hash("d") % 13 != string_hash("x") % 13
    cache = ns.NgramCache(capacity=100, draft_token_num=8, external_sam_budget=6)
    for cid in ids:
        cache.add_corpus(cid, [[1, 2]])
    good, bad = tmp_path / "good.npz", tmp_path / "bad.npz"
    cache.save(good)
    order = list(cache.corpora())

    def split(h):  # put "x" between the two ids of one bucket
        by_id = {c["id"]: c for c in h["corpora"]}
        h["corpora"] = [by_id["a"], by_id["x"], by_id["d"]]
    rewrite_cache_file(good, bad, header=split)
    with np.load(good) as f:
        streams = {c: f[f"corpus_{i}"] for i, c in enumerate(order)}
    with np.load(bad) as f:
        data = dict(f)
    for i, cid in enumerate(["a", "x", "d"]):
        data[f"corpus_{i}"] = streams[cid]
    np.savez(bad, **data)
    with pytest.raises(ns.CacheFileError, match="impossible with 13 buckets"):
        ns.NgramCache.load(bad)
