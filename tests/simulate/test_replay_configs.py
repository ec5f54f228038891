"""The engine's compiled replay equals the ``Drafter`` replay for every configuration.

Every combination that :class:`~ngramspec.NgramConfig` accepts of profile, match type and the
options beyond SGLang (``index_prompt``, ``exact_counts``, ``local_index``, and ADAPTIVE's
``min_token_prob``/``max_spec_factor``/``min_expected_accept``), at concurrency 1 and 4, with a
large capacity and with one small enough that the tries evict, on a slice of the shipped corpus:
per request and per step, the tokens emitted and the real draft nodes, and the batch steps.
The ``Drafter`` replay (:func:`ngramspec.simulate._replay_stepwise`: ``add_request`` /
``propose`` / ``verify_greedy`` / ``accept`` / ``finish``) is the definition.
"""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from numpy.testing import assert_array_equal

import ngramspec as ns
from ngramspec.config import PROFILES
from ngramspec.engine.serving import replay as replay_module
from ngramspec.engine.serving.replay import replay
from ngramspec.simulate import _replay_stepwise
from ngramspec.streams import embedded_streams_path

ADAPTIVE_KNOBS = [
    {},
    {"min_token_prob": 0.18, "max_spec_factor": 4.0},
    {"min_expected_accept": 2.5},  # some steps send an empty tree
    {"min_token_prob": 0.05, "max_spec_factor": 1.5, "min_expected_accept": 1.8},
]


def all_configs() -> list[dict]:
    """Every combination NgramConfig accepts (the options beyond SGLang: 0.5.23 only;
    local_index and the ADAPTIVE knobs: ADAPTIVE only)."""
    out = [{"profile": "sglang-0.5.9", "match_type": mt} for mt in ("BFS", "PROB")]
    flags = list(itertools.product([False, True], repeat=2))
    for mt in ("BFS", "PROB"):
        out += [{"match_type": mt, "index_prompt": ip, "exact_counts": ex} for ip, ex in flags]
    for (ip, ex), local, knobs in itertools.product(flags, [False, True], ADAPTIVE_KNOBS):
        out.append({"match_type": "ADAPTIVE", "index_prompt": ip, "exact_counts": ex,
                    "local_index": local, **knobs})
    # a finished request teaches the shared trie its prompt's last 40 tokens only
    out.append({"match_type": "ADAPTIVE", "index_prompt": True, "exact_counts": True,
                "local_index": True, "shared_prompt_window": 40})
    return out


def config_id(options: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in options.items() if k != "match_type") or "sglang"


CONFIGS = all_configs()


@pytest.fixture(scope="module")
def streams() -> tuple[list[np.ndarray], list[np.ndarray], list]:
    """Six requests spread over the corpus (every task), prompts cut to their last 200 tokens
    and outputs to their first 150 (a prefix of a greedy stream is a greedy stream)."""
    rows = ns.read_streams(embedded_streams_path())
    rows = rows[::len(rows) // 6][:6]
    prompts = [np.asarray(r["prompt_ids"][-200:], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"][:150], np.int32) for r in rows]
    return prompts, outputs, [r["id"] for r in rows]


def assert_replays_equal(cfg: ns.NgramConfig, streams, concurrency: int) -> ns.SimulationResult:
    prompts, outputs, ids = streams
    got = replay(prompts, outputs, cfg, concurrency=concurrency)
    emitted, drafts, _, steps, _ = _replay_stepwise(prompts, outputs, cfg, concurrency, "numba",
                                                    ids, None)
    assert len(got.emitted) == len(emitted) == len(prompts)
    for r in range(len(prompts)):
        assert_array_equal(got.emitted[r], emitted[r])
        assert_array_equal(got.drafts[r], drafts[r])
        assert got.emitted[r].sum() == outputs[r].size - 1
    assert got.batch_steps == steps
    return got


@pytest.mark.parametrize("capacity", [10_000_000, 400], ids=["big", "evicting"])
@pytest.mark.parametrize("concurrency", [1, 4])
@pytest.mark.parametrize("options", CONFIGS, ids=[f"{o['match_type']}-{config_id(o)}"
                                                  for o in CONFIGS])
def test_compiled_replay_equals_drafter(streams, options, concurrency, capacity):
    cfg = ns.NgramConfig(**options, capacity=capacity)
    got = assert_replays_equal(cfg, streams, concurrency)
    # The comparison is not between two loops that never drafted.
    assert sum(int(d.sum()) for d in got.drafts) > 0


@pytest.mark.parametrize("capacity", [3_000, 12_000, 40_000])
@pytest.mark.parametrize("options", [{}, {"profile": "sglang-0.5.9", "match_type": "PROB"},
                                     {"exact_counts": True, "index_prompt": True},
                                     {"match_type": "ADAPTIVE", "local_index": True,
                                      "exact_counts": True, "index_prompt": True}],
                         ids=["BFS", "0.5.9-PROB", "exact", "local"])
def test_capacities_between(streams, options, capacity):
    """Capacities that the run fills only part of the way: the tries keep their eviction
    order as stamps, then as the list or not at all, as the room left decides."""
    assert_replays_equal(ns.NgramConfig(**options, capacity=capacity), streams, 2)


def test_the_combinations_are_all_that_config_accepts():
    """CONFIGS holds every accepted combination of the boolean options per SGLang profile and
    match type: any other combination is refused by NgramConfig.  (vLLM's profile has its own
    replay: tests/simulate/test_vllm_profile.py.)"""
    seen = {(o.get("profile", "sglang-0.5.23"), o["match_type"], o.get("index_prompt", False),
             o.get("exact_counts", False), o.get("local_index", False)) for o in CONFIGS}
    for profile, mt, ip, ex, local in itertools.product(
            [p for p in PROFILES if p.startswith("sglang")], ("BFS", "PROB", "ADAPTIVE"),
            *[[False, True]] * 3):
        try:
            ns.NgramConfig(profile=profile, match_type=mt, index_prompt=ip, exact_counts=ex,
                           local_index=local)
        except ValueError:
            assert (profile, mt, ip, ex, local) not in seen
        else:
            assert (profile, mt, ip, ex, local) in seen


def test_eviction_happens_with_the_small_capacity(streams):
    """The small capacity of the cases above does evict (the drafts change)."""
    prompts, outputs, _ = streams
    for options in ({"match_type": "PROB"}, {"profile": "sglang-0.5.9"},
                    {"match_type": "ADAPTIVE", "local_index": True, "exact_counts": True}):
        big = replay(prompts, outputs, ns.NgramConfig(**options), concurrency=4)
        small = replay(prompts, outputs, ns.NgramConfig(**options, capacity=400), concurrency=4)
        assert any(not np.array_equal(a, b) for a, b in zip(big.drafts, small.drafts))


@pytest.mark.parametrize("options", [{}, {"profile": "sglang-0.5.9", "match_type": "PROB"},
                                     {"local_index": True}], ids=["recommended", "0.5.9", "local"])
def test_longer_runs_with_growth_and_chunks(options, monkeypatch):
    """More requests than slots, tries that grow many times, the kernel paused every few
    steps (progress chunks): 24 requests at concurrency 3, against the Drafter."""
    monkeypatch.setattr(replay_module, "_CHUNK_STEPS", 37)
    rows = ns.read_streams(embedded_streams_path())[::5][:24]
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"][:300], np.int32) for r in rows]
    if options.get("local_index"):
        cfg = ns.NgramConfig(match_type="ADAPTIVE", local_index=True, capacity=3_000)
    elif options:
        cfg = ns.NgramConfig(**options)
    else:
        cfg = ns.NgramConfig.recommended()
    calls = []
    got = replay(prompts, outputs, cfg, concurrency=3,
                 progress=lambda done, total: calls.append((done, total)))
    emitted, drafts, _, steps, _ = _replay_stepwise(prompts, outputs, cfg, 3, "numba",
                                                    [r["id"] for r in rows], None)
    for r in range(len(rows)):
        assert_array_equal(got.emitted[r], emitted[r])
        assert_array_equal(got.drafts[r], drafts[r])
    assert got.batch_steps == steps
    assert calls[-1] == (sum(o.size for o in outputs),) * 2
    assert len(calls) > 5
    assert [c[0] for c in calls] == sorted(c[0] for c in calls)


def test_edge_requests():
    """Empty prompts, single-token outputs (no verify step), token 0 (padding accepted),
    more slots than requests."""
    rows = [([], [0, 0, 0, 0, 0]), ([1, 2], [7]), ([0, 1, 0, 1], [0, 1, 0, 1, 0, 1]),
            ([3], [3, 3, 3, 3, 3, 3, 3, 3])]
    prompts = [np.asarray(p, np.int32) for p, _ in rows]
    outputs = [np.asarray(o, np.int32) for _, o in rows]
    for options in CONFIGS:
        for capacity in (10_000, 30):
            cfg = ns.NgramConfig(**options, capacity=capacity, draft_token_num=5)
            got = replay(prompts, outputs, cfg, concurrency=10)
            assert got.concurrency == 4
            emitted, drafts, _, steps, _ = _replay_stepwise(prompts, outputs, cfg, 4, "numba",
                                                            list(range(4)), None)
            for r in range(4):
                assert_array_equal(got.emitted[r], emitted[r])
                assert_array_equal(got.drafts[r], drafts[r])
            assert got.batch_steps == steps
            assert got.emitted[1].size == 0


def test_simulate_uses_the_compiled_replay_for_every_config(streams):
    """simulate(backend="numba") reports what the engine's replay measured, and the reference
    backend (the Drafter on the pure-Python cache) gives the same counts."""
    prompts, outputs, ids = streams
    rows = [{"id": i, "prompt_ids": p.tolist(), "output_ids": o.tolist()}
            for i, p, o in zip(ids, prompts, outputs)][:3]
    cfg = ns.NgramConfig.recommended(min_expected_accept=2.0)
    a = ns.simulate(rows, config=cfg, concurrency=2)
    b = ns.simulate(rows, config=cfg, concurrency=2, backend="reference")
    for x, y in zip(a.emitted + a.drafts, b.emitted + b.drafts):
        assert_array_equal(x, y)
    assert a.batch_steps == b.batch_steps


JIT_OFF_SCRIPT = """
import json, sys
import numpy as np
import ngramspec as ns
from ngramspec.config import PROFILES
from ngramspec.engine.serving import replay as replay_module
from ngramspec.engine.serving.replay import replay
from ngramspec.simulate import _replay_stepwise
rows = [([5, 1, 2, 3, 1, 2], [3, 1, 2, 3, 4, 1, 2, 3, 1]), ([], [1, 2, 1, 2, 1, 2, 0, 0]),
        ([2, 3], [1, 2, 3, 1, 2, 3, 1, 2])]
prompts = [np.asarray(p, np.int32) for p, _ in rows]
outputs = [np.asarray(o, np.int32) for _, o in rows]
assert not hasattr(replay_module.replay_kernel, "py_func")  # the plain Python function
same = []
for options in json.loads(sys.argv[1]):
    cfg = ns.NgramConfig(**options)
    got = replay(prompts, outputs, cfg, concurrency=2)
    em, dr, _, steps, _ = _replay_stepwise(prompts, outputs, cfg, 2, "numba", [0, 1, 2], None)
    same.append(all(np.array_equal(a, b) for a, b in zip(got.emitted + got.drafts, em + dr))
                and steps == got.batch_steps)
print(json.dumps(same))
"""


def test_kernels_run_as_plain_python():
    """With Numba's JIT off the replay kernels run as plain Python and still equal the
    Drafter (a few configurations, small capacities so that eviction runs too)."""
    options = [{"profile": "sglang-0.5.9", "match_type": "PROB", "capacity": 20,
                "draft_token_num": 4},
               {"match_type": "BFS", "index_prompt": True, "exact_counts": True,
                "capacity": 25, "draft_token_num": 4},
               {"match_type": "ADAPTIVE", "local_index": True, "exact_counts": True,
                "index_prompt": True, "min_expected_accept": 1.5, "capacity": 22,
                "draft_token_num": 4}]
    env = dict(os.environ, NUMBA_DISABLE_JIT="1")
    proc = subprocess.run([sys.executable, "-c", JIT_OFF_SCRIPT, json.dumps(options)],
                          capture_output=True, text=True, env=env, timeout=300,
                          cwd=Path(__file__).resolve().parents[2])
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1]) == [True] * len(options)
