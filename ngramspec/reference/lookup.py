"""vLLM 0.33's n-gram (prompt lookup) proposer, written for obviousness.

vLLM drafts from the request's own tokens, statelessly, at every step: the longest suffix of
the context, of ``min_n .. max_n`` tokens, that also occurs earlier in the context (ending
before the last token) wins; of that suffix's earlier occurrences the first one (nearest
the start of the context); the draft is the up-to-``k`` tokens that follow it, cut at the
end of the context.  An occurrence may overlap the suffix: in ``1 1 1`` the suffix ``1 1``
occurs at 0 and the draft is ``1``.  No occurrence of even ``min_n`` tokens (or a context
shorter than ``min_n``): no draft.  vLLM also never drafts past ``max_model_len``; the
simulator takes it as unlimited.

The compiled twin is :mod:`ngramspec.engine.vllm.lookup`; both are checked against the function
in vLLM's wheel (``tests/integrations/test_vllm_ngram.py``).
"""

from __future__ import annotations

import numpy as np

__all__ = ["prompt_lookup", "verify_chain"]


def prompt_lookup(context, *, min_n: int, max_n: int, k: int) -> np.ndarray:
    """The draft vLLM's n-gram proposer sends for this context (int32, possibly empty).

    Examples
    --------
    >>> prompt_lookup([1, 2, 3, 9, 1, 2, 3, 4, 1, 2, 3], min_n=1, max_n=3, k=2).tolist()
    [9, 1]
    >>> prompt_lookup([1, 1, 1], min_n=2, max_n=2, k=5).tolist()
    [1]
    >>> prompt_lookup([5, 6, 7], min_n=1, max_n=3, k=4).tolist()
    []
    """
    ctx = [int(t) for t in np.asarray(context).reshape(-1)]
    size = len(ctx)
    for n in range(min(max_n, size - 1), min_n - 1, -1):
        suffix = ctx[size - n:]
        for start in range(size - n):  # the occurrence ends before the last token
            if ctx[start:start + n] == suffix:
                follow = ctx[start + n:start + n + k]
                return np.asarray(follow, dtype=np.int32)
    return np.zeros(0, np.int32)


def verify_chain(draft, truth) -> int:
    """Tokens a greedy verification of a chain emits: the draft's longest prefix that equals
    the target's next tokens, plus the bonus token.

    Examples
    --------
    >>> verify_chain([4, 5, 6], [4, 5, 7, 8])
    3
    >>> verify_chain([], [4])
    1
    """
    accepted = 0
    for d, t in zip(np.asarray(draft).tolist(), np.asarray(truth).tolist()):
        if d != t:
            break
        accepted += 1
    return accepted + 1
