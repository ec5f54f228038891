"""The TOML form of a configuration: reading its options with their types checked, and writing
one ``name = value`` line per set field.  The configuration itself is :mod:`ngramspec.config`.

Besides the fields, a file may name the preset it was written against (``preset = "NAME"``):
its fields then go over that preset's options (see :meth:`NgramConfig.from_toml`).  A winner
written by ``ngramspec sweep`` ends with a ``[ranking]`` table saying how it was ranked
(:data:`RANKING_KEYS`; :func:`read_ranking`), which the configuration itself ignores."""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
from typing import Any, Iterable, Sequence

__all__ = ["read_options", "render", "render_ranking", "read_ranking", "RANKING_KEYS"]

#: The keys of a ``[ranking]`` table and their types: the engine whose pricing ranked the
#: winner (``"custom"``, ``"sglang"``, or ``"none"`` for a ranking by tokens per step), the
#: concurrency it won at, its predicted speed-up there (absent without a cost) and the cost.
RANKING_KEYS = {"engine": str, "concurrency": int, "speed_up": float, "cost": str}


def render(title: str, items: Sequence[tuple[str, Any]]) -> str:
    """TOML text: a comment line, then ``name = value`` for every item whose value is set."""
    lines = [f"# {title}"]
    for name, value in items:
        if value is None:
            continue
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (int, float)):
            text = repr(value)  # finite (validated): valid TOML integers and floats
        else:
            text = json.dumps(str(value))  # a TOML basic string for these plain names
        lines.append(f"{name} = {text}")
    return "\n".join(lines) + "\n"


def render_ranking(ranking: dict[str, Any]) -> str:
    """The ``[ranking]`` table (to append after the fields).

    Examples
    --------
    >>> print(render_ranking({"engine": "sglang", "concurrency": 16, "speed_up": 1.27}))
    <BLANKLINE>
    [ranking]
    engine = "sglang"
    concurrency = 16
    speed_up = 1.27
    <BLANKLINE>
    """
    unknown = set(ranking) - set(RANKING_KEYS)
    if unknown:
        raise ValueError(f"ranking: unknown key(s) {', '.join(sorted(unknown))}; keys: "
                         f"{', '.join(RANKING_KEYS)}")
    return "\n" + render("", [(k, ranking.get(k)) for k in RANKING_KEYS]).replace(
        "# \n", "[ranking]\n", 1)


def _load(source: "str | os.PathLike[str]") -> tuple[dict[str, Any], str]:
    """The parsed TOML of text or a file, and the name of the source for messages."""
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        try:
            import tomli as tomllib  # type: ignore[no-redef]
        except ImportError:
            raise ValueError("reading TOML on Python < 3.11 needs tomli: "
                             "pip install 'ngramspec[toml]'") from None
    if isinstance(source, str):
        where, text = "TOML", source
    elif isinstance(source, os.PathLike):
        where = os.fspath(source)
        try:
            with open(source, "rb") as fh:
                raw = fh.read()
        except OSError as e:
            raise ValueError(f"{where}: cannot read the config file ({e.strerror or e})"
                             ) from None
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"{where}: not UTF-8 text (a TOML file is UTF-8)") from None
    else:
        raise TypeError(f"source must be TOML text (str) or a path (e.g. pathlib.Path), got "
                        f"{type(source).__name__}")
    try:
        return tomllib.loads(text), where
    except tomllib.TOMLDecodeError as e:
        hint = ("; to read a file pass a path object, e.g. pathlib.Path(...)"
                if where == "TOML" and "=" not in text else "")
        raise ValueError(f"{where}: not valid TOML ({e}){hint}") from None


def read_ranking(source: "str | os.PathLike[str]") -> dict[str, Any] | None:
    r"""The ``[ranking]`` table of a config (text or a path), checked; None without one.

    Examples
    --------
    >>> read_ranking('draft_token_num = 8\n[ranking]\nengine = "sglang"\nconcurrency = 4\n')
    {'engine': 'sglang', 'concurrency': 4}
    >>> read_ranking("draft_token_num = 8") is None
    True
    """
    data, where = _load(source)
    table = data.get("ranking")
    if table is None:
        return None
    if not isinstance(table, dict):
        raise ValueError(f"{where}: ranking must be a table ([ranking]), got "
                         f"{type(table).__name__}")
    for key, value in table.items():
        kind = RANKING_KEYS.get(key)
        if kind is None:
            raise ValueError(f"{where}: [ranking] has an unknown key {key!r}; keys: "
                             f"{', '.join(RANKING_KEYS)}")
        ok = (isinstance(value, (int, float)) if kind is float else isinstance(value, kind)) \
            and not isinstance(value, bool)
        if not ok:
            raise ValueError(f"{where}: [ranking] {key} must be {kind.__name__}, got {value!r}")
    return dict(table)


def _kind(f: dataclasses.Field) -> type:
    if f.name in ("match_type", "profile"):
        return str
    if isinstance(f.default, (bool, float)):
        return type(f.default)
    return int


def read_options(source: "str | os.PathLike[str]", fields: Iterable[dataclasses.Field],
                 *, presets: Sequence[str] = ()) -> tuple[dict[str, Any], str]:
    """The options a TOML config gives (field name to value, types checked against
    ``fields``, unvalidated) and the name of the source for messages: the file name, or
    ``"TOML"`` for text.  With ``presets``, a ``preset`` key naming one of them is accepted
    and returned under ``"preset"``.

    Raises ``ValueError`` naming the source and the field at fault.
    """
    data, where = _load(source)
    fields = {f.name: f for f in fields}
    options: dict[str, Any] = {}
    for key, value in data.items():
        if key == "ranking" and key not in fields:  # how a sweep ranked it: not a setting
            continue
        if key == "preset" and presets and key not in fields:
            if not isinstance(value, str) or value not in presets:
                shown = repr(value) if isinstance(value, str) else f"{type(value).__name__} " \
                    f"{value!r}"
                raise ValueError(f"{where}: preset must be one of {', '.join(presets)}, got "
                                 f"{shown}")
            options[key] = value
            continue
        if key not in fields:
            close = difflib.get_close_matches(key, list(fields), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise ValueError(f"{where}: unknown field {key!r}{hint}; NgramConfig fields: "
                             f"{', '.join(fields)}")
        kind = _kind(fields[key])
        if key == "min_expected_accept" and value == "auto":
            options[key] = value
            continue
        ok = (isinstance(value, bool) if kind is bool else
              isinstance(value, (int, float)) and not isinstance(value, bool) if kind is float
              else isinstance(value, kind) and not isinstance(value, bool))
        if not ok:
            what = {bool: "true or false", float: "a number", int: "an integer",
                    str: "a string"}[kind]
            shown = "a table" if isinstance(value, dict) else f"{type(value).__name__} {value!r}"
            raise ValueError(f"{where}: field {key!r} must be {what}, got {shown}")
        options[key] = value
    return options, where
