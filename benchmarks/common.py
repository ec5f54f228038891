"""What every benchmark shares: the recorded streams, SGLang's serving trace, the machine line
and small timing helpers; and the acceptance-table fit that a study and the tests both use.

One module, so that a stream is read, a trace cut and a figure headed the same way in every
study, asv benchmark and test (``benchmarks.asv``, ``benchmarks.studies``, ``tests/``).
"""

from __future__ import annotations

import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

import ngramspec as ns
from ngramspec.streams import embedded_streams_path, fresh_streams_path, read_streams

#: The repository's root (studies run their child processes from it, so that
#: ``benchmarks`` imports there as it does for ``python -m benchmarks.studies.NAME``).
ROOT = Path(__file__).resolve().parents[1]

#: SGLang 0.5.23's server defaults for the trie, as the comparisons with its C++ core use them.
DEFAULTS: dict[str, Any] = dict(max_trie_depth=18, min_bfs_breadth=1, max_bfs_breadth=10,
                                draft_token_num=12)

#: The configurations of the simulator's speed goals, by name (``benchmarks.asv.bench_simulate``,
#: ``benchmarks.studies.simulate_speed``).
SPEED_CONFIGS: dict[str, Callable[[], ns.NgramConfig]] = {
    "SGLang BFS": lambda: ns.NgramConfig(),
    "SGLang PROB": lambda: ns.NgramConfig(match_type="PROB"),
    "recommended()": lambda: ns.NgramConfig.recommended(),
    "sglang-0.5.9": lambda: ns.NgramConfig(profile="sglang-0.5.9"),
}


# --- recorded streams ---------------------------------------------------------------------

def load_rows(limit: int | None = None) -> list[dict]:
    """The recorded streams shipped with ngramspec (133 requests), in file order; the first
    ``limit`` of them if given."""
    rows = read_streams(embedded_streams_path())
    return rows if limit is None else rows[:limit]


def fresh_rows() -> list[dict]:
    """The second recording shipped with ngramspec (prompts the first does not contain)."""
    return read_streams(fresh_streams_path())


def corpus(repeat: int) -> list[dict]:
    """The shipped streams, ``repeat`` times in a row (ids made unique)."""
    rows = load_rows()
    return [dict(r, id=f"{k}:{r['id']}") for k in range(repeat) for r in rows]


def documents(rows: Sequence[dict] | None = None) -> list[list[int]]:
    """One document per request: its prompt followed by its output."""
    return [r["prompt_ids"] + r["output_ids"] for r in (load_rows() if rows is None else rows)]


def bulk_sequence(rows: Sequence[dict], n: int = 100_000) -> np.ndarray:
    """The streams' tokens end to end, repeated to ``n`` tokens (int32)."""
    toks = [t for r in rows for t in r["prompt_ids"] + r["output_ids"]]
    reps = -(-n // len(toks))
    return np.asarray((toks * reps)[:n], np.int32)


def trace(rows: Sequence[dict], concurrency: int, depth: int = 18, accept: int = 3
          ) -> list[tuple[list[np.ndarray], list, list[int]]]:
    """SGLang's serving loop over ``rows``: per step the int32 context windows (the last
    ``depth`` tokens), request ids and total lengths, in its admission order; every request
    advances by ``accept`` recorded tokens a step, so the trace is the same for any drafter."""
    queue, running, steps = list(rows), [], []
    while queue or running:
        while queue and len(running) < concurrency:
            r = queue.pop(0)
            running.append([r["id"], r["prompt_ids"] + r["output_ids"][:1], r["output_ids"][1:]])
        steps.append(([np.asarray(s[-depth:], np.int32) for _, s, _ in running],
                      [rid for rid, _, _ in running], [len(s) for _, s, _ in running]))
        for it in running:
            it[1] += it[2][:accept]
            it[2] = it[2][accept:]
        running = [it for it in running if it[2]]
    return steps


# --- machine and timing -------------------------------------------------------------------

def machine() -> str:
    """``"<processor>, <n> cores, <date>"`` for the head line of a report."""
    return (f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, "
            f"{time.strftime('%Y-%m-%d')}")


def rss() -> int:
    """This process's resident memory in bytes (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def nbytes(cache: Any) -> int:
    """Bytes of a cache's trie arrays (the public ``nbytes`` where the cache has one)."""
    n = getattr(cache, "nbytes", None)
    return int(n) if n is not None else int(cache._backend.nbytes)


def median_time(fn: Callable[[], Any], repeats: int) -> float:
    """Median wall seconds of ``repeats`` calls of ``fn``."""
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def run_python(code: str, *args: str) -> str:
    """Run ``python -c code args...`` in a fresh process from the repository's root (where
    ``benchmarks`` imports); its standard output."""
    return subprocess.run([sys.executable, "-c", code, *args], cwd=ROOT, check=True,
                          capture_output=True, text=True).stdout


# --- tokenizers ---------------------------------------------------------------------------

def train_chat_tokenizer(directory: Path, texts: Sequence[str], *, vocab_size: int,
                         chat_template: str | None = None) -> Path:
    """A small byte-level BPE trained on ``texts`` with ChatML's special tokens, saved to
    ``directory`` with ``chat_template`` (needs tokenizers and transformers)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, show_progress=False,
                                  special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer)
    kwargs = {"chat_template": chat_template} if chat_template else {}
    PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<|im_end|>",
                            pad_token="<|endoftext|>", **kwargs).save_pretrained(str(directory))
    return directory


# --- the acceptance-table fit (benchmarks.studies.fit_acceptance) -------------------------

CONTEXT_EDGES = (1, 2, 3, 4, 6, 8, 12, 16, 20, 24)
TOTAL_EDGES = (1, 2, 3, 5)
LEVEL_EDGES = (0, 1, 2, 4, 8)


def _ridge(x: np.ndarray, y: np.ndarray, prior: np.ndarray, ridge: float) -> np.ndarray:
    X = np.stack([np.ones_like(x), x], 1)
    return np.linalg.solve(X.T @ X + ridge * np.eye(2), X.T @ y + ridge * prior)


def fit(edges: np.ndarray, ridge: float, level_edges: Sequence[int] = LEVEL_EDGES
        ) -> np.ndarray:
    """Coefficients ``(a, b)`` per (source, context bin, total bin, level bin, rank 0 or
    not), each cell pulled (``ridge`` pseudo-edges) towards its coarser cell's fit."""
    src, ctx, level, total, rank, ratio, acc = edges.T[:7]
    ci = np.searchsorted(CONTEXT_EDGES, ctx, side="right") - 1
    ti = np.searchsorted(TOTAL_EDGES, total, side="right") - 1
    li = np.searchsorted(level_edges, level, side="right") - 1
    coef = np.zeros((2, len(CONTEXT_EDGES), len(TOTAL_EDGES), len(level_edges), 2, 2))
    for s in range(2):
        ms = src == s
        ps = _ridge(ratio[ms], acc[ms], np.array([0.0, 1.0]), ridge)
        for c in range(len(CONTEXT_EDGES)):
            mc = ms & (ci == c)
            pc = _ridge(ratio[mc], acc[mc], ps, ridge)
            for t in range(len(TOTAL_EDGES)):
                mt = mc & (ti == t)
                pt = _ridge(ratio[mt], acc[mt], pc, ridge)
                for g in range(len(level_edges)):
                    for r in range(2):
                        m = mt & (li == g) & ((rank > 0) == bool(r))
                        coef[s, c, t, g, r] = _ridge(ratio[m], acc[m], pt, ridge)
    return coef


def table_array(coef: np.ndarray, level_edges: Sequence[int] = LEVEL_EDGES) -> np.ndarray:
    """The kernels' form of a fitted table
    (:func:`ngramspec.config.acceptance_table.calibration_array`)."""
    return np.concatenate([[len(CONTEXT_EDGES), len(TOTAL_EDGES), len(level_edges)],
                           CONTEXT_EDGES, TOTAL_EDGES, level_edges,
                           np.asarray(coef, np.float64).reshape(-1)]).astype(np.float64)


def cross_validate(edge_sets: dict[str, np.ndarray], rows: list[dict], repeats: int,
                   ridge: float, seed: int = 0) -> dict[str, list[float]]:
    """Worst bin (>= 1% of steps) of each edge set's fit, judged on the other half of the
    tuning requests, per fold (``2 * repeats`` folds, the same halves for every set)."""
    import ngramspec.config.acceptance_table as calibration
    from ngramspec.sweep.split import group_key
    from ngramspec.measure.reliability import reliability

    keys = sorted({group_key(r["id"]) for r in rows})
    rng = np.random.default_rng(seed)
    out: dict[str, list[float]] = {name: [] for name in edge_sets}
    config = ns.NgramConfig.preset("calibrated")
    shipped = calibration._TABLE
    for _ in range(repeats):
        half = {keys[j] for j in rng.permutation(len(keys))[:len(keys) // 2]}
        a = [i for i, r in enumerate(rows) if group_key(r["id"]) in half]
        b = [i for i, r in enumerate(rows) if group_key(r["id"]) not in half]
        for train, test in ((a, b), (b, a)):
            for name, edges in edge_sets.items():
                coef = fit(edges[np.isin(edges[:, 7].astype(int), train)], ridge)
                calibration._TABLE = table_array(coef)
                try:
                    rel = reliability([rows[i] for i in test], config=config)
                finally:
                    calibration._TABLE = shipped
                out[name].append(rel.worst())
    return out

