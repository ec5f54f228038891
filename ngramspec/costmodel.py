"""Moved to :mod:`ngramspec.costs.model` (kept while the package's own imports move)."""

from .costs.model import CostModel, Prediction  # noqa: F401
