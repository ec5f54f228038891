"""The Numba engine: flat-array trie, matching and tree-building kernels.

State travels between kernels as named-tuple bundles: :data:`~.trie.Trie` (owned and grown by
:class:`~.trie.TrieArrays`), :data:`~.match.States` (:func:`~.match.new_states`),
:data:`~.tree.Scratch` (:func:`~.tree.new_scratch`) and :data:`~.adaptive.AdaptiveScratch`.
Kernels called from Python take them as plain tuples (cheaper to dispatch) and rebuild the
named view on entry (``Trie(*trie)``).  The serving-loop replay's one entry point is
:func:`~.replay.replay`.
"""

from .backend import EngineBackend
from .match import States, new_states
from .trie import Trie, TrieArrays
from .tree import Scratch, new_scratch

__all__ = ["EngineBackend", "Trie", "TrieArrays", "States", "new_states", "Scratch",
           "new_scratch"]
