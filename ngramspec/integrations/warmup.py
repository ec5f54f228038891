"""``ngramspec warmup``'s work: what a configuration runs, compiled into Numba's disk cache."""

from __future__ import annotations

import time
import types
from typing import Callable

import numpy as np

from ..config import NgramConfig
from ..simulate import simulate
from ._warm import warm_corpus
from .sglang import NgramCorpus
from .timing import time_drafting

__all__ = ["PARTS", "warm_everything"]


#: What :func:`warm_everything` compiles, in order: the compiled replay of ``simulate``, the
#: step API a prediction times (the custom engine), SGLang's worker on the drop-in, vLLM's
#: custom proposer.
PARTS = ("simulate", "step-api", "sglang", "vllm")


def warm_everything(config: NgramConfig, parts: tuple[str, ...] = PARTS,
                    report: Callable[[str, float], None] | None = None) -> dict[str, float]:
    """Compile what ``config`` runs into Numba's disk cache (for container images and CI):
    seconds per part of :data:`PARTS` (those that apply: the drop-in for SGLang profiles,
    the proposer for chains), each reported as it ends."""
    bad = [p for p in parts if p not in PARTS]
    if bad:
        raise ValueError(f"parts: {bad[0]!r} is not one of {', '.join(PARTS)}")
    # Long enough that the step API's timed steps (128) use more tree rows than a stateful
    # match's pool holds (it is renewed then, by a kernel of its own).
    rng = np.random.default_rng(0)
    rows = [{"id": r, "prompt_ids": [1, 2, 3, 4, 1, 2, 3][:5 + r],
             "output_ids": rng.integers(0, 50, 400).tolist()} for r in range(3)]
    # (vLLM's own proposer has no trie to size)
    small = config if config.vllm else config.replace(capacity=max(config.trie_depth + 1, 256))
    applies = {"simulate": True, "step-api": not config.vllm,
               "sglang": config.profile == "sglang-0.5.23" and not config.chain,
               "vllm": config.chain}
    taken: dict[str, float] = {}
    for part in parts:
        if not applies[part]:
            continue
        t0 = time.perf_counter()
        if part == "simulate":
            simulate(rows, config=small)
        elif part == "step-api":  # one request per step, and batches (other kernels)
            for conc in (1, 3):
                time_drafting(simulate(rows, config=small, concurrency=conc), "custom")
        elif part == "sglang":
            warm_corpus(NgramCorpus, config)
        else:
            from .vllm import Proposer

            sn = types.SimpleNamespace
            k = config.num_speculative_tokens if config.vllm else config.draft_token_num - 1
            proposer = Proposer(sn(speculative_config=sn(num_speculative_tokens=k),
                                   scheduler_config=sn(max_num_seqs=4),
                                   model_config=sn(max_model_len=64)), config=small)
            ctx = np.zeros((4, 64), np.int32)
            ctx[0, :9] = [1, 2, 3, 4, 5, 1, 2, 3, 4]
            proposer.propose([[4]], np.array([9, 0, 0, 0]), ctx)
        taken[part] = time.perf_counter() - t0
        if report is not None:
            report(part, taken[part])
    return taken
