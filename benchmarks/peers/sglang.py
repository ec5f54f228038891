"""SGLang's own C++ n-gram core, built from the PyPI wheel, driven through ctypes.

The ``sglang==0.5.23`` wheel ships the C++ sources of its NGRAM drafter
(``sglang/kernels/jit/csrc/ngram_corpus/``); they need only the C++20 standard library.  This
module downloads the wheel with pip (nothing of it is stored in this repository), compiles
those sources with ``g++ -std=c++20 -O3`` (SGLang's own flags) together with a small C shim of
ours, and wraps the result as :class:`SglangPeer`, with the same insert/match/erase/reset
calls as ``NgramCache``.  Used by the benchmarks and the differential tests.

The window-era core of ``sglang==0.5.9`` (``sglang/srt/speculative/cpp_ngram/ngram.cpp``,
pybind-free once compiled beside our shim) is built the same way by ``build("0.5.9")`` and
wrapped as :class:`SglangLegacyPeer` (profile ``"sglang-0.5.9"``).

Build products are cached in ``$NGRAMSPEC_PEER_DIR`` (default: ``benchmarks/peers/.build``,
git-ignored).
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import types
import zipfile
from pathlib import Path
from typing import Callable

import numpy as np

SGLANG_VERSION = "0.5.23"
LEGACY_VERSION = "0.5.9"
SOURCES = ("trie.cpp", "result.cpp", "ngram.cpp", "suffix_automaton.cpp")
WHEEL_DIR = "sglang/kernels/jit/csrc/ngram_corpus/"

def _shim(namespace: str, create_args: str, settings: str, calls: str) -> str:
    """A C shim of ours over ``<namespace>::Ngram``: error text, create (``Param`` from the
    arguments ``create_args`` through the assignments ``settings``), destroy, reset, and the
    version's own ``calls``; the peer's sources are compiled beside it."""
    return ("""
// C entry points over NS::Ngram (ours: the peer's sources are compiled beside it).
#include "ngram.h"
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>
using NS::Ngram;
using NS::Param;
static thread_local std::string g_error;
extern "C" {
const char* peer_error() { return g_error.c_str(); }
void* peer_create(int64_t capacity, ARGS) {
  try {
    Param p{};
    p.enable = true; p.enable_router_mode = false;
SETTINGS
    return new Ngram(static_cast<size_t>(capacity), p);
  } catch (const std::exception& e) { g_error = e.what(); return nullptr; }
}
void peer_destroy(void* h) { delete static_cast<Ngram*>(h); }
void peer_reset(void* h) { static_cast<Ngram*>(h)->reset(); }
CALLS}
""".replace("NS", namespace).replace("ARGS", create_args).replace("SETTINGS", settings)
            .replace("CALLS", calls))


SHIM = _shim("sglang::ngram", """int64_t min_b, int64_t max_b, int64_t depth, int64_t draft,
                  int prob, int64_t sam_budget, int64_t max_tokens""", """\
    p.min_bfs_breadth = min_b; p.max_bfs_breadth = max_b; p.max_trie_depth = depth;
    p.draft_token_num = draft; p.match_type = prob ? "PROB" : "BFS";
    p.external_sam_budget = static_cast<size_t>(sam_budget);
    p.external_corpus_max_tokens = static_cast<size_t>(max_tokens);""", r"""
int peer_insert(void* h, const int32_t* flat, const int64_t* offsets, int64_t n) {
  try {
    std::vector<std::vector<int32_t>> seqs(n);
    for (int64_t i = 0; i < n; ++i) seqs[i].assign(flat + offsets[i], flat + offsets[i + 1]);
    auto* g = static_cast<Ngram*>(h);
    g->asyncInsert(std::move(seqs));
    g->synchronize();
    return 0;
  } catch (const std::exception& e) { g_error = e.what(); return 1; }
}
int peer_match(void* h, const int64_t* state_ids, const int32_t* flat, const int64_t* offsets,
               const int64_t* total_lens, int64_t n, int32_t* out_tokens, uint8_t* out_mask) {
  try {
    std::vector<int64_t> ids(state_ids, state_ids + n);
    std::vector<std::vector<int32_t>> ctx(n);
    std::vector<size_t> lens(n);
    for (int64_t i = 0; i < n; ++i) {
      ctx[i].assign(flat + offsets[i], flat + offsets[i + 1]);
      lens[i] = static_cast<size_t>(total_lens[i]);
    }
    auto r = static_cast<Ngram*>(h)->batchMatch(ids, ctx, lens);
    std::memcpy(out_tokens, r.token.data(), r.token.size() * sizeof(int32_t));
    std::memcpy(out_mask, r.mask.data(), r.mask.size());
    return 0;
  } catch (const std::exception& e) { g_error = e.what(); return 1; }
}
void peer_erase(void* h, const int64_t* state_ids, int64_t n) {
  static_cast<Ngram*>(h)->eraseMatchState(std::vector<int64_t>(state_ids, state_ids + n));
}
""")

# The window-era core of sglang 0.5.9.
LEGACY_SHIM = _shim("ngram", """int64_t min_b, int64_t max_b, int64_t min_w, int64_t max_w,
                  int64_t branch, int64_t draft, int prob""", """\
    p.min_bfs_breadth = min_b; p.max_bfs_breadth = max_b;
    p.min_match_window_size = min_w; p.max_match_window_size = max_w;
    p.branch_length = branch; p.draft_token_num = draft; p.match_type = prob ? "PROB" : "BFS";""",
                    r"""
int peer_insert(void* h, const int32_t* flat, const int64_t* offsets, int64_t n) {
  try {
    std::vector<std::vector<int32_t>> seqs(n + 1);
    for (int64_t i = 0; i < n; ++i) seqs[i].assign(flat + offsets[i], flat + offsets[i + 1]);
    // 0.5.9's synchronize() waits for an empty queue, not for the insert in flight: a trailing
    // empty sequence (a no-op insert) is dequeued only after every real one is done.
    auto* g = static_cast<Ngram*>(h);
    g->asyncInsert(std::move(seqs));
    g->synchronize();
    return 0;
  } catch (const std::exception& e) { g_error = e.what(); return 1; }
}
int peer_match(void* h, const int32_t* flat, const int64_t* offsets, int64_t n,
               int32_t* out_tokens, uint8_t* out_mask) {
  try {
    std::vector<std::vector<int32_t>> ctx(n);
    for (int64_t i = 0; i < n; ++i) ctx[i].assign(flat + offsets[i], flat + offsets[i + 1]);
    auto r = static_cast<Ngram*>(h)->batchMatch(ctx);
    std::memcpy(out_tokens, r.token.data(), r.token.size() * sizeof(int32_t));
    std::memcpy(out_mask, r.mask.data(), r.mask.size());
    return 0;
  } catch (const std::exception& e) { g_error = e.what(); return 1; }
}
""")

# What to take from each wheel and how to drive it.
_PEERS = {
    SGLANG_VERSION: dict(wheel_dir=WHEEL_DIR, sources=SOURCES, shim=SHIM),
    LEGACY_VERSION: dict(wheel_dir="sglang/srt/speculative/cpp_ngram/", sources=("ngram.cpp",),
                         shim=LEGACY_SHIM),
}


class PeerUnavailable(RuntimeError):
    """The SGLang peer could not be built here (no g++, no PyPI access, ...)."""


def _cache_dir() -> Path:
    return Path(os.environ.get("NGRAMSPEC_PEER_DIR", Path(__file__).parent / ".build"))


def shim_tag(*shims: str) -> str:
    """A digest of the C shims a library is compiled from, for its file name: a changed shim
    compiles anew instead of loading a library whose entry points no longer match."""
    return hashlib.sha256("\0".join(shims).encode()).hexdigest()[:12]


def compile_library(lib: Path, sources: list[Path], what: str) -> Path:
    """Compile ``sources`` (SGLang's and a shim of ours, beside SGLang's headers) into the
    shared library ``lib``, atomically."""
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        raise PeerUnavailable("no C++ compiler (g++) to build SGLang's core")
    tmp_lib = lib.with_suffix(".so.tmp")
    cmd = [cxx, "-std=c++20", "-O3", "-shared", "-fPIC", "-pthread", "-I",
           str(sources[0].parent), *map(str, sources), "-o", str(tmp_lib)]
    res = subprocess.run(cmd, capture_output=True, text=True)
    if res.returncode != 0:
        raise PeerUnavailable(f"compiling {what} failed:\n{res.stderr[-2000:]}")
    tmp_lib.replace(lib)
    family = lib.name.split("-")[0]  # the same library built from earlier shims: stale now
    for old in lib.parent.glob(f"{family}*.so"):
        if old != lib and old.name.removesuffix(".so").split("-")[0] == family:
            old.unlink(missing_ok=True)
    return lib


def exec_with_stubs(files: dict[str, Path], stubs: dict[str, types.ModuleType]
                    ) -> dict[str, types.ModuleType]:
    """Execute a wheel's Python files as modules (module name -> path; executed in that
    order, each visible to the next) while ``stubs`` stand in for what they import of their
    package; ``sys.modules`` is left as it was (an installed copy of the package included)."""
    names = list(stubs) + list(files)
    saved = {n: sys.modules[n] for n in names if n in sys.modules}
    loaded: dict[str, types.ModuleType] = {}
    try:
        sys.modules.update(stubs)
        for name, path in files.items():
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            mod = importlib.util.module_from_spec(spec)
            sys.modules[name] = mod
            spec.loader.exec_module(mod)
            loaded[name] = mod
    finally:
        for n in names:
            sys.modules.pop(n, None)
        sys.modules.update(saved)
    return loaded


def extract_from_wheel(version: str, dest: Callable[[str], Path | None], *,
                       package: str = "sglang") -> None:
    """Download ``package`` ``version``'s wheel (without its dependencies; SGLang's unless
    ``package`` names another) and write each member ``name`` for which ``dest(name)`` gives a
    path, there."""
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
               f"{package}=={version}", "-d", tmp]
        if subprocess.run(cmd, capture_output=True).returncode != 0:
            raise PeerUnavailable(f"pip could not download {package}=={version}")
        wheel = next(Path(tmp).glob(f"{package}-*.whl"), None)
        if wheel is None:
            raise PeerUnavailable(f"pip gave no wheel of {package}=={version} (a source "
                                  "archive only?)")
        with zipfile.ZipFile(wheel) as z:
            for name in z.namelist():
                path = dest(name)
                if path is not None:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_bytes(z.read(name))


def build(version: str = SGLANG_VERSION) -> Path:
    """Download and extract the peer's sources once, compile them with our shim once; return
    the shared library's path.

    ``version``: ``"0.5.23"`` (default) or ``"0.5.9"`` (the window-era core).
    """
    if version not in _PEERS:
        raise ValueError(f"version must be one of {sorted(_PEERS)}, got {version!r}")
    spec = _PEERS[version]
    out = _cache_dir() / f"sglang-{version}"
    lib = out / f"libsglang_ngram_peer-{shim_tag(spec['shim'])}.so"
    if lib.exists():
        return lib
    if shutil.which(os.environ.get("CXX", "g++")) is None:
        raise PeerUnavailable("no C++ compiler (g++) to build SGLang's core")
    src = out / "src"
    if not all((src / f).exists() for f in spec["sources"]):
        extract_from_wheel(version, lambda name: src / Path(name).name if name.startswith(
            spec["wheel_dir"]) and not name.endswith("/") else None)
    (src / "peer_shim.cpp").write_text(spec["shim"])
    return compile_library(lib, [src / f for f in spec["sources"]] + [src / "peer_shim.cpp"],
                           "SGLang's core")


_LIBS: dict[str, ctypes.CDLL] = {}


def _lib(version: str = SGLANG_VERSION) -> ctypes.CDLL:
    if version not in _LIBS:
        lib = ctypes.CDLL(str(build(version)))
        p, i64, i32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
        lib.peer_create.restype = p
        lib.peer_error.restype = ctypes.c_char_p
        lib.peer_destroy.argtypes = [p]
        lib.peer_insert.argtypes = [p, p, p, i64]
        lib.peer_reset.argtypes = [p]
        if version == LEGACY_VERSION:
            lib.peer_create.argtypes = [i64, i64, i64, i64, i64, i64, i64, i32]
            lib.peer_match.argtypes = [p, p, p, i64, p, p]
        else:
            lib.peer_create.argtypes = [i64, i64, i64, i64, i64, i32, i64, i64]
            lib.peer_match.argtypes = [p, p, p, p, p, i64, p, p]
            lib.peer_erase.argtypes = [p, p, i64]
        _LIBS[version] = lib
    return _LIBS[version]


def _pack(seqs):
    arrs = [np.asarray(s, dtype=np.int32) for s in seqs]
    offsets = np.zeros(len(arrs) + 1, np.int64)
    np.cumsum([a.size for a in arrs], out=offsets[1:])
    flat = np.ascontiguousarray(np.concatenate(arrs) if arrs else np.zeros(0, np.int32))
    return flat, offsets


def _ptr(a: np.ndarray) -> int:
    return a.ctypes.data


class SglangPeer:
    """SGLang 0.5.23's ``Ngram`` object with NgramCache-like calls (stateful ids as ``NgramCorpus``
    assigns them: first-seen order, fresh ids after erase and reset)."""

    def __init__(self, *, max_trie_depth=18, min_bfs_breadth=1, max_bfs_breadth=10,
                 draft_token_num=12, match_type="BFS", capacity=10_000_000,
                 external_sam_budget=0, external_corpus_max_tokens=10_000_000):
        if capacity <= max_trie_depth:
            raise ValueError("SGLang crashes for capacity <= max_trie_depth")
        self.n = draft_token_num
        self.depth = max_trie_depth
        # The library this object's calls go to (a subclass may compile more into its own).
        self._lib = lib = self._library()
        self._h = lib.peer_create(capacity, min_bfs_breadth, max_bfs_breadth, max_trie_depth,
                                  draft_token_num, int(match_type == "PROB"),
                                  external_sam_budget, external_corpus_max_tokens)
        if not self._h:
            raise ValueError(lib.peer_error().decode())
        self._ids: dict = {}
        self._next = 0

    @staticmethod
    def _library() -> ctypes.CDLL:
        return _lib()

    def __del__(self):
        if getattr(self, "_h", None):
            self._lib.peer_destroy(self._h)
            self._h = None

    def insert(self, seqs) -> None:
        flat, offsets = _pack(seqs)
        if self._lib.peer_insert(self._h, _ptr(flat), _ptr(offsets), len(offsets) - 1):
            raise RuntimeError(self._lib.peer_error().decode())

    def _state_ids(self, request_ids):
        out = []
        for r in request_ids:
            if r not in self._ids:
                self._ids[r] = self._next
                self._next += 1
            out.append(self._ids[r])
        return np.asarray(out, np.int64)

    def match(self, contexts, request_ids=None, total_lens=None):
        """(tokens (B, n) int32, mask (B, n, n) bool).  Without ids, each context gets a fresh
        state id that is erased afterwards (a rebuild: stateless matching)."""
        b = len(contexts)
        flat, offsets = _pack(contexts)
        if request_ids is None:
            ids = np.arange(self._next, self._next + b, dtype=np.int64) + (1 << 40)
            lens = np.diff(offsets)
        else:
            ids = self._state_ids(request_ids)
            lens = np.asarray(total_lens, np.int64)
        tokens = np.empty((b, self.n), np.int32)
        mask = np.empty((b, self.n, self.n), np.uint8)
        lib = self._lib
        if lib.peer_match(self._h, _ptr(ids), _ptr(flat), _ptr(offsets), _ptr(lens), b,
                          _ptr(tokens), _ptr(mask)):
            raise RuntimeError(lib.peer_error().decode())
        if request_ids is None:
            lib.peer_erase(self._h, _ptr(ids), b)
        return tokens, mask.astype(bool)

    # Entry points with inputs packed beforehand, for timing the C core alone.
    def pack_match(self, contexts, request_ids, total_lens):
        flat, offsets = _pack(contexts)
        b = len(contexts)
        return (self._state_ids(request_ids), flat, offsets, np.asarray(total_lens, np.int64),
                b, np.empty((b, self.n), np.int32), np.empty((b, self.n, self.n), np.uint8))

    def match_packed(self, packed) -> None:
        ids, flat, offsets, lens, b, tokens, mask = packed
        self._lib.peer_match(self._h, _ptr(ids), _ptr(flat), _ptr(offsets), _ptr(lens), b,
                          _ptr(tokens), _ptr(mask))

    @staticmethod
    def pack_insert(seqs):
        return _pack(seqs)

    def insert_packed(self, packed) -> None:
        flat, offsets = packed
        self._lib.peer_insert(self._h, _ptr(flat), _ptr(offsets), len(offsets) - 1)

    def erase(self, request_ids) -> None:
        ids = np.asarray([self._ids.pop(r) for r in request_ids if r in self._ids], np.int64)
        if ids.size:
            self._lib.peer_erase(self._h, _ptr(ids), ids.size)

    def reset(self) -> None:
        self._lib.peer_reset(self._h)
        self._ids.clear()
        self._next = 0


class SglangLegacyPeer:
    """SGLang 0.5.9's window-era ``Ngram`` object with NgramCache-like calls.

    Its matching is stateless: ``request_ids``/``total_lens`` are accepted and ignored, and
    ``erase`` is a no-op.  Inserts are complete before ``insert`` returns (a barrier around
    0.5.9's racy ``synchronize``).  The C++ preallocates about 168 bytes per node of capacity.
    """

    def __init__(self, *, branch_length=18, min_match_window_size=1, max_match_window_size=12,
                 min_bfs_breadth=1, max_bfs_breadth=10, draft_token_num=12, match_type="BFS",
                 capacity=10_000_000):
        if capacity <= branch_length:
            raise ValueError("SGLang crashes for capacity <= branch_length")
        self.n = draft_token_num
        lib = _lib(LEGACY_VERSION)
        self._h = lib.peer_create(capacity, min_bfs_breadth, max_bfs_breadth,
                                  min_match_window_size, max_match_window_size, branch_length,
                                  draft_token_num, int(match_type == "PROB"))
        if not self._h:
            raise ValueError(lib.peer_error().decode())

    def __del__(self):
        if getattr(self, "_h", None):
            _lib(LEGACY_VERSION).peer_destroy(self._h)
            self._h = None

    def insert(self, seqs) -> None:
        self.insert_packed(_pack(seqs))

    def match(self, contexts, request_ids=None, total_lens=None):
        """(tokens (B, n) int32, mask (B, n, n) bool); ids and lengths are ignored."""
        packed = self.pack_match(contexts)
        self.match_packed(packed)
        return packed[3], packed[4].astype(bool)

    # Entry points with inputs packed beforehand, for timing the C core alone.
    def pack_match(self, contexts, request_ids=None, total_lens=None):
        flat, offsets = _pack(contexts)
        b = len(contexts)
        return (flat, offsets, b, np.empty((b, self.n), np.int32),
                np.empty((b, self.n, self.n), np.uint8))

    def match_packed(self, packed) -> None:
        flat, offsets, b, tokens, mask = packed
        lib = _lib(LEGACY_VERSION)
        if lib.peer_match(self._h, _ptr(flat), _ptr(offsets), b, _ptr(tokens), _ptr(mask)):
            raise RuntimeError(lib.peer_error().decode())

    @staticmethod
    def pack_insert(seqs):
        return _pack(seqs)

    def insert_packed(self, packed) -> None:
        flat, offsets = packed
        lib = _lib(LEGACY_VERSION)
        if lib.peer_insert(self._h, _ptr(flat), _ptr(offsets), len(offsets) - 1):
            raise RuntimeError(lib.peer_error().decode())

    def erase(self, request_ids) -> None:
        """A no-op: 0.5.9 keeps no match states."""

    def reset(self) -> None:
        _lib(LEGACY_VERSION).peer_reset(self._h)
