"""Checks and coercion of user input, shared by every public entry point.

Each function takes what a user passed and returns it in the one form the library works with
(int32 token arrays, int64 lengths, plain ``str``/``int`` ids), or raises a ``TypeError`` /
``ValueError`` that names the argument, says what was wrong and what is allowed.  Nothing here
changes any state, so a failed check leaves every cache untouched.

The common cases cost no Python work per token: int32 arrays pass as they are, other integer
arrays are range-checked with one NumPy reduction per batch, and lists of plain ints are
recognised by their element types in one C-level pass.

Wherever an array is taken, a torch tensor is too, without importing torch: anything with
``.detach()``, ``.cpu()`` and ``.numpy()`` is read as ``x.detach().cpu().numpy()`` (see
:func:`host_array`), so a tensor on a GPU is copied to the host first (which waits for the
device).
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Sequence
from itertools import accumulate
from typing import Any, Hashable

import numpy as np

__all__ = ["INT32_MIN", "INT32_MAX", "is_tensor", "host_array", "as_sequence", "as_batch",
           "checked_ids", "as_contexts", "serving_one",
           "serving_batch", "as_serving_one",
           "as_request_id", "as_request_ids", "as_total_lens", "as_lengths", "as_count_from",
           "check_config", "check_backend", "check_bool", "as_positive_int",
           "as_token_matrix", "as_int32_matrix",
           "renamed_keyword", "as_token", "first_negative", "negative_error",
           "refuse_negative", "duplicate_error"]

INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
_INT64_MAX = np.iinfo(np.int64).max
_I32 = np.dtype(np.int32)
_PLAIN_INT = frozenset((int,))
_ID_TYPES = frozenset((str, int))
_LIST_TYPES = frozenset((list, tuple))
_I64_END = 2 ** 63
_NDARRAY, _INT32_ONLY, _ONE = {np.ndarray}, {_I32}, {1}
_DTYPE, _NDIM = operator.attrgetter("dtype"), operator.attrgetter("ndim")


# Tensors -----------------------------------------------------------------------------------

def is_tensor(x: Any) -> bool:
    """A torch tensor, or anything that reads like one (``.detach()``, ``.cpu()``, ``.numpy()``);
    NumPy arrays have none of the three."""
    return hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "numpy")


def host_array(x: Any, name: str, what: str = "integer token ids") -> Any:
    """``x`` itself, or, for a tensor (:func:`is_tensor`), its values as a NumPy array on the
    host: ``x.detach().cpu().numpy()`` (no copy for a CPU tensor; a GPU tensor is copied,
    which waits for the device).  The one place where ngramspec reads tensors; ``what`` is
    what ``name`` must hold, for the message about a dtype NumPy lacks."""
    if type(x) is np.ndarray or not is_tensor(x):
        return x
    try:
        return x.detach().cpu().numpy()
    except (TypeError, RuntimeError) as e:  # a dtype NumPy lacks (bfloat16), say
        raise TypeError(f"{name} must hold {what}, got a tensor of dtype "
                        f"{getattr(x, 'dtype', '?')} that NumPy cannot read ({e})") from None


# Token sequences ---------------------------------------------------------------------------

def _int32_range_error(name: str, lo: Any, hi: Any) -> ValueError:
    return ValueError(f"{name} holds token ids outside int32 [{INT32_MIN}, {INT32_MAX}]: "
                      f"min {lo}, max {hi}")


def _wide(dtype: np.dtype) -> bool:
    """Integer dtypes that can hold values outside int32."""
    return (dtype.kind == "i" and dtype.itemsize > 4) or (dtype.kind == "u" and
                                                          dtype.itemsize >= 4)


def _check_int_array(arr: np.ndarray, name: str) -> None:
    """dtype and range of an array of token ids (not its shape)."""
    dt = arr.dtype
    if arr.size and dt.kind not in "iu":
        raise TypeError(f"{name} must hold integer token ids, got dtype {dt}")
    if arr.size and _wide(dt):
        lo, hi = arr.min(), arr.max()
        if lo < INT32_MIN or hi > INT32_MAX:
            raise _int32_range_error(name, lo, hi)


def _from_items(items: Sequence, name: str) -> np.ndarray:
    """A list/tuple/range of token ids as int32; the slow path explains what is wrong."""
    if set(map(type, items)) <= _PLAIN_INT:  # type(), not isinstance: bool is an int subclass
        try:
            return np.array(items, dtype=np.int32)
        except OverflowError:
            pass  # a value outside int32: reported below
    for t in items:
        if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
            raise TypeError(f"{name} must hold integer token ids, found "
                            f"{type(t).__name__} {t!r}")
    try:
        arr = np.asarray(items, dtype=np.int64) if len(items) else np.zeros(0, np.int64)
    except OverflowError:  # Python ints beyond int64
        bad = next(t for t in items if not INT32_MIN <= int(t) <= INT32_MAX)
        raise ValueError(f"{name} holds a token id outside int32 [{INT32_MIN}, {INT32_MAX}]: "
                         f"{int(bad)}") from None
    _check_int_array(arr, name)
    return arr.astype(np.int32)


def as_sequence(seq: Any, name: str) -> np.ndarray:
    """One 1-D sequence of token ids as an int32 array (int32 input is not copied)."""
    if type(seq) is not np.ndarray:
        seq = host_array(seq, name)
    if type(seq) is np.ndarray:
        if seq.ndim == 1 and seq.dtype == _I32:
            return seq
        arr = seq
    elif isinstance(seq, (str, bytes, bytearray)):
        raise TypeError(f"{name} must be a 1-D sequence of integer token ids (list, tuple, "
                        f"range or integer array), got {type(seq).__name__}")
    elif isinstance(seq, np.ndarray) or hasattr(seq, "__array__"):
        arr = np.asarray(seq)
    elif isinstance(seq, Sequence):
        return _from_items(seq, name)
    else:
        raise TypeError(f"{name} must be a 1-D sequence of integer token ids (list, tuple, "
                        f"range or integer array), got {type(seq).__name__}")
    if arr.ndim != 1:
        deeper = " (nesting deeper than a batch of sequences)" if arr.ndim > 1 else ""
        raise ValueError(f"{name} must be a 1-D sequence of token ids, got an array of "
                         f"shape {arr.shape}{deeper}")
    _check_int_array(arr, name)
    return arr.astype(np.int32, copy=False)


def first_negative(arr: np.ndarray) -> tuple[int, ...] | None:
    """The index of the first negative value of an integer array, or None: one reduction when
    there is none (the common case), so the check costs no Python work per token.
    (``argmin``: 0.4 us on a step's few tokens, where ``min()`` takes 0.7.)"""
    if arr.size and arr.dtype.kind == "i" and arr.item(int(arr.argmin())) < 0:
        return tuple(int(i) for i in np.argwhere(arr < 0)[0])
    return None


def negative_error(name: str, value: Any) -> ValueError:
    return ValueError(f"{name} = {int(value)} is a negative token id; token ids must be >= 0 "
                      "(a tokenizer makes none: leave padding out instead of writing -1)")


def refuse_negative(arr: np.ndarray, name: str) -> np.ndarray:
    """``arr`` (token ids of any shape), or a ValueError naming its first negative id."""
    at = first_negative(arr)
    if at is not None:
        raise negative_error(name + "".join(f"[{i}]" for i in at), arr[at])
    return arr


def checked_ids(seq: Any, name: str) -> np.ndarray:
    """One 1-D sequence of token ids, every id checked to lie in ``[0, INT32_MAX]``, but an
    integer array not converted: its copy to int32 is left to whoever copies it (a server's
    indexing thread, off the serving thread).  Two reductions for a wide array, one for int32;
    anything else is :func:`as_sequence`'s int32 array."""
    if type(seq) is np.ndarray and seq.ndim == 1 and seq.dtype.kind in "iu" and seq.size \
            and _wide(seq.dtype):
        lo, hi = seq.min(), seq.max()
        if lo < 0:
            refuse_negative(seq, name)
        if hi > INT32_MAX:
            raise _int32_range_error(name, lo, hi)
        return seq
    return refuse_negative(as_sequence(seq, name), name)


def as_token(value: Any, name: str) -> int:
    """One token id (an int, a NumPy integer, or an array or tensor of one element) as an
    ``int`` within ``[0, INT32_MAX]``."""
    if type(value) is not int:
        value = host_array(value, name)
        if isinstance(value, np.ndarray) and value.size == 1:
            value = value.reshape(())[()]
        if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
            what = (f"an array of shape {value.shape} dtype {value.dtype}"
                    if isinstance(value, np.ndarray) else f"{type(value).__name__} {value!r}")
            raise TypeError(f"{name} must be one integer token id, got {what}")
        value = int(value)
    if value < 0:
        raise negative_error(name, value)
    if value > INT32_MAX:
        raise ValueError(f"{name} = {value} is outside int32 [0, {INT32_MAX}]")
    return value


def as_batch(batch: Any, name: str) -> list[np.ndarray]:
    """A batch (a list of 1-D sequences, or a 2-D array) as a list of int32 arrays.

    A 2-D array is checked once as a whole and split into row views; int32 rows are not
    copied (the backends copy while packing and never keep the arrays).  A 2-D tensor is read
    as its array (:func:`host_array`)."""
    if type(batch) is not list:
        batch = host_array(batch, name)
    if isinstance(batch, np.ndarray):
        if batch.ndim != 2:
            hint = (" (a 1-D array is one sequence: wrap it as [array])" if batch.ndim == 1
                    else "")
            raise ValueError(f"{name} as an array must be 2-D (batch, length), got shape "
                             f"{batch.shape}{hint}")
        try:
            _check_int_array(batch, name)  # one reduction for the whole batch
        except (TypeError, ValueError):
            for i, row in enumerate(batch):  # name the first bad row, as for a list
                as_sequence(row, f"{name}[{i}]")
            raise
        return list(batch.astype(np.int32, copy=False))
    if type(batch) in _LIST_TYPES and set(map(type, batch)) == _NDARRAY and \
            set(map(_DTYPE, batch)) == _INT32_ONLY and set(map(_NDIM, batch)) == _ONE:
        return list(batch)  # the common case: 1-D int32 arrays, nothing to convert
    if isinstance(batch, (str, bytes)) or not isinstance(batch, Sequence):
        raise TypeError(f"{name} must be a list of 1-D integer sequences or a 2-D integer "
                        f"array, got {type(batch).__name__}")
    if set(map(type, batch)) == {np.ndarray} and all(a.ndim == 1 for a in batch):
        dtypes = set(a.dtype for a in batch)
        if dtypes == {_I32}:
            return list(batch)
        if all(dt.kind in "iu" for dt in dtypes):
            # each array's range in place (a concatenation first copied the whole batch:
            # 3 ms of the serving thread for 48 prompts of 16k tokens)
            if all(INT32_MIN <= a.min() and a.max() <= INT32_MAX for a in batch
                   if a.size and _wide(a.dtype)):
                return [a.astype(np.int32, copy=False) for a in batch]
    elif batch and all(isinstance(t, (int, np.integer)) for t in batch):
        raise TypeError(f"{name} must be a batch (a list of sequences), got a flat sequence "
                        f"of ints; wrap it as [{name}]")
    return [as_sequence(seq, f"{name}[{i}]") for i, seq in enumerate(batch)]


def as_contexts(contexts: Any, name: str = "contexts") -> list[np.ndarray]:
    """A batch of non-empty contexts (the last token of each is the root of its tree)."""
    if type(contexts) is list and len(contexts) == 1:  # batch 1, as a server sends it
        a = contexts[0]
        if type(a) is np.ndarray and a.dtype is _I32 and a.ndim == 1 and a.size:
            return [a]
    batch = as_batch(contexts, name)
    if not batch:
        raise ValueError(f"{name} must hold at least one context, got an empty batch")
    if min(map(len, batch)) == 0:
        i = next(i for i, c in enumerate(batch) if c.size == 0)
        raise ValueError(f"{name}[{i}] is empty; a context needs at least one token "
                         "(its last token is the root of the draft tree)")
    return batch


def serving_one(contexts: Any, request_ids: Any, total_lens: Any
                ) -> tuple[np.ndarray, Hashable, int] | None:
    """The batch-1 serving call (``[int32 array]``, ``[str or int id]``, ``[int length]``)
    checked in one pass: ``(context, request_id, total_len)``, the one request's items as
    :func:`as_contexts`, :func:`as_request_ids` and :func:`as_total_lens` accept them, or None
    for any other form (which those then check, with their messages)."""
    if type(contexts) is list and type(request_ids) is list and type(total_lens) is list and \
            len(contexts) == 1 == len(request_ids) == len(total_lens):
        a, rid, total = contexts[0], request_ids[0], total_lens[0]
        if type(a) is np.ndarray and a.dtype is _I32 and a.ndim == 1 and \
                type(rid) in _ID_TYPES and type(total) is int and 0 < a.size <= total < _I64_END:
            return a, rid, total
    return None


def serving_batch(contexts: Any, request_ids: Any, total_lens: Any
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """A serving call of several requests (a list of 1-D int32 arrays, a list of distinct
    ``str``/``int`` ids, a list of ``int`` lengths, each at least its context's length) checked
    and packed in one pass: ``(flat int32 tokens, int64 offsets, int64 total_lens)``, or None
    for any other form (which :func:`as_contexts`, :func:`as_request_ids` and
    :func:`as_total_lens` then check, with their messages).  The ids are ``request_ids``
    itself."""
    if type(contexts) is not list or type(request_ids) is not list or \
            type(total_lens) is not list:
        return None
    n = len(contexts)
    if not n or len(request_ids) != n or len(total_lens) != n or \
            set(map(type, contexts)) != _NDARRAY or set(map(_DTYPE, contexts)) != _INT32_ONLY \
            or set(map(_NDIM, contexts)) != _ONE:
        return None
    try:  # the arrays' bytes joined: a third of np.concatenate's time on 48 short arrays
        flat = np.frombuffer(bytearray().join(contexts), np.int32)
    except TypeError:  # an array that is not contiguous
        return None
    sizes = list(map(len, contexts))
    if not min(sizes) or not set(map(type, request_ids)) <= _ID_TYPES or \
            len(set(request_ids)) != n or not set(map(type, total_lens)) <= _PLAIN_INT or \
            any(map(operator.lt, total_lens, sizes)):
        return None
    try:
        lens = np.array(total_lens, dtype=np.int64)
    except OverflowError:
        return None
    return flat, np.fromiter(accumulate(sizes, initial=0), np.int64, n + 1), lens


def as_serving_one(contexts: Any, request_ids: Any, total_lens: Any
                   ) -> tuple[list[np.ndarray], list[Hashable], np.ndarray] | None:
    """:func:`serving_one` as ``(contexts, request_ids, total_lens)`` in the forms
    :func:`as_contexts`, :func:`as_request_ids` and :func:`as_total_lens` return."""
    one = serving_one(contexts, request_ids, total_lens)
    if one is None:
        return None
    return [one[0]], [one[1]], np.array([one[2]], dtype=np.int64)


# Request ids and lengths -------------------------------------------------------------------

def as_request_id(rid: Any, name: str) -> Hashable:
    """One request id as a plain ``str`` or ``int`` (NumPy integers become ``int``)."""
    if isinstance(rid, (bool, np.bool_)) or not isinstance(rid, (str, int, np.integer)):
        raise TypeError(f"{name} must be a str or an int, got {type(rid).__name__}")
    return int(rid) if isinstance(rid, (int, np.integer)) else str(rid)


def as_request_ids(request_ids: Any, n: int | None = None, *,
                   name: str = "request_ids") -> list[Hashable]:
    """Request ids as a list of plain ``str``/``int`` keys.

    With ``n`` (a batch of ``n`` contexts): exactly ``n`` ids, no duplicates."""
    if n == 1 and type(request_ids) is list and len(request_ids) == 1 and \
            type(request_ids[0]) in _ID_TYPES:
        return request_ids[:]  # batch 1, as a server sends it
    if type(request_ids) in _LIST_TYPES and set(map(type, request_ids)) <= _ID_TYPES:
        keys = list(request_ids)  # the common case: plain ids
    elif is_tensor(request_ids):
        return as_request_ids(host_array(request_ids, name, "int ids"), n, name=name)
    elif isinstance(request_ids, (str, bytes)) or not isinstance(
            request_ids, (Sequence, np.ndarray)) or (
            isinstance(request_ids, np.ndarray) and request_ids.ndim != 1):
        what = (f"an array of shape {request_ids.shape}" if isinstance(request_ids, np.ndarray)
                else type(request_ids).__name__)
        raise TypeError(f"{name} must be a 1-D sequence of str or int ids, got {what}")
    elif isinstance(request_ids, np.ndarray) and request_ids.dtype.kind in "iuU":
        keys = request_ids.tolist()  # plain ints or strs, no loop in Python
    else:
        keys = [as_request_id(r, f"{name}[{i}]") for i, r in enumerate(request_ids)]
    if n is not None:
        if len(keys) != n:
            raise ValueError(f"{name} has {len(keys)} ids for {n} contexts")
        if len(set(keys)) != n:
            raise duplicate_error(keys, name, "a batch holds no duplicates, each request its "
                                  "own id (SGLang would silently share one match state)")
    return keys


def duplicate_error(keys: Sequence[Hashable], name: str, why: str) -> ValueError:
    """The first id of ``keys`` that repeats, named with both of its positions."""
    first: dict[Hashable, int] = {}
    for j, k in enumerate(keys):
        i = first.setdefault(k, j)
        if i != j:
            return ValueError(f"duplicate request id {k!r} in {name} ({name}[{i}] and "
                              f"{name}[{j}]); {why}")
    raise AssertionError("no duplicate")  # pragma: no cover - callers check first


def as_lengths(values: Any, n: int, name: str, *, minimum: int | None = 0,
               per: str = "requests") -> np.ndarray:
    """``n`` integer lengths (one per ``per``) as an int64 array, each ``>= minimum``."""
    if type(values) in _LIST_TYPES and len(values) == n and n and \
            set(map(type, values)) <= _PLAIN_INT:
        # The common case: plain ints (min() of Python ints is one C-level pass).
        if minimum is None or min(values) >= minimum:
            try:
                return np.array(values, dtype=np.int64)
            except OverflowError:
                pass  # reported below
    values = host_array(values, name, "integers")
    if isinstance(values, np.ndarray):
        lens = values
    elif isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"{name} must be a 1-D sequence of ints (list, tuple or integer "
                        f"array), got {type(values).__name__}")
    elif set(map(type, values)) <= _PLAIN_INT:
        try:
            lens = np.array(values, dtype=np.int64)
        except OverflowError:
            raise ValueError(f"{name} values must fit in int64") from None
    else:
        for i, t in enumerate(values):
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"{name}[{i}] must be an integer, got "
                                f"{type(t).__name__} {t!r}")
        try:
            lens = np.asarray(values, dtype=np.int64) if len(values) else np.zeros(0, np.int64)
        except OverflowError:
            raise ValueError(f"{name} values must fit in int64") from None
    if lens.ndim != 1 or (lens.size and lens.dtype.kind not in "iu"):
        raise TypeError(f"{name} must be a 1-D sequence of integers, got dtype "
                        f"{lens.dtype} and shape {lens.shape}")
    if lens.size != n:
        raise ValueError(f"{name} has {lens.size} values for {n} {per}")
    if lens.size and lens.dtype.kind == "u" and lens.max() > _INT64_MAX:
        raise ValueError(f"{name} values must fit in int64")
    lens = lens.astype(np.int64, copy=False)
    if lens.size and minimum is not None:
        low = int(lens.min())
        if low < minimum:
            i = int(np.argmin(lens))
            raise ValueError(f"{name}[{i}] = {low}; lengths must be >= {minimum}")
    return lens


def as_total_lens(total_lens: Any, contexts: list[np.ndarray]) -> np.ndarray:
    """``total_lens`` of a batch: one int64 per context, each at least the context's length."""
    if type(total_lens) is list and len(total_lens) == 1 == len(contexts):
        first = total_lens[0]  # batch 1, as a server sends it
        if type(first) is int and contexts[0].size <= first < _I64_END:
            return np.array(total_lens, dtype=np.int64)
    if type(total_lens) in _LIST_TYPES and len(total_lens) == len(contexts) and \
            set(map(type, total_lens)) <= _PLAIN_INT and \
            not any(map(operator.lt, total_lens, map(len, contexts))):
        try:  # the common case: plain ints, each at least its context's length
            return np.array(total_lens, dtype=np.int64)
        except OverflowError:
            pass  # reported below
    lens = as_lengths(total_lens, len(contexts), "total_lens", minimum=None, per="contexts")
    if type(total_lens) in _LIST_TYPES:  # plain ints: compare in one C-level pass
        short = any(map(operator.lt, total_lens, map(len, contexts)))
    else:
        short = (lens < np.fromiter(map(len, contexts), np.int64, len(contexts))).any()
    if short:
        i = next(i for i, c in enumerate(contexts) if lens[i] < c.size)
        raise ValueError(f"total_lens[{i}] = {lens[i]} is shorter than "
                         f"contexts[{i}] ({contexts[i].size} tokens)")
    return lens


def as_count_from(count_from: Any, sequences: list[np.ndarray]) -> list[int]:
    """Per sequence, the first position whose n-grams count: ``0 <= count_from[s] <= len``."""
    lens = as_lengths(count_from, len(sequences), "count_from", per="sequences")
    for i, (first, seq) in enumerate(zip(lens.tolist(), sequences)):
        if first > seq.size:
            raise ValueError(f"count_from[{i}] = {first} is beyond sequences[{i}] "
                             f"({seq.size} tokens)")
    return lens.tolist()


# Options -----------------------------------------------------------------------------------

def check_config(config: Any, *, default: bool = True):
    """An :class:`~ngramspec.NgramConfig` (``None`` -> the defaults when ``default``)."""
    from .config import NgramConfig

    if config is None and default:
        return NgramConfig()
    if not isinstance(config, NgramConfig):
        raise TypeError(f"config must be an NgramConfig, got {type(config).__name__}")
    return config


def check_backend(backend: Any, backends: Sequence[str], *, allow_none: bool = False):
    if (backend is None and allow_none) or (isinstance(backend, str) and backend in backends):
        return backend
    extra = " or None" if allow_none else ""
    raise ValueError(f"backend must be one of {tuple(backends)}{extra}, got {backend!r}")


def check_bool(value: Any, name: str) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {type(value).__name__} {value!r}")
    return bool(value)


def as_positive_int(value: Any, name: str, what: str = "") -> int:
    """An int ``>= 1`` (``what`` says what it counts, for the message)."""
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
        raise TypeError(f"{name} must be an int >= 1, got {type(value).__name__} {value!r}")
    if value < 1:
        raise ValueError(f"{name} must be >= 1{f' ({what})' if what else ''}, got {value}")
    return int(value)


# Verification inputs -----------------------------------------------------------------------

def as_token_matrix(values: Any, shape: tuple[int, int], name: str, *,
                    check_range: bool = True) -> np.ndarray:
    """A (B, n) array of token ids within int32 (the target's predictions; the range is left
    to the caller with ``check_range=False``)."""
    arr = np.asarray(host_array(values, name))
    if arr.shape != shape:
        raise ValueError(f"{name} must have shape (batch, draft_token_num) = {shape}, got "
                         f"{arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    if check_range and arr.size and _wide(arr.dtype) and (arr.min() < INT32_MIN or
                                                          arr.max() > INT32_MAX):
        raise _int32_range_error(name, arr.min(), arr.max())
    return arr


int32_range_error = _int32_range_error


def as_int32_matrix(values: Any, name: str) -> np.ndarray:
    """A 2-D matrix of token ids as a C-ordered int32 array (ids beyond int32 refused)."""
    arr = np.asarray(host_array(values, name))
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D matrix (requests x tokens), got {arr.ndim} "
                         "dimension(s)")
    _check_int_array(arr, name)
    return np.ascontiguousarray(arr, np.int32)


# Renamed keywords --------------------------------------------------------------------------

def renamed_keyword(value: Any, old: dict[str, Any], new: str, where: str) -> Any:
    """The value of keyword ``new``, or of a deprecated alias in ``old`` (with a warning)."""
    given = {k: v for k, v in old.items() if v is not None}
    if not given:
        if value is None:
            raise TypeError(f"{where}() missing required argument: '{new}'")
        return value
    if value is not None or len(given) > 1:
        raise TypeError(f"{where}(): pass {new} only once (got {sorted(given)}"
                        f"{' and ' + new if value is not None else ''})")
    (name, v), = given.items()
    warnings.warn(f"{where}({name}=...) is deprecated; the argument is now called {new}",
                  DeprecationWarning, stacklevel=3)
    return v
