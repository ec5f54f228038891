"""Recognising vLLM's input-batch rows between steps (``ngramspec.integrations.vllm``):
compiled, over the runner's (rows, max_model_len) token array.

A row's request is known by its context length and a fingerprint of its context: in its
first half of columns the context's first tokens, in its second half the tokens before its
length (positions clipped into the context, so the fingerprint depends on the context's first
``length`` tokens only).
"""

from __future__ import annotations

from ..._jit import jit

__all__ = ["recognise", "remember"]


@jit
def recognise(ctx, n, emitted, b, owner, own_len, own_fp, rows_known, out):
    """``out[i]``: the request row ``i`` held at the last call if its context less the
    tokens just emitted has that request's length and fingerprint, else -1; returns how
    many rows matched."""
    head = tail = own_fp.shape[1] // 2
    matched = 0
    for i in range(b):
        out[i] = -1
        if i >= rows_known or owner[i] < 0:
            continue
        size = n[i] - emitted[i]
        if size < 1 or size != own_len[i]:
            continue
        same = True
        for j in range(head):
            if ctx[i, min(j, size - 1)] != own_fp[i, j]:
                same = False
                break
        if same:
            for j in range(tail):
                if ctx[i, max(size - tail + j, 0)] != own_fp[i, head + j]:
                    same = False
                    break
        if same:
            out[i] = owner[i]
            matched += 1
    return matched


@jit
def remember(ctx, n, owner, b, own, own_len, own_fp):
    """Store each row's request, context length and fingerprint."""
    head = tail = own_fp.shape[1] // 2
    for i in range(b):
        own[i] = owner[i]
        size = n[i]
        own_len[i] = size
        if owner[i] < 0 or size < 1:
            continue
        for j in range(head):
            own_fp[i, j] = ctx[i, min(j, size - 1)]
        for j in range(tail):
            own_fp[i, head + j] = ctx[i, max(size - tail + j, 0)]
