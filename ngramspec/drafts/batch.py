"""``DraftBatch``: the draft trees of one ``match`` call, in SGLang's layout and derived forms."""

from __future__ import annotations

import sys
from functools import cached_property
from typing import Any

import numpy as np

from .. import _validate as v

__all__ = ["DraftBatch"]


def _frozen(a: np.ndarray) -> np.ndarray:
    a.flags.writeable = False
    return a


class DraftBatch:
    """Draft token trees for a batch of requests, one row per request, in batch order.

    Slot 0 of every row is the root (the last context token, already emitted); slots
    ``1 .. num_drafts[b]`` hold the drafted nodes in level order (every parent before its
    children, siblings in SGLang's layout order); the remaining slots are SGLang's padding:
    token 0 children of the root.  All (B, n) arrays ``.ravel()`` into SGLang's flat layout.

    Attributes
    ----------
    tokens : np.ndarray
        (B, n) int32 draft tokens.
    mask : np.ndarray
        (B, n, n) bool; ``mask[b, i, j]`` is True iff slot ``j`` is slot ``i`` or one of its
        ancestors (rows are queries, columns keys).
    num_drafts : np.ndarray
        (B,) int32: slots holding real drafts, root and padding excluded.
    probs : np.ndarray or None
        (B, n) float64, ADAPTIVE drafts only: the estimated probability that the target
        produces each slot's whole path (1 for the root, 0 for padding); None otherwise.

    Examples
    --------
    >>> import ngramspec as ns
    >>> cache = ns.NgramCache(max_trie_depth=4, min_bfs_breadth=1, max_bfs_breadth=3,
    ...                       draft_token_num=5, capacity=100)
    >>> cache.insert([[1, 2, 3, 1, 2, 4]])
    >>> d = cache.match([[3, 1, 2]])
    >>> d.tokens
    array([[2, 3, 4, 1, 2]], dtype=int32)
    >>> d.parents
    array([[-1,  0,  0,  1,  3]], dtype=int32)
    >>> d.positions([10])
    array([[10, 11, 11, 12, 13]])
    """

    def __init__(self, tokens: Any, mask: Any, num_drafts: Any, probs: Any = None) -> None:
        tokens = np.asarray(v.host_array(tokens, "tokens"))
        if tokens.ndim != 2 or (tokens.size and tokens.dtype.kind not in "iu"):
            raise ValueError(f"tokens must be a (batch, draft_token_num) integer array, got "
                             f"shape {tokens.shape} dtype {tokens.dtype}")
        b, n = tokens.shape
        if n < 1:
            raise ValueError("tokens needs at least one slot per request (the root)")
        mask = np.asarray(v.host_array(mask, "mask", "bools"))
        if mask.shape != (b, n, n) or not (mask.dtype == np.bool_ or (
                mask.dtype.kind in "iu" and ((mask == 0) | (mask == 1)).all())):
            raise ValueError(f"mask must be a bool (or 0/1) array of shape (batch, n, n) = "
                             f"({b}, {n}, {n}), got shape {mask.shape} dtype {mask.dtype}")
        num = np.asarray(v.host_array(num_drafts, "num_drafts", "integers"))
        if num.shape != (b,) or (num.size and num.dtype.kind not in "iu"):
            raise ValueError(f"num_drafts must be {b} integers, one per request, got shape "
                             f"{num.shape} dtype {num.dtype}")
        if num.size and (num.min() < 0 or num.max() > n - 1):
            raise ValueError(f"num_drafts must be within [0, {n - 1}] (slots after the root)")
        if probs is not None:
            probs = np.asarray(v.host_array(probs, "probs", "floats"))
            if probs.shape != (b, n) or probs.dtype.kind != "f":
                raise ValueError(f"probs must be None or a float array of shape ({b}, {n}), "
                                 f"got shape {probs.shape} dtype {probs.dtype}")
            probs = probs.astype(np.float64, copy=True)
        self._init(np.array(tokens, dtype=np.int32), mask.astype(bool), np.array(num, np.int32),
                   probs)

    @classmethod
    def _trusted(cls, tokens: np.ndarray, mask: np.ndarray, num_drafts: np.ndarray,
                 probs: np.ndarray | None = None) -> "DraftBatch":
        """From a backend's freshly allocated output arrays: no checks, no copies (and, being on
        every match's path, the fields set here rather than through :meth:`_init`)."""
        self = cls.__new__(cls)
        self._tokens, self._mask, self._num_drafts, self._probs = tokens, mask, num_drafts, probs
        return self

    @classmethod
    def _pooled(cls, pool: tuple, start: int, stop: int) -> "DraftBatch":
        """Rows ``start .. stop`` of a backend's output pool (tokens, mask, num arrays whose
        rows are written once, by one match): the row views are made when first read."""
        self = cls.__new__(cls)
        self._pool, self._start, self._stop, self._probs = pool, start, stop, None
        return self

    # Set directly by _trusted/_init; from the pool only when read (a view costs 0.15 us).
    _tokens = cached_property(lambda self: self._pool[0][self._start:self._stop])
    _mask = cached_property(lambda self: self._pool[1][self._start:self._stop])
    _num_drafts = cached_property(lambda self: self._pool[2][self._start:self._stop])

    def __getstate__(self) -> dict:
        # A pickle holds this batch's rows, not the whole pool they are views of.
        state = dict(self.__dict__)
        if "_pool" in state:
            state.update(_tokens=self._tokens, _mask=self._mask, _num_drafts=self._num_drafts)
            del state["_pool"], state["_start"], state["_stop"]
        return state

    def _init(self, tokens, mask, num_drafts, probs) -> None:
        # The arrays are frozen when first read (see the properties): nothing is done for
        # exports a caller never asks for.
        self._tokens, self._mask, self._num_drafts, self._probs = tokens, mask, num_drafts, probs

    @cached_property
    def tokens(self) -> np.ndarray:
        """(B, n) int32 draft tokens (read-only)."""
        return _frozen(self._tokens)

    @cached_property
    def mask(self) -> np.ndarray:
        """(B, n, n) bool tree mask (read-only); see the class docstring."""
        return _frozen(self._mask)

    @cached_property
    def num_drafts(self) -> np.ndarray:
        """(B,) int32 real drafts per request (read-only)."""
        return _frozen(self._num_drafts)

    @cached_property
    def probs(self) -> np.ndarray | None:
        """(B, n) float64 path probabilities (ADAPTIVE only, read-only) or None."""
        return None if self._probs is None else _frozen(self._probs)

    @property
    def expected_accept_lens(self) -> np.ndarray:
        """(B,) float64: the expected accept length of each tree, ``1 +`` the sum of its
        drafted nodes' probabilities (ADAPTIVE drafts only: SGLang's modes estimate none)."""
        if self.probs is None:
            raise ValueError("these drafts carry no probabilities: only match_type='ADAPTIVE' "
                             "estimates them")
        real = np.arange(self.draft_token_num)[None, :] <= self.num_drafts[:, None]
        return np.where(real, self.probs, 0.0).sum(axis=1)

    @property
    def batch_size(self) -> int:
        return int(self.tokens.shape[0])

    @property
    def draft_token_num(self) -> int:
        """Slots per request, root included (``n``)."""
        return int(self.tokens.shape[1])

    def __len__(self) -> int:
        return self.batch_size

    def __repr__(self) -> str:
        return (f"DraftBatch(batch_size={self.batch_size}, draft_token_num="
                f"{self.draft_token_num}, num_drafts={self.num_drafts.tolist()})")

    @cached_property
    def depth(self) -> np.ndarray:
        """(B, n) int32: ancestors of each slot, root excluded from none (root depth 0)."""
        n = self.draft_token_num
        strict = self.mask & ~np.eye(n, dtype=bool)
        return _frozen(strict.sum(axis=2).astype(np.int32))

    @cached_property
    def parents(self) -> np.ndarray:
        """(B, n) int32: parent slot of each slot, -1 for the root."""
        n = self.draft_token_num
        strict = self.mask & np.tri(n, n, -1, dtype=bool)  # j < i
        # The parent is the nearest ancestor: the largest j < i with mask[i, j].
        last = n - 1 - np.argmax(strict[:, :, ::-1], axis=2)
        return _frozen(np.where(strict.any(axis=2), last, -1).astype(np.int32))

    def positions(self, kv_lens=None, *, seq_lens=None) -> np.ndarray:
        """(B, n) int64 position ids: ``kv_lens[b] + depth`` (``kv_lens`` = tokens in the
        target's KV cache, so the root sits at ``kv_lens[b]``).  A NumPy array, whatever
        ``kv_lens`` is (a list, an array or a torch tensor); ``torch.from_numpy`` makes it a
        tensor without a copy.

        ``kv_lens`` is the one name for the per-request lengths across :meth:`positions` and
        the masks (the keywords ``seq_lens`` here and ``prefix_lens`` there still work, with
        a ``DeprecationWarning``)."""
        kv = self._kv_lens(v.renamed_keyword(kv_lens, dict(seq_lens=seq_lens), "kv_lens",
                                             "positions"))
        return kv[:, None] + self.depth

    def _kv_lens(self, kv_lens) -> np.ndarray:
        """``kv_lens`` as int64, one per request, each >= 0."""
        return v.as_lengths(kv_lens, self.batch_size, "kv_lens")

    def attention_mask(self, kv_lens=None, *, prefix_lens=None) -> np.ndarray:
        """(B, n, P + n) bool: the attention of each draft slot over the KV cache and the tree.

        Request ``b``'s rows are SGLang's mask for it (spec section 4.3): True over its
        ``kv_lens[b]`` cached tokens, then the tree mask over the draft block.  With
        ragged lengths, ``P = max(kv_lens)`` and shorter prefixes are padded on the
        **left** with False, so ``mask[b, :, P - kv_lens[b]:]`` is exactly SGLang's
        ``(n, kv_lens[b] + n)`` mask and the draft block always occupies the last ``n``
        columns.  ``kv_lens`` are the tokens in the target's KV cache (for a drafter
        request: ``total_len - 1``; the root is the first query): a list, an array or a torch
        tensor.  The result is a NumPy array whatever ``kv_lens`` is (``torch.from_numpy``
        makes it a tensor without a copy; :meth:`additive_attention_mask` builds a tensor
        itself).  ``prefix_lens=`` is the deprecated name of ``kv_lens``.

        Examples
        --------
        >>> import ngramspec as ns
        >>> cache = ns.NgramCache(draft_token_num=3, capacity=100)
        >>> cache.insert([[2, 4, 3]])
        >>> d = cache.match([[2]])                   # the chain 2, 4, 3
        >>> d.attention_mask([2]).astype(int)
        array([[[1, 1, 1, 0, 0],
                [1, 1, 1, 1, 0],
                [1, 1, 1, 1, 1]]])
        """
        pre = self._kv_lens(v.renamed_keyword(kv_lens, dict(prefix_lens=prefix_lens), "kv_lens",
                                              "attention_mask"))
        b, n = self.tokens.shape
        p = int(pre.max()) if b else 0
        out = np.zeros((b, n, p + n), dtype=bool)
        cols = np.arange(p)
        out[:, :, :p] = (cols[None, :] >= (p - pre)[:, None])[:, None, :]
        out[:, :, p:] = self.mask
        return out

    def additive_attention_mask(self, kv_lens=None, *, dtype=np.float32, device=None,
                                prefix_lens=None) -> Any:
        """(B, 1, n, P + n) float: :meth:`attention_mask` as an additive mask, ``0`` where a
        slot may attend and ``-inf`` where not (the 4-D form Hugging Face ``transformers``
        models take as ``attention_mask``).  Left padding as in :meth:`attention_mask`.

        Parameters
        ----------
        kv_lens : sequence of int, array or torch tensor
            As for :meth:`attention_mask`.
        dtype : NumPy or torch floating dtype, default ``np.float32``
            A NumPy dtype gives a NumPy array; a torch dtype (``torch.float32``,
            ``torch.bfloat16``, ...) gives a torch tensor of that dtype, made on ``device``.
        device : str or torch.device, optional
            With a torch dtype only: where the tensor is made (default: the CPU).

        Examples
        --------
        >>> import ngramspec as ns
        >>> cache = ns.NgramCache(draft_token_num=2, capacity=100)
        >>> cache.insert([[2, 4]])
        >>> cache.match([[2]]).additive_attention_mask([1])
        array([[[[  0.,   0., -inf],
                 [  0.,   0.,   0.]]]], dtype=float32)
        """
        kv = v.renamed_keyword(kv_lens, dict(prefix_lens=prefix_lens), "kv_lens",
                               "additive_attention_mask")
        torch_dtype = type(dtype).__module__ == "torch" and type(dtype).__name__ == "dtype"
        if torch_dtype:
            floating = bool(getattr(dtype, "is_floating_point", False))
        else:
            floating = isinstance(dtype, (type, np.dtype, str)) and np.dtype(dtype).kind == "f"
            if device is not None:
                raise ValueError(f"device= goes with a torch dtype (a NumPy array has no "
                                 f"device), got dtype {dtype!r} and device {device!r}")
        if not floating:
            raise TypeError(f"dtype must be a floating dtype, NumPy's or torch's (-inf must be "
                            f"representable), got {dtype!r}")
        allowed = self.attention_mask(kv)
        if torch_dtype:  # torch is imported already: the caller holds one of its dtypes
            torch = sys.modules["torch"]
            keep = torch.from_numpy(allowed)
            if device is not None:
                keep = keep.to(device)
            out = torch.zeros(allowed.shape, dtype=dtype, device=keep.device)
            return out.masked_fill_(~keep, float("-inf"))[:, None]
        out = np.full(allowed.shape, -np.inf, dtype=dtype)
        out[allowed] = 0
        return out[:, None]

    def custom_mask(self, kv_lens=None, *, prefix_lens=None) -> np.ndarray:
        """SGLang's flat ``custom_mask``: per request, ``(n, kv_lens[b] + n)`` row-major,
        concatenated in batch order: a NumPy bool array whatever ``kv_lens`` is (a list, an
        array or a torch tensor).  ``prefix_lens=`` is the deprecated name."""
        pre = self._kv_lens(v.renamed_keyword(kv_lens, dict(prefix_lens=prefix_lens), "kv_lens",
                                              "custom_mask"))
        full = self.attention_mask(pre)
        p = full.shape[2] - self.draft_token_num
        return np.concatenate([full[b, :, p - pre[b]:].ravel() for b in range(self.batch_size)]
                              or [np.zeros(0, bool)])

    def chain_slots(self) -> list[np.ndarray]:
        """Per request, the slots of one root-to-leaf path (root excluded), for verifiers that
        only take a linear draft.

        With path probabilities (ADAPTIVE), the path with the most expected accepted tokens
        under chain verification: the largest sum of its slots' probabilities (each the
        probability that the target follows the path that far).  Without (BFS, PROB), the
        path that descends, at each slot, into the child with the most drafted descendants:
        the branch the drafter spent most of its budget on (BFS keeps expanding the branches
        that longer and more recent matches continue; PROB the most probable ones).  At each
        slot ties go to the lower child slot, the first in SGLang's layout.  Padding is never
        on the path.
        """
        b, n = self.tokens.shape
        par = self.parents
        real = np.arange(n)[None, :] <= self.num_drafts[:, None]
        # score[b, i]: the best path value of slot i's subtree; children come after parents,
        # so one backward pass over the slots settles every subtree.
        own = np.where(real, 1.0 if self.probs is None else self.probs, 0.0).astype(np.float64)
        score = own.copy()
        best_kid = np.zeros((b, n), np.float64)
        rows = np.arange(b)
        for i in range(n - 1, 0, -1):
            p = np.maximum(par[:, i], 0)
            ok = real[:, i]
            if self.probs is None:  # subtree sizes
                np.add.at(score, (rows[ok], p[ok]), score[ok, i])
            else:
                score[ok, i] += best_kid[ok, i]
                np.maximum.at(best_kid, (rows[ok], p[ok]), score[ok, i])
        paths: list[list[int]] = [[] for _ in range(b)]
        cur = np.zeros(b, np.int64)
        live = np.ones(b, bool)
        kid_of = (par[:, None, :] == np.arange(n)[None, :, None]) & real[:, None, :]
        kid_of[:, :, 0] = False
        for _ in range(n - 1):
            cand = kid_of[rows, cur] & live[:, None]
            live = cand.any(axis=1)
            if not live.any():
                break
            nxt = np.argmax(np.where(cand, score, -np.inf), axis=1)  # first maximum
            for r in np.flatnonzero(live):
                paths[r].append(int(nxt[r]))
            cur = np.where(live, nxt, cur)
        return [np.asarray(p, dtype=np.int32) for p in paths]

    def chain(self) -> list[np.ndarray]:
        """Per request, the draft tokens along :meth:`chain_slots` (int32, root excluded).

        Examples
        --------
        >>> import numpy as np, ngramspec as ns
        >>> d = ns.DraftBatch(np.array([[2, 4, 3, 7, 0]], dtype=np.int32),
        ...                   np.array([[[1, 0, 0, 0, 0], [1, 1, 0, 0, 0], [1, 0, 1, 0, 0],
        ...                              [1, 0, 1, 1, 0], [1, 0, 0, 0, 1]]], dtype=bool),
        ...                   np.array([3], dtype=np.int32))
        >>> [c.tolist() for c in d.chain()]
        [[3, 7]]
        """
        return [self.tokens[b, s] for b, s in enumerate(self.chain_slots())]

    def chains(self) -> "DraftBatch":
        """These drafts cut to one chain per request (:meth:`chain_slots`), in the same layout:
        slot 0 the root, slots ``1 .. num_drafts`` the chain (each the child of the one
        before), the rest padding; probabilities kept along the chain.  What a verifier of
        chains (vLLM's) is sent, and what ``NgramConfig(chain=True)`` proposes.

        Examples
        --------
        >>> import ngramspec as ns
        >>> cache = ns.NgramCache(draft_token_num=5, capacity=100)
        >>> cache.insert([[2, 4], [2, 3, 7], [2, 3, 8]])
        >>> d = cache.match([[2]])                 # root 2: children 4 and 3 (7, 8 below)
        >>> c = d.chains()
        >>> d.tokens.tolist(), c.tokens.tolist(), c.num_drafts.tolist(), c.parents.tolist()
        ([[2, 4, 3, 7, 8]], [[2, 3, 7, 0, 0]], [2], [[-1, 0, 1, 0, 0]])
        """
        from ..engine.vllm.chains import cut_to_chains  # compiled on first use

        tokens, mask, num = self._tokens, self._mask, self._num_drafts
        b, n = tokens.shape
        out_t = np.zeros((b, n), np.int32)
        out_m = np.zeros((b, n, n), bool)
        out_n = np.zeros(b, np.int32)
        has = self._probs is not None
        probs = self._probs if has else np.zeros((b, n), np.float64)
        out_p = np.zeros((b, n), np.float64)
        cut_to_chains(np.ascontiguousarray(tokens), np.ascontiguousarray(mask),
                      np.ascontiguousarray(num), np.ascontiguousarray(probs, np.float64), has,
                      out_t, out_m, out_n, out_p)
        return DraftBatch._trusted(out_t, out_m, out_n, out_p if has else None)

    @cached_property
    def retrieve_index(self) -> np.ndarray:
        """(B, n) int32 global rows ``b * n + i`` (SGLang's ``retrive_index``)."""
        b, n = self.tokens.shape
        return _frozen(np.arange(b * n, dtype=np.int32).reshape(b, n))

    @cached_property
    def retrieve_next_token(self) -> np.ndarray:
        """(B, n) int32: first child slot of each slot (the smallest i > slot that has it as an
        ancestor), -1 for none."""
        b, n = self.tokens.shape
        out = np.full((b, n), -1, dtype=np.int32)
        par = self.parents
        # Children come after parents in level order; fill from the back so the first wins.
        for i in range(n - 1, 0, -1):
            rows = np.arange(b)
            out[rows, par[:, i]] = i
        return _frozen(out)

    @cached_property
    def retrieve_next_sibling(self) -> np.ndarray:
        """(B, n) int32: the next slot with the same parent, -1 for none (and for the root)."""
        b, n = self.tokens.shape
        out = np.full((b, n), -1, dtype=np.int32)
        par = self.parents
        following = np.full((b, n + 1), -1, dtype=np.int64)  # by parent slot; n = no parent
        rows = np.arange(b)
        for i in range(n - 1, 0, -1):
            out[:, i] = following[rows, par[:, i]]
            following[rows, par[:, i]] = i
        return _frozen(out)
