"""SGLang 0.5.23's external corpora (suffix automata), from the same wheel as
:mod:`peers.sglang`, driven through ctypes.

:func:`build` reuses the sources that :func:`peers.sglang.build` extracted and compiles them
with a second C shim of ours: a bare ``SuffixAutomaton`` (build timing, memory) and an ``Ngram``
object with ``external_sam_budget`` and the corpus calls (load, remove, clear, list), wrapped as
:class:`SglangSamPeer` with ``NgramCache``-like calls.  Used by the corpus benchmark and the
differential tests (marker ``sglang``).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess

import numpy as np

from . import sglang as base

SHIM = r"""
// C entry points over SGLang's SuffixAutomaton and Ngram corpus calls (ours).
#include "ngram.h"
#include "suffix_automaton.h"
#include <cstdint>
#include <cstring>
#include <exception>
#include <string>
#include <vector>
using sglang::ngram::Ngram;
using sglang::ngram::Param;
using sglang::ngram::SuffixAutomaton;
static thread_local std::string g_error;
static const int64_t kChunk = 4096;  // SGLang's Python hands tokens over in such chunks
extern "C" {
const char* sam_error() { return g_error.c_str(); }
void* sam_build(const int32_t* tokens, int64_t n) {
  try {
    auto* s = new SuffixAutomaton();
    for (int64_t i = 0; i < n; i += kChunk) {
      int64_t e = i + kChunk < n ? i + kChunk : n;
      s->appendTokens(std::vector<int32_t>(tokens + i, tokens + e));
    }
    s->finalize();
    return s;
  } catch (const std::exception& e) { g_error = e.what(); return nullptr; }
}
void sam_destroy(void* s) { delete static_cast<SuffixAutomaton*>(s); }
void* ngx_create(int64_t capacity, int64_t min_b, int64_t max_b, int64_t depth, int64_t draft,
                 int prob, int64_t sam_budget, int64_t max_tokens) {
  try {
    Param p{};
    p.enable = true; p.enable_router_mode = false;
    p.min_bfs_breadth = min_b; p.max_bfs_breadth = max_b; p.max_trie_depth = depth;
    p.draft_token_num = draft; p.match_type = prob ? "PROB" : "BFS";
    p.external_sam_budget = static_cast<size_t>(sam_budget);
    p.external_corpus_max_tokens = static_cast<size_t>(max_tokens);
    return new Ngram(static_cast<size_t>(capacity), p);
  } catch (const std::exception& e) { g_error = e.what(); return nullptr; }
}
int ngx_add_corpus(void* h, const char* id, const int32_t* tokens, int64_t n) {
  auto* g = static_cast<Ngram*>(h);
  try {
    g->startExternalCorpusLoad();
    for (int64_t i = 0; i < n; i += kChunk) {
      int64_t e = i + kChunk < n ? i + kChunk : n;
      g->appendExternalCorpusTokens(std::vector<int32_t>(tokens + i, tokens + e));
    }
    g->finishExternalCorpusLoad(std::string(id));
    return 0;
  } catch (const std::exception& e) { g_error = e.what(); g->resetStagingSam(); return 1; }
}
void ngx_remove_corpus(void* h, const char* id) {
  static_cast<Ngram*>(h)->removeExternalCorpus(std::string(id));
}
void ngx_clear_corpora(void* h) { static_cast<Ngram*>(h)->clearExternalCorpus(); }
// "id\tcount\n" lines into buf; returns the length needed.
int64_t ngx_list(void* h, char* buf, int64_t cap) {
  std::string out;
  for (auto& kv : static_cast<Ngram*>(h)->listExternalCorpora())
    out += kv.first + "\t" + std::to_string(kv.second) + "\n";
  if (static_cast<int64_t>(out.size()) < cap) std::memcpy(buf, out.c_str(), out.size() + 1);
  return static_cast<int64_t>(out.size());
}
}
"""

_LIB: list[ctypes.CDLL] = []


def build() -> str:
    """Compile the corpus shim beside SGLang's sources (downloaded by peers.sglang.build)."""
    base.build()
    out = base._cache_dir() / f"sglang-{base.SGLANG_VERSION}"
    lib = out / "libsglang_sam_peer.so"
    if lib.exists():
        return str(lib)
    src = out / "src"
    (src / "sam_shim.cpp").write_text(SHIM)
    cxx = shutil.which(os.environ.get("CXX", "g++"))
    if cxx is None:
        raise base.PeerUnavailable("no C++ compiler (g++) to build SGLang's core")
    files = [str(src / f) for f in base.SOURCES] + [str(src / "sam_shim.cpp"),
                                                      str(src / "peer_shim.cpp")]
    tmp = lib.with_suffix(".so.tmp")
    res = subprocess.run([cxx, "-std=c++20", "-O3", "-shared", "-fPIC", "-pthread", "-I",
                          str(src), *files, "-o", str(tmp)], capture_output=True, text=True)
    if res.returncode != 0:
        raise base.PeerUnavailable(f"compiling SGLang's corpus shim failed:\n{res.stderr[-2000:]}")
    tmp.replace(lib)
    return str(lib)


def _lib() -> ctypes.CDLL:
    if not _LIB:
        lib = ctypes.CDLL(build())
        p, i64, i32, s = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_char_p
        lib.sam_error.restype = s
        lib.sam_build.restype = p
        lib.sam_build.argtypes = [p, i64]
        lib.sam_destroy.argtypes = [p]
        lib.ngx_create.restype = p
        lib.ngx_create.argtypes = [i64, i64, i64, i64, i64, i32, i64, i64]
        lib.ngx_add_corpus.argtypes = [p, s, p, i64]
        lib.ngx_remove_corpus.argtypes = [p, s]
        lib.ngx_clear_corpora.argtypes = [p]
        lib.ngx_list.restype = i64
        lib.ngx_list.argtypes = [p, p, i64]
        # The trie calls of peers.sglang's shim, compiled into the same library.
        lib.peer_destroy.argtypes = [p]
        lib.peer_insert.argtypes = [p, p, p, i64]
        lib.peer_match.argtypes = [p, p, p, p, p, i64, p, p]
        lib.peer_erase.argtypes = [p, p, i64]
        lib.peer_reset.argtypes = [p]
        lib.peer_error.restype = s
        _LIB.append(lib)
    return _LIB[0]


class SamHandle:
    """A bare SGLang ``SuffixAutomaton`` built from a token stream (chunks of 4,096)."""

    def __init__(self, stream: np.ndarray) -> None:
        arr = np.ascontiguousarray(stream, dtype=np.int32)
        self._h = _lib().sam_build(arr.ctypes.data, arr.size)
        if not self._h:
            raise RuntimeError(_lib().sam_error().decode())

    def close(self) -> None:
        if self._h:
            _lib().sam_destroy(self._h)
            self._h = None

    __del__ = close


class SglangSamPeer(base.SglangPeer):
    """SGLang 0.5.23's ``Ngram`` with external corpora: ``add_corpus`` takes the documents,
    joins them with ``INT32_MIN`` as SGLang's Python does and loads them in chunks."""

    def __init__(self, *, max_trie_depth=18, min_bfs_breadth=1, max_bfs_breadth=10,
                 draft_token_num=12, match_type="BFS", capacity=10_000_000,
                 external_sam_budget=0, external_corpus_max_tokens=10_000_000):
        if capacity <= max_trie_depth:
            raise ValueError("SGLang crashes for capacity <= max_trie_depth")
        self.n = draft_token_num
        self.depth = max_trie_depth
        lib = _lib()
        self._h = lib.ngx_create(capacity, min_bfs_breadth, max_bfs_breadth, max_trie_depth,
                                 draft_token_num, int(match_type == "PROB"),
                                 external_sam_budget, external_corpus_max_tokens)
        if not self._h:
            raise ValueError(lib.sam_error().decode())
        self._ids: dict = {}
        self._next = 0

    def __del__(self):
        if getattr(self, "_h", None):
            _lib().peer_destroy(self._h)
            self._h = None

    def add_corpus(self, corpus_id: str, documents) -> int:
        parts = []
        for d in documents:
            if len(d):
                if parts:
                    parts.append(np.array([-(2**31)], np.int32))
                parts.append(np.asarray(d, np.int32))
        stream = np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(0, np.int32))
        if _lib().ngx_add_corpus(self._h, corpus_id.encode(), stream.ctypes.data, stream.size):
            raise ValueError(_lib().sam_error().decode())
        return int(stream.size)

    def remove_corpus(self, corpus_id: str) -> None:
        _lib().ngx_remove_corpus(self._h, corpus_id.encode())

    def clear_corpora(self) -> None:
        _lib().ngx_clear_corpora(self._h)

    def corpora(self) -> dict[str, int]:
        need = _lib().ngx_list(self._h, None, 0)
        buf = ctypes.create_string_buffer(need + 1)
        _lib().ngx_list(self._h, buf, need + 1)
        out = {}
        for line in buf.value.decode().splitlines():
            cid, count = line.split("\t", 1)
            out[cid] = int(count)
        return out

    # The inherited calls go through peers.sglang's library; route them to this one.
    def insert(self, seqs) -> None:
        flat, offsets = base._pack(seqs)
        if _lib().peer_insert(self._h, flat.ctypes.data, offsets.ctypes.data, len(offsets) - 1):
            raise RuntimeError(_lib().peer_error().decode())

    def match(self, contexts, request_ids=None, total_lens=None):
        b = len(contexts)
        flat, offsets = base._pack(contexts)
        if request_ids is None:
            ids = np.arange(self._next, self._next + b, dtype=np.int64) + (1 << 40)
            lens = np.diff(offsets)
        else:
            ids = self._state_ids(request_ids)
            lens = np.asarray(total_lens, np.int64)
        tokens = np.empty((b, self.n), np.int32)
        mask = np.empty((b, self.n, self.n), np.uint8)
        lib = _lib()
        if lib.peer_match(self._h, ids.ctypes.data, flat.ctypes.data, offsets.ctypes.data,
                          lens.ctypes.data, b, tokens.ctypes.data, mask.ctypes.data):
            raise RuntimeError(lib.peer_error().decode())
        if request_ids is None:
            lib.peer_erase(self._h, ids.ctypes.data, b)
        return tokens, mask.astype(bool)

    def match_packed(self, packed) -> None:
        ids, flat, offsets, lens, b, tokens, mask = packed
        _lib().peer_match(self._h, ids.ctypes.data, flat.ctypes.data, offsets.ctypes.data,
                          lens.ctypes.data, b, tokens.ctypes.data, mask.ctypes.data)

    def erase(self, request_ids) -> None:
        ids = np.asarray([self._ids.pop(r) for r in request_ids if r in self._ids], np.int64)
        if ids.size:
            _lib().peer_erase(self._h, ids.ctypes.data, ids.size)

    def reset(self) -> None:
        _lib().peer_reset(self._h)
        self._ids.clear()
        self._next = 0
