"""The torch pieces of a speculative decoding loop over a transformers causal LM (private).

One home for what :mod:`ngramspec.measure.calibrate` times and :mod:`ngramspec.measure.check` runs, so that
both pay exactly the same per step: the input ids, position ids and (where needed) the 4-D
additive mask built on the host with NumPy, uploaded, one forward with the KV cache, the
verdict (the argmax over the slots) read back to the host, and for a tree step the KV rows of
the accepted path kept per request (a gather; shorter requests left-padded).

Also: importing torch with a clear error, checking device / dtype / threads, loading a local
model directory, a prefill that keeps only the last position's logits, and the batched cache
bookkeeping of a loop whose requests come and go (left padding).
"""

from __future__ import annotations

import inspect
import os
import time
from typing import Any, Sequence

import numpy as np

DTYPES = ("float32", "float64", "bfloat16", "float16")


def import_torch(what: str = "calibrate"):
    """``torch`` (transformers checked too), or a ValueError saying what to install."""
    try:
        import torch
        import transformers  # noqa: F401
    except ImportError:
        raise ValueError(f"{what} needs torch and transformers: pip install "
                         "'ngramspec[calibrate]'") from None
    return torch


def check_options(*, dtype: Any = None, threads: Any = None) -> None:
    """Errors for ``dtype`` and ``threads`` that need no torch."""
    if threads is not None and (isinstance(threads, bool) or not isinstance(threads, int)
                                or threads < 1):
        raise ValueError(f"threads must be an integer >= 1, got {threads!r}")
    if dtype is not None and dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")


def setup(device: str, *, dtype: str | None = None, threads: int | None = None,
          what: str = "calibrate"):
    """``(torch, torch.device)`` after checking the options and setting the threads."""
    check_options(dtype=dtype, threads=threads)
    torch = import_torch(what)
    if threads is not None:
        torch.set_num_threads(threads)
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as e:
        raise ValueError(f"device {device!r}: {e}") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device cuda: torch sees no CUDA device here")
    if dev.type not in ("cpu", "cuda", "mps", "xpu"):
        raise ValueError(f"device {device!r}: not a device a model can run on here (cpu, "
                         "cuda, ...)")
    return torch, dev


def check_model_dir(model: Any) -> None:
    """A model given as a path must be a directory (checked before anything long runs)."""
    if isinstance(model, (str, os.PathLike)) and not os.path.isdir(os.fspath(model)):
        raise ValueError(f"MODEL_DIR {os.fspath(model)!r}: no such directory (a local "
                         "transformers model directory, with config.json and weights)")


def load_model(model: Any, dev, dtype: str | None = None) -> tuple[Any, str]:
    """A causal LM on ``dev`` in eval mode, and its name: ``model`` is a local model
    directory or an already loaded module."""
    torch = import_torch()
    name = getattr(model, "name_or_path", "model")
    if isinstance(model, (str, os.PathLike)):
        check_model_dir(model)
        name = os.fspath(model)
        from transformers import AutoModelForCausalLM
        from transformers.utils import logging as hf_logging

        bar = hf_logging.is_progress_bar_enabled()
        hf_logging.disable_progress_bar()  # ours is the only progress bar
        try:
            model = AutoModelForCausalLM.from_pretrained(name)
        except (OSError, ValueError, KeyError) as e:
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"MODEL_DIR {name!r}: cannot be loaded as a causal LM: "
                             f"{first}") from None
        finally:
            if bar:
                hf_logging.enable_progress_bar()
    if not hasattr(model, "forward") or not hasattr(model, "config"):
        raise TypeError(f"model must be a model directory or a transformers causal LM, got "
                        f"{type(model).__name__}")
    model = model.to(dev)
    if dtype is not None:
        model = model.to(getattr(torch, dtype))
    model.eval()
    return model, str(name)


def _cache_name(model) -> str:
    """The KV cache keyword of this transformers (``cache`` in 5.x, ``past_key_values``
    before)."""
    params = inspect.signature(model.forward).parameters
    return "cache" if "cache" in params else "past_key_values"


def forward(model, input_ids, cache=None, **kwargs):
    """``(logits, cache)`` of ``model(input_ids, ...)`` with the cache under this
    transformers' keyword."""
    name = _cache_name(model)
    out = model(input_ids, use_cache=True, **kwargs,
                **({name: cache} if cache is not None else {}))
    return out.logits, getattr(out, name)


def prefill(model, input_ids, **kwargs):
    """The prompt's forward: ``(last position's logits (B, V), cache)``.  Only the last
    position's logits are computed where the model takes ``logits_to_keep`` (else they are
    sliced): the full (B, L, V) logits of a large vocabulary would not fit."""
    if "logits_to_keep" in inspect.signature(model.forward).parameters:
        kwargs["logits_to_keep"] = 1
    logits, cache = forward(model, input_ids, **kwargs)
    return logits[:, -1], cache


def synchronizer(dev):
    """A function that waits for the device's queued work (a no-op on the CPU)."""
    import torch

    if dev.type == "cuda":
        return torch.cuda.synchronize
    if dev.type == "mps" and hasattr(torch, "mps"):
        return torch.mps.synchronize
    return lambda: None


# --- KV cache layout --------------------------------------------------------------------


def _layers(cache) -> list:
    if hasattr(cache, "layers"):
        return list(cache.layers)
    return [_OldLayer(cache, i) for i in range(len(cache.key_cache))]  # pragma: no cover


def _layer_tensor(name: str) -> property:
    """Layer ``i``'s tensor in the old cache's per-kind list ``name``, read and written."""
    return property(lambda self: getattr(self.cache, name)[self.i],
                    lambda self, t: getattr(self.cache, name).__setitem__(self.i, t))


class _OldLayer:  # pragma: no cover - DynamicCache before transformers 4.56
    keys = _layer_tensor("key_cache")
    values = _layer_tensor("value_cache")

    def __init__(self, cache, i: int) -> None:
        self.cache, self.i = cache, i


def cache_len(cache) -> int:
    """Rows (sequence positions) in the cache, padding included."""
    layers = _layers(cache)
    return int(layers[0].keys.shape[-2]) if layers else 0


def crop(cache, length: int) -> None:
    """Drop every row after the first ``length``."""
    for layer in _layers(cache):
        layer.keys = layer.keys[..., :length, :]
        layer.values = layer.values[..., :length, :]


def gather_rows(cache, index) -> None:
    """Keep, per request ``b``, the rows ``index[b]`` (a (B, L) int64 tensor on the cache's
    device) in that order."""
    for layer in _layers(cache):
        k, v = layer.keys, layer.values
        idx = index[:, None, :, None]
        layer.keys = k.gather(2, idx.expand(k.shape[0], k.shape[1], -1, k.shape[3]))
        layer.values = v.gather(2, idx.expand(v.shape[0], v.shape[1], -1, v.shape[3]))


def kept_index(kv_lens: np.ndarray, padded: int, slots: Sequence[np.ndarray]
               ) -> tuple[np.ndarray, np.ndarray]:
    """The rows to keep after a tree step, left-padded: ``(index (B, L'), new kv_lens)``.

    Before the step request ``b`` held ``kv_lens[b]`` rows right-aligned in ``padded``
    columns, and the step appended the tree's slots after column ``padded``; ``slots[b]`` are
    the accepted slots (root first).  Padding columns of the result point at row 0 (hidden by
    the next step's mask)."""
    kv = np.asarray(kv_lens, np.int64)
    new = kv + np.array([s.size for s in slots], np.int64)
    width = int(new.max())
    index = np.zeros((kv.size, width), np.int64)
    for b, s in enumerate(slots):
        start = width - int(new[b])
        index[b, start:start + kv[b]] = np.arange(padded - kv[b], padded)
        index[b, start + kv[b]:] = padded + s
    return index, new


def left_pad(cache, width: int) -> None:
    """Pad every request's rows on the left to ``width`` rows (zeros; masked)."""
    import torch

    for layer in _layers(cache):
        for attr in ("keys", "values"):
            t = getattr(layer, attr)
            extra = width - t.shape[-2]
            if extra > 0:
                pad = t.new_zeros(t.shape[:-2] + (extra, t.shape[-1]))
                setattr(layer, attr, torch.cat([pad, t], dim=-2))


def merge(cache, other) -> None:
    """Append ``other``'s requests to ``cache`` (batch dim), left-padding the shorter."""
    import torch

    width = max(cache_len(cache), cache_len(other))
    left_pad(cache, width)
    left_pad(other, width)
    for mine, theirs in zip(_layers(cache), _layers(other)):
        mine.keys = torch.cat([mine.keys, theirs.keys], dim=0)
        mine.values = torch.cat([mine.values, theirs.values], dim=0)


def select(cache, rows, width: int) -> None:
    """Keep the requests ``rows`` (a list of batch indices) and the last ``width`` columns."""
    import torch

    idx = None
    for layer in _layers(cache):
        if idx is None:
            idx = torch.as_tensor(rows, dtype=torch.long, device=layer.keys.device)
        layer.keys = layer.keys.index_select(0, idx)[..., -width:, :] if width else \
            layer.keys.index_select(0, idx)[..., :0, :]
        layer.values = layer.values.index_select(0, idx)[..., -width:, :] if width else \
            layer.values.index_select(0, idx)[..., :0, :]


# --- one loop step ------------------------------------------------------------------------


def decode_mask(kv_lens: np.ndarray, dtype) -> np.ndarray:
    """(B, 1, 1, P + 1) additive mask of a one-token step over left-padded caches."""
    kv = np.asarray(kv_lens, np.int64)
    p = int(kv.max())
    allowed = np.arange(p + 1)[None, :] >= (p - kv)[:, None]
    return np.where(allowed, 0, -np.inf).astype(dtype)[:, None, None, :]


class Stepper:
    """One step of a loop on a model: host-built inputs, upload, forward, verdict to host.

    ``step(tokens, kv_lens, drafts=None)``: ``tokens`` (B, n) int; a tree step passes its
    :class:`~ngramspec.DraftBatch` (positions from the tree depths and its 4-D additive tree
    mask); a plain step (``n = 1``) gets positions ``kv_lens`` and, for ``B > 1`` (ragged
    lengths), a padding mask.  Returns the argmax over the slots on the host, (B, n) int64.
    ``keep(index)`` gathers the kept KV rows (see :func:`kept_index`)."""

    def __init__(self, model, dev) -> None:
        import torch

        self.torch, self.model, self.dev = torch, model, dev
        self.mask_dtype = next(model.parameters()).dtype
        self.np_mask_dtype = np.float64 if self.mask_dtype == torch.float64 else np.float32
        self.sync = synchronizer(dev)
        self.cache = None

    def step(self, tokens: np.ndarray, kv_lens: np.ndarray, drafts: Any = None) -> np.ndarray:
        torch = self.torch
        b, n = tokens.shape
        kw: dict[str, Any] = {}
        if drafts is not None:
            kw["position_ids"] = torch.from_numpy(drafts.positions(kv_lens)).to(self.dev)
            mask = drafts.additive_attention_mask(kv_lens, dtype=self.np_mask_dtype)
        else:
            kw["position_ids"] = torch.from_numpy(
                np.asarray(kv_lens, np.int64)[:, None]).to(self.dev)
            mask = decode_mask(kv_lens, self.np_mask_dtype) if b > 1 else None
        if mask is not None:
            kw["attention_mask"] = torch.from_numpy(mask).to(self.dev, self.mask_dtype)
        ids = torch.from_numpy(np.ascontiguousarray(tokens, np.int64)).to(self.dev)
        logits, self.cache = forward(self.model, ids, self.cache, **kw)
        return logits.argmax(-1).cpu().numpy()

    def keep(self, index: np.ndarray) -> None:
        gather_rows(self.cache, self.torch.from_numpy(index).to(self.dev))

    def timed(self) -> float:
        """``perf_counter`` after the device finished its queued work."""
        self.sync()
        return time.perf_counter()
