"""SGLang 0.5.23's external corpora (suffix automata), from the same wheel as
:mod:`benchmarks.peers.sglang`, driven through ctypes.

:func:`build` reuses the sources that :func:`benchmarks.peers.sglang.build` extracted and
compiles them with its trie shim and a second C shim of ours: a bare ``SuffixAutomaton`` (build
timing, memory) and the corpus calls of an ``Ngram`` object (load, remove, clear, list), wrapped
as :class:`SglangSamPeer` with ``NgramCache``-like calls.  Used by the corpus benchmark and the
differential tests (marker ``sglang``).
"""

from __future__ import annotations

import ctypes

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
    """Compile the corpus shim beside SGLang's sources and the trie shim of
    :mod:`benchmarks.peers.sglang` (whose :func:`~benchmarks.peers.sglang.build` downloads
    them), once."""
    base.build()
    out = base._cache_dir() / f"sglang-{base.SGLANG_VERSION}"
    lib = out / f"libsglang_sam_peer-{base.shim_tag(base.SHIM, SHIM)}.so"
    if lib.exists():
        return str(lib)
    src = out / "src"
    (src / "sam_shim.cpp").write_text(SHIM)
    files = [src / f for f in base.SOURCES] + [src / "sam_shim.cpp", src / "peer_shim.cpp"]
    return str(base.compile_library(lib, files, "SGLang's corpus shim"))


def _lib() -> ctypes.CDLL:
    if not _LIB:
        lib = ctypes.CDLL(build())
        p, i64, i32, s = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int, ctypes.c_char_p
        lib.sam_error.restype = s
        lib.sam_build.restype = p
        lib.sam_build.argtypes = [p, i64]
        lib.sam_destroy.argtypes = [p]
        lib.ngx_add_corpus.argtypes = [p, s, p, i64]
        lib.ngx_remove_corpus.argtypes = [p, s]
        lib.ngx_clear_corpora.argtypes = [p]
        lib.ngx_list.restype = i64
        lib.ngx_list.argtypes = [p, p, i64]
        # The trie calls of benchmarks.peers.sglang's shim, compiled into the same library.
        lib.peer_create.restype = p
        lib.peer_create.argtypes = [i64, i64, i64, i64, i64, i32, i64, i64]
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
    """SGLang 0.5.23's ``Ngram`` with external corpora (keywords ``external_sam_budget`` and
    ``external_corpus_max_tokens`` beside :class:`~benchmarks.peers.sglang.SglangPeer`'s):
    ``add_corpus`` takes the documents, joins them with ``INT32_MIN`` as SGLang's Python does
    and loads them in chunks."""

    @staticmethod
    def _library() -> ctypes.CDLL:
        return _lib()  # the trie calls and the corpus calls, in one library

    def add_corpus(self, corpus_id: str, documents) -> int:
        parts = []
        for d in documents:
            if len(d):
                if parts:
                    parts.append(np.array([-(2**31)], np.int32))
                parts.append(np.asarray(d, np.int32))
        stream = np.ascontiguousarray(np.concatenate(parts) if parts else np.zeros(0, np.int32))
        if self._lib.ngx_add_corpus(self._h, corpus_id.encode(), stream.ctypes.data, stream.size):
            raise ValueError(self._lib.sam_error().decode())
        return int(stream.size)

    def remove_corpus(self, corpus_id: str) -> None:
        self._lib.ngx_remove_corpus(self._h, corpus_id.encode())

    def clear_corpora(self) -> None:
        self._lib.ngx_clear_corpora(self._h)

    def corpora(self) -> dict[str, int]:
        need = self._lib.ngx_list(self._h, None, 0)
        buf = ctypes.create_string_buffer(need + 1)
        self._lib.ngx_list(self._h, buf, need + 1)
        out = {}
        for line in buf.value.decode().splitlines():
            cid, count = line.split("\t", 1)
            out[cid] = int(count)
        return out
