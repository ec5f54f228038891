"""Exact comparison of draft batches, with the two trees drawn as text on a difference."""

from __future__ import annotations

from itertools import zip_longest
from typing import Any

import numpy as np

__all__ = ["DraftsDiffer", "assert_drafts_equal", "draw_tree", "as_arrays"]


class DraftsDiffer(AssertionError):
    """Two draft batches differ; the message draws both trees of the first differing row."""


def as_arrays(drafts: Any, name: str = "drafts"
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """``(tokens, mask, num_drafts)`` of a :class:`~ngramspec.DraftBatch` or any object with
    those attributes (``num_drafts`` may be missing: None).  ``tokens`` is made 2-D
    ``(batch, n)`` and ``mask`` 3-D ``(batch, n, n)`` when their sizes allow it."""
    missing = [a for a in ("tokens", "mask") if not hasattr(drafts, a)]
    if missing:
        raise TypeError(f"{name} must be a DraftBatch or have .tokens, .mask (and .num_drafts) "
                        f"arrays; {type(drafts).__name__} lacks {', '.join(missing)}")
    tokens = np.asarray(drafts.tokens)
    mask = np.asarray(drafts.mask)
    num = getattr(drafts, "num_drafts", None)
    num = None if num is None else np.asarray(num).reshape(-1)
    if tokens.ndim == 1 and num is not None and num.size and tokens.size % num.size == 0:
        tokens = tokens.reshape(num.size, -1)  # SGLang's flat layout
    if tokens.ndim == 2 and mask.ndim != 3 and mask.size == tokens.shape[0] * tokens.shape[1] ** 2:
        mask = mask.reshape(tokens.shape[0], tokens.shape[1], tokens.shape[1])
    return tokens, mask.astype(bool) if mask.dtype != bool else mask, num


def _parents(mask: np.ndarray) -> list[int]:
    """Parent slot of every slot (-1: none): the nearest earlier slot its row attends to."""
    out = []
    for i in range(mask.shape[0]):
        earlier = np.flatnonzero(mask[i, :i])
        out.append(int(earlier[-1]) if earlier.size else -1)
    return out


def draw_tree(tokens: np.ndarray, mask: np.ndarray, *, num_drafts: int | None = None,
              mark: int | None = None, upto: int | None = None) -> list[str]:
    """One request's draft tree as indented lines ``[slot] token``, depth-first in slot order.

    Slots after ``num_drafts`` (SGLang's padding) are summarised unless ``upto`` reaches them;
    without ``num_drafts`` (SGLang's raw output) the trailing slots of token 0 under the root
    with a mask row of the root and themselves are taken for padding.  Slot ``mark`` gets an
    arrow.

    Examples
    --------
    >>> import numpy as np
    >>> mask = np.array([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=bool)
    >>> print("\\n".join(draw_tree(np.array([7, 8, 9]), mask, num_drafts=2, mark=2)))
    [0] 7
      [1] 8
        [2] 9  <-- first difference
    """
    n = int(tokens.shape[0])
    if num_drafts is None:  # SGLang's raw output: its trailing padding read from the slots
        num_drafts = n - 1 - _trailing_padding(tokens, mask)
    last = int(num_drafts)
    if upto is not None:
        last = max(last, min(int(upto), n - 1))
    parents = _parents(mask[:last + 1, :last + 1]) if mask.shape == (n, n) else [-1] * (last + 1)
    children: dict[int, list[int]] = {}
    roots = []
    for i, p in enumerate(parents):
        (roots if p < 0 else children.setdefault(p, [])).append(i)
    lines: list[str] = []

    real = int(num_drafts)

    def visit(i: int, depth: int) -> None:
        pad = " (padding)" if i > real else ""
        arrow = "  <-- first difference" if i == mark else ""
        lines.append(f"{'  ' * depth}[{i}] {int(tokens[i])}{pad}{arrow}")
        for c in children.get(i, []):
            visit(c, depth + 1)

    for r in roots:
        visit(r, 0)
    if last < n - 1:
        lines.append(f"({n - 1 - last} padding slot{'s' * (n - 2 - last > 0)})")
    return lines


def _trailing_padding(tokens: np.ndarray, mask: np.ndarray) -> int:
    """How many last slots are SGLang's padding: token 0 under the root, its mask row the root
    and itself (a drafted 0 there looks the same; SGLang's output cannot tell them apart)."""
    n = int(tokens.shape[0])
    if mask.shape != (n, n):
        return 0
    k = 0
    for i in range(n - 1, 0, -1):
        row = np.flatnonzero(mask[i])
        if int(tokens[i]) != 0 or row.tolist() != [0, i]:
            break
        k += 1
    return k


def _first_slot(a_tok, a_mask, b_tok, b_mask) -> int:
    n = min(a_tok.shape[0], b_tok.shape[0])
    for i in range(n):
        if a_tok[i] != b_tok[i]:
            return i
        if a_mask.shape[-1] > i and b_mask.shape[-1] > i and not np.array_equal(
                a_mask[i, :n], b_mask[i, :n]):
            return i
    return n


def describe_difference(actual: Any, expected: Any, *, context: str | None = None,
                        names: tuple[str, str] = ("actual", "expected")) -> str | None:
    """None if equal, else a readable description (see :func:`assert_drafts_equal`)."""
    at, am, an = as_arrays(actual, names[0])
    et, em, en = as_arrays(expected, names[1])
    head = f"drafts differ ({context})" if context else "drafts differ"
    if at.shape != et.shape or am.shape != em.shape:
        return (f"{head}: shapes differ: {names[0]} tokens {at.shape} mask {am.shape}, "
                f"{names[1]} tokens {et.shape} mask {em.shape}")
    fields = []
    if not np.array_equal(at, et):
        fields.append("tokens")
    if not np.array_equal(am, em):
        fields.append("mask")
    if an is not None and en is not None and not np.array_equal(an, en):
        fields.append("num_drafts")
    if not fields:
        return None
    rows = [b for b in range(at.shape[0])
            if not (np.array_equal(at[b], et[b]) and np.array_equal(am[b], em[b])
                    and (an is None or en is None or an[b] == en[b]))]
    b = rows[0]
    na = None if an is None else int(an[b])
    ne = None if en is None else int(en[b])
    n = int(at.shape[1])
    slot: int | None = _first_slot(at[b], am[b], et[b], em[b])
    if slot is not None and slot >= n:
        # Same tokens and mask, other num_drafts: the first slot one of them calls padding.
        slot = min(na, ne) + 1 if na is not None and ne is not None else None
        slot = slot if slot is not None and slot < n else None
    where = f"; first differing slot {slot}" if slot is not None else ""
    if "num_drafts" in fields:
        where += f"; num_drafts {na} against {ne}"
    left = draw_tree(at[b], am[b], num_drafts=na, mark=slot, upto=slot)
    right = draw_tree(et[b], em[b], num_drafts=ne, mark=slot, upto=slot)
    headers = [name if num is None else f"{name} (num_drafts={num})"
               for name, num in zip(names, (na, ne))]
    width = max(len(s) for s in left + headers[:1]) + 4
    out = [f"{head}: {', '.join(fields)} differ in request {b}"
           + (f" (and {len(rows) - 1} more)" if len(rows) > 1 else "") + where,
           f"{headers[0]:<{width}}{headers[1]}"]
    out += [f"{x:<{width}}{y}" for x, y in zip_longest(left, right, fillvalue="")]
    return "\n".join(out)


def assert_drafts_equal(actual: Any, expected: Any, *, context: str | None = None) -> None:
    """Assert two draft batches are identical: tokens, masks and ``num_drafts``, exactly.

    Parameters
    ----------
    actual, expected : DraftBatch or object with ``tokens``, ``mask``, ``num_drafts``
        ``tokens`` (B, n) or SGLang's flat (B*n,); ``mask`` (B, n, n) or flat.  When either
        lacks ``num_drafts``, it is not compared.
    context : str, optional
        Said first in the failure message (which scenario or step this was).

    Raises
    ------
    DraftsDiffer
        (an ``AssertionError``) naming the fields that differ and drawing both trees of the
        first differing request, the first differing slot marked.

    Examples
    --------
    >>> import ngramspec as ns
    >>> from ngramspec.testing import assert_drafts_equal
    >>> cache = ns.NgramCache(max_trie_depth=4, draft_token_num=4, capacity=100)
    >>> cache.insert([[1, 2, 3, 1, 2, 4]])
    >>> other = ns.NgramCache(max_trie_depth=4, draft_token_num=4, capacity=100)
    >>> other.insert([[1, 2, 4, 1, 2, 3]])
    >>> assert_drafts_equal(cache.match([[1, 2]]), other.match([[1, 2]]), context="demo")
    Traceback (most recent call last):
    ...
    ngramspec.testing._compare.DraftsDiffer: drafts differ (demo): tokens differ in request 0; first differing slot 1
    actual (num_drafts=3)            expected (num_drafts=3)
    [0] 2                            [0] 2
      [1] 3  <-- first difference      [1] 4  <-- first difference
        [3] 1                            [3] 1
      [2] 4                            [2] 3
    """
    message = describe_difference(actual, expected, context=context)
    if message is not None:
        raise DraftsDiffer(message)
