"""The Numba engine: flat-array trie, matching and tree-building kernels.

State travels between kernels as named-tuple bundles: :data:`~.trie.Trie` (owned and grown by
:class:`~.trie.TrieArrays`), :data:`~.match.States` (:func:`~.match.new_states`),
:data:`~.tree.Scratch` (:func:`~.tree.new_scratch`) and :data:`~.adaptive.AdaptiveScratch`.
Kernels called from Python take them as plain tuples (cheaper to dispatch) and rebuild the
named view on entry (``Trie(*trie)``).  The serving-loop replay's one entry point is
:func:`~.serving.replay.replay`.

One of each algorithm: the trie's insert and child table (:mod:`.trie`), the libstdc++
``unordered_map`` order of tree children (:mod:`.tree`), the libstdc++ heap (:mod:`.heap`).
Modules by topic: :mod:`.trie`, :mod:`.match` (anchors), :mod:`.tree` (BFS/PROB trees and
the layout), :mod:`.adaptive`, :mod:`.batch` (the backend's match kernels) and
:mod:`.backend`, :mod:`.export`, :mod:`.integrity`; three subpackages:
:mod:`.corpora` (external corpora: the suffix automaton, its build, its trees),
:mod:`.serving` (the compiled replay of the serving loop, the step API's kernels, per-request
memory and request store) and :mod:`.vllm` (vLLM's n-gram proposer and its replay, trees cut
to chains, its input batch's rows recognised).
"""

from typing import Any

__all__ = ["EngineBackend", "Trie", "TrieArrays", "States", "new_states", "Scratch",
           "new_scratch", "kernels"]

# Importing ngramspec loads no Numba: the kernel modules load on first use, through
# ``kernels`` or these names.
_HOMES = {"EngineBackend": "backend", "States": "match", "new_states": "match", "Trie": "trie",
          "TrieArrays": "trie", "Scratch": "tree", "new_scratch": "tree"}
_KERNELS: dict[str, Any] = {}


def kernels(name: str) -> Any:
    """The kernel module ``ngramspec.engine.<name>``, imported on first use and held here: an
    import statement on every call costs about 2.5 µs on a hot path whose caches a forward
    pass has just evicted (measured at batch 1)."""
    mod = _KERNELS.get(name)
    if mod is None:
        import importlib

        mod = _KERNELS[name] = importlib.import_module(f"{__name__}.{name}")
    return mod


def __getattr__(name: str) -> Any:
    if name in _HOMES:
        return getattr(kernels(_HOMES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
