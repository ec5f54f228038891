"""What SGLang's two drop-in ``NgramCorpus`` classes share (0.5.23's in
:mod:`~ngramspec.integrations.sglang`, 0.5.9's in :mod:`~ngramspec.integrations.sglang_legacy`):
reading a configuration, SGLang's leaf-path reading of a tree mask and its ``debug_result``
log, and the packing of the worker's windows."""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from itertools import accumulate, chain
from typing import Any

import numpy as np

from ..config import PRESETS, NgramConfig

__all__ = ["EMPTY", "leaf_paths_from_mask", "log_draft_trees", "pack_windows", "resolve_config"]

#: No request ids (int64), shared.
EMPTY = np.zeros(0, np.int64)
# NumPy 2 refuses a Python int out of a dtype's range where NumPy 1 wrapped it around.
_FROMITER_REFUSES = int(np.__version__.split(".")[0]) >= 2


def resolve_config(config: Any) -> NgramConfig:
    """An :class:`~ngramspec.NgramConfig` from a config, a preset name (one of
    :data:`ngramspec.config.PRESETS`) or a TOML file's path.

    Examples
    --------
    >>> resolve_config("recommended").match_type
    'ADAPTIVE'
    """
    if isinstance(config, NgramConfig):
        return config
    if isinstance(config, str) and config in PRESETS:
        return NgramConfig.preset(config)
    if isinstance(config, (str, os.PathLike)):
        path = os.fspath(config)
        if not os.path.isfile(path):
            raise ValueError(f"config must be an NgramConfig, a preset ({', '.join(PRESETS)}) "
                             f"or a TOML file; {path!r} is none of these")
        from pathlib import Path

        return NgramConfig.from_toml(Path(path))
    raise TypeError(f"config must be an NgramConfig, a preset name or a TOML path, got "
                    f"{type(config).__name__}")


def leaf_paths_from_mask(tokens: Sequence[Any], tree_mask: Any) -> list[list[Any]]:
    """The token paths of a draft tree's leaves, read from its mask, as SGLang's
    ``NgramCorpus.leaf_paths_from_mask`` gives them.

    Row ``r`` of ``tree_mask`` marks (with 1) the columns of the slots on the path from the
    root to slot ``r``.  A row is a leaf when no later row marks every column it marks (a
    later row whose marked set contains it); each leaf gives the tokens of its marked columns
    in column order, and the leaves come in row order.  Any other value than 1 counts as
    unmarked; columns past ``len(tokens)`` count in the containment test but give no token.

    Parameters
    ----------
    tokens : sequence
        The tree's tokens, slot by slot (a list, or an array: the paths hold its elements).
    tree_mask : sequence of sequences or 2-D array
        The tree's ``n x n`` ancestor mask (one row per slot, at least ``len(tokens)``
        columns).

    Returns
    -------
    list of list
        The leaves' token paths (``tokens[c]`` for each marked column ``c``).

    Raises
    ------
    ValueError
        ``tree_mask`` is not a rectangular 2-D matrix, or has fewer columns than tokens.

    Examples
    --------
    >>> leaf_paths_from_mask([3, 4, 44, 5], [[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0],
    ...                                      [1, 1, 0, 1]])
    [[3, 44], [3, 4, 5]]
    """
    n = len(tokens)
    if not len(tree_mask):
        return []
    try:
        marked = np.asarray(tree_mask) == 1
    except ValueError:
        raise ValueError("tree_mask must be a rectangular 2-D matrix (rows of equal length)"
                         ) from None
    if marked.ndim != 2:
        raise ValueError(f"tree_mask must be a 2-D matrix, got {marked.ndim} dimension(s)")
    if marked.shape[1] < n:
        raise ValueError(f"tree_mask has {marked.shape[1]} columns but tokens has {n}: each "
                         "token needs a column")
    # outside[i, j]: columns row i marks and row j does not; 0 means row j contains row i.
    m = marked.astype(np.int32)
    contained = (m @ (1 - m).T) == 0
    leaf = ~np.triu(contained, k=1).any(axis=1)
    return [[tokens[c] for c in np.flatnonzero(marked[r, :n]).tolist()]
            for r in np.flatnonzero(leaf).tolist()]


def log_draft_trees(log: logging.Logger, draft_token_num: int, decoding_ids: Any,
                     decoding_masks: Any, tokenizer: Any) -> None:
    """SGLang's ``debug_result``: log ``batch_get``'s trees and their leaf paths at INFO."""
    if not log.isEnabledFor(logging.INFO):
        return
    d = draft_token_num
    ids = decoding_ids if hasattr(decoding_ids, "reshape") else np.asarray(decoding_ids)
    masks = decoding_masks if hasattr(decoding_masks, "reshape") else np.asarray(decoding_masks)
    n_ids, n_mask = int(np.prod(ids.shape)), int(np.prod(masks.shape))
    if n_ids % d or n_mask != (n_ids // d) * d * d:
        raise ValueError(f"decoding_ids ({n_ids} values) and decoding_masks ({n_mask} values) "
                         f"are not the trees of one batch_get with draft_token_num={d} "
                         f"({d} and {d * d} values per tree)")
    ids, masks = ids.reshape(-1, d), masks.reshape(-1, d, d)
    log.info("\ndecoding_ids=%r\ndecoding_masks=%r", ids, masks)
    for i in range(ids.shape[0]):
        paths = leaf_paths_from_mask(ids[i].tolist(), masks[i].tolist())
        if tokenizer is None:
            log.info("draft path %d: %s", i, paths)
            continue
        log.info("result %d:", i)
        for path in paths:
            log.info("draft path %d: %s -> %s", i, path, tokenizer.decode(path,
                                                                         ensure_ascii=False))


def pack_windows(batch: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """The worker's windows (lists of int token ids, none empty) packed as (int32 flat, int64
    offsets) in one pass; None for any other input, which the checked path then handles.
    Floats are truncated, as SGLang's own packing (``torch.tensor(..., dtype=int32)``) does."""
    try:
        lens = [len(s) for s in batch]
        if not lens or 0 in lens:
            return None
        if _FROMITER_REFUSES:  # (a Python int outside int32 raises: no range pass after)
            flat = np.fromiter(chain.from_iterable(batch), np.int32, sum(lens))
        else:
            wide = np.fromiter(chain.from_iterable(batch), np.int64, sum(lens))
            if wide.min() < -(2**31) or wide.max() > 2**31 - 1:
                return None
            flat = wide.astype(np.int32)
    except (TypeError, ValueError, OverflowError):
        return None
    return flat, np.fromiter(accumulate(lens, initial=0), np.int64, len(lens) + 1)
