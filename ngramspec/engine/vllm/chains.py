"""Trees cut to chains (``DraftBatch.chains``), compiled: what a verifier of chains is sent.

The rule is :meth:`ngramspec.DraftBatch.chain_slots`' (readable, NumPy): with path
probabilities, the root-to-leaf path with the largest sum of them; without, the descent into
the child with the most drafted nodes below it; ties to the lower slot.  Slot ``i``'s parent
is the nearest ``j < i`` that its mask row holds (children come after parents).
"""

from __future__ import annotations

import numpy as np

from ..._jit import jit

__all__ = ["cut_to_chains"]


@jit(what="trees cut to chains")
def cut_to_chains(tokens, mask, num_drafts, probs, has_probs, out_tokens, out_mask, out_num,
                  out_probs):
    """Fill the ``out_*`` arrays (zeroed by the caller) with each row's chain."""
    b_size, n = tokens.shape
    par = np.zeros(n, np.int64)
    score = np.zeros(n, np.float64)
    best = np.zeros(n, np.float64)
    for b in range(b_size):
        k = num_drafts[b]
        for i in range(1, k + 1):
            p = 0
            for j in range(i - 1, 0, -1):
                if mask[b, i, j]:
                    p = j
                    break
            par[i] = p
        for i in range(k + 1):
            score[i] = probs[b, i] if has_probs else 1.0
            best[i] = 0.0
        for i in range(k, 0, -1):  # children after parents: subtrees settle backwards
            p = par[i]
            if has_probs:
                score[i] += best[i]
                if score[i] > best[p]:
                    best[p] = score[i]
            else:
                score[p] += score[i]
        out_tokens[b, 0] = tokens[b, 0]
        for i in range(n):
            out_mask[b, i, 0] = True
            out_mask[b, i, i] = True
        if has_probs:
            out_probs[b, 0] = probs[b, 0]
        cur = 0
        m = 0
        while True:
            pick = -1
            for i in range(cur + 1, k + 1):
                if par[i] == cur and (pick < 0 or score[i] > score[pick]):
                    pick = i
            if pick < 0:
                break
            m += 1
            out_tokens[b, m] = tokens[b, pick]
            if has_probs:
                out_probs[b, m] = probs[b, pick]
            for j in range(m):
                out_mask[b, m, j] = True
            cur = pick
        out_num[b] = m
