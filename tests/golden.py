"""Replay of SGLang golden scenarios on an NgramCache (shared by the golden tests)."""

from __future__ import annotations

import numpy as np

import ngramspec as ns


def replay(scenario: dict, backend: str = "reference",
           profile: str = "sglang-0.5.23") -> tuple[int, list[str]]:
    """Apply the scenario's ops to one cache; return (matches checked, mismatch descriptions)."""
    cache = ns.NgramCache(**scenario["params"], profile=profile, backend=backend)
    checked, failures = 0, []
    for k, op in enumerate(scenario["ops"]):
        kind = op["op"]
        if kind == "insert":
            cache.insert(op["batch"])
        elif kind == "reset":
            cache.reset()
        elif kind == "erase":
            cache.erase(op["req_ids"])
        elif kind == "match":
            # The 0.5.9 (window-era) file has no req_ids / total_lens: its matcher is stateless.
            d = cache.match(op["tokens"], request_ids=op.get("req_ids"),
                            total_lens=op.get("total_lens"))
            checked += 1
            tokens = np.asarray(op["expect_tokens"], dtype=np.int32)
            mask = np.asarray(op["expect_mask"], dtype=np.uint8).astype(bool)
            if not (np.array_equal(d.tokens.ravel(), tokens)
                    and np.array_equal(d.mask.ravel(), mask)):
                failures.append(f"op {k}: got {d.tokens.ravel().tolist()} expected "
                                f"{tokens.tolist()}")
        else:
            raise AssertionError(f"unknown op {kind!r}")
    return checked, failures
