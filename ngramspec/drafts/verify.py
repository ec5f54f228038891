"""Greedy tree verification, as SGLang's ``VerifyTreeGreedy`` (spec section 5.1)."""

from __future__ import annotations

from functools import cached_property
from typing import Any, Sequence

import numpy as np

from .. import _validate as v
from .._jit import EntryPoints
from ..engine import kernels
from .batch import DraftBatch

__all__ = ["VerifyResult", "verify_greedy", "verify_greedy_logits"]


class VerifyResult:
    """Outcome of tree verification of a :class:`DraftBatch`.

    Attributes
    ----------
    accept_index : np.ndarray
        (B, n) int32: accepted slots in order, starting with the root slot 0, padded with -1
        (SGLang's global index is ``b * n + slot``).
    accept_lens : np.ndarray
        (B,) int32: accepted drafts + 1 bonus token (SGLang's accept length).
    emitted : list of np.ndarray
        Per request, int32: the accepted draft tokens followed by the bonus token (made when
        first read; :meth:`Drafter.accept` takes the result itself, which skips them).
    """

    def __init__(self, accept_index: np.ndarray, accept_lens: np.ndarray,
                 emitted: Sequence[np.ndarray]) -> None:
        self.accept_index = accept_index
        self.accept_lens = accept_lens
        self.__dict__["emitted"] = list(emitted)
        self._tokens: np.ndarray | None = None

    @classmethod
    def _compiled(cls, accept_index: np.ndarray, accept_lens: np.ndarray,
                  tokens: np.ndarray) -> "VerifyResult":
        """From the kernel's arrays: ``tokens[b, :accept_lens[b]]`` are request b's emitted
        tokens."""
        self = cls.__new__(cls)
        self.accept_index, self.accept_lens, self._tokens = accept_index, accept_lens, tokens
        return self

    @cached_property
    def emitted(self) -> list[np.ndarray]:
        return [self._tokens[b, :k] for b, k in enumerate(self.accept_lens.tolist())]

    def _matrix(self) -> np.ndarray:
        """(B, >= max accept length) int32: each request's emitted tokens, left-aligned."""
        if self._tokens is None:
            em = self.emitted
            out = np.zeros((len(em), max((e.size for e in em), default=1)), np.int32)
            for b, e in enumerate(em):
                out[b, :e.size] = e
            self._tokens = out
        return self._tokens

    @property
    def batch_size(self) -> int:
        return int(self.accept_lens.size)

    def __repr__(self) -> str:
        return (f"VerifyResult(accept_lens={self.accept_lens.tolist()}, "
                f"emitted={[e.tolist() for e in self.emitted]})")


def verify_greedy(drafts: DraftBatch, target_predict) -> VerifyResult:
    """Accept the longest draft path that the target's argmax follows, plus its bonus token.

    ``target_predict[b, i]`` is the target's argmax after slot ``i`` (its prediction for the
    token that follows the path root..i).  From the root, the children of the current slot are
    scanned in slot order and the first whose token equals the current slot's prediction is
    accepted; the bonus is the prediction at the last accepted slot.  Padding slots are token 0
    children of the root and are accepted like real drafts (SGLang's quirk, spec section 5.3).
    ``target_predict`` may be a NumPy array or a torch tensor (a CPU tensor is read without a
    copy, a GPU tensor copied to the host).
    Compiled; :func:`ngramspec.reference.verify.verify_greedy` is the readable definition.

    Examples
    --------
    >>> import numpy as np, ngramspec as ns
    >>> d = ns.DraftBatch(np.array([[2, 4, 3, 7]], dtype=np.int32),
    ...                   np.array([[[1, 0, 0, 0], [1, 1, 0, 0], [1, 0, 1, 0], [1, 0, 1, 1]]],
    ...                            dtype=bool), np.array([3], dtype=np.int32))
    >>> r = ns.verify_greedy(d, [[3, 99, 7, 11]])
    >>> r.accept_index.tolist(), r.accept_lens.tolist(), [e.tolist() for e in r.emitted]
    ([[0, 2, 3, -1]], [3], [[3, 7, 11]])
    """
    if type(drafts) is not DraftBatch:
        _check_drafts(drafts)
    tokens, mask = drafts._tokens, drafts._mask
    b, n = tokens.shape
    pred = target_predict
    if type(pred) is not np.ndarray or pred.dtype is not _INT64 or pred.shape != (b, n) or \
            not pred.flags.c_contiguous:
        if type(pred) is not np.ndarray:
            pred = np.asarray(v.host_array(pred, "target_predict"))
        pred = v.as_token_matrix(pred, (b, n), "target_predict", check_range=False)
        pred = np.ascontiguousarray(pred, dtype=np.int64)
    accept_index = np.empty((b, n), np.int32)
    accept_lens = np.empty(b, np.int32)
    out = np.zeros((b, n), np.int32)  # rows 0-padded: Drafter.accept checks them in one pass
    walk = kernels("serving.steps").greedy_walk
    if tokens.dtype is _INT32 and mask.dtype is _BOOL and tokens.flags.c_contiguous and \
            mask.flags.c_contiguous:  # the usual types: the entry point, no typing per call
        walk = _ENTRIES("walk", walk, (tokens, mask, pred, accept_index, accept_lens, out))
    # (else views of a DraftBatch's arrays, say: typed per call)
    bad = walk(tokens, mask, pred, accept_index, accept_lens, out)
    if bad >= 0:  # (the range is checked in the walk: one pass less)
        raise v.int32_range_error("target_predict", pred.min(), pred.max())
    return VerifyResult._compiled(accept_index, accept_lens, out)


def verify_greedy_logits(drafts: DraftBatch, logits) -> VerifyResult:
    """:func:`verify_greedy` from the target's logits over the draft slots.

    ``logits`` has shape (B, n, V) (or SGLang's flat (B * n, V)); row ``[b, i]`` is the
    target's output at slot ``i``.  The argmax takes the first of equal maxima (as
    ``numpy.argmax`` and ``torch.argmax`` do).  Anything NumPy can read works; a torch tensor
    (any device or dtype, ``bfloat16`` included) takes its argmax where it is, and only the
    (B, n) argmax is copied to the host.

    Examples
    --------
    >>> import numpy as np, ngramspec as ns
    >>> cache = ns.NgramCache(draft_token_num=3, capacity=100)
    >>> cache.insert([[2, 4], [2, 3]])
    >>> d = cache.match([[2]])                       # root 2; children 4 and 3
    >>> logits = np.eye(6)[[3, 1, 5]][None]          # argmax 3, 1, 5
    >>> ns.verify_greedy_logits(d, logits).emitted[0].tolist()
    [3, 5]
    """
    _check_drafts(drafts)
    b, n = drafts._tokens.shape
    if _is_torch(logits):  # the argmax where the logits are (any device, bfloat16 too)
        shape = tuple(logits.shape)
        if len(shape) == 2 and shape[0] == b * n:
            logits = logits.reshape(b, n, shape[1])
        elif len(shape) != 3 or shape[:2] != (b, n) or shape[2] == 0:
            raise ValueError(f"logits must have shape (batch, draft_token_num, vocab) = ({b}, "
                             f"{n}, V) or ({b * n}, V) with V > 0, got {shape}")
        return verify_greedy(drafts, logits.argmax(dim=-1).cpu().numpy())
    return verify_greedy(drafts, _as_logits(logits, b, n).argmax(axis=-1))


def _is_torch(x) -> bool:
    return type(x).__module__.startswith("torch") and hasattr(x, "argmax") and \
        hasattr(x, "cpu")


_INT64, _INT32, _BOOL = np.dtype(np.int64), np.dtype(np.int32), np.dtype(np.bool_)
_ENTRIES = EntryPoints()  # greedy_walk's, made at the first call of the usual types


def _check_drafts(drafts) -> None:
    if not isinstance(drafts, DraftBatch):
        raise TypeError(f"drafts must be a DraftBatch, got {type(drafts).__name__}")


def verify_sampling(drafts: DraftBatch, target_probs, *, rng: np.random.Generator,
                    threshold_single: float = 1.0, threshold_acc: float = 1.0) -> VerifyResult:
    """Tree verification of sampled requests, as SGLang's target-only rule (spec section 5.2).

    Per request, from the root: one uniform coin ``u`` walks the children of the current slot
    in sibling order (:attr:`DraftBatch.retrieve_next_sibling`), adding each child's target
    probability ``q = target_probs[b, slot, token]`` to ``acc``; the first child with
    ``u <= acc / threshold_acc`` or ``q >= threshold_single`` is accepted and the walk
    descends into it with a new coin.  When no child is accepted, the rejected children's
    tokens are removed from the current slot's distribution and the bonus token is drawn from
    what remains, renormalised (no removal when every depth was accepted).  SGLang's token-0
    padding slots are root children like any other: each adds ``p(0)`` to ``acc`` again, a
    small bias towards token 0 that this reproduces.

    With the default thresholds and distinct sibling tokens, a child is accepted with exactly
    the probability that a fresh draw from the target equals its token, and the emitted tokens
    follow the target's distribution.

    Parameters
    ----------
    drafts : DraftBatch
    target_probs : array_like
        (B, n, V) (or SGLang's flat (B * n, V)) float: the target's distribution for the token
        after each slot (softmax at temperature, after top-k/top-p); every row sums to 1.
    rng : numpy.random.Generator
        Source of the coins.
    threshold_single, threshold_acc : float
        SGLang's ``speculative_accept_threshold_single`` / ``_acc`` (default 1.0: lossless).

    Returns
    -------
    VerifyResult
        As :func:`verify_greedy`: accepted slots, accept lengths (drafts + bonus), emitted
        tokens.

    Examples
    --------
    >>> import numpy as np, ngramspec as ns
    >>> d = ns.DraftBatch(np.array([[2, 4, 3]], dtype=np.int32),
    ...                   np.array([[[1, 0, 0], [1, 1, 0], [1, 0, 1]]], dtype=bool),
    ...                   np.array([2], dtype=np.int32))
    >>> p = np.zeros((1, 3, 6)); p[0, 0, 3] = 1.0; p[0, 2, 5] = 1.0; p[0, 1, 1] = 1.0
    >>> r = ns.verify_sampling(d, p, rng=np.random.default_rng(0))  # certain: 3, then 5
    >>> r.accept_index.tolist(), r.accept_lens.tolist(), [e.tolist() for e in r.emitted]
    ([[0, 2, -1]], [2], [[3, 5]])
    """
    _check_drafts(drafts)
    _check_rng(rng)
    t_single = _as_threshold(threshold_single, "threshold_single")
    t_acc = _as_threshold(threshold_acc, "threshold_acc")
    probs = _as_probs(target_probs, drafts.tokens)
    tokens = drafts.tokens
    next_token = drafts.retrieve_next_token
    next_sibling = drafts.retrieve_next_sibling
    from ..reference.verify import no_acceptance  # the readable rule's start, shared

    b, n = tokens.shape
    accept_index, accept_lens = no_acceptance(b, n)
    emitted = []
    for r in range(b):
        cur, k, out = 0, 0, []
        coin, acc = rng.random(), 0.0
        rejected: dict[int, float] = {}  # per token, not summed (duplicate padding: once)
        for _ in range(1, n):
            child = next_token[r, cur]
            while child != -1:
                tok = int(tokens[r, child])
                q = probs[r, cur, tok]
                acc += q
                if coin <= acc / t_acc or q >= t_single:
                    k += 1
                    accept_index[r, k] = child
                    out.append(tok)
                    cur, coin, acc, rejected = child, rng.random(), 0.0, {}
                    break
                rejected[tok] = q
                child = next_sibling[r, child]
            if child == -1:
                break
        dist = probs[r, cur].copy()
        if k != n - 1:
            for tok, q in rejected.items():
                dist[tok] = max(dist[tok] - q, 0.0)
        total = dist.sum()
        if not total > 0:  # only reachable through rounding: fall back on the target
            dist, total = probs[r, cur], probs[r, cur].sum()
        cdf = np.cumsum(dist)
        bonus = int(min(np.searchsorted(cdf, rng.random() * total, side="right"),
                        dist.size - 1))
        out.append(bonus)
        accept_lens[r] = k + 1
        emitted.append(np.asarray(out, dtype=np.int32))
    return VerifyResult(accept_index, accept_lens, emitted)


# --- the checks of the target's outputs ------------------------------------------------------


def _as_logits(values: Any, b: int, n: int) -> np.ndarray:
    """Logits as (B, n, V) (SGLang's flat (B * n, V) accepted), V > 0, numeric, finite or not."""
    arr = np.asarray(v.host_array(values, "logits", "numbers"))
    if arr.ndim == 2 and arr.shape[0] == b * n:
        arr = arr.reshape(b, n, arr.shape[1])
    if arr.ndim != 3 or arr.shape[:2] != (b, n) or arr.shape[2] == 0:
        raise ValueError(f"logits must have shape (batch, draft_token_num, vocab) = ({b}, {n}, "
                         f"V) or ({b * n}, V) with V > 0, got {arr.shape}")
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"logits must be numeric, got dtype {arr.dtype}")
    return arr


def _as_threshold(value: Any, name: str) -> float:
    """An acceptance threshold of sampling verification: a finite number > 0."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(
            value, (int, float, np.integer, np.floating)) or not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a finite number > 0 (SGLang's default 1.0), got "
                         f"{value!r}")
    return float(value)


def _check_rng(rng: Any) -> np.random.Generator:
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator (np.random.default_rng(seed)), "
                        f"got {type(rng).__name__}")
    return rng


def _as_probs(values: Any, tokens: np.ndarray) -> np.ndarray:
    """The target's distributions over the draft slots of ``tokens`` (B, n) as (B, n, V)
    float64 (SGLang's flat (B * n, V) accepted): finite, >= 0, rows summing to 1, and a
    vocabulary holding every drafted token."""
    arr = np.asarray(v.host_array(values, "target_probs", "floating-point probabilities"))
    b, n = tokens.shape
    if arr.ndim == 2 and arr.shape[0] == b * n:
        arr = arr.reshape(b, n, arr.shape[1])
    if arr.ndim != 3 or arr.shape[:2] != (b, n) or arr.shape[2] == 0:
        raise ValueError(f"target_probs must have shape (batch, draft_token_num, vocab) = "
                         f"({b}, {n}, V) or ({b * n}, V) with V > 0, got {arr.shape}")
    if arr.dtype.kind != "f":
        raise TypeError(f"target_probs must hold floating-point probabilities, got dtype "
                        f"{arr.dtype}")
    if not np.isfinite(arr).all():
        idx = tuple(int(i) for i in np.argwhere(~np.isfinite(arr))[0])
        raise ValueError(f"target_probs{list(idx)} is {arr[idx]}: probabilities must be finite")
    if (arr < 0).any():
        idx = tuple(int(i) for i in np.argwhere(arr < 0)[0])
        raise ValueError(f"target_probs{list(idx)} = {arr[idx]} is negative")
    sums = arr.sum(axis=2, dtype=np.float64)
    tol = 1e-6 if arr.dtype == np.float64 else 1e-3
    bad = np.abs(sums - 1.0) > tol
    if bad.any():
        i, j = (int(x) for x in np.argwhere(bad)[0])
        raise ValueError(f"target_probs[{i}, {j}] sums to {sums[i, j]:.6g}, not 1 (tolerance "
                         f"{tol:g}): pass the target's distribution (softmax after temperature, "
                         "top-k/top-p), not logits")
    vocab = arr.shape[2]
    kids = tokens[:, 1:]  # the root's token is never looked up
    if kids.size and (kids.max() >= vocab or kids.min() < 0):
        i, j = (int(x) for x in np.argwhere((kids >= vocab) | (kids < 0))[0])
        j += 1
        raise ValueError(f"draft token {int(tokens[i, j])} at [{i}, {j}] is outside the "
                         f"vocabulary of target_probs (size {vocab})")
    return arr.astype(np.float64, copy=False)
