"""The Numba engine: flat-array trie, matching and tree-building kernels.

State travels between kernels as named-tuple bundles: :data:`~.trie.Trie` (owned and grown by
:class:`~.trie.TrieArrays`), :data:`~.match.States` (:func:`~.match.new_states`),
:data:`~.tree.Scratch` (:func:`~.tree.new_scratch`) and :data:`~.adaptive.AdaptiveScratch`.
Kernels called from Python take them as plain tuples (cheaper to dispatch) and rebuild the
named view on entry (``Trie(*trie)``).  The serving-loop replay's one entry point is
:func:`~.replay.replay`.

One of each algorithm: the trie's insert and child table (:mod:`.trie`), the libstdc++
``unordered_map`` order of tree children (:mod:`.tree`), the libstdc++ heap (:mod:`.heap`).
Modules by topic: :mod:`.trie`, :mod:`.match` (anchors), :mod:`.tree` (BFS/PROB trees and
the layout), :mod:`.adaptive`, :mod:`.batch` (the backend's match kernels) and
:mod:`.backend`, :mod:`.automaton`, :mod:`.corpus_tree` and :mod:`.sam` (external corpora),
:mod:`.replay_kernel` and its driver :mod:`.replay`, :mod:`.steps`, :mod:`.remembered` and
:mod:`.request_store` (the step API's kernels, per-request memory and request store),
:mod:`.export`, :mod:`.integrity`; for vLLM, :mod:`.lookup` (its n-gram proposer and its replay),
:mod:`.chains` (trees cut to chains) and :mod:`.rows` (its input batch's rows recognised).
"""

from .backend import EngineBackend
from .match import States, new_states
from .trie import Trie, TrieArrays
from .tree import Scratch, new_scratch

__all__ = ["EngineBackend", "Trie", "TrieArrays", "States", "new_states", "Scratch",
           "new_scratch"]
