"""Draft trees: :class:`DraftBatch`, SGLang's layout and what derives from it (``batch.py``),
and their greedy and sampled verification (``verify.py``)."""

from .batch import DraftBatch

__all__ = ["DraftBatch"]
