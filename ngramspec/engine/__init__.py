"""The Numba engine: flat-array trie, matching and tree-building kernels."""

from .backend import EngineBackend

__all__ = ["EngineBackend"]
