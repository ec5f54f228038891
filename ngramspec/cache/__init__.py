"""The cache: :class:`NgramCache` (``facade.py``: the lock, the backend, matching; its corpus
calls in ``corpus_calls.py``, save, load and the integrity check in ``saving.py``), the backend
protocol and its name table (``backends.py``), the insert thread (``inserts.py``), external
corpora (``corpora.py``) and the file format (``persist.py``)."""

from .facade import BACKENDS, NgramCache, cache_from_sglang_args

__all__ = ["NgramCache", "BACKENDS", "cache_from_sglang_args"]
