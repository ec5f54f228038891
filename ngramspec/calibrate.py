"""Measure a cost table (:class:`~ngramspec.costs.CostTable`) for a transformers causal LM.

For every batch size ``b``: a KV cache of ``context`` random tokens is prefilled for ``b``
requests; then for every ``tokens`` count ``n``, one forward of ``n`` query tokens per request
is timed on top of that cache: a plain decode for ``n = 1``, otherwise a draft tree of ``n``
slots under its tree attention mask (the 4-D additive mask and tree-depth position ids of
:class:`~ngramspec.DraftBatch`, as in ``examples/hf_speculative_greedy.py``).  After each
forward the cache is cut back to ``context`` tokens.  Each point runs ``warmup`` untimed
forwards, then ``repeats`` timed ones (the device synchronised around each); the median is
kept.

Needs the optional extra: ``pip install 'ngramspec[calibrate]'`` (torch, transformers).
"""

from __future__ import annotations

import inspect
import os
import time
from typing import Any, Callable, Sequence

import numpy as np

from .costs import CostTable
from .drafts import DraftBatch

__all__ = ["calibrate", "measure", "tree_batch"]

_DTYPES = ("float32", "float64", "bfloat16", "float16")


def _torch():
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        raise ValueError("calibrate needs torch and transformers: pip install "
                         "'ngramspec[calibrate]'") from None
    return torch


def tree_batch(batch: int, tokens: int, *, vocab: int, rng: np.random.Generator) -> DraftBatch:
    """A batch of draft trees of ``tokens`` slots with random token ids: slot ``i`` hangs
    below slot ``(i - 1) // 2`` (a branching tree, as SGLang's BFS trees branch near the
    root), in level order like every draft tree.

    Examples
    --------
    >>> import numpy as np
    >>> from ngramspec.calibrate import tree_batch
    >>> d = tree_batch(2, 5, vocab=100, rng=np.random.default_rng(0))
    >>> d.parents.tolist()
    [[-1, 0, 0, 1, 1], [-1, 0, 0, 1, 1]]
    """
    parents = [-1] + [(i - 1) // 2 for i in range(1, tokens)]
    mask = np.zeros((tokens, tokens), bool)
    for i in range(tokens):
        j = i
        while j != -1:
            mask[i, j] = True
            j = parents[j]
    toks = rng.integers(1, vocab, size=(batch, tokens)).astype(np.int32)
    return DraftBatch(toks, np.broadcast_to(mask, (batch, tokens, tokens)).copy(),
                      np.full(batch, tokens - 1, np.int32))


def _forward(model, input_ids, cache=None, **kwargs):
    """``model(...)`` with the KV cache under this transformers' name (``cache`` in 5.x,
    ``past_key_values`` before)."""
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else \
        "past_key_values"
    out = model(input_ids, use_cache=True, **kwargs, **({name: cache} if cache is not None
                                                       else {}))
    return getattr(out, name)


def _crop(cache, length: int) -> None:
    if hasattr(cache, "crop") and hasattr(cache, "get_seq_length"):
        extra = int(cache.get_seq_length()) - length
        if extra > 0:
            cache.crop(-extra)  # negative: drop that many (every transformers with crop())
        return
    for layer in cache.layers:  # pragma: no cover - caches without crop()
        layer.keys = layer.keys[..., :length, :]
        layer.values = layer.values[..., :length, :]


def _check_sizes(name: str, values: Any) -> list[int]:
    try:
        out = [int(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a list of integers >= 1, got {values!r}") from None
    if not out or min(out) < 1 or len(set(out)) != len(out) or any(
            isinstance(v, bool) for v in values):
        raise ValueError(f"{name} must be distinct integers >= 1, got {list(values)!r}")
    return sorted(out)


def calibrate(model: Any, **options: Any) -> CostTable:
    """Measure forward times ``t(batch, tokens)`` of a causal LM as a :class:`CostTable`
    (options: see :func:`measure`; the module docstring says what is timed)."""
    points = measure(model, **options)
    return CostTable([(b, n, ms) for b, n, ms, _, _ in points],
                     source=f"calibrated {getattr(model, 'name_or_path', model)}")


def measure(model: Any, *, batch: Sequence[int] = (1, 4, 16),
              tokens: Sequence[int] = (1, 4, 8, 12), context: int = 1024, repeats: int = 5,
              warmup: int = 2, device: str = "cpu", dtype: str | None = None, seed: int = 0,
              threads: int | None = None,
              progress: Callable[[int, int], None] | None = None) -> CostTable:
    """The measurements behind :func:`calibrate`: ``(batch, tokens, median_ms, min_ms,
    max_ms)`` per point (a wide min..max range means a noisy machine).

    Parameters
    ----------
    model : str, os.PathLike or torch.nn.Module
        A local transformers model directory, or a loaded causal LM.
    batch, tokens : sequences of int
        The grid; ``tokens`` must include 1 (the plain decode step).
    context : int
        Tokens in each request's KV cache.
    repeats, warmup : int
        Timed forwards per point (the median is kept) and untimed ones before them.
    device, dtype : str
        Torch device (``"cpu"``, ``"cuda"``, ...) and dtype (``float32``, ``bfloat16``,
        ``float16``, ``float64``; default: as loaded).
    seed : int
        Seed of the random token ids.
    threads : int, optional
        CPU threads for torch (``torch.set_num_threads``; default: torch's).  On a machine
        busy with other work, 1 gives much steadier CPU timings.
    progress : callable(done, total), optional
        Called after every measured point.

    Returns
    -------
    list of (int, int, float, float, float)
    """
    batch = _check_sizes("batch", batch)
    tokens = _check_sizes("tokens", tokens)
    if tokens[0] != 1:
        raise ValueError("tokens must include 1: the plain decode step the table compares with")
    for name, v, lo in (("context", context, 1), ("repeats", repeats, 1),
                        ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    if dtype is not None and dtype not in _DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    torch = _torch()
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: torch sees no CUDA device here")
    name = "model"
    if isinstance(model, (str, os.PathLike)):
        name = os.fspath(model)
        if not os.path.isdir(name):
            raise ValueError(f"MODEL_DIR {name!r}: no such directory (a local transformers "
                             "model directory, with config.json and weights)")
        from transformers import AutoModelForCausalLM
        try:
            model = AutoModelForCausalLM.from_pretrained(name)
        except (OSError, ValueError) as e:
            raise ValueError(f"MODEL_DIR {name!r}: cannot be loaded as a causal LM: "
                             f"{str(e).splitlines()[0]}") from None
    model = model.to(dev)
    if dtype is not None:
        model = model.to(getattr(torch, dtype))
    model.eval()
    mask_dtype = next(model.parameters()).dtype
    vocab = int(model.config.vocab_size)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rng = np.random.default_rng(seed)
    points = []
    total, done = len(batch) * len(tokens), 0
    with torch.inference_mode():
        for b in batch:
            prompt = torch.from_numpy(rng.integers(1, vocab, size=(b, context))).to(dev)
            cache = _forward(model, prompt)
            for n in tokens:
                d = tree_batch(b, n, vocab=vocab, rng=rng)
                ids = torch.from_numpy(d.tokens.astype(np.int64)).to(dev)
                kwargs: dict[str, Any] = {}
                if n > 1:
                    kv = [context] * b
                    kwargs["position_ids"] = torch.from_numpy(d.positions(kv)).to(dev)
                    kwargs["attention_mask"] = torch.from_numpy(
                        d.additive_attention_mask(kv)).to(dev, mask_dtype)
                else:
                    kwargs["position_ids"] = torch.full((b, 1), context, device=dev)
                times = []
                for i in range(warmup + repeats):
                    sync()
                    t0 = time.perf_counter()
                    _forward(model, ids, cache, **kwargs)
                    sync()
                    if i >= warmup:
                        times.append(time.perf_counter() - t0)
                    _crop(cache, context)
                points.append((b, n, 1e3 * float(np.median(times)), 1e3 * min(times),
                               1e3 * max(times)))
                done += 1
                if progress is not None:
                    progress(done, total)
            del cache
    return points
