"""Profile ``vllm-0.33`` without vLLM's wheel: ``prompt_lookup`` on hand-worked contexts, its
compiled twin equal to it, and ``simulate`` equal to a chain loop written here over it.

The same functions against the wheel's own: tests/integrations/test_vllm_ngram.py (-m vllm).
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import LOOKUP_SETTINGS, chain_replay, compiled_lookup, lookup_cases, lookup_streams
from hypothesis import given, settings
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.reference.lookup import prompt_lookup

# (context, min_n, max_n, k, draft), each worked by hand from the rule: the longest suffix of
# min_n..max_n tokens occurring earlier (the occurrence ending before the last token), its
# first occurrence, the up-to-k tokens after it, cut at the context's end.
HAND = [
    # [4, 5] (2 tokens) occurs at 2: the longer suffix wins over [5]'s earlier occurrence at 0
    ([5, 9, 4, 5, 8, 4, 5], 1, 2, 2, [8, 4]),
    # max_n = 1: [5] occurs at 0 and 3; the first, at 0, is followed by 9, 4
    ([5, 9, 4, 5, 8, 4, 5], 1, 1, 2, [9, 4]),
    # overlap: [1, 1] occurs at 0 (ends at 1, before the last token); one token follows
    ([1, 1, 1], 2, 2, 5, [1]),
    # max_n = 3 > 2 = the longest possible earlier occurrence: [1, 1] again
    ([1, 1, 1], 1, 3, 5, [1]),
    # [1, 1] at 0: three tokens follow, k = 3 takes them all
    ([1, 1, 1, 1, 1], 1, 2, 3, [1, 1, 1]),
    # the context is shorter than min_n
    ([4, 4], 3, 5, 2, []),
    ([], 1, 1, 1, []),
    # no token repeats
    ([1, 2, 3], 1, 3, 4, []),
    # [2] occurs at 1 but min_n = 2; [9, 2] and [2, 9, 2] occur nowhere earlier
    ([1, 2, 9, 2], 2, 3, 3, []),
    # min_n = 1: [2] at 1, followed by 9, 2 (cut at the context's end, k = 3)
    ([1, 2, 9, 2], 1, 3, 3, [9, 2]),
    # max_n = 2: [2, 3] first at 0, followed by 0
    ([2, 3, 0, 1, 2, 3, 7, 1, 2, 3], 1, 2, 1, [0]),
    # max_n = 3: [1, 2, 3] at 3, followed by 7
    ([2, 3, 0, 1, 2, 3, 7, 1, 2, 3], 1, 3, 1, [7]),
    # [6, 7] at 0: the two tokens up to the end (k = 5)
    ([6, 7, 6, 7], 2, 2, 5, [6, 7]),
    # k = 1: [3, 5] nowhere earlier; [5] at 4 and 8, the first followed by 9
    ([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5], 1, 2, 1, [9]),
]


@pytest.mark.parametrize("context, min_n, max_n, k, draft", HAND)
def test_prompt_lookup_by_hand(context, min_n, max_n, k, draft):
    for fn in (prompt_lookup, compiled_lookup):
        got = fn(np.asarray(context, np.int32), min_n=min_n, max_n=max_n, k=k)
        assert got.dtype == np.int32
        assert got.tolist() == draft, fn.__name__


@settings(max_examples=300, deadline=None)
@given(case=lookup_cases())
def test_compiled_lookup_equals_reference(case):
    context, min_n, max_n, k = case
    assert_array_equal(compiled_lookup(context, min_n=min_n, max_n=max_n, k=k),
                       prompt_lookup(context, min_n=min_n, max_n=max_n, k=k))


def _config(min_n, max_n, k):
    return ns.NgramConfig(profile="vllm-0.33", prompt_lookup_min=min_n, prompt_lookup_max=max_n,
                          num_speculative_tokens=k)


# Worked by hand.  1: prefill emits 2; [1, 2] first at 0 -> draft 3 4 1, the recording's
# 3 4 9: 3 4 accepted + the bonus 9 = 3 tokens; then [4, 9] and [9] occur nowhere earlier: no
# draft, 1 token, the recording's end.  2: prefill emits 3; [2, 3] first at 1 -> draft 1 2 3,
# the recording has 1 2 left: 2 accepted, the step cut to those 2.
SIM_HAND = [
    ({"prompt_ids": [1, 2, 3, 4, 1], "output_ids": [2, 3, 4, 9, 9]}, [3, 1], [3, 0]),
    ({"prompt_ids": [1, 2, 3, 1, 2], "output_ids": [3, 1, 2]}, [2], [3]),
]


@pytest.mark.parametrize("backend", ["numba", "reference"])
@pytest.mark.parametrize("concurrency", [1, 2])
def test_simulate_by_hand(backend, concurrency):
    rows = [dict(row, id=f"r{i}") for i, (row, _, _) in enumerate(SIM_HAND)]
    r = ns.simulate(rows, config=_config(1, 2, 3), concurrency=concurrency, backend=backend)
    assert [e.tolist() for e in r.emitted] == [em for _, em, _ in SIM_HAND]
    assert [d.tolist() for d in r.drafts] == [dr for _, _, dr in SIM_HAND]


@settings(max_examples=40, deadline=None)
@given(rows=lookup_streams())
@pytest.mark.parametrize("min_n, max_n, k", LOOKUP_SETTINGS)
def test_simulate_equals_chain_loop(rows, min_n, max_n, k):
    emitted, drafts = chain_replay(
        lambda ctx: prompt_lookup(ctx, min_n=min_n, max_n=max_n, k=k), rows)
    for backend in ("numba", "reference"):
        for concurrency in (1, 8):
            r = ns.simulate(rows, config=_config(min_n, max_n, k), concurrency=concurrency,
                            backend=backend)
            assert [e.tolist() for e in r.emitted] == emitted, (backend, concurrency)
            assert [d.tolist() for d in r.drafts] == drafts, (backend, concurrency)
