"""SGLang 0.5.23's own ``NgramCorpus`` Python class, taken from the PyPI wheel and run over the
C++ core built from the same wheel (``peers.sglang``), driven through ctypes.

The worker's drafter is two Python files of the wheel: ``sglang/srt/speculative/cpp_ngram/
ngram_corpus.py`` (``NgramCorpus``: request ids to state ids, external-corpus bookkeeping) over
``sglang/kernels/ops/speculative/ngram_corpus.py`` (the FFI object: packing with torch, the
int64 outputs).  Both are loaded here unchanged (nothing of them is stored in this repository:
pip downloads the wheel once, the files are cached beside the built core) with small stand-ins
for what they import from outside: ``tvm_ffi`` (an object base class whose methods call our C
shim over SGLang's ``Ngram``) and ``sglang.kernels.jit.utils`` (no JIT: the core is already
built).  The stand-ins live in ``sys.modules`` only while the two files execute, so an installed
SGLang is never shadowed.  Needs torch (the wheel's file packs its inputs with it).

Used by the adapter's differential tests (marker ``sglang``) and ``benchmarks.studies.sglang_adapter``.
"""

from __future__ import annotations

import ctypes
import functools
import importlib.util
import sys
import types
from pathlib import Path

import numpy as np

from . import sglang as base

PeerUnavailable = base.PeerUnavailable

#: The wheel's files loaded here (wheel path -> module name while loading).
PY_FILES = {
    "sglang/kernels/ops/speculative/ngram_corpus.py": "sglang.kernels.ops.speculative.ngram_corpus",
    "sglang/srt/speculative/cpp_ngram/ngram_corpus.py":
        "sglang.srt.speculative.cpp_ngram.ngram_corpus",
}

SHIM = r"""
// C entry points over sglang::ngram::Ngram, one per method of SGLang's FFI object (ours).
#include "ngram.h"
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>
using sglang::ngram::Ngram;
using sglang::ngram::Param;
static thread_local std::string g_error;
static std::vector<std::vector<int32_t>> split(const int32_t* flat, const int64_t* offs,
                                               int64_t n) {
  std::vector<std::vector<int32_t>> out(n);
  for (int64_t i = 0; i < n; ++i) out[i].assign(flat + offs[i], flat + offs[i + 1]);
  return out;
}
#define GUARD(body) try { body; return 0; } \
  catch (const std::exception& e) { g_error = e.what(); return 1; }
extern "C" {
const char* nc_error() { return g_error.c_str(); }
void* nc_create(int64_t capacity, int64_t depth, int64_t min_b, int64_t max_b, int64_t draft,
                int64_t match_type, int64_t sam_budget, int64_t max_tokens) {
  try {
    Param p{};
    p.enable = true; p.enable_router_mode = false;
    p.max_trie_depth = depth; p.min_bfs_breadth = min_b; p.max_bfs_breadth = max_b;
    p.draft_token_num = draft; p.match_type = match_type == 0 ? "BFS" : "PROB";
    p.external_sam_budget = static_cast<size_t>(sam_budget);
    p.external_corpus_max_tokens = static_cast<size_t>(max_tokens);
    return new Ngram(static_cast<size_t>(capacity), p);
  } catch (const std::exception& e) { g_error = e.what(); return nullptr; }
}
void nc_destroy(void* h) { delete static_cast<Ngram*>(h); }
int nc_async_insert(void* h, const int32_t* flat, const int64_t* offs, int64_t n) {
  GUARD(static_cast<Ngram*>(h)->asyncInsert(split(flat, offs, n)))
}
int nc_synchronize(void* h) { GUARD(static_cast<Ngram*>(h)->synchronize()) }
int nc_match(void* h, const int64_t* sid, const int32_t* flat, const int64_t* offs,
             const int64_t* tlens, int64_t n, int32_t* out_tok, int64_t tok_cap,
             uint8_t* out_mask, int64_t mask_cap) {
  GUARD({
    std::vector<int64_t> ids(sid, sid + n);
    std::vector<size_t> lens(tlens, tlens + n);
    auto r = static_cast<Ngram*>(h)->batchMatch(ids, split(flat, offs, n), lens);
    if (static_cast<int64_t>(r.token.size()) > tok_cap)
      throw std::runtime_error("out_tokens buffer too small");
    if (static_cast<int64_t>(r.mask.size()) > mask_cap)
      throw std::runtime_error("out_mask buffer too small");
    std::memcpy(out_tok, r.token.data(), r.token.size() * sizeof(int32_t));
    std::memcpy(out_mask, r.mask.data(), r.mask.size());
  })
}
int nc_erase(void* h, const int64_t* sid, int64_t n) {
  GUARD(static_cast<Ngram*>(h)->eraseMatchState(std::vector<int64_t>(sid, sid + n)))
}
int nc_start_load(void* h) { GUARD(static_cast<Ngram*>(h)->startExternalCorpusLoad()) }
int nc_append(void* h, const int32_t* t, int64_t n) {
  GUARD(static_cast<Ngram*>(h)->appendExternalCorpusTokens(std::vector<int32_t>(t, t + n)))
}
int nc_finish_load(void* h, const char* id) {
  GUARD(static_cast<Ngram*>(h)->finishExternalCorpusLoad(std::string(id)))
}
int nc_cancel_load(void* h) { GUARD(static_cast<Ngram*>(h)->resetStagingSam()) }
int nc_remove(void* h, const char* id) {
  GUARD(static_cast<Ngram*>(h)->removeExternalCorpus(std::string(id)))
}
int nc_clear(void* h) { GUARD(static_cast<Ngram*>(h)->clearExternalCorpus()) }
// "id\tcount" lines joined by "\n" (the FFI object's form) into buf; returns the length.
int64_t nc_list(void* h, char* buf, int64_t cap) {
  std::string out;
  auto entries = static_cast<Ngram*>(h)->listExternalCorpora();
  for (size_t i = 0; i < entries.size(); ++i) {
    if (i) out += "\n";
    out += entries[i].first + "\t" + std::to_string(entries[i].second);
  }
  if (static_cast<int64_t>(out.size()) < cap) std::memcpy(buf, out.c_str(), out.size() + 1);
  return static_cast<int64_t>(out.size());
}
int nc_reset(void* h) { GUARD(static_cast<Ngram*>(h)->reset()) }
}
"""

_LIB: list[ctypes.CDLL] = []


def _out_dir() -> Path:
    return base._cache_dir() / f"sglang-{base.SGLANG_VERSION}"


def build() -> Path:
    """Compile the shim beside SGLang's sources (downloaded by ``peers.sglang.build``), once
    per version of the shim."""
    base.build()
    out = _out_dir()
    lib = out / f"libsglang_corpus_peer-{base.shim_tag(SHIM)}.so"
    if lib.exists():
        return lib
    src = out / "src"
    (src / "corpus_shim.cpp").write_text(SHIM)
    files = [src / f for f in base.SOURCES] + [src / "corpus_shim.cpp"]
    return base.compile_library(lib, files, "the NgramCorpus shim")


def python_files() -> dict[str, Path]:
    """The wheel's two Python files, extracted once beside the built core."""
    py = _out_dir() / "py"
    paths = {name: py / name for name in PY_FILES}
    if all(p.exists() for p in paths.values()):
        return paths
    base.extract_from_wheel(base.SGLANG_VERSION, paths.get)
    return paths


def _lib() -> ctypes.CDLL:
    if not _LIB:
        lib = ctypes.CDLL(str(build()))
        p, i64, s = ctypes.c_void_p, ctypes.c_int64, ctypes.c_char_p
        lib.nc_error.restype = s
        lib.nc_create.restype = p
        lib.nc_create.argtypes = [i64] * 8
        lib.nc_destroy.argtypes = [p]
        lib.nc_async_insert.argtypes = [p, p, p, i64]
        lib.nc_synchronize.argtypes = [p]
        lib.nc_match.argtypes = [p, p, p, p, p, i64, p, i64, p, i64]
        lib.nc_erase.argtypes = [p, p, i64]
        lib.nc_start_load.argtypes = [p]
        lib.nc_append.argtypes = [p, p, i64]
        lib.nc_finish_load.argtypes = [p, s]
        lib.nc_cancel_load.argtypes = [p]
        lib.nc_remove.argtypes = [p, s]
        lib.nc_clear.argtypes = [p]
        lib.nc_list.argtypes = [p, p, i64]
        lib.nc_list.restype = i64
        lib.nc_reset.argtypes = [p]
        _LIB.append(lib)
    return _LIB[0]


def _check(rc: int) -> None:
    if rc:
        raise RuntimeError(_lib().nc_error().decode())


class _CoreObject:
    """Stands in for ``tvm_ffi.Object``: the registered methods of SGLang's C++ object
    (``ngram_corpus_ffi.cpp``), same names and tensor arguments, over the ctypes shim."""

    __slots__ = ()

    def __ffi_init__(self, capacity, max_trie_depth, min_bfs_breadth, max_bfs_breadth,
                     draft_token_num, match_type, external_sam_budget,
                     external_corpus_max_tokens) -> None:
        h = _lib().nc_create(capacity, max_trie_depth, min_bfs_breadth, max_bfs_breadth,
                             draft_token_num, match_type, external_sam_budget,
                             external_corpus_max_tokens)
        if not h:
            raise RuntimeError(_lib().nc_error().decode())
        self._h = h

    def __del__(self) -> None:
        h = getattr(self, "_h", None)
        if h:
            _lib().nc_destroy(h)
            self._h = None

    def async_insert(self, tokens_flat, offsets) -> None:
        _check(_lib().nc_async_insert(self._h, tokens_flat.data_ptr(), offsets.data_ptr(),
                                      offsets.numel() - 1))

    def synchronize(self) -> None:
        _check(_lib().nc_synchronize(self._h))

    def batch_match_stateful(self, state_ids, tokens_flat, offsets, total_lens, out_tokens,
                             out_mask) -> None:
        if not (state_ids.numel() == offsets.numel() - 1 == total_lens.numel()):
            # The C++ reads state ids and lengths by the offsets' count.
            raise RuntimeError("batchMatch expects state_ids, tokens, and total_lens to match "
                               "in size")
        _check(_lib().nc_match(self._h, state_ids.data_ptr(), tokens_flat.data_ptr(),
                               offsets.data_ptr(), total_lens.data_ptr(), offsets.numel() - 1,
                               out_tokens.data_ptr(), out_tokens.numel(), out_mask.data_ptr(),
                               out_mask.numel()))

    def erase_match_state(self, state_ids) -> None:
        _check(_lib().nc_erase(self._h, state_ids.data_ptr(), state_ids.numel()))

    def start_external_corpus_load(self) -> None:
        _check(_lib().nc_start_load(self._h))

    def append_external_corpus_tokens(self, tokens) -> None:
        _check(_lib().nc_append(self._h, tokens.data_ptr(), tokens.numel()))

    def finish_external_corpus_load(self, corpus_id: str) -> None:
        _check(_lib().nc_finish_load(self._h, corpus_id.encode()))

    def cancel_external_corpus_load(self) -> None:
        _check(_lib().nc_cancel_load(self._h))

    def remove_external_corpus(self, corpus_id: str) -> None:
        _check(_lib().nc_remove(self._h, corpus_id.encode()))

    def clear_external_corpus(self) -> None:
        _check(_lib().nc_clear(self._h))

    def list_external_corpora(self) -> str:
        need = _lib().nc_list(self._h, None, 0)
        buf = ctypes.create_string_buffer(need + 1)
        _lib().nc_list(self._h, buf, need + 1)
        return buf.value.decode()

    def reset(self) -> None:
        _check(_lib().nc_reset(self._h))


def _stubs() -> dict[str, types.ModuleType]:
    """Stand-ins for what the wheel's files import from outside them."""
    tvm_ffi = types.ModuleType("tvm_ffi")
    tvm_ffi.Object = _CoreObject
    tvm_ffi.register_object = lambda name: (lambda cls: cls)
    jit_utils = types.ModuleType("sglang.kernels.jit.utils")
    jit_utils.cache_once = functools.cache
    jit_utils.load_jit = lambda *a, **k: types.SimpleNamespace(register_once=lambda: None)
    mods = {"tvm_ffi": tvm_ffi, "sglang.kernels.jit.utils": jit_utils}
    for pkg in ("sglang", "sglang.kernels", "sglang.kernels.jit", "sglang.kernels.ops",
                "sglang.kernels.ops.speculative", "sglang.srt", "sglang.srt.speculative",
                "sglang.srt.speculative.cpp_ngram"):
        mods[pkg] = types.ModuleType(pkg)
        mods[pkg].__path__ = []
    return mods


@functools.cache
def wheel_modules() -> dict[str, types.ModuleType]:
    """The wheel's two files executed as modules (module name -> module), over our core."""
    try:
        import torch  # noqa: F401  (the wheel's file needs it)
    except ImportError:
        raise PeerUnavailable("the wheel's ngram_corpus.py needs torch") from None
    build()
    paths = python_files()
    return base.exec_with_stubs({name: paths[f] for f, name in PY_FILES.items()}, _stubs())


def corpus_class() -> type:
    """SGLang 0.5.23's ``NgramCorpus`` (the wheel's class, unchanged, over the wheel's core)."""
    return wheel_modules()[PY_FILES["sglang/srt/speculative/cpp_ngram/ngram_corpus.py"]].NgramCorpus


# ---- SGLang 0.5.9's NgramCache (the window era) -------------------------------------------------

LEGACY_PY = "sglang/srt/speculative/cpp_ngram/ngram_cache.py"


def legacy_python_file() -> Path:
    """The 0.5.9 wheel's ``ngram_cache.py``, extracted once beside that core."""
    path = base._cache_dir() / f"sglang-{base.LEGACY_VERSION}" / "py" / LEGACY_PY
    if not path.exists():
        base.extract_from_wheel(base.LEGACY_VERSION, {LEGACY_PY: path}.get)
    return path


class _LegacyParam:
    """Stands in for the pybind ``Param`` of 0.5.9 (plain attributes)."""


class _LegacyNgram:
    """Stands in for the pybind ``Ngram`` of 0.5.9, over the ctypes-built core (inserts are
    complete when ``asyncInsert`` returns: ``synchronize`` has nothing left to wait for)."""

    def __init__(self, capacity: int, p: _LegacyParam) -> None:
        self._peer = base.SglangLegacyPeer(
            branch_length=p.branch_length, min_match_window_size=p.min_match_window_size,
            max_match_window_size=p.max_match_window_size, min_bfs_breadth=p.min_bfs_breadth,
            max_bfs_breadth=p.max_bfs_breadth, draft_token_num=p.draft_token_num,
            match_type=p.match_type, capacity=capacity)

    def asyncInsert(self, batch_tokens) -> None:
        self._peer.insert(batch_tokens)

    def synchronize(self) -> None:
        pass

    def reset(self) -> None:
        self._peer.reset()

    def batchMatch(self, batch_tokens):
        tokens, mask = self._peer.match(batch_tokens)
        return types.SimpleNamespace(token=tokens.reshape(-1).tolist(),
                                     mask=mask.reshape(-1).astype(np.uint8).tolist())


@functools.cache
def legacy_cache_class() -> type:
    """SGLang 0.5.9's ``NgramCache`` (the wheel's class, unchanged, over the wheel's core; its
    ``torch.utils.cpp_extension.load`` answered by the ctypes build)."""
    base.build(base.LEGACY_VERSION)
    path = legacy_python_file()
    ext = types.ModuleType("torch.utils.cpp_extension")
    ext.load = lambda **kw: types.SimpleNamespace(Param=_LegacyParam, Ngram=_LegacyNgram)
    stubs = {"torch": types.ModuleType("torch"), "torch.utils": types.ModuleType("torch.utils"),
             "torch.utils.cpp_extension": ext}
    stubs["torch"].__path__ = stubs["torch.utils"].__path__ = []
    name = "sglang_0_5_9_ngram_cache"
    saved = {n: sys.modules[n] for n in stubs if n in sys.modules}
    try:
        sys.modules.update(stubs)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
    finally:
        for n in stubs:
            sys.modules.pop(n, None)
        sys.modules.update(saved)
    return mod.NgramCache
