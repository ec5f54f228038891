"""NgramConfig's command-line form: ``--preset``, ``--config FILE.toml`` and one flag per field
(``--draft-token-num 8``), and the configuration they give, each error naming its flag.

Every command that takes a configuration reads it this way (``ngramspec simulate``, ``sweep``,
``check`` and ``sglang-launch``), so a flag means the same, with the same default, in each:
the preset first, the file over it, the flags on top; without ``--preset`` and ``--config``,
SGLang's server defaults (preset ``sglang``).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from pathlib import Path
from typing import Any

from .settings import MATCH_TYPES, PRESETS, PROFILES, NgramConfig, toml_options

__all__ = ["add_config_flags", "base_options", "config_fields", "config_options", "flag",
           "kind_of", "make_config", "parse_list", "parse_value", "preset_of"]

_STR_OPTIONS = {"match_type": MATCH_TYPES, "profile": PROFILES}


def config_fields() -> list[dataclasses.Field]:
    return list(dataclasses.fields(NgramConfig))


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false, yes/no, 1/0)")


def kind_of(f: dataclasses.Field) -> Any:
    """How a config field's value is parsed from the command line."""
    if f.name in _STR_OPTIONS:
        return _STR_OPTIONS[f.name]
    if isinstance(f.default, bool):
        return bool
    if isinstance(f.default, float):
        return float
    return int


def parse_value(name: str, text: str, kind: Any) -> Any:
    item = text.strip()
    if kind is bool:
        try:
            return _parse_bool(item)
        except ValueError as e:
            raise ValueError(f"{flag(name)}: {e}") from None
    if name == "min_expected_accept" and item == "auto":
        return item  # tree sizes from the cost given (--cost-table, --decode-ms, ...)
    if kind in (int, float):
        try:
            return kind(item)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            if name == "min_expected_accept":
                what += " or 'auto'"
            raise ValueError(f"{flag(name)}: {item!r} is not {what}") from None
    if item not in kind:
        raise ValueError(f"{flag(name)}: {item!r} is not one of {', '.join(kind)}")
    return item


def parse_list(name: str, text: str, kind: Any) -> list:
    items = text.split(",")
    if any(not i.strip() for i in items):
        raise ValueError(f"{flag(name)}: empty item in {text!r}")
    return [parse_value(name, i, kind) for i in items]


def flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def add_config_flags(p: argparse.ArgumentParser, *, grid: bool = False) -> None:
    """--preset, --config and one flag per NgramConfig field."""
    pc = p.add_argument_group("starting point (flags below override it)")
    pc.add_argument("--preset", metavar="NAME",
                    help=f"named settings: {', '.join(PRESETS)} (default: sglang, SGLang's "
                         "server defaults)")
    pc.add_argument("--config", metavar="FILE.toml",
                    help="NgramConfig fields from a TOML file (e.g. written by sweep "
                         "--best-as toml or --best-out); over the preset, under the flags; "
                         "a file whose line preset = NAME names its preset starts from that "
                         "preset")
    g = p.add_argument_group("drafter settings (NgramConfig; SGLang's server defaults)"
                             + ("; comma lists make the grid" if grid else ""))
    for f in config_fields():
        kind = kind_of(f)
        what = {bool: "true or false", float: "number", int: "integer"}.get(
            kind, f"one of {', '.join(kind)}" if not isinstance(kind, type) else "")
        help_ = what + (f" (default {f.default})" if f.default is not None
                        else " (profile's default)")
        metavar = "LIST" if grid else {bool: "BOOL", float: "X", int: "N"}.get(kind, "NAME")
        # Values are parsed (and errors named) in config_options, not by argparse.
        g.add_argument(flag(f.name), dest=f.name, metavar=metavar, help=help_)


def config_options(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: parse_value(f.name, getattr(args, f.name), kind_of(f))
            for f in config_fields() if getattr(args, f.name) is not None}


def base_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of --preset, then those of --config over them (flags go on top).

    A --config file that names its preset (``preset = "NAME"``, as ``sweep --best-as toml``
    writes it) brings that preset along; another --preset beside it is an error.  A file
    without one that changes what --preset sets gets a warning line on stderr."""
    if args.preset is not None and args.preset not in PRESETS:
        raise ValueError(f"--preset: unknown preset {args.preset!r}; presets: "
                         f"{', '.join(PRESETS)}")
    file: dict[str, Any] = {}
    if args.config is not None:
        file = toml_options(Path(args.config))[0]
    named = file.pop("preset", None)
    if named is not None and args.preset is not None and named != args.preset:
        raise ValueError(f"--config {args.config} is written over preset {named} "
                         f"(its line preset = \"{named}\"), not over --preset {args.preset}: "
                         f"give --preset {named}, or leave --preset out")
    preset = args.preset if args.preset is not None else named
    options = NgramConfig.preset_options(preset) if preset is not None else {}
    if named is None and options:
        changed = [f"{k} {options[k]!r} -> {v!r}" for k, v in file.items()
                   if k in options and v != options[k]]
        if changed:
            print(f"ngramspec: warning: --config {args.config} overrides what --preset "
                  f"{preset} sets: {', '.join(changed)} (the file's values apply)",
                  file=sys.stderr)
    options.update(file)
    return options


def preset_of(args: argparse.Namespace) -> str:
    """The preset the settings start from: --preset, the one a --config file names, or
    sglang (SGLang's server defaults)."""
    if args.preset is not None:
        return args.preset
    if args.config is not None:
        named = toml_options(Path(args.config))[0].get("preset")
        if named is not None:
            return named
    return "sglang"


def _layers(args: argparse.Namespace) -> str:
    given = [f"--preset {args.preset}" if args.preset else "",
             f"--config {args.config}" if args.config else ""]
    return ", then ".join([g for g in given if g] + ["flags"])


def make_config(base: dict[str, Any], options: dict[str, Any],
                args: argparse.Namespace) -> NgramConfig:
    try:
        return NgramConfig(**{**base, **options})
    except (TypeError, ValueError) as e:
        if args.preset is None and args.config is None:
            raise
        raise type(e)(f"{e} (settings from {_layers(args)})") from None
