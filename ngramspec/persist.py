"""Saving and loading an :class:`~ngramspec.NgramCache`: :meth:`~ngramspec.NgramCache.save`
and :meth:`~ngramspec.NgramCache.load`.

File format (version 1)
-----------------------
An uncompressed NumPy ``.npz`` archive (a zip of ``.npy`` members, each CRC-32 checked by
zip), read with ``allow_pickle=False``.  Members:

``header``
    uint8: UTF-8 JSON object with ``format`` (``"ngramspec-cache"``), ``format_version`` (1),
    ``library_version``, ``saved_by_backend``, ``config`` (every field of
    :class:`~ngramspec.NgramConfig`, as ``dataclasses.asdict`` gives them), ``epoch`` (the
    trie's reset counter), ``nodes`` (non-root nodes), ``request_ids`` (the ids with a match
    state, as ``["str", id]`` or ``["int", id]``, in the order of the state arrays) and
    ``arrays``: for every other member its ``dtype``, ``shape`` and ``sha256`` (of its
    little-endian C-order bytes).
``node_token``, ``node_parent``, ``node_freq``
    int32, shape ``(N,)``: the non-root nodes in global LRU order, most recently touched
    first.  ``node_parent`` is the parent's index in these arrays, -1 for the root, and is
    always smaller than the node's own index (a parent is more recent than its children).
    ``node_freq >= 1`` and a parent's at least the sum of its children's (with the config's
    ``exact_counts``, only ``>= 0``).
    Each node's children keep, in their recency list, the order they have here.
``state_epoch``, ``state_processed_len`` (int64, ``(S,)``), ``state_count`` (int32, ``(S,)``),
``state_refs`` (int32, ``(S, trie depth)``)
    The match states of the live request ids (profile ``sglang-0.5.23``; ``S = 0`` for the
    stateless 0.5.9 profile): SGLang's ``MatchState`` epoch, processed total length, number of
    suffix references and, for suffix length ``d``, ``state_refs[s, d - 1]`` = the node's
    index, -1 = absent, -2 = stale (the next match of that request rebuilds its state).

The content does not depend on the backend: slot numbers, version counters, growth and
free-list history are not saved, only what decides future drafts.  A loaded cache therefore
continues exactly as the saved one would have, on either backend: same drafts for the same
future calls, stateful matches included.  Loading checks the header, every array's presence,
dtype, shape and checksum, and every structural rule above (ranges, depths, distinct sibling
tokens, frequency sums, state references of the right depth) before building the backend.

Merging two saved caches is not supported (the recency and frequency histories of two tries
have no single meaningful interleaving); to combine corpora, insert both token streams (or
replay both serving logs) into one cache, in the order that should count as more recent last.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import tempfile
import zipfile
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import NgramConfig
from .errors import CacheFileError

if TYPE_CHECKING:
    from .cache import NgramCache

__all__ = ["FORMAT", "FORMAT_VERSION", "CacheFileError", "save_cache", "load_cache"]

FORMAT = "ngramspec-cache"
FORMAT_VERSION = 1

# Member name -> (dtype, number of dimensions).
_ARRAYS = {"node_token": ("<i4", 1), "node_parent": ("<i4", 1), "node_freq": ("<i4", 1),
           "state_epoch": ("<i8", 1), "state_processed_len": ("<i8", 1),
           "state_count": ("<i4", 1), "state_refs": ("<i4", 2)}


def _as_path(path: Any) -> str:
    fs = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(fs, str):
        raise TypeError(f"path must be a str or os.PathLike of str, got {type(path).__name__}")
    return fs


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


# Canonical content of each backend --------------------------------------------------------

def _canonical(cache: "NgramCache") -> tuple[int, dict[str, np.ndarray], list]:
    """``(epoch, arrays, request_ids)`` of a cache; call under its lock."""
    backend = cache._backend
    depth = cache.config.trie_depth
    if cache.backend == "numba":
        from .engine.export import export_states, export_trie
        from .engine.trie import M_EPOCH

        token, parent, freq, number = export_trie(backend.trie)
        epoch = int(backend.trie.meta[M_EPOCH])
        if cache.config.stateful:
            keys, s_epoch, ptl, count, refs = export_states(backend, number)
        else:
            keys, s_epoch, ptl, count, refs = [], *_no_states(depth)
    else:
        token, parent, freq, epoch, index = _export_reference_trie(backend.trie)
        if cache.config.stateful:
            keys, s_epoch, ptl, count, refs = _export_reference_states(backend, index, depth)
        else:
            keys, s_epoch, ptl, count, refs = [], *_no_states(depth)
    arrays = dict(node_token=token, node_parent=parent, node_freq=freq, state_epoch=s_epoch,
                  state_processed_len=ptl, state_count=count, state_refs=refs)
    order = sorted(range(len(keys)), key=lambda i: (isinstance(keys[i], str), keys[i]))
    for name in ("state_epoch", "state_processed_len", "state_count", "state_refs"):
        arrays[name] = arrays[name][order]
    return epoch, arrays, [keys[i] for i in order]


def _no_states(depth: int):
    return (np.zeros(0, np.int64), np.zeros(0, np.int64), np.zeros(0, np.int32),
            np.zeros((0, depth), np.int32))


def _export_reference_trie(trie):
    nodes = list(trie.global_lru)
    index = {id(node): k for k, node in enumerate(nodes)}
    index[id(trie.root)] = -1
    token = np.asarray([n.token for n in nodes], np.int32).reshape(-1)
    parent = np.asarray([index[id(n.parent)] for n in nodes], np.int32).reshape(-1)
    freq = np.asarray([n.freq for n in nodes], np.int32).reshape(-1)
    return token, parent, freq, int(trie.epoch), index


def _export_reference_states(backend, index, depth):
    trie = backend.trie
    keys = list(backend.states)
    s_epoch, ptl = np.zeros(len(keys), np.int64), np.zeros(len(keys), np.int64)
    count, refs = np.zeros(len(keys), np.int32), np.full((len(keys), depth), -1, np.int32)
    for i, key in enumerate(keys):
        st = backend.states[key]
        s_epoch[i], ptl[i], count[i] = st.epoch, st.processed_total_len, len(st.anchors)
        for d, ref in enumerate(st.anchors):
            if ref is not None:
                node, version = ref
                fresh = st.epoch == trie.epoch and version == node.version
                refs[i, d] = index[id(node)] if fresh else -2
    return keys, s_epoch, ptl, count, refs


def _build_reference(backend, epoch, arrays, keys) -> None:
    from .reference.match import MatchState
    from .reference.trie import Node

    trie = backend.trie
    trie.epoch = epoch
    nodes = []
    for tok, par, freq in zip(arrays["node_token"].tolist(), arrays["node_parent"].tolist(),
                              arrays["node_freq"].tolist()):
        parent = trie.root if par == -1 else nodes[par]
        node = Node(tok, parent)
        node.freq = freq
        parent.children[tok] = node
        parent.lru.append(node)  # global order = recency order among siblings
        trie.global_lru[node] = None
        nodes.append(node)
    stale = Node(0, None)  # version 1: a reference stored with version 0 is stale forever
    for i, key in enumerate(keys):
        st = MatchState()
        st.epoch = int(arrays["state_epoch"][i])
        st.processed_total_len = int(arrays["state_processed_len"][i])
        refs = arrays["state_refs"][i, :int(arrays["state_count"][i])].tolist()
        st.anchors = [None if r == -1 else (stale, 0) if r == -2 else (nodes[r], 1)
                      for r in refs]
        backend.states[key] = st


# Writing ---------------------------------------------------------------------------------

def _write_npz(f, members: dict[str, np.ndarray]) -> None:
    """Write the archive to the open binary file ``f`` (the step a crash could interrupt)."""
    np.savez(f, **members)


def save_cache(cache: "NgramCache", path: str | os.PathLike) -> None:
    """Write ``cache`` to ``path`` atomically (see the module docstring for the format)."""
    from . import __version__

    path = _as_path(path)
    cache.synchronize()
    with cache._lock:
        epoch, arrays, keys = _canonical(cache)
    arrays = {name: np.ascontiguousarray(a, dtype=_ARRAYS[name][0]) for name, a in arrays.items()}
    header = dict(
        format=FORMAT, format_version=FORMAT_VERSION, library_version=__version__,
        saved_by_backend=cache.backend, config=dataclasses.asdict(cache.config), epoch=epoch,
        nodes=int(arrays["node_token"].size),
        request_ids=[["str", k] if isinstance(k, str) else ["int", int(k)] for k in keys],
        arrays={name: dict(dtype=a.dtype.str, shape=list(a.shape), sha256=_sha256(a))
                for name, a in arrays.items()})
    members = dict(arrays, header=np.frombuffer(json.dumps(header).encode(), np.uint8))
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=directory, prefix="." + os.path.basename(path) + ".",
                               suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            _write_npz(f, members)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    try:  # make the rename itself durable (POSIX; not possible on every platform)
        dfd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(dfd)
    except OSError:
        pass
    finally:
        os.close(dfd)


# Reading ---------------------------------------------------------------------------------

def _bad(path: str, msg: str) -> CacheFileError:
    return CacheFileError(f"{path}: {msg}")


def _read_members(path: str) -> dict[str, np.ndarray]:
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError:
        raise  # a missing or unreadable file is an OSError, not a bad file
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            names = list(npz.files)
            unexpected = sorted(set(names) - set(_ARRAYS) - {"header"})
            if unexpected:
                raise _bad(path, f"unexpected members {unexpected}")
            return {name: npz[name] for name in names}
    except CacheFileError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, IndexError,
            TypeError, UnicodeDecodeError, zipfile.LargeZipFile, NotImplementedError,
            MemoryError, OverflowError) as e:
        raise _bad(path, f"not a readable ngramspec cache file (truncated or corrupted?): "
                         f"{type(e).__name__}: {e}") from None


def _parse_header(path: str, members: dict[str, np.ndarray]) -> dict[str, Any]:
    raw = members.get("header")
    if raw is None or raw.dtype != np.uint8 or raw.ndim != 1:
        raise _bad(path, "no header (not an ngramspec cache file?)")
    try:
        header = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise _bad(path, f"header is not valid JSON: {e}") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise _bad(path, "not an ngramspec cache file (header format is not "
                         f"{FORMAT!r})")
    version = header.get("format_version")
    if version != FORMAT_VERSION:
        raise _bad(path, f"format version {version!r}; this ngramspec reads version "
                         f"{FORMAT_VERSION} (written by ngramspec "
                         f"{header.get('library_version', '?')})")
    types = dict(config=dict, epoch=int, nodes=int, request_ids=list, arrays=dict)
    for key, typ in types.items():
        if not isinstance(header.get(key), typ) or isinstance(header.get(key), bool):
            raise _bad(path, f"header field {key!r} is missing or not a {typ.__name__}")
    return header


def _file_config(path: str, header: dict[str, Any]) -> NgramConfig:
    fields = {f.name for f in dataclasses.fields(NgramConfig)}
    unknown = sorted(set(header["config"]) - fields)
    if unknown:
        raise _bad(path, f"config has fields this ngramspec does not know: {unknown} (written "
                         f"by ngramspec {header.get('library_version', '?')}?)")
    try:
        return NgramConfig(**header["config"])
    except (TypeError, ValueError) as e:
        raise _bad(path, f"invalid config in header: {e}") from None


def _check_arrays(path: str, header: dict[str, Any], members: dict[str, np.ndarray],
                  config: NgramConfig) -> dict[str, np.ndarray]:
    arrays = {}
    meta = header["arrays"]
    for name, (dtype, ndim) in _ARRAYS.items():
        a = members.get(name)
        info = meta.get(name)
        if a is None or not isinstance(info, dict):
            raise _bad(path, f"array {name!r} is missing")
        if a.dtype.str != dtype or a.ndim != ndim or list(a.shape) != info.get("shape") \
                or info.get("dtype") != dtype:
            raise _bad(path, f"array {name!r} has dtype {a.dtype.str} and shape {a.shape}; "
                             f"expected dtype {dtype}, {ndim}-D, shape {info.get('shape')}")
        if _sha256(a) != info.get("sha256"):
            raise _bad(path, f"array {name!r} fails its sha256 checksum (corrupted)")
        arrays[name] = np.ascontiguousarray(a, dtype=dtype.replace("<", "="))
    n = header["nodes"]
    depth = config.trie_depth
    token, parent, freq = arrays["node_token"], arrays["node_parent"], arrays["node_freq"]
    if not token.size == parent.size == freq.size == n:
        raise _bad(path, f"node arrays disagree with the header's node count {n}")
    if n + 1 > config.capacity:
        raise _bad(path, f"{n + 1} nodes exceed capacity {config.capacity}")
    idx = np.arange(n)
    if n and ((parent < -1).any() or (parent >= idx).any()):
        raise _bad(path, "node_parent must be -1 or the index of an earlier node")
    exact = bool(getattr(config, "exact_counts", False))  # uncounted walks leave freq 0
    if n and (freq < (0 if exact else 1)).any():
        raise _bad(path, f"node_freq must be >= {0 if exact else 1}")
    # Depths by fixed-point iteration (parents come first, depth <= trie depth).
    node_depth = np.ones(n, np.int64)
    for _ in range(depth + 1):
        new = np.where(parent >= 0, node_depth[np.maximum(parent, 0)] + 1, 1) if n else node_depth
        if np.array_equal(new, node_depth):
            break
        node_depth = new
    if n and node_depth.max() > depth:
        raise _bad(path, f"a node is deeper than the trie depth {depth}")
    keys = (parent.astype(np.int64) << 32) | (token.astype(np.int64) & 0xFFFFFFFF)
    if np.unique(keys).size != n:
        raise _bad(path, "two children of one node have the same token")
    sums = np.zeros(n + 1, np.int64)
    np.add.at(sums, parent + 1, freq.astype(np.int64))
    if n and not exact and (sums[1:] > freq).any():
        raise _bad(path, "a node's freq is below the sum of its children's freqs")
    if header["epoch"] < 1:
        raise _bad(path, f"epoch must be >= 1, got {header['epoch']}")
    # Match states.
    ids = header["request_ids"]
    s = len(ids)
    s_epoch, ptl = arrays["state_epoch"], arrays["state_processed_len"]
    count, refs = arrays["state_count"], arrays["state_refs"]
    if not (s_epoch.size == ptl.size == count.size == refs.shape[0] == s) \
            or refs.shape[1] != depth:
        raise _bad(path, f"state arrays disagree with {s} request ids and trie depth {depth}")
    if s and not config.stateful:
        raise _bad(path, f"profile {config.profile!r} keeps no match states, the file has {s}")
    if s and ((s_epoch < 0).any() or (s_epoch > header["epoch"]).any() or (ptl < 0).any()
              or (count < 0).any() or (count > depth).any()):
        raise _bad(path, "a match state has an out-of-range epoch, length or count")
    if s and ((refs < -2).any() or (refs >= n).any()):
        raise _bad(path, "a match state refers to a node that does not exist")
    for i in range(s):
        for d in range(int(count[i])):
            r = int(refs[i, d])
            if r >= 0 and node_depth[r] != d + 1:
                raise _bad(path, f"match state {i} refers at suffix length {d + 1} to a node "
                                 f"of depth {int(node_depth[r])}")
    return arrays


def _request_ids(path: str, header: dict[str, Any]) -> list:
    keys = []
    for item in header["request_ids"]:
        if not (isinstance(item, list) and len(item) == 2
                and ((item[0] == "str" and isinstance(item[1], str))
                     or (item[0] == "int" and isinstance(item[1], int)
                         and not isinstance(item[1], bool)))):
            raise _bad(path, f"malformed request id {item!r}")
        keys.append(item[1])
    if len(set(keys)) != len(keys):
        raise _bad(path, "request ids repeat")
    return keys


def load_cache(path: str | os.PathLike, *, backend: str | None = None,
               config: NgramConfig | None = None) -> "NgramCache":
    """Read a cache written by :func:`save_cache`; :class:`CacheFileError` if it is bad."""
    from .cache import BACKENDS, NgramCache

    path = _as_path(path)
    if backend is not None and backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS} or None, got {backend!r}")
    if config is not None and not isinstance(config, NgramConfig):
        raise TypeError(f"config must be an NgramConfig or None, got {type(config).__name__}")
    members = _read_members(path)
    header = _parse_header(path, members)
    file_config = _file_config(path, header)
    if config is not None and config != file_config:
        diff = {f: (getattr(file_config, f), getattr(config, f))
                for f in (x.name for x in dataclasses.fields(NgramConfig))
                if getattr(file_config, f) != getattr(config, f)}
        raise _bad(path, "saved with another config; (file, expected) per differing field: "
                         + ", ".join(f"{k}: {v[0]!r} vs {v[1]!r}" for k, v in diff.items()))
    arrays = _check_arrays(path, header, members, file_config)
    keys = _request_ids(path, header)
    if backend is None:
        backend = header.get("saved_by_backend")
        if backend not in BACKENDS:
            backend = "numba"
    cache = NgramCache(config=file_config, backend=backend)
    epoch = header["epoch"]
    b = cache._backend
    if backend == "numba":
        from .engine.export import import_states, import_trie

        b.trie = import_trie(file_config.capacity, epoch, arrays["node_token"],
                             arrays["node_parent"], arrays["node_freq"])
        if keys:
            import_states(b, keys, arrays["state_epoch"], arrays["state_processed_len"],
                          arrays["state_count"], arrays["state_refs"])
    else:
        _build_reference(b, epoch, arrays, keys)
    return cache
