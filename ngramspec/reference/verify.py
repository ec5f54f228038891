"""Greedy tree verification written for obviousness (SGLang's ``VerifyTreeGreedy``, spec
section 5.1): the definition that :func:`ngramspec.verify_greedy`'s compiled walk is tested
against."""

from __future__ import annotations

import numpy as np

__all__ = ["verify_greedy", "no_acceptance"]


def no_acceptance(b: int, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(accept_index, accept_lens)`` before any slot is accepted: the roots alone."""
    accept_index = np.full((b, n), -1, dtype=np.int32)
    accept_index[:, 0] = 0
    return accept_index, np.zeros(b, dtype=np.int32)


def verify_greedy(tokens: np.ndarray, next_token: np.ndarray, next_sibling: np.ndarray,
                  pred: np.ndarray) -> tuple[np.ndarray, np.ndarray, list[np.ndarray]]:
    """``(accept_index, accept_lens, emitted)`` of (B, n) draft ``tokens`` with SGLang's
    ``retrive_next_token``/``retrive_next_sibling`` links and the target's argmax ``pred``.

    From the root, the children of the current slot are scanned in slot order and the first
    whose token equals the current slot's prediction is accepted; the bonus is the prediction
    at the last accepted slot.
    """
    b, n = tokens.shape
    accept_index, accept_lens = no_acceptance(b, n)
    emitted = []
    for r in range(b):
        last, k, out = 0, 0, []
        for _ in range(1, n):
            cur = next_token[r, last]
            while cur != -1:
                if tokens[r, cur] == pred[r, last]:
                    k += 1
                    accept_index[r, k] = cur
                    out.append(int(tokens[r, cur]))
                    last = cur
                    break
                cur = next_sibling[r, cur]
            if cur == -1:
                break
        out.append(int(pred[r, last]))
        accept_lens[r] = k + 1
        emitted.append(np.asarray(out, dtype=np.int32))
    return accept_index, accept_lens, emitted
