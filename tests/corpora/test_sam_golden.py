"""Parity with SGLang 0.5.23's C++ core with external corpora (suffix automata): every op of
the SAM golden file (606 match ops, 475 corpus ops), on both backends."""

from __future__ import annotations

import numpy as np
import pytest

import ngramspec as ns
from conftest import load_golden


@pytest.fixture(scope="module")
def golden_sam() -> dict:
    return load_golden("sglang-0.5.23-sam-golden.json.gz")


_ERRORS = {"duplicate": ValueError, "empty": ValueError, "over_cap": ValueError,
           "over_budget": ValueError, "unknown": KeyError}


def replay_sam(scenario: dict, backend: str) -> tuple[int, int, list[str]]:
    """Apply a scenario's ops to one cache; (match ops checked, corpus ops checked, failures)."""
    cache = ns.NgramCache(**scenario["params"], backend=backend)
    matches = corpus_ops = 0
    failures: list[str] = []
    for k, op in enumerate(scenario["ops"]):
        kind = op["op"]
        if kind == "insert":
            cache.insert(op["batch"])
        elif kind == "reset":
            cache.reset()
        elif kind == "erase":
            cache.erase(op["req_ids"])
        elif kind == "match":
            d = cache.match(op["tokens"], request_ids=op["req_ids"], total_lens=op["total_lens"])
            matches += 1
            tokens = np.asarray(op["expect_tokens"], dtype=np.int32)
            mask = np.asarray(op["expect_mask"], dtype=np.uint8).astype(bool)
            if not (np.array_equal(d.tokens.ravel(), tokens)
                    and np.array_equal(d.mask.ravel(), mask)):
                failures.append(f"op {k}: got {d.tokens.ravel().tolist()} expected "
                                f"{tokens.tolist()}")
        elif kind in ("add_corpus", "remove_corpus", "clear_corpora", "list_corpora"):
            corpus_ops += 1
            before = cache.corpora()
            error = op.get("expect_error")
            try:
                if kind == "add_corpus":
                    got = cache.add_corpus(op["corpus_id"], op["documents"])
                    if error is None and got != op["expect_loaded"]:
                        failures.append(f"op {k}: loaded {got}, expected {op['expect_loaded']}")
                elif kind == "remove_corpus":
                    cache.remove_corpus(op["corpus_id"])
                elif kind == "clear_corpora":
                    cache.clear_corpora()
                else:
                    got = cache.corpora()
                    if got != op["expect"]:
                        failures.append(f"op {k}: corpora() {got}, expected {op['expect']}")
                    elif list(got) != list(op["expect"]):
                        failures.append(f"op {k}: corpora() order {list(got)}, SGLang's "
                                        f"{list(op['expect'])}")
                if error is not None:
                    failures.append(f"op {k}: expected {error}, no error")
            except (ValueError, KeyError) as e:
                if error is None or not isinstance(e, _ERRORS[error]):
                    failures.append(f"op {k}: unexpected {type(e).__name__}: {e}")
                elif cache.corpora() != before:
                    failures.append(f"op {k}: corpora changed by a failed {kind}")
        else:
            raise AssertionError(f"unknown op {kind!r}")
    return matches, corpus_ops, failures


@pytest.mark.parametrize("backend", ["reference", "numba"])
def test_sam_golden_parity_every_op(golden_sam, backend):
    matches = corpus_ops = 0
    failures: list[str] = []
    for i, scenario in enumerate(golden_sam["scenarios"]):
        m, c, bad = replay_sam(scenario, backend)
        matches += m
        corpus_ops += c
        failures += [f"scenario {i} ({scenario['kind']}): {f}" for f in bad]
    assert failures == []
    assert (matches, corpus_ops) == (606, 475)


def test_sam_golden_file_coverage(golden_sam):
    scenarios = golden_sam["scenarios"]
    assert len(scenarios) == 64
    assert {s["params"]["match_type"] for s in scenarios} == {"BFS", "PROB"}
    errors = {op.get("expect_error") for s in scenarios for op in s["ops"]}
    assert errors >= {"duplicate", "empty", "over_cap", "over_budget", "unknown"}
