"""``ngramspec simulate``, ``sweep``, ``calibrate``, ``check``: will speculation pay off for me?

``simulate`` replays SGLang's serving loop on recorded streams (default: the corpus shipped
with the package) and prints tokens per verify step, acceptance by depth and, with a cost
table or model, the predicted serving speed-up at each concurrency level and a verdict.
``sweep`` does that over a grid of settings in parallel processes and ranks them.
``calibrate`` measures a cost table for a transformers model on this machine; ``check``
decodes recorded streams on that model and holds the realised speed-up against the predicted
one.  ``streams
import`` turns chat logs (through the model's chat template) or token-id logs into stream
files.  ``--preset`` and ``--config FILE.toml`` give a starting configuration.  Run
``ngramspec simulate --help`` for every option.  Errors are one line on stderr (exit 2), never
a traceback.

Each command is one module of this package (``add_arguments(parser)``, ``run(args, out) ->
int``) and one row of :data:`COMMANDS`; the work itself is the library's.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from dataclasses import dataclass
from types import ModuleType
from typing import Callable, Sequence, TextIO

from ..streams import StreamError
from . import calibrate, check, costs, simulate, streams, sweep, warmup
from ._report import ProgressBar, format_predictions, format_report, sglang_flags  # noqa: F401

__all__ = ["main", "Command", "COMMANDS", "forward"]


@dataclass(frozen=True)
class Command:
    """One row of the command table.

    Attributes
    ----------
    name : str
        The subcommand (``ngramspec NAME ...``).
    help : str
        Its line in ``ngramspec --help``.
    description : str or None
        The first paragraph of ``ngramspec NAME --help``.
    add_arguments : callable
        Adds its flags to its parser.
    run : callable
        ``run(args, out) -> int``: does the command, prints to ``out``, returns the exit
        status; errors are raised (``main`` prints them as one line).
    raw : bool
        The command reads its arguments itself: ``run`` gets them unparsed, as
        ``args.argv`` (see :func:`forward`).
    """

    name: str
    help: str
    description: str | None
    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace, TextIO], int]
    raw: bool = False

    @classmethod
    def of(cls, name: str, module: ModuleType) -> "Command":
        """The command that a module of this package defines (HELP, DESCRIPTION,
        add_arguments, run)."""
        return cls(name, module.HELP, module.DESCRIPTION, module.add_arguments, module.run)


def forward(name: str, target: str, *, help: str) -> Command:
    """A command that hands its arguments, unparsed, to ``function(argv) -> int``.

    ``target`` is ``"package.module:function"``, imported only when the command runs (so an
    integration's own dependencies load only then).

    Examples
    --------
    >>> cmd = forward("echo-exit", "builtins:len", help="exit status: the number of arguments")
    >>> cmd.run(argparse.Namespace(argv=["a", "b"]), sys.stdout)
    2
    """

    def add_arguments(p: argparse.ArgumentParser) -> None:
        p.add_argument("argv", nargs=argparse.REMAINDER, help="its own arguments")

    def run(args: argparse.Namespace, out: TextIO) -> int:
        module, _, function = target.partition(":")
        return getattr(importlib.import_module(module), function)(list(args.argv))

    return Command(name, help, None, add_arguments, run, raw=True)


#: The commands, in the order ``ngramspec --help`` lists them.  A new command is one row.
COMMANDS: tuple[Command, ...] = (
    Command.of("simulate", simulate),
    Command.of("sweep", sweep),
    Command.of("streams", streams),
    Command.of("calibrate", calibrate),
    Command.of("check", check),
    Command.of("costs", costs),
    Command.of("warmup", warmup),
    forward("sglang-launch", "ngramspec.integrations.sglang_launch:launch",
            help="run SGLang's server with ngramspec's drafter (docs/sglang.md)"),
)

# The usage line names these first, in this order (as it always has); later rows follow.
_USAGE_ORDER = ("simulate", "sweep", "calibrate", "check", "streams")


def plain(text: str) -> str:
    """Docstring markup (``literal``, :role:`target`) as the plain text a terminal shows.

    Examples
    --------
    >>> plain("``ngramspec sweep``: see :func:`ngramspec.simulate`")
    'ngramspec sweep: see ngramspec.simulate'
    """
    return re.sub(r":[a-z]+:`~?([^`]*)`", r"\1", text).replace("``", "")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ngramspec", description=plain(__doc__.splitlines()[0]))
    names = [c.name for c in COMMANDS]
    usage = [n for n in _USAGE_ORDER if n in names] + [n for n in names
                                                       if n not in _USAGE_ORDER]
    sub = ap.add_subparsers(dest="command", required=True, metavar="{" + ",".join(usage) + "}")
    for cmd in COMMANDS:
        kwargs = {} if cmd.description is None else {"description": plain(cmd.description)}
        cmd.add_arguments(sub.add_parser(cmd.name, help=plain(cmd.help), add_help=not cmd.raw,
                                         **kwargs))
    return ap


def _parse(argv: Sequence[str] | None) -> tuple[argparse.Namespace, Command]:
    argv = list(sys.argv[1:] if argv is None else argv)
    table = {c.name: c for c in COMMANDS}
    if argv and argv[0] in table and table[argv[0]].raw:  # its arguments are its own
        return argparse.Namespace(command=argv[0], argv=argv[1:]), table[argv[0]]
    args = _parser().parse_args(argv)
    return args, table[args.command]  # the parser accepts table names only


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Entry point of the ``ngramspec`` command; returns the exit status.

    Every error is one line on stderr, ``ngramspec: error: ...``, and exit status 2; set
    ``NGRAMSPEC_DEBUG=1`` to see the traceback of an unexpected one.

    Examples
    --------
    >>> from ngramspec.cli import main
    >>> main(["simulate", "--limit", "3", "--max-bfs-breadth", "0"])  # message on stderr
    2
    """
    args, command = _parse(argv)
    out = stdout or sys.stdout
    try:
        return command.run(args, out)
    except KeyboardInterrupt:
        print("ngramspec: interrupted", file=sys.stderr)
        return 130
    except (ValueError, TypeError, KeyError, StreamError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"ngramspec: error: {msg}", file=sys.stderr)
        return 2
    except Exception as e:  # never a traceback: say what failed, in one line
        if os.environ.get("NGRAMSPEC_DEBUG"):
            raise
        first = str(e).splitlines()[0] if str(e) else ""
        print(f"ngramspec: error: {type(e).__name__}: {first} (unexpected; rerun with "
              "NGRAMSPEC_DEBUG=1 for the traceback)", file=sys.stderr)
        return 2
