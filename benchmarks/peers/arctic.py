"""Snowflake ArcticInference suffix decoding, built from its PyPI sdist, as a tree proposer.

``pip download --no-deps arctic-inference==0.3.0`` gives an sdist whose
``csrc/suffix_decoding/`` (a suffix tree in C++20 with a nanobind binding, ``_C``) builds on
its own; the rest of the package needs CUDA and is not built.  This module downloads the sdist
at benchmark time (nothing of it is stored in this repository), builds that one extension with
cmake and ``nanobind==2.9.2`` (installed into the running environment with pip if missing),
and lays out a minimal importable ``arctic_inference.suffix_decoding`` package next to it: the
built ``_C`` module plus the sdist's own ``suffix_decoding/__init__.py`` and ``cache.py`` (the
Python ``SuffixDecodingCache`` that vLLM and Arctic's vLLM plugin drive) and an empty top-level
``__init__.py`` of ours (the sdist's one only carries a licence header).

Build products are cached in ``$NGRAMSPEC_PEER_DIR`` (default: ``benchmarks/peers/.build``,
git-ignored), under ``arctic-inference-0.3.0/``.

How the cache is used here (as Arctic's vLLM plugin and vLLM's suffix-decoding proposer do):

- admission: ``start_request(rid, prompt)`` puts the prompt into the request's *local* suffix
  tree (and allocates the request's slot in the *global* tree, which holds responses only),
  then ``add_active_response(rid, [first_token])``: the token the prefill sampled;
- each step: ``speculate(rid, context, max_spec_tokens=11, max_spec_factor=4,
  max_spec_offset=0, min_token_prob=0.1, use_tree_spec=True)`` with ``context`` = the last
  ``max_tree_depth`` (64) tokens of prompt + output; the wrapper speculates from the local and
  from the global tree and keeps the draft with the higher score;
- after verification: ``add_active_response(rid, emitted)`` (accepted drafts + bonus) extends
  the local tree and the request's response in the global tree;
- finish: ``stop_request(rid)`` drops the local tree (prompt); the response stays in the global
  tree (``max_cached_requests=-1``: never evicted; Arctic's plugin default is 100,000 requests,
  the same on this corpus).

So a request's own prompt is searchable only by that request (local tree), while every
response, including the running one, is searchable by all later requests (global tree).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import numpy as np

ARCTIC_VERSION = "0.3.0"
NANOBIND_VERSION = "2.9.2"
#: Settings of issue 8: tree drafts, at most 11 tokens, factor 4, min_token_prob 0.1.
#: ``max_tree_depth`` 64 and ``max_spec_offset`` 0 are the defaults of Arctic's vLLM config.
DEFAULTS = dict(max_tree_depth=64, max_cached_requests=-1, max_spec_tokens=11,
                max_spec_factor=4.0, max_spec_offset=0.0, min_token_prob=0.1,
                use_tree_spec=True)


class PeerUnavailable(RuntimeError):
    """The Arctic peer could not be built here (no cmake/g++, no package index, ...)."""


def _cache_dir() -> Path:
    return Path(os.environ.get("NGRAMSPEC_PEER_DIR", Path(__file__).parent / ".build"))


def _run(cmd, what: str, **kw) -> None:
    res = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if res.returncode != 0:
        raise PeerUnavailable(f"{what} failed:\n{(res.stdout + res.stderr)[-3000:]}")


def _ensure_nanobind() -> None:
    try:
        import nanobind  # noqa: F401
        if getattr(nanobind, "__version__", NANOBIND_VERSION) == NANOBIND_VERSION:
            return
    except ImportError:
        pass
    _run([sys.executable, "-m", "pip", "install", "--quiet", f"nanobind=={NANOBIND_VERSION}"],
         f"pip install nanobind=={NANOBIND_VERSION}")
    importlib.invalidate_caches()


def _download_sdist(tmp: Path) -> Path:
    """The sdist: ``$NGRAMSPEC_ARCTIC_SDIST`` if set (a local ``.tar.gz``), else pip download.

    pip prepares the sdist's metadata, which runs its ``setup.py``; that imports torch (a
    build requirement).  Without build isolation this takes seconds where torch is installed;
    otherwise pip installs the build requirements (torch included) into an isolated
    environment first, which takes minutes.
    """
    local = os.environ.get("NGRAMSPEC_ARCTIC_SDIST")
    if local:
        return Path(local)
    base = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet",
            f"arctic-inference=={ARCTIC_VERSION}", "-d", str(tmp)]
    if subprocess.run(base[:5] + ["--no-build-isolation"] + base[5:],
                      capture_output=True).returncode != 0:
        _run(base, f"pip download arctic-inference=={ARCTIC_VERSION}")
    found = sorted(tmp.glob("arctic_inference-*.tar.gz"))
    if not found:
        raise PeerUnavailable("pip download gave no arctic_inference sdist")
    return found[0]


def build() -> Path:
    """Download the sdist and build ``suffix_decoding._C`` once; return the directory that
    holds the built ``arctic_inference`` package."""
    out = _cache_dir() / f"arctic-inference-{ARCTIC_VERSION}"
    pkg_root = out / "pkg"
    sd = pkg_root / "arctic_inference" / "suffix_decoding"
    if (out / "BUILT").exists():
        return pkg_root
    for tool in ("cmake", os.environ.get("CXX", "g++")):
        if shutil.which(tool) is None:
            raise PeerUnavailable(f"no {tool} to build ArcticInference's suffix tree")
    _ensure_nanobind()
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    with tempfile.TemporaryDirectory() as tmp:
        sdist = _download_sdist(Path(tmp))
        top = f"arctic_inference-{ARCTIC_VERSION}/"
        wanted = (top + "csrc/suffix_decoding/", top + "arctic_inference/suffix_decoding/")
        src = out / "src"
        with tarfile.open(sdist) as tar:
            for m in tar.getmembers():
                if m.isfile() and m.name.startswith(wanted) and ".." not in m.name:
                    dest = src / m.name[len(top):]
                    dest.parent.mkdir(parents=True, exist_ok=True)
                    dest.write_bytes(tar.extractfile(m).read())
    bdir = out / "cmake-build"
    _run(["cmake", "-S", str(src / "csrc" / "suffix_decoding"), "-B", str(bdir),
          f"-DPython_EXECUTABLE={sys.executable}", "-DCMAKE_BUILD_TYPE=Release"], "cmake configure")
    _run(["cmake", "--build", str(bdir), "-j", str(min(2, os.cpu_count() or 1))], "cmake build")
    built = [p for p in bdir.glob("_C*") if p.suffix in (".so", ".pyd")]
    if not built:
        raise PeerUnavailable(f"cmake built no _C module in {bdir}")
    sd.mkdir(parents=True)
    (pkg_root / "arctic_inference" / "__init__.py").write_text("")
    for name in ("__init__.py", "cache.py"):
        shutil.copy2(src / "arctic_inference" / "suffix_decoding" / name, sd / name)
    shutil.copy2(built[0], sd / built[0].name)
    (out / "BUILT").write_text(f"arctic-inference=={ARCTIC_VERSION} nanobind=={NANOBIND_VERSION}\n")
    return pkg_root


def load():
    """The ``arctic_inference.suffix_decoding`` module (built on first use)."""
    if "arctic_inference" not in sys.modules:
        # The built package by its file, under its own name (the import path stays as it is;
        # its submodules are found through the package's own search location).
        init = build() / "arctic_inference" / "__init__.py"
        spec = importlib.util.spec_from_file_location(
            "arctic_inference", init, submodule_search_locations=[str(init.parent)])
        if spec is None or spec.loader is None:
            raise PeerUnavailable(f"cannot load the built package at {init.parent}")
        module = importlib.util.module_from_spec(spec)
        sys.modules["arctic_inference"] = module
        spec.loader.exec_module(module)
    return importlib.import_module("arctic_inference.suffix_decoding")


class ArcticProposer:
    """Arctic's ``SuffixDecodingCache`` behind the tree-proposer protocol of
    ``benchmarks/peers/replay.py`` (``start`` / ``propose`` / ``on_accept`` / ``stop``).

    Keywords: ``max_tree_depth``, ``max_cached_requests`` (the cache's constructor) and
    ``max_spec_tokens``, ``max_spec_factor``, ``max_spec_offset``, ``min_token_prob``,
    ``use_tree_spec`` (``speculate``'s arguments); defaults in :data:`DEFAULTS`.
    """

    name = "Arctic suffix decoding"

    def __init__(self, **settings) -> None:
        unknown = set(settings) - set(DEFAULTS)
        if unknown:
            raise TypeError(f"unknown Arctic settings {sorted(unknown)}; known: {sorted(DEFAULTS)}")
        self.settings = {**DEFAULTS, **settings}
        mod = load()
        s = self.settings
        self.cache = mod.SuffixDecodingCache(max_tree_depth=s["max_tree_depth"],
                                             max_cached_requests=s["max_cached_requests"])
        self._spec = dict(max_spec_tokens=s["max_spec_tokens"],
                          max_spec_factor=float(s["max_spec_factor"]),
                          max_spec_offset=float(s["max_spec_offset"]),
                          min_token_prob=float(s["min_token_prob"]),
                          use_tree_spec=bool(s["use_tree_spec"]))
        self.last_draft = None

    def start(self, rid, prompt: np.ndarray, first_token: int) -> None:
        self.cache.start_request(rid, np.array(prompt, dtype=np.int32))
        self.cache.add_active_response(rid, np.asarray([first_token], dtype=np.int32))

    def propose(self, rid, context: np.ndarray):
        # a fresh writable copy: the binding refuses read-only arrays
        ctx = np.array(context[-self.settings["max_tree_depth"]:], dtype=np.int32)
        d = self.cache.speculate(rid, ctx, **self._spec)
        self.last_draft = d
        return (np.asarray(d.token_ids, dtype=np.int64).reshape(-1),
                np.asarray(d.parents, dtype=np.int64).reshape(-1))

    def on_accept(self, rid, emitted: np.ndarray) -> None:
        self.cache.add_active_response(rid, np.array(emitted, dtype=np.int32))

    def stop(self, rid) -> None:
        self.cache.stop_request(rid)
