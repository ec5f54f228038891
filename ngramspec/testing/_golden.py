"""SGLang's own recorded outputs (package data) replayed through any implementation."""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from functools import lru_cache
from importlib.resources import files
from types import SimpleNamespace
from typing import Any, Callable

import numpy as np

from ..config import NgramConfig
from ._compare import describe_difference
from ._machine import as_factory, calls_made, config_source, make_checked

__all__ = ["GoldenReport", "golden_scenarios", "replay_golden"]

_FILES = {"sglang-0.5.23": "sglang-0.5.23-golden.json.gz",
          "sglang-0.5.9": "sglang-0.5.9-legacy-golden.json.gz"}


def _check_version(version: str) -> str:
    if version not in _FILES:
        raise ValueError(f"version must be one of {tuple(_FILES)} (the SGLang releases whose "
                         f"outputs are recorded), got {version!r}")
    return version


@lru_cache(maxsize=None)
def _load(version: str) -> dict:
    with gzip.open(files("ngramspec") / "data" / _FILES[version], "rt") as f:  # type: ignore
        return json.load(f)


def golden_scenarios(version: str) -> list[dict[str, Any]]:
    """The recorded scenarios of one SGLang release, outputs of its unmodified C++ core.

    Each scenario is ``{"params": {...NgramConfig options...}, "ops": [...]}``; ops are
    ``{"op": "insert", "batch": [[...], ...]}``, ``{"op": "reset"}``, ``{"op": "erase",
    "req_ids": [...]}`` and ``{"op": "match", "tokens": [[...], ...], "req_ids": [...],
    "total_lens": [...], "expect_tokens": [...], "expect_mask": [...]}`` with SGLang's flat
    outputs (``req_ids``/``total_lens`` absent in 0.5.9, whose matching is stateless).

    Parameters
    ----------
    version : {"sglang-0.5.23", "sglang-0.5.9"}

    Examples
    --------
    >>> from ngramspec.testing import golden_scenarios
    >>> len(golden_scenarios("sglang-0.5.23")), len(golden_scenarios("sglang-0.5.9"))
    (110, 100)
    """
    data = _load(_check_version(version))
    return json.loads(json.dumps(data["scenarios"]))  # a copy the caller may change


def scenario_config(scenario: dict[str, Any], version: str) -> NgramConfig:
    """The :class:`~ngramspec.NgramConfig` a scenario was recorded with."""
    return NgramConfig(**scenario["params"], profile=version)


@dataclass
class GoldenReport:
    """What :func:`replay_golden` found; truthy when every recorded match was reproduced."""

    version: str
    scenarios: int = 0
    matches: int = 0
    mismatched_matches: int = 0
    mismatched_scenarios: list[int] = field(default_factory=list)
    first_mismatch: str | None = None

    def __bool__(self) -> bool:
        return not self.mismatched_scenarios

    def __str__(self) -> str:
        head = (f"{self.version}: {self.matches - self.mismatched_matches}/{self.matches} "
                f"recorded matches reproduced in {self.scenarios} scenarios")
        if self:
            return head
        return (f"{head}; {len(self.mismatched_scenarios)} scenarios differ "
                f"({self.mismatched_scenarios[:10]}{' ...' * (len(self.mismatched_scenarios) > 10)})"
                f"\nfirst mismatch: {self.first_mismatch}")


def _expected(op: dict[str, Any], batch: int) -> SimpleNamespace:
    tokens = np.asarray(op["expect_tokens"], dtype=np.int64).reshape(batch, -1)
    n = tokens.shape[1]
    mask = np.asarray(op["expect_mask"], dtype=np.uint8).astype(bool).reshape(batch, n, n)
    return SimpleNamespace(tokens=tokens, mask=mask, num_drafts=None)


def _run(cache: Any, op: dict[str, Any]) -> Any:
    kind = op["op"]
    if kind == "insert":
        return cache.insert(op["batch"])
    if kind == "reset":
        return cache.reset()
    if kind == "erase":
        return cache.erase(op["req_ids"])
    if kind == "match":
        if "req_ids" in op:
            return cache.match(op["tokens"], request_ids=op["req_ids"],
                               total_lens=op["total_lens"])
        return cache.match(op["tokens"])
    raise ValueError(f"unknown op {kind!r} in the golden file")


def replay_golden(make_cache: Callable[[NgramConfig], Any], version: str, *,
                  stop_at_first: bool = False) -> GoldenReport:
    """Replay SGLang's recorded scenarios through ``make_cache(config)`` caches.

    One fresh cache per scenario; every op applied in order; every match compared with SGLang's
    output exactly (tokens and masks; SGLang does not report ``num_drafts``).  An exception
    from the cache on a recorded op counts as a mismatch.

    Parameters
    ----------
    make_cache : class or callable
        As for :func:`check_drafter`: a class such as ``ns.NgramCache`` or a factory
        function, making an object with ``insert``, ``match``, ``erase``, ``reset``; the
        first cache's methods are checked against the calls the replay makes before any op
        runs (a ``TypeError`` naming the method and the missing keyword).
    version : {"sglang-0.5.23", "sglang-0.5.9"}
    stop_at_first : bool
        Stop at the first scenario that differs (faster when you only want a yes/no).

    Returns
    -------
    GoldenReport
        Falsy when anything differs; ``first_mismatch`` names the scenario, the op and draws
        the two trees.

    Examples
    --------
    >>> import ngramspec as ns
    >>> from ngramspec.testing import replay_golden
    >>> report = replay_golden(lambda c: ns.NgramCache(config=c), "sglang-0.5.23")
    >>> bool(report), report.matches
    (True, 598)
    >>> bool(replay_golden(ns.NgramCache, "sglang-0.5.9", stop_at_first=True))
    True
    """
    factory = as_factory(make_cache)
    report = GoldenReport(_check_version(version))
    stateful = version == "sglang-0.5.23"  # 0.5.9's recordings: stateless matches, no erase
    calls = calls_made(stateless=not stateful, stateful=stateful, erase=stateful)
    for i, scenario in enumerate(golden_scenarios(version)):
        report.scenarios += 1
        cache = make_checked(factory, scenario_config(scenario, version), calls if i == 0
                             else None)
        bad = 0
        for k, op in enumerate(scenario["ops"]):
            kind = op["op"]
            where = (f"scenario {i}" + (f" ({scenario['kind']})" if "kind" in scenario else "")
                     + f", op {k} ({kind})")
            try:
                got = _run(cache, op)
            except Exception as e:  # a recorded op must not raise
                report.matches += kind == "match"
                report.mismatched_matches += kind == "match"
                bad += 1
                if report.first_mismatch is None:
                    report.first_mismatch = f"{where}: the cache raised {type(e).__name__}: {e}"
                break
            if kind != "match":
                continue
            report.matches += 1
            try:
                diff = describe_difference(got, _expected(op, len(op["tokens"])),
                                           context=where, names=("cache", "SGLang"))
            except TypeError as e:
                raise TypeError(f"cache.match(...) returned {type(got).__name__}: {e}") from None
            if diff is not None:
                report.mismatched_matches += 1
                bad += 1
                if report.first_mismatch is None:
                    report.first_mismatch = (
                        f"{diff}\nconfig: {config_source(scenario_config(scenario, version))}")
        if bad:
            report.mismatched_scenarios.append(i)
            if stop_at_first:
                break
    return report
