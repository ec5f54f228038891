"""The cache file format: :func:`write` and :func:`read` of a cache's canonical content.

:meth:`~ngramspec.NgramCache.save` and :meth:`~ngramspec.NgramCache.load` are the public
entry points: the cache takes its backend's :class:`~ngramspec._canonical.CanonicalContent`
under its lock and hands it here with the header fields; on loading, the backend builds
itself from what :func:`read` returns.  This module knows the file, not the cache or its
backends.

File format (versions 1 and 2)
------------------------------
An uncompressed NumPy ``.npz`` archive (a zip of ``.npy`` members, each CRC-32 checked by
zip), read with ``allow_pickle=False``.  Members:

``header``
    uint8: UTF-8 JSON object with ``format`` (``"ngramspec-cache"``), ``format_version`` (1),
    ``library_version``, ``saved_by_backend``, ``config`` (every field of
    :class:`~ngramspec.NgramConfig`, as ``dataclasses.asdict`` gives them), ``epoch`` (the
    trie's reset counter), ``nodes`` (non-root nodes), ``request_ids`` (the ids with a match
    state, as ``["str", id]`` or ``["int", id]``, in the order of the state arrays: written
    ints ascending, then strs; read in any order) and
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

Version 2 adds the external corpora (written only when corpora are loaded: a cache without
any is written as version 1, which earlier ngramspec releases read too):

``header``
    also ``corpora``: ``[{"id": str, "tokens": int}, ...]`` in SGLang's corpus order, and
    ``corpus_table``: ``[bucket count, next resize]`` of that order's table.
``corpus_0``, ``corpus_1``, ...
    int32, shape ``(tokens,)``: each corpus's token stream (documents joined by
    ``INT32_MIN``), in the order of ``corpora``; listed in ``arrays`` like the others.  The
    automata are rebuilt from them on loading.

The content does not depend on the backend: slot numbers, version counters, growth and
free-list history are not saved, only what decides future drafts.  A loaded cache therefore
continues exactly as the saved one would have, on either backend: same drafts for the same
future calls, stateful matches included.  Loading checks the header, every array's presence,
dtype, shape and checksum, and every structural rule above (ranges, depths, distinct sibling
tokens, frequency sums, state references of the right depth) before a backend is built from
it.

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
from typing import Any, NamedTuple

import numpy as np

from .._canonical import CanonicalContent
from ..config import NgramConfig
from ..errors import CacheFileError

__all__ = ["FORMAT", "FORMAT_VERSION", "READ_VERSIONS", "CacheFileError", "SavedCache", "write",
           "read", "in_id_order"]

FORMAT = "ngramspec-cache"
FORMAT_VERSION = 2
#: The versions :func:`read` accepts (1: no corpora).
READ_VERSIONS = (1, 2)
_SEPARATOR = -(2**31)

# Member name -> (dtype, number of dimensions).
_ARRAYS = {"node_token": ("<i4", 1), "node_parent": ("<i4", 1), "node_freq": ("<i4", 1),
           "state_epoch": ("<i8", 1), "state_processed_len": ("<i8", 1),
           "state_count": ("<i4", 1), "state_refs": ("<i4", 2)}


class SavedCache(NamedTuple):
    """What :func:`read` found in a file: its config, the backend that wrote it (as the file
    says; not checked) and the validated content."""

    config: NgramConfig
    saved_by_backend: Any
    content: CanonicalContent


def _as_path(path: Any) -> str:
    fs = os.fspath(path) if isinstance(path, (str, os.PathLike)) else None
    if not isinstance(fs, str):
        raise TypeError(f"path must be a str or os.PathLike of str, got {type(path).__name__}")
    return fs


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def in_id_order(content: CanonicalContent) -> CanonicalContent:
    """``content`` with its match states ordered by id (ints ascending, then strs), the
    order files hold: backends may list their states in any order."""
    keys = content.request_ids
    order = sorted(range(len(keys)), key=lambda i: (isinstance(keys[i], str), keys[i]))
    return dataclasses.replace(
        content, request_ids=[keys[i] for i in order],
        state_epoch=content.state_epoch[order],
        state_processed_len=content.state_processed_len[order],
        state_count=content.state_count[order], state_refs=content.state_refs[order])


# Writing ---------------------------------------------------------------------------------

def _write_npz(f, members: dict[str, np.ndarray]) -> None:
    """Write the archive to the open binary file ``f`` (the step a crash could interrupt)."""
    np.savez(f, **members)


def write(path: str | os.PathLike, content: CanonicalContent, *, config: NgramConfig,
          saved_by_backend: str, library_version: str) -> None:
    """Write ``content`` to ``path`` atomically (see the module docstring for the format).

    The file appears complete at ``path`` or not at all; a failure mid-write leaves a
    previous file there untouched."""
    path = _as_path(path)
    content = in_id_order(content)
    arrays = {name: np.ascontiguousarray(getattr(content, name), dtype=dt)
              for name, (dt, _) in _ARRAYS.items()}
    header = dict(
        format=FORMAT, format_version=FORMAT_VERSION, library_version=library_version,
        saved_by_backend=saved_by_backend, config=dataclasses.asdict(config),
        epoch=int(content.epoch), nodes=int(arrays["node_token"].size),
        request_ids=[["str", k] if isinstance(k, str) else ["int", int(k)]
                     for k in content.request_ids],
        arrays={name: dict(dtype=a.dtype.str, shape=list(a.shape), sha256=_sha256(a))
                for name, a in arrays.items()})
    if content.corpus_ids:
        streams = {f"corpus_{i}": np.ascontiguousarray(a, dtype="<i4")
                   for i, a in enumerate(content.corpus_streams)}
        header.update(format_version=2,
                      corpora=[dict(id=c, tokens=int(a.size))
                               for c, a in zip(content.corpus_ids, streams.values())],
                      corpus_table=[int(x) for x in content.corpus_table])
        header["arrays"].update({name: dict(dtype=a.dtype.str, shape=list(a.shape),
                                            sha256=_sha256(a)) for name, a in streams.items()})
        arrays = dict(arrays, **streams)
    else:  # no corpora: version 1, readable by earlier releases
        header.update(format_version=1)
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
            unexpected = sorted(n for n in set(names) - set(_ARRAYS) - {"header"}
                                if not (n.startswith("corpus_") and n[7:].isdigit()))
            if unexpected:
                raise _bad(path, f"unexpected members {unexpected}")
            return {name: npz[name] for name in names}
    except CacheFileError:
        raise
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, KeyError, IndexError,
            TypeError, UnicodeDecodeError, zipfile.LargeZipFile, NotImplementedError,
            MemoryError, OverflowError, RuntimeError) as e:
        # RuntimeError: zipfile's "encrypted member" when a flipped byte sets that flag.
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
    if version not in READ_VERSIONS or isinstance(version, bool):
        raise _bad(path, f"format version {version!r}; this ngramspec reads versions "
                         f"{', '.join(map(str, READ_VERSIONS))} (written by ngramspec "
                         f"{header.get('library_version', '?')})")
    types = dict(config=dict, epoch=int, nodes=int, request_ids=list, arrays=dict)
    if version >= 2:
        types.update(corpora=list, corpus_table=list)
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


def _corpora(path: str, header: dict[str, Any], members: dict[str, np.ndarray],
             config: NgramConfig) -> dict[str, Any]:
    """The corpus fields of :class:`CanonicalContent` (none in version 1), checked."""
    listed = header.get("corpora", []) if header["format_version"] >= 2 else []
    names = sorted((n for n in members if n.startswith("corpus_")), key=lambda n: int(n[7:]))
    if names != [f"corpus_{i}" for i in range(len(listed))]:
        raise _bad(path, f"corpus members {names} do not match the {len(listed)} corpora of "
                         "the header")
    ids, streams = [], []
    for i, item in enumerate(listed):
        if not (isinstance(item, dict) and isinstance(item.get("id"), str) and item["id"]
                and isinstance(item.get("tokens"), int) and not isinstance(item["tokens"], bool)):
            raise _bad(path, f"malformed corpus entry {item!r}")
        name = f"corpus_{i}"
        a, info = members[name], header["arrays"].get(name)
        if not isinstance(info, dict) or a.dtype.str != "<i4" or a.ndim != 1 \
                or list(a.shape) != info.get("shape") or info.get("dtype") != "<i4":
            raise _bad(path, f"array {name!r} has dtype {a.dtype.str} and shape {a.shape}; "
                             "expected dtype <i4, 1-D, as listed")
        if _sha256(a) != info.get("sha256"):
            raise _bad(path, f"array {name!r} fails its sha256 checksum (corrupted)")
        sep = a == _SEPARATOR
        if a.size != item["tokens"] or a.size == 0 or sep[0] or sep[-1] \
                or (sep[1:] & sep[:-1]).any():
            raise _bad(path, f"corpus {item['id']!r}: its stream must hold {item['tokens']} "
                             "tokens, non-empty documents joined by single separators")
        ids.append(item["id"])
        streams.append(np.ascontiguousarray(a, dtype=np.int32))
    if len(set(ids)) != len(ids):
        raise _bad(path, "corpus ids repeat")
    if ids and config.external_sam_budget == 0:
        raise _bad(path, "corpora are saved but the config's external_sam_budget is 0")
    if sum(a.size for a in streams) > config.external_corpus_max_tokens:
        raise _bad(path, "the corpora hold more tokens than external_corpus_max_tokens")
    table = header.get("corpus_table", [1, 0]) if header["format_version"] >= 2 else [1, 0]
    if not (len(table) == 2 and all(isinstance(x, int) and not isinstance(x, bool)
                                    for x in table) and table[0] >= 1 and table[1] >= 0
            and table[0] >= len(ids) and table[1] in (0, table[0])):
        raise _bad(path, f"malformed corpus_table {table!r}")
    return dict(corpus_ids=ids, corpus_streams=streams, corpus_table=(table[0], table[1]))


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


def read(path: str | os.PathLike, *, config: NgramConfig | None = None) -> SavedCache:
    """Read and validate a file written by :func:`write`.

    ``config``: the configuration the caller expects; a file with another one raises.

    Raises
    ------
    CacheFileError
        Truncated, corrupted, of an unknown format version, structurally invalid, or of
        another ``config``.
    OSError
        A missing or unreadable file.
    """
    path = _as_path(path)
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
    corpora = _corpora(path, header, members, file_config)
    content = CanonicalContent(epoch=header["epoch"], request_ids=keys,
                               **{k: v for k, v in arrays.items() if k in _ARRAYS}, **corpora)
    return SavedCache(file_config, header.get("saved_by_backend"), content)
