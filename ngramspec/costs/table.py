"""Cost tables: measured forward times ``t(batch, tokens)`` and their interpolation.

A :class:`CostTable` holds measured forward times ``t(batch, tokens)``: one forward of the
target model for ``batch`` requests, each bringing ``tokens`` query tokens (a plain decode
step is ``tokens = 1``; SGLang's verify step is ``tokens = draft_token_num``, padding
included).  Between measured points it interpolates piecewise-linearly in each axis
(bilinearly in each cell of the grid); outside the grid it raises an error naming the
missing point unless extrapolation was asked for.  The per-request models of
:class:`~ngramspec.CostModel` are special cases (:meth:`CostTable.from_model`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
from typing import Any, Iterable, Mapping, Union

import numpy as np

from .model import CostModel

__all__ = ["CostTable", "CostTableError", "Cost", "csv_text", "DRAFTING_MARK",
           "add_cost_table_flags", "read_cost_table"]

COLUMNS = ("batch", "tokens", "ms")

#: The line before a CSV table's header that says its verify rows include drafting
#: (:attr:`CostTable.drafting_included`); :meth:`CostTable.parse` reads it back.
DRAFTING_MARK = "# drafting included in verify rows"

Cost = Union["CostTable", CostModel]


class CostTableError(ValueError):
    """A cost table that cannot be used, or a point it does not cover; the message says which."""


CostTableError.__module__ = "ngramspec.costs"  # its public home, as tracebacks name it


def _read_number(value: Any, where: str, what: str) -> tuple[Any, str]:
    """The number a cell or argument holds (text parsed) and how to show it in a message;
    :class:`CostTableError` saying ``what`` it must be for anything else."""
    if isinstance(value, bool):
        raise CostTableError(f"{where}: {what}, got {value!r}")
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text), repr(text)
        except ValueError:
            raise CostTableError(f"{where}: {what}, got {text!r}") from None
    if not isinstance(value, (int, float, np.integer, np.floating)):
        raise CostTableError(f"{where}: {what}, got {type(value).__name__} {value!r}")
    return value, repr(value)


def _as_int(value: Any, name: str, where: str) -> int:
    what = f"{name} must be an integer >= 1"
    number, shown = _read_number(value, where, what)
    if isinstance(number, (float, np.floating)):
        if not (math.isfinite(number) and number == int(number)):  # "4.0" is 4; 2.5 is not
            raise CostTableError(f"{where}: {what}, got {shown}")
        number = int(number)
    if number < 1:
        raise CostTableError(f"{where}: {what}, got {number}")
    return int(number)


def _as_ms(value: Any, where: str) -> float:
    number = float(_read_number(value, where, "ms must be a number of milliseconds")[0])
    if not math.isfinite(number) or number <= 0:
        raise CostTableError(f"{where}: ms must be a finite number of milliseconds > 0, got "
                             f"{number}")
    return number


class CostTable:
    """Measured forward times ``t(batch, tokens)`` in milliseconds, on a full grid.

    Parameters
    ----------
    points : iterable of mappings or of (batch, tokens, ms) triples
        One per measured forward: ``batch`` requests with ``tokens`` query tokens each took
        ``ms`` milliseconds.  Every combination of the batch sizes and token counts listed
        must be present exactly once (a full grid), and ``tokens = 1`` (plain decode) must be
        among them.  Extra keys of a mapping are ignored.
    extrapolate : bool
        Outside the grid, extend the edge cells linearly (constant along an axis with a
        single measured value) instead of raising :class:`CostTableError`.
    source : str
        Where the points came from (named in error messages).
    drafting_included : bool
        The verify rows (``tokens > 1``) are whole step times with the drafter's time in them
        (as an NGRAM server records its steps): a prediction adds no drafting time on top.
        Kept by :meth:`to_csv` (the line :data:`DRAFTING_MARK` before the header) and
        :meth:`to_json` (``"drafting_included": true``), and read back by :meth:`parse`.

    Examples
    --------
    >>> from ngramspec.costs import CostTable
    >>> t = CostTable([(1, 1, 10.0), (1, 8, 14.0), (4, 1, 12.0), (4, 8, 22.0)])
    >>> t.ms(1, 8), t.ms(4, 1)
    (14.0, 12.0)
    >>> round(t.ms(2, 4), 4)   # piecewise-linear in each axis: 278 / 21
    13.2381
    >>> t.ms(8, 8)
    Traceback (most recent call last):
    ...
    ngramspec.costs.CostTableError: cost table has no point for batch=8 (measured batch 1..4); ...
    >>> round(CostTable(t.points(), extrapolate=True).ms(8, 8), 4)
    32.6667
    >>> v = CostTable(t.points(), drafting_included=True)
    >>> print(v.to_csv().splitlines()[0])
    # drafting included in verify rows
    >>> CostTable.parse(v.to_csv()).drafting_included, CostTable.parse(v.to_json())
    (True, CostTable(batch=[1, 4], tokens=[1, 8], extrapolate=False, drafting_included=True))
    """

    #: How an error names the switch that allows extrapolation (the command line sets its flag).
    extrapolation_words = "extrapolate=True"

    def __init__(self, points: Iterable[Any], *, extrapolate: bool = False,
                 source: str = "cost table", drafting_included: bool = False) -> None:
        for name, flag in (("extrapolate", extrapolate), ("drafting_included", drafting_included)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {type(flag).__name__}")
        if isinstance(points, (str, bytes, Mapping)):
            raise TypeError("points must be an iterable of (batch, tokens, ms) triples or of "
                            "mappings with keys batch, tokens, ms; to read a file use "
                            "CostTable.read(path)")
        seen: dict[tuple[int, int], str] = {}
        values: dict[tuple[int, int], float] = {}
        for i, p in enumerate(points):
            where = f"{source}: point {i}" if not isinstance(p, _Row) else f"{source}: {p.where}"
            if isinstance(p, Mapping):
                missing = [c for c in COLUMNS if c not in p]
                if missing:
                    raise CostTableError(f"{where}: missing {', '.join(missing)} (a point needs "
                                         f"{', '.join(COLUMNS)})")
                b, n, ms = p["batch"], p["tokens"], p["ms"]
            else:
                try:
                    b, n, ms = p
                except (TypeError, ValueError):
                    raise CostTableError(f"{where}: a point is (batch, tokens, ms), got {p!r}"
                                         ) from None
            key = (_as_int(b, "batch", where), _as_int(n, "tokens", where))
            t = _as_ms(ms, where)
            if key in seen:
                raise CostTableError(f"{where}: duplicate point batch={key[0]}, tokens={key[1]} "
                                     f"(also {seen[key].rsplit(': ', 1)[-1]}); give each point "
                                     "once (a median of repeats, not the repeats)")
            seen[key] = where
            values[key] = t
        if not values:
            raise CostTableError(f"{source}: no points; a cost table needs rows "
                                 f"{', '.join(COLUMNS)}")
        batches = np.array(sorted({k[0] for k in values}), np.int64)
        tokens = np.array(sorted({k[1] for k in values}), np.int64)
        if tokens[0] != 1:
            raise CostTableError(f"{source}: no tokens=1 rows; the plain decode step "
                                 "(tokens = 1) is what speculation is compared with, measure it "
                                 "at every batch size")
        missing = [(int(b), int(n)) for b in batches for n in tokens if (b, n) not in values]
        if missing:
            shown = ", ".join(f"batch={b} tokens={n}" for b, n in missing[:5])
            more = f" and {len(missing) - 5} more" if len(missing) > 5 else ""
            raise CostTableError(f"{source}: not a full grid: missing {shown}{more} (every "
                                 f"batch {batches.tolist()} needs every tokens "
                                 f"{tokens.tolist()})")
        grid = np.array([[values[(int(b), int(n))] for n in tokens] for b in batches])
        self.batches, self.tokens, self.grid = batches, tokens, grid
        self.extrapolate = extrapolate
        self.drafting_included = drafting_included
        self.source = source
        for a in (batches, tokens, grid):
            a.setflags(write=False)

    # --- construction ---------------------------------------------------------------------

    @classmethod
    def read(cls, path: str | os.PathLike[str], *, extrapolate: bool = False) -> "CostTable":
        """Read a table from CSV (header ``batch,tokens,ms``; other columns ignored; the line
        :data:`DRAFTING_MARK` may stand before the header) or JSON (a list of ``{"batch",
        "tokens", "ms"}`` objects, or ``{"points": [...]}`` with an optional
        ``"drafting_included": true``)."""
        name = os.fspath(path)
        try:
            with open(name, encoding="utf-8") as f:
                text = f.read()
        except OSError as e:
            raise CostTableError(f"cost table {name!r}: cannot be read ({e.strerror or e})"
                                 ) from None
        except UnicodeDecodeError:
            raise CostTableError(f"cost table {name!r}: not UTF-8 text (CSV or JSON)") from None
        return cls.parse(text, extrapolate=extrapolate, source=f"cost table {name}",
                         json_format=name.lower().endswith(".json"))

    @classmethod
    def parse(cls, text: str, *, extrapolate: bool = False, source: str = "cost table",
              json_format: bool | None = None) -> "CostTable":
        """A table from CSV or JSON text (JSON when ``json_format`` or when the text starts
        with ``[`` or ``{``)."""
        stripped = text.lstrip()
        if json_format or (json_format is None and stripped[:1] in ("[", "{")):
            try:
                data = json.loads(text)
            except json.JSONDecodeError as e:
                raise CostTableError(f"{source}: not valid JSON ({e.msg} at line {e.lineno})"
                                     ) from None
            included = False
            if isinstance(data, Mapping):
                if "points" not in data:
                    raise CostTableError(f"{source}: a JSON table is a list of points or an "
                                         "object with a 'points' list")
                included = data.get("drafting_included", False)
                if not isinstance(included, bool):
                    raise CostTableError(f"{source}: drafting_included must be true or false, "
                                         f"got {included!r}")
                data = data["points"]
            if not isinstance(data, list) or not all(isinstance(p, Mapping) for p in data):
                raise CostTableError(f"{source}: the JSON points must be a list of objects "
                                     f"with keys {', '.join(COLUMNS)}")
            rows = [_Row(p, f"point {i}") for i, p in enumerate(data)]
            return cls(rows, extrapolate=extrapolate, source=source, drafting_included=included)
        # The mark is a whole line before the header; lines after it keep their numbers.
        first, _, rest = stripped.partition("\n")
        included = first.strip() == DRAFTING_MARK
        skipped = text[:len(text) - len(stripped)].count("\n") + 1 if included else 0
        if included:
            text = rest
        reader = csv.DictReader(io.StringIO(text))
        header = [h.strip() for h in (reader.fieldnames or [])]
        missing = [c for c in COLUMNS if c not in header]
        if missing:
            raise CostTableError(f"{source}: missing column(s) {', '.join(missing)} in the "
                                 f"header {header} (a cost table has columns "
                                 f"{', '.join(COLUMNS)})")
        reader.fieldnames = header
        rows = []
        for row in reader:
            line = reader.line_num + skipped
            if all(v is None or not str(v).strip() for v in row.values()):
                continue
            if None in row:
                raise CostTableError(f"{source}: line {line}: more cells than columns")
            for c in COLUMNS:
                if row[c] is None or not str(row[c]).strip():
                    raise CostTableError(f"{source}: line {line}: empty {c}")
            rows.append(_Row(row, f"line {line}"))
        return cls(rows, extrapolate=extrapolate, source=source, drafting_included=included)

    @classmethod
    def from_model(cls, model: CostModel, *, max_batch: int = 1,
                   max_tokens: int = 12) -> "CostTable":
        """The table a :class:`~ngramspec.CostModel` stands for, up to these sizes.

        Measured (``decode_ms``, ``verify_ms``): ``decode_ms`` for ``tokens = 1`` and
        ``verify_ms`` for every larger tree, at every batch size.  Linear (``step_ms``,
        ``token_ms``): ``step_ms + token_ms * batch * tokens``, which bilinear
        interpolation between the grid's corners reproduces exactly.

        Examples
        --------
        >>> from ngramspec import CostModel
        >>> from ngramspec.costs import CostTable
        >>> t = CostTable.from_model(CostModel(decode_ms=12.2, verify_ms=30), max_batch=8)
        >>> t.ms(5, 1), t.ms(5, 3), t.ms(5, 12)
        (12.2, 30.0, 30.0)
        """
        if not isinstance(model, CostModel):
            raise TypeError(f"model must be a CostModel, got {type(model).__name__}")
        max_batch = _as_int(max_batch, "max_batch", "from_model")
        max_tokens = _as_int(max_tokens, "max_tokens", "from_model")
        batches = sorted({1, max_batch})
        if model.kind == "measured":
            tokens = sorted({1, min(2, max_tokens), max_tokens})
            pts = [(b, n, model.decode_ms if n == 1 else model.verify_ms)
                   for b in batches for n in tokens]
            desc = f"decode {model.decode_ms:g} ms, verify {model.verify_ms:g} ms at every size"
        else:
            tokens = sorted({1, max_tokens})
            pts = [(b, n, model.step_ms + model.token_ms * b * n) for b in batches for n in tokens]
            desc = f"{model.step_ms:g} ms + {model.token_ms:g} ms per token"
        return cls(pts, source=desc)

    # --- use ------------------------------------------------------------------------------

    def points(self) -> list[tuple[int, int, float]]:
        """The measured points as ``(batch, tokens, ms)``, batch-major."""
        return [(int(b), int(n), float(self.grid[i, j])) for i, b in enumerate(self.batches)
                for j, n in enumerate(self.tokens)]

    def to_csv(self) -> str:
        """The table as CSV text (header ``batch,tokens,ms``, after :data:`DRAFTING_MARK`
        when :attr:`drafting_included`)."""
        return csv_text(self.points(), drafting_included=self.drafting_included)

    def to_json(self) -> str:
        """The table as JSON text: ``{"points": [{"batch", "tokens", "ms"}, ...],
        "drafting_included": ...}``."""
        return json.dumps({"points": [{"batch": b, "tokens": n, "ms": ms}
                                      for b, n, ms in self.points()],
                           "drafting_included": self.drafting_included})

    def __repr__(self) -> str:
        drafting = ", drafting_included=True" if self.drafting_included else ""
        return (f"CostTable(batch={self.batches.tolist()}, tokens={self.tokens.tolist()}, "
                f"extrapolate={self.extrapolate}{drafting})")

    def _axis(self, axis: np.ndarray, x: np.ndarray, name: str) -> tuple[np.ndarray, np.ndarray]:
        """Left grid index and weight of the right neighbour, per value."""
        if not self.extrapolate:
            bad = (x < axis[0]) | (x > axis[-1])
            if axis.size == 1:
                bad = x != axis[0]
            if bad.any():
                v = f"{x[np.argmax(bad)]:g}"
                span = f"{axis[0]}..{axis[-1]}" if axis.size > 1 else f"{axis[0]} only"
                raise CostTableError(
                    f"{self.source} has no point for {name}={v} (measured {name} {span}); "
                    f"measure it, or allow extrapolation ({self.extrapolation_words})")
        if axis.size == 1:
            return np.zeros(x.shape, np.int64), np.zeros(x.shape)
        i = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, axis.size - 2)
        w = (x - axis[i]) / (axis[i + 1] - axis[i])
        return i, w

    def ms_array(self, batch: np.ndarray, tokens: np.ndarray) -> np.ndarray:
        """Vectorised :meth:`ms` (float64 array of the broadcast shape).  ``tokens`` may be
        fractional (a mean per request, as vLLM's steps are priced): linear between the
        measured token counts, like any value between grid points."""
        tokens = np.asarray(tokens)
        tokens = tokens.astype(np.int64 if tokens.dtype.kind in "iub" else np.float64)
        b, n = np.broadcast_arrays(np.asarray(batch, np.int64), tokens)
        if b.size and (b.min() < 1 or n.min() < 1):
            raise CostTableError("batch and tokens must be >= 1")
        i, wb = self._axis(self.batches, b, "batch")
        j, wt = self._axis(self.tokens, n, "tokens")
        g = self.grid
        i1 = np.minimum(i + 1, self.batches.size - 1)
        j1 = np.minimum(j + 1, self.tokens.size - 1)
        out = ((1 - wb) * (1 - wt) * g[i, j] + wb * (1 - wt) * g[i1, j]
               + (1 - wb) * wt * g[i, j1] + wb * wt * g[i1, j1])
        if out.size and not (out > 0).all():
            k = int(np.argmin(out))
            raise CostTableError(f"{self.source}: extrapolating to batch={int(b.flat[k])}, "
                                 f"tokens={n.flat[k]:g} gives {out.flat[k]:.4g} ms (not > 0); "
                                 "measure that point")
        return out

    def ms(self, batch: int, tokens: int) -> float:
        """Time of one forward of ``batch`` requests with ``tokens`` query tokens each."""
        b = _as_int(batch, "batch", "ms")
        n = _as_int(tokens, "tokens", "ms")
        return float(self.ms_array(np.array([b]), np.array([n]))[0])


def csv_text(points: Iterable[tuple[int, int, float]], *, drafting_included: bool = False
             ) -> str:
    """``(batch, tokens, ms)`` points as the CSV text :meth:`CostTable.parse` reads, in the
    order given; also for points that are not a full grid (which ``parse`` then refuses).

    Examples
    --------
    >>> print(csv_text([(1, 1, 12.2), (1, 16, 30.0)], drafting_included=True), end="")
    # drafting included in verify rows
    batch,tokens,ms
    1,1,12.2
    1,16,30
    """
    mark = DRAFTING_MARK + "\n" if drafting_included else ""
    return mark + "batch,tokens,ms\n" + "".join(f"{b},{n},{ms:.6g}\n" for b, n, ms in points)


class _Row(dict):
    """A point read from a file, remembering where (for error messages)."""

    def __init__(self, data: Mapping, where: str) -> None:
        super().__init__(data)
        self.where = where


# --- the command-line form ------------------------------------------------------------------


def add_cost_table_flags(group: Any, *, required: bool = False,
                         what: str = "measured forward times") -> None:
    """``--cost-table FILE`` and ``--extrapolate``, as every command that reads a table takes
    them (an ``argparse`` parser or argument group; ``what``: the table's role, for the
    help)."""
    group.add_argument("--cost-table", metavar="FILE", required=required,
                       help=f"CSV (batch,tokens,ms) or JSON of {what}, e.g. from ngramspec "
                            "calibrate MODEL_DIR")
    group.add_argument("--extrapolate", action="store_true",
                       help="extend the cost table linearly beyond its measured grid "
                            "(default: an error naming the missing point)")


def read_cost_table(args: Any) -> CostTable:
    """``--cost-table`` read (parsed arguments of :func:`add_cost_table_flags`), its errors
    naming the command line's flags."""
    table = CostTable.read(args.cost_table, extrapolate=args.extrapolate)
    table.extrapolation_words = "--extrapolate"
    return table
