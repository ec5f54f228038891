"""Profile ``vllm-0.33`` against vLLM 0.33's own n-gram proposer: the wheel's
``vllm/v1/spec_decode/ngram_proposer.py``, run unchanged (benchmarks.peers.vllm).

* ``ngramspec.reference.lookup.prompt_lookup`` and its compiled twin give the wheel's
  ``_find_longest_matched_ngram_and_propose_tokens`` draft on every context (Hypothesis, and
  every context over two ids up to 8 tokens);
* ``ns.simulate`` gives, per request and step, the tokens emitted and the draft lengths of a
  greedy chain-verification loop written here (``helpers.chain_replay``) around the wheel's
  function, and of the wheel's ``NgramProposer.propose`` called as the model runner calls it
  (a persistent batch of ``token_ids_cpu`` rows, reused as requests finish);
* the wheel's ``create_custom_proposer`` loads a class by its dotted path.

Opt-in: ``python -m pytest -m vllm``.  Skips when the wheel cannot be downloaded here (no
package index) or torch is missing.
"""

from __future__ import annotations

import functools
import itertools

import numpy as np
import pytest
from helpers import (LOOKUP_SETTINGS, chain_replay, compiled_lookup, lookup_cases, lookup_streams,
                     recorded_streams)
from hypothesis import example, given, settings
from hypothesis import strategies as st
from numpy.testing import assert_array_equal

import ngramspec as ns
from benchmarks.peers import vllm as vllm_peer
from ngramspec.reference.lookup import prompt_lookup

pytestmark = pytest.mark.vllm


def _wheel_lookup(context, min_n, max_n, k) -> np.ndarray:
    return vllm_peer.find_longest_matched_ngram()(np.asarray(context, dtype=np.int32), min_n,
                                                  max_n, vllm_peer.UNLIMITED, k)


def _assert_lookup_equal(context, min_n, max_n, k) -> None:
    theirs = _wheel_lookup(context, min_n, max_n, k)
    assert theirs.dtype == np.int32
    for name, fn in (("reference", prompt_lookup), ("compiled", compiled_lookup)):
        assert_array_equal(fn(context, min_n=min_n, max_n=max_n, k=k), theirs,
                           err_msg=f"{name}: context={list(context)} min_n={min_n} "
                                   f"max_n={max_n} k={k}")


@settings(max_examples=500, deadline=None)
@given(case=lookup_cases(max_len=60))
@example(case=([1, 1, 1], 2, 2, 5))          # an occurrence overlapping the suffix
@example(case=([1, 1, 1], 1, 3, 5))          # max_n beyond the longest earlier occurrence
@example(case=([1, 1, 1, 1, 1, 1], 2, 2, 1))  # min = max, k = 1
@example(case=([4, 4], 3, 5, 2))              # shorter than min_n
@example(case=([], 1, 1, 1))
@example(case=([7], 1, 1, 3))
@example(case=([2, 3, 0, 1, 2, 3, 7, 1, 2, 3], 1, 3, 1))
def test_lookup_equals_wheel(wheel, case):
    _assert_lookup_equal(*case)


def test_lookup_equals_wheel_exhaustive(wheel):
    """Every context over two ids of up to 8 tokens, every 1 <= min_n <= max_n <= 6, k in
    1, 2, 7."""
    for size in range(9):
        for context in itertools.product((0, 1), repeat=size):
            for min_n in range(1, 7):
                for max_n in range(min_n, 7):
                    for k in (1, 2, 7):
                        _assert_lookup_equal(context, min_n, max_n, k)


def _config(min_n, max_n, k):
    return ns.NgramConfig(profile="vllm-0.33", prompt_lookup_min=min_n, prompt_lookup_max=max_n,
                          num_speculative_tokens=k)


@functools.cache
def _rows(limit: int | None) -> list[dict]:
    return recorded_streams(limit) if limit else recorded_streams(10**9)


@functools.cache
def _wheel_loop(limit: int | None, min_n: int, max_n: int, k: int):
    return chain_replay(lambda ctx: _wheel_lookup(ctx, min_n, max_n, k), _rows(limit))


def _assert_simulate_equal(rows, min_n, max_n, k, emitted, drafts, concurrency, backend):
    r = ns.simulate(rows, config=_config(min_n, max_n, k), concurrency=concurrency,
                    backend=backend)
    assert len(r.emitted) == len(rows)
    for i, (e, d) in enumerate(zip(r.emitted, r.drafts)):
        where = f"request {rows[i]['id']} ({backend}, concurrency {concurrency})"
        assert e.tolist() == emitted[i], where
        assert d.tolist() == drafts[i], where


@pytest.mark.parametrize("backend, limit", [("numba", None), ("reference", 16)])
@pytest.mark.parametrize("concurrency", [1, 8])
@pytest.mark.parametrize("min_n, max_n, k", LOOKUP_SETTINGS)
def test_simulate_equals_wheel_on_shipped_streams(wheel, min_n, max_n, k, concurrency, backend,
                                                  limit):
    """All 133 shipped requests on the compiled replay, 16 of them on the readable one."""
    emitted, drafts = _wheel_loop(limit, min_n, max_n, k)
    assert sum(map(sum, emitted)) > sum(map(len, emitted))  # some drafts were accepted
    _assert_simulate_equal(_rows(limit), min_n, max_n, k, emitted, drafts, concurrency, backend)


@settings(max_examples=60, deadline=None)
@given(rows=lookup_streams(max_requests=10), data=st.data())
def test_simulate_equals_wheel_on_random_streams(wheel, rows, data):
    min_n = data.draw(st.integers(1, 5), label="min_n")
    max_n = data.draw(st.integers(min_n, min_n + 4), label="max_n")
    k = data.draw(st.integers(1, 8), label="k")
    emitted, drafts = chain_replay(lambda ctx: _wheel_lookup(ctx, min_n, max_n, k), rows)
    for backend in ("numba", "reference"):
        for concurrency in (1, 8):
            _assert_simulate_equal(rows, min_n, max_n, k, emitted, drafts, concurrency, backend)


def _runner_loop(proposer, rows: list[dict], concurrency: int, max_model_len: int, k: int):
    """``(emitted, drafts)`` per request from the wheel's ``NgramProposer.propose`` called as
    vLLM's model runner calls it: a persistent batch of ``concurrency`` rows of
    ``token_ids_cpu`` (``num_tokens_no_spec`` valid tokens each; a finished request's row
    taken by the next one, its old tokens left past the new length), ``sampled_token_ids`` the
    tokens each request got at its last step (the prefill's one token first; empty for an
    idle row), greedy chain verification against the recording."""
    token_ids = np.zeros((concurrency, max_model_len), np.int32)
    num_tokens = np.zeros(concurrency, np.int32)
    slot = [-1] * concurrency
    done = [0] * concurrency
    sampled: list[list[int]] = [[] for _ in range(concurrency)]
    emitted: list[list[int]] = [[] for _ in rows]
    drafts: list[list[int]] = [[] for _ in rows]
    pending = iter(range(len(rows)))

    def admit(s: int) -> None:
        for r in pending:
            p, o = rows[r]["prompt_ids"], rows[r]["output_ids"]
            token_ids[s, :len(p)] = p
            token_ids[s, len(p)] = o[0]  # the prefill's token
            num_tokens[s] = len(p) + 1
            slot[s], done[s], sampled[s] = r, 1, [o[0]]
            if len(o) > 1:
                return
        slot[s], sampled[s], num_tokens[s] = -1, [], 0

    for s in range(concurrency):
        admit(s)
    while any(r >= 0 for r in slot):
        out = proposer.propose(k, [list(x) for x in sampled], num_tokens.copy(), token_ids)
        assert len(out) == concurrency
        for s, draft in enumerate(out):
            r = slot[s]
            if r < 0:
                assert draft == []
                continue
            output = rows[r]["output_ids"]
            accepted = 0
            while accepted < len(draft) and done[s] + accepted < len(output) \
                    and draft[accepted] == output[done[s] + accepted]:
                accepted += 1
            step = min(accepted + 1, len(output) - done[s])
            got = output[done[s]:done[s] + step]
            token_ids[s, num_tokens[s]:num_tokens[s] + step] = got
            num_tokens[s] += step
            done[s] += step
            sampled[s] = list(got)
            emitted[r].append(step)
            drafts[r].append(len(draft))
            if done[s] == len(output):
                admit(s)
    return emitted, drafts


@pytest.mark.parametrize("min_n, max_n, k", [(5, 5, 5), (1, 3, 4)])
def test_simulate_equals_wheel_proposer_batch_api(wheel, min_n, max_n, k):
    """The wheel's NgramProposer (its constructor's warm-up and Numba batch kernel included),
    8 requests at a time over the shipped streams; ``max_model_len`` long enough that vLLM's
    length cap never binds (the simulator takes it as unlimited)."""
    rows, concurrency = _rows(None), 8
    max_model_len = max(len(r["prompt_ids"]) + len(r["output_ids"]) for r in rows) + k + 1
    proposer = wheel.ngram_proposer(min_n, max_n, k, max_model_len, max_num_seqs=concurrency)
    emitted, drafts = _runner_loop(proposer, rows, concurrency, max_model_len, k)
    assert (emitted, drafts) == _wheel_loop(None, min_n, max_n, k)
    for backend in ("numba", "reference"):
        sub = slice(None) if backend == "numba" else slice(0, 12)
        _assert_simulate_equal(rows[sub], min_n, max_n, k, emitted[sub], drafts[sub],
                               concurrency, backend)


class EchoProposer:
    """A proposer class for the wheel's loader to find (``test_vllm_ngram.EchoProposer``)."""

    def __init__(self, vllm_config):
        self.config = vllm_config

    def propose(self, *args, **kwargs):
        return []


def test_create_custom_proposer_loads_by_dotted_path(wheel):
    create = wheel.create_custom_proposer()
    cfg = wheel.make_config(2, 3, 4, max_model_len=64, model=f"{__name__}.EchoProposer")
    proposer = create(cfg)
    assert type(proposer).__name__ == "EchoProposer" and proposer.config is cfg
    with pytest.raises(ValueError, match="full module path"):
        create(wheel.make_config(2, 3, 4, max_model_len=64, model="EchoProposer"))
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchProposer'"):
        create(wheel.make_config(2, 3, 4, max_model_len=64, model="ngramspec.NoSuchProposer"))
    with pytest.raises(AttributeError, match="must have a 'propose' method"):
        create(wheel.make_config(2, 3, 4, max_model_len=64, model="builtins.repr"))
