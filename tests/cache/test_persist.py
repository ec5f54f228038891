"""save/load: exact continuation on both backends (and across them), atomic writes, and bad
files rejected with CacheFileError, never a crash or a silently different cache."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
import ngramspec.cache.persist as persist
from helpers import assert_same_content, rewrite_cache_file

BACKENDS = ["numba", "reference"]


@st.composite
def configs(draw):
    depth = draw(st.integers(2, 7))
    common = dict(max_bfs_breadth=draw(st.integers(1, 5)), draft_token_num=draw(st.integers(1, 10)),
                  match_type=draw(st.sampled_from(["BFS", "PROB"])),
                  capacity=depth + 1 + draw(st.sampled_from([0, 3, 20, 1000])))
    if depth > 2 and draw(st.booleans()) and draw(st.booleans()):
        return dict(common, profile="sglang-0.5.9", branch_length=depth,
                    max_match_window_size=draw(st.integers(1, depth - 1)))
    return dict(common, max_trie_depth=depth)


@st.composite
def operations(draw, n):
    ops = []
    for _ in range(n):
        kind = draw(st.sampled_from(["insert", "insert", "match", "match", "erase", "reset"]))
        if kind == "insert":
            ops.append(("insert", draw(st.lists(st.lists(st.integers(0, 4), max_size=14),
                                                min_size=1, max_size=2))))
        elif kind == "match":
            rid = draw(st.sampled_from(["a", "b", 7]))
            ctx = draw(st.lists(st.integers(0, 4), min_size=1, max_size=6))
            ops.append(("match", rid, ctx, len(ctx) + draw(st.integers(0, 3))))
        elif kind == "erase":
            ops.append(("erase", [draw(st.sampled_from(["a", "b", 7]))]))
        elif draw(st.integers(0, 3)) == 0:
            ops.append(("reset",))
    return ops


def run(cache, ops):
    out = []
    for op in ops:
        if op[0] == "insert":
            cache.insert(op[1])
        elif op[0] == "match":
            d = cache.match([op[2]], request_ids=[op[1]], total_lens=[op[3]])
            out.append((d.tokens, d.mask, d.num_drafts))
            out.append((cache.match([op[2]]).tokens,))
        elif op[0] == "erase":
            cache.erase(op[1])
        else:
            cache.reset()
    return out


@given(cfg=configs(), backend=st.sampled_from(BACKENDS), data=st.data())
@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
def test_loaded_cache_continues_exactly(tmp_path, cfg, backend, data):
    cache = ns.NgramCache(**cfg, backend=backend)
    run(cache, data.draw(operations(12)))
    path = tmp_path / "cache.npz"
    cache.save(path)
    future = data.draw(operations(12))
    loaded = [ns.NgramCache.load(path, backend=b) for b in BACKENDS]
    for c in loaded:
        c.check_integrity()
        assert c.config == cache.config
        assert_same_content(c, cache)
    expected = run(cache, future)
    for c in loaded:
        got = run(c, future)
        assert len(got) == len(expected)
        for x, y in zip(got, expected):
            for a, b in zip(x, y):
                assert_array_equal(a, b)
        assert_same_content(c, cache)


def _populated(backend="numba", **kw):
    cfg = dict(max_trie_depth=5, draft_token_num=6, capacity=40) | kw
    cache = ns.NgramCache(**cfg, backend=backend)
    rng = np.random.default_rng(0)
    for step in range(20):
        cache.insert([rng.integers(0, 5, size=9)])
        cache.match([rng.integers(0, 5, size=4), rng.integers(0, 5, size=4)],
                    request_ids=[f"r{step % 3}", step % 2], total_lens=[4 + step, 4 + step])
    return cache


def test_both_backends_write_the_same_content(tmp_path):
    for b in BACKENDS:
        _populated(b).save(tmp_path / f"{b}.npz")
    with np.load(tmp_path / "numba.npz") as x, np.load(tmp_path / "reference.npz") as y:
        assert sorted(x.files) == sorted(y.files)
        for name in x.files:
            if name != "header":
                assert_array_equal(x[name], y[name], err_msg=name)
        hx, hy = (json.loads(h["header"].tobytes()) for h in (x, y))
    assert hx["saved_by_backend"] == "numba" and hy["saved_by_backend"] == "reference"
    del hx["saved_by_backend"], hy["saved_by_backend"]
    assert hx == hy
    assert hx["format_version"] == 1 and hx["config"]["capacity"] == 40
    assert hx["request_ids"] == [["int", 0], ["int", 1], ["str", "r0"], ["str", "r1"],
                                 ["str", "r2"]]


def test_save_includes_queued_background_inserts(tmp_path):
    cache = ns.NgramCache(max_trie_depth=4, capacity=100)
    cache.insert([[1, 2, 3]], wait=False)
    cache.save(tmp_path / "c.npz")
    assert len(ns.NgramCache.load(tmp_path / "c.npz")) == len(cache) == 7


# Bad files ---------------------------------------------------------------------------------

@pytest.fixture
def saved(tmp_path):
    cache = _populated()
    path = tmp_path / "good.npz"
    cache.save(path)
    return cache, path


@given(cut=st.floats(0, 1, exclude_max=True))
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_truncated_files_raise(saved, tmp_path, cut):
    _, path = saved
    data = path.read_bytes()
    bad = tmp_path / "truncated.npz"
    bad.write_bytes(data[:int(cut * len(data))])
    with pytest.raises(ns.CacheFileError, match="truncated.npz"):
        ns.NgramCache.load(bad)


@given(flips=st.lists(st.tuples(st.floats(0, 1, exclude_max=True), st.integers(1, 255)),
                      min_size=1, max_size=3), backend=st.sampled_from(BACKENDS))
@settings(max_examples=60, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_flipped_bytes_raise_or_load_the_same_cache(saved, tmp_path, flips, backend):
    cache, path = saved
    data = bytearray(path.read_bytes())
    for where, xor in flips:
        data[int(where * len(data))] ^= xor
    bad = tmp_path / "flipped.npz"
    bad.write_bytes(bytes(data))
    try:
        loaded = ns.NgramCache.load(bad, backend=backend)
    except ns.CacheFileError:
        return
    # Only bytes nobody reads (zip timestamps, padding) can change without an error.
    loaded.check_integrity()
    assert loaded.config == cache.config
    assert_same_content(loaded, cache)


def test_wrong_version_missing_members_wrong_config(saved, tmp_path):
    cache, path = saved
    bad = tmp_path / "bad.npz"
    cases = [
        (dict(header=lambda h: h.update(format_version=3)), "format version 3"),
        (dict(header=lambda h: h.update(format="something-else")), "not an ngramspec cache"),
        (dict(header=lambda h: h.pop("config")), "'config' is missing"),
        (dict(header=lambda h: h["config"].update(future_option=3)), "future_option"),
        (dict(header=lambda h: h["config"].update(capacity=3)), "invalid config"),
        (dict(header=lambda h: h.update(nodes=h["nodes"] + 1)), "node count"),
        (dict(header=lambda h: h.update(epoch=0)), "epoch"),
        (dict(header=lambda h: h["request_ids"].append(["float", 1.5])), "disagree|malformed"),
        (dict(header=lambda h: h["request_ids"].__setitem__(1, h["request_ids"][0])), "repeat"),
        (dict(drop=["node_freq"]), "'node_freq' is missing"),
        (dict(drop=["header"]), "no header"),
        (dict(fix_checksums=False, arrays={"node_freq": np.full(39, 1, np.int32)}),
         "checksum|shape"),
        (dict(arrays={"node_freq": np.zeros(39, np.int64)}), "dtype"),
    ]
    for kwargs, message in cases:
        rewrite_cache_file(path, bad, **kwargs)
        with pytest.raises(ns.CacheFileError, match=message):
            ns.NgramCache.load(bad)
    with pytest.raises(ns.CacheFileError, match="another config.*capacity: 40 vs 41"):
        ns.NgramCache.load(path, config=cache.config.replace(capacity=41))
    assert len(ns.NgramCache.load(path, config=cache.config)) == len(cache)
    bad.write_text("not a zip at all")
    with pytest.raises(ns.CacheFileError, match="not a readable"):
        ns.NgramCache.load(bad)
    bad.write_bytes(b"")
    with pytest.raises(ns.CacheFileError):
        ns.NgramCache.load(bad)
    with pytest.raises(FileNotFoundError):
        ns.NgramCache.load(tmp_path / "missing.npz")


def test_structurally_invalid_content_with_valid_checksums(saved, tmp_path):
    cache, path = saved
    with np.load(path) as f:
        token, parent, freq = f["node_token"], f["node_parent"], f["node_freq"]
        refs = f["state_refs"]
    n = token.size
    bad = tmp_path / "bad.npz"
    deep = np.arange(-1, n - 1, dtype=np.int32)  # one long chain: deeper than the trie
    same_token = token.copy()
    kids = np.flatnonzero(parent == -1)
    same_token[kids[1]] = token[kids[0]]
    cases = [
        ({"node_parent": np.where(np.arange(n) == 3, 5, parent).astype(np.int32)}, "earlier"),
        ({"node_parent": np.full(n, -7, np.int32)}, "earlier"),
        ({"node_freq": np.where(np.arange(n) == 0, 0, freq).astype(np.int32)}, ">= 1"),
        ({"node_parent": deep, "node_freq": np.arange(n, 0, -1, dtype=np.int32)}, "deeper"),
        ({"node_token": same_token}, "same token"),
        ({"node_freq": np.where(parent == -1, 1, freq).astype(np.int32)}, "sum of its children"),
        ({"state_refs": np.full_like(refs, n)}, "does not exist"),
        ({"state_refs": np.where(refs >= 0, kids[0], refs).astype(np.int32)}, "depth"),
    ]
    for arrays, message in cases:
        rewrite_cache_file(path, bad, arrays=arrays)
        with pytest.raises(ns.CacheFileError, match=message):
            ns.NgramCache.load(bad)
    small = tmp_path / "small.npz"
    rewrite_cache_file(path, small, header=lambda h: h["config"].update(capacity=n))
    with pytest.raises(ns.CacheFileError, match="exceed capacity"):
        ns.NgramCache.load(small)


# Atomic writes -----------------------------------------------------------------------------

@pytest.mark.parametrize("backend", BACKENDS)
def test_crash_mid_save_keeps_the_old_file(tmp_path, monkeypatch, backend):
    old = _populated(backend)
    path = tmp_path / "cache.npz"
    old.save(path)
    before = path.read_bytes()
    newer = _populated(backend)
    newer.insert([[9, 9, 9, 9]])

    def crash(f, members):
        f.write(b"PK\x03\x04 half an archive")
        raise KeyboardInterrupt("power cut")

    monkeypatch.setattr(persist, "_write_npz", crash)
    with pytest.raises(KeyboardInterrupt):
        newer.save(path)
    assert path.read_bytes() == before
    assert sorted(os.listdir(tmp_path)) == ["cache.npz"]  # no temporary file left behind
    assert_same_content(ns.NgramCache.load(path), old)
    monkeypatch.undo()
    newer.save(path)
    assert_same_content(ns.NgramCache.load(path, backend=backend), newer)


def test_load_argument_errors(saved):
    _, path = saved
    with pytest.raises(ValueError, match="backend must be one of"):
        ns.NgramCache.load(path, backend="gpu")
    with pytest.raises(TypeError, match="config must be an NgramConfig"):
        ns.NgramCache.load(path, config={"capacity": 40})
    with pytest.raises(TypeError, match="path"):
        ns.NgramCache.load(3.5)


# Files written by an earlier version -------------------------------------------------------

def _legacy_operations(backend, **cfg):
    """The operations behind tests/data/cache-format1-*.npz (written by format-1 ngramspec
    0.1.0, before the backends converted themselves to canonical content)."""
    cache = ns.NgramCache(**cfg, backend=backend)
    rng = np.random.default_rng(13)
    for step in range(12):
        cache.insert([rng.integers(0, 6, size=10).tolist()])
        if cache.config.stateful:
            cache.match([rng.integers(0, 6, size=5).tolist(), rng.integers(0, 6, size=3).tolist()],
                        request_ids=[f"r{step % 3}", step % 2], total_lens=[5 + step, 3 + step])
        if step == 8:
            cache.erase(["r1"])
    return cache


LEGACY_FILES = {
    "cache-format1-numba.npz": ("numba", dict(max_trie_depth=5, draft_token_num=6,
                                              max_bfs_breadth=3, capacity=60)),
    "cache-format1-reference.npz": ("reference", dict(max_trie_depth=4, draft_token_num=5,
                                                      match_type="PROB", capacity=50)),
}


@pytest.mark.parametrize("name", sorted(LEGACY_FILES))
@pytest.mark.parametrize("backend", BACKENDS)
def test_files_of_the_previous_version_load_and_continue(name, backend):
    saved_by, cfg = LEGACY_FILES[name]
    path = os.path.join(os.path.dirname(os.path.dirname(__file__)), "data", name)
    loaded = ns.NgramCache.load(path, backend=backend)
    rebuilt = _legacy_operations(saved_by, **cfg)
    assert loaded.backend == backend and loaded.config == rebuilt.config
    assert len(loaded) == len(rebuilt) >= rebuilt.config.capacity - 1  # evictions happened
    loaded.check_integrity()
    assert_same_content(loaded, rebuilt)
    rng = np.random.default_rng(5)
    future = []
    for step in range(8):
        future.append(("insert", [rng.integers(0, 6, size=7).tolist()]))
        rid = ["r0", "r1", "r2", 0, 1][step % 5]
        ctx = rng.integers(0, 6, size=4).tolist()
        future.append(("match", rid, ctx, 20 + step))
    expected = run(rebuilt, future)
    got = run(loaded, future)
    assert len(got) == len(expected) == 16
    for x, y in zip(got, expected):
        for a, b in zip(x, y):
            assert_array_equal(a, b)
    assert_same_content(loaded, rebuilt)


def _imports(module: str) -> set[str]:
    """The ngramspec modules a module imports, at any level (relative names resolved)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec(module)
    tree = ast.parse(open(spec.origin).read())
    package = module.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[:len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m.startswith("ngramspec")}


def test_persist_knows_the_file_format_only():
    imported = _imports("ngramspec.cache.persist")
    assert imported, "the import scan found nothing: it is broken"
    for forbidden in ("ngramspec.cache.facade", "ngramspec.cache.saving", "ngramspec.engine",
                      "ngramspec.reference"):
        assert not any(m == forbidden or m.startswith(forbidden + ".") for m in imported), \
            imported
    # One way only: the cache uses persist, persist never the cache.
    assert "ngramspec.cache.persist" in _imports("ngramspec.cache.saving")
