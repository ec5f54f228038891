"""Measure a cost table (:class:`~ngramspec.costs.CostTable`) for a transformers causal LM.

For every batch size ``b``: a KV cache of ``context`` random tokens is prefilled for ``b``
requests (only the last position's logits are computed); then for every ``tokens`` count
``n``, one step of ``n`` query tokens per request is timed on top of that cache: a plain
decode for ``n = 1``, otherwise a verify step over a draft tree of ``n`` slots.

``timing="loop"`` (the default) times what a decoding loop pays per step, the way
``examples/hf_speculative_greedy.py`` and ``ngramspec check`` run it: the input ids, position
ids and (for a tree, or a batch of several requests) the 4-D additive attention mask of
:class:`~ngramspec.DraftBatch` built on the host, uploaded, the forward with the KV cache,
the verdict (the argmax over the slots) read back to the host and, for a tree, the KV rows of
the root and an accepted path kept per request (a gather over the cache).  ``timing=
"forward"`` times the forward alone (inputs uploaded beforehand, nothing read back).  After
each step the cache is cut back to ``context`` tokens, untimed.

Each point runs ``warmup`` untimed steps, then ``repeats`` timed ones (the device
synchronised around each); the median is kept (the first point is run once untimed before
the grid, so that it pays no cold start).  The first point is measured again at the end:
the spread between the two says whether the machine stayed steady, and the table keeps the
lower of the two medians (a process's first steps tend to run slow).  A point that fails (e.g.
out of memory) is named and left out with its batch row (or its tokens column, whichever
keeps more points): the table holds a full grid of what could be measured.

Needs the optional extra: ``pip install 'ngramspec[calibrate]'`` (torch, transformers).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import numpy as np

from . import torch_loop as tl
from ..costs import CostTable
from ..drafts import DraftBatch

__all__ = ["calibrate", "measure", "tree_batch", "Measurements", "TIMINGS"]

#: What a point times: ``"loop"`` (everything a loop pays per step) or ``"forward"``.
TIMINGS = ("loop", "forward")


def tree_batch(batch: int, tokens: int, *, vocab: int, rng: np.random.Generator) -> DraftBatch:
    """A batch of draft trees of ``tokens`` slots with random token ids: slot ``i`` hangs
    below slot ``(i - 1) // 2`` (a branching tree, as SGLang's BFS trees branch near the
    root), in level order like every draft tree.

    Examples
    --------
    >>> import numpy as np
    >>> from ngramspec.measure.calibrate import tree_batch
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


def _check_sizes(name: str, values: Any) -> list[int]:
    try:
        out = [int(v) for v in values]
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a list of integers >= 1, got {values!r}") from None
    if not out or min(out) < 1 or len(set(out)) != len(out) or any(
            isinstance(v, bool) for v in values):
        raise ValueError(f"{name} must be distinct integers >= 1, got {list(values)!r}")
    return sorted(out)




def accepted_path(tokens: int) -> np.ndarray:
    """The slots kept after a timed tree step: the root and its first-child chain in
    :func:`tree_batch`'s tree (slots 0, 1, 3, 7, ...).

    Examples
    --------
    >>> from ngramspec.measure.calibrate import accepted_path
    >>> accepted_path(12).tolist(), accepted_path(1).tolist()
    ([0, 1, 3, 7], [0])
    """
    path = [0]
    while 2 * path[-1] + 1 < tokens:
        path.append(2 * path[-1] + 1)
    return np.asarray(path, np.int64)


class Measurements(list):
    """The points measured, ``(batch, tokens, median_ms, min_ms, max_ms)`` each (a list),
    with what else a run found out.

    Attributes
    ----------
    failed : list of (int, int, str)
        ``(batch, tokens, reason)`` of every point that could not be measured.
    left_out : dict
        ``{"batch": [...], "tokens": [...]}``: grid rows and columns left out of the points
        because a point in them failed (the points always form a full grid).
    drift : tuple of (int, int, float, float) or None
        ``(batch, tokens, first_ms, last_ms)``: the first point measured at the start and
        again at the end (None if it could not be re-measured).
    timing : str
        ``"loop"`` or ``"forward"``.
    """

    def __init__(self, points=(), *, failed=(), left_out=None, drift=None,
                 timing: str = "loop") -> None:
        super().__init__(points)
        self.failed = list(failed)
        self.left_out = dict(left_out or {"batch": [], "tokens": []})
        self.drift = drift
        self.timing = timing

    @property
    def spread(self) -> float | None:
        """``last / first - 1`` of the re-measured first point (None without one)."""
        if self.drift is None:
            return None
        return self.drift[3] / self.drift[2] - 1


def calibrate(model: Any, **options: Any) -> CostTable:
    """Measure step times ``t(batch, tokens)`` of a causal LM as a :class:`CostTable`
    (options: see :func:`measure`; the module docstring says what is timed)."""
    points = measure(model, **options)
    return CostTable([(b, n, ms) for b, n, ms, _, _ in points],
                     source=f"calibrated {getattr(model, 'name_or_path', model)}")


def _full_grid(ok: dict, batch: list[int], tokens: list[int]) -> tuple[list, list, list]:
    """The batches and tokens kept (a full grid of measured points) and the points."""
    bad_b = sorted({b for b in batch for n in tokens if (b, n) not in ok})
    keep_b = [b for b in batch if b not in bad_b]
    # Dropping the failed tokens columns instead keeps more points when few columns failed
    # (never the plain decode column, which every table needs).
    alt_b = [b for b in batch if (b, 1) in ok]
    alt_n = [n for n in tokens if all((b, n) in ok for b in alt_b)]
    if alt_b and len(alt_b) * len(alt_n) > len(keep_b) * len(tokens):
        keep_b, keep_n = alt_b, alt_n
    else:
        keep_n = list(tokens)
    points = [ok[(b, n)] for b in keep_b for n in keep_n]
    return keep_b, keep_n, points


def _reason(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}"[:200]


def measure(model: Any, *, batch: Sequence[int] = (1, 2, 3, 4, 16, 48),
            tokens: Sequence[int] = tuple(range(1, 17)), context: int = 1024, repeats: int = 5,
            warmup: int = 2, device: str = "cpu", dtype: str | None = None, seed: int = 0,
            threads: int | None = None, timing: str = "loop",
            progress: Callable[[int, int], None] | None = None) -> Measurements:
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
        Timed steps per point (the median is kept) and untimed ones before them.
    device, dtype : str
        Torch device (``"cpu"``, ``"cuda"``, ...) and dtype (``float32``, ``bfloat16``,
        ``float16``, ``float64``; default: as loaded).
    seed : int
        Seed of the random token ids.
    threads : int, optional
        CPU threads for torch (``torch.set_num_threads``; default: torch's).  On a machine
        busy with other work, 1 gives much steadier CPU timings.
    timing : {"loop", "forward"}
        ``"loop"``: everything a decoding loop pays per step (host-built inputs, upload,
        forward, verdict read back, accepted KV rows kept); ``"forward"``: the forward alone.
    progress : callable(done, total), optional
        Called after every measured point.

    Returns
    -------
    Measurements
        A list of ``(batch, tokens, median_ms, min_ms, max_ms)``, a full grid of the points
        that could be measured; ``failed``, ``left_out`` and ``drift`` say the rest.

    Raises
    ------
    ValueError
        Bad options, a model that cannot be loaded, or no point measured at all.
    """
    batch, tokens = _check_grid(batch, tokens, context, repeats, warmup, timing)
    torch, dev = tl.setup(device, dtype=dtype, threads=threads)
    model, _ = tl.load_model(model, dev, dtype)
    vocab = int(model.config.vocab_size)
    stepper = tl.Stepper(model, dev)
    rng = np.random.default_rng(seed)
    ok: dict[tuple[int, int], tuple] = {}
    failed: list[tuple[int, int, str]] = []
    total, done = len(batch) * len(tokens) + 1, 0

    def prefill(b: int) -> None:
        stepper.cache = None
        prompt = torch.from_numpy(rng.integers(1, vocab, size=(b, context))).to(dev)
        _, stepper.cache = tl.prefill(model, prompt)

    def point(b: int, n: int) -> tuple:
        return _time_point(model, stepper, torch, dev, rng, vocab, context, timing, warmup,
                           repeats, b, n)

    def release() -> None:
        stepper.cache = None
        if dev.type == "cuda":
            torch.cuda.empty_cache()

    with torch.inference_mode():
        for b in batch:
            try:
                prefill(b)
                if b == batch[0]:  # once, untimed: the first point pays no cold start
                    point(b, tokens[0])
            except (RuntimeError, MemoryError) as e:
                release()
                failed += [(b, n, f"prefill: {_reason(e)}") for n in tokens]
                done += len(tokens)
                if progress is not None:
                    progress(done, total)
                continue
            for n in tokens:
                try:
                    ok[(b, n)] = point(b, n)
                except (RuntimeError, MemoryError) as e:
                    failed.append((b, n, _reason(e)))
                    if stepper.cache is not None:
                        tl.crop(stepper.cache, context)
                    if dev.type == "cuda":
                        torch.cuda.empty_cache()
                done += 1
                if progress is not None:
                    progress(done, total)
            release()
        drift = None
        if ok:
            b0, n0 = next(iter(ok))
            try:
                prefill(b0)
                again = point(b0, n0)
                drift = (b0, n0, ok[(b0, n0)][2], again[2])
                if again[2] < ok[(b0, n0)][2]:  # the first point paid a start the others did not
                    ok[(b0, n0)] = again
            except (RuntimeError, MemoryError):
                pass
            release()
        if progress is not None:
            progress(total, total)
    keep_b, keep_n, points = _full_grid(ok, batch, tokens)
    if not points:
        first = failed[0] if failed else None
        raise ValueError("no point could be measured" + (
            f" (batch {first[0]}, tokens {first[1]}: {first[2]})" if first else ""))
    left_out = {"batch": [b for b in batch if b not in keep_b],
                "tokens": [n for n in tokens if n not in keep_n]}
    return Measurements(points, failed=failed, left_out=left_out, drift=drift, timing=timing)


def _check_grid(batch: Sequence[int], tokens: Sequence[int], context: int, repeats: int,
                warmup: int, timing: str) -> tuple[list[int], list[int]]:
    """:func:`measure`'s options checked; the grid's sizes, sorted."""
    batch = _check_sizes("batch", batch)
    tokens = _check_sizes("tokens", tokens)
    if tokens[0] != 1:
        raise ValueError("tokens must include 1: the plain decode step the table compares with")
    for name, v, lo in (("context", context, 1), ("repeats", repeats, 1),
                        ("warmup", warmup, 0)):
        if isinstance(v, bool) or not isinstance(v, int) or v < lo:
            raise ValueError(f"{name} must be an integer >= {lo}, got {v!r}")
    if timing not in TIMINGS:
        raise ValueError(f"timing must be one of {', '.join(TIMINGS)}, got {timing!r}")
    return batch, tokens


def _time_point(model: Any, stepper: Any, torch: Any, dev: Any, rng: np.random.Generator,
                vocab: int, context: int, timing: str, warmup: int, repeats: int, b: int,
                n: int) -> tuple:
    """One point of the grid: ``(b, n, median_ms, min_ms, max_ms)`` of ``repeats`` steps of
    ``b`` requests with ``n`` query tokens each, after ``warmup`` untimed ones (the KV cache
    cropped back to ``context`` after each)."""
    d = tree_batch(b, n, vocab=vocab, rng=rng)
    kv = np.full(b, context, np.int64)
    slots = [accepted_path(n)] * b
    if timing == "forward":
        ids = torch.from_numpy(d.tokens.astype(np.int64)).to(dev)
        kw: dict[str, Any] = {"position_ids": torch.from_numpy(d.positions(kv)).to(dev)}
        if n > 1:
            kw["attention_mask"] = torch.from_numpy(d.additive_attention_mask(
                kv, dtype=stepper.np_mask_dtype)).to(dev, stepper.mask_dtype)
    times = []
    for i in range(warmup + repeats):
        t0 = stepper.timed()
        if timing == "forward":
            tl.forward(model, ids, stepper.cache, **kw)
        else:
            stepper.step(d.tokens, kv, d if n > 1 else None)
            if n > 1:
                stepper.keep(tl.kept_index(kv, context, slots)[0])
        t1 = stepper.timed()
        if i >= warmup:
            times.append(t1 - t0)
        tl.crop(stepper.cache, context)
    return (b, n, 1e3 * float(np.median(times)), 1e3 * min(times), 1e3 * max(times))
