"""``ngramspec costs import``: a cost table from SGLang's own records."""

from __future__ import annotations

import argparse
import sys
from typing import TextIO

from ._options import check_out_file, write_atomic

HELP = "make a cost table from SGLang's benchmark results or server step times"
DESCRIPTION = ("Make a cost table (batch,tokens,ms) for --cost-table from what SGLang's own "
               "tools write, for models that ngramspec calibrate cannot load.")


def add_arguments(p: argparse.ArgumentParser) -> None:
    sub = p.add_subparsers(dest="costs_command", required=True, metavar="{import}")
    imp = sub.add_parser(
        "import", help="SGLang's records to a cost table",
        description="Read sglang.benchmark.one_batch results (JSON Lines: decode rows) and "
                    "/get_server_info dumps of servers started with SGLANG_RECORD_STEP_TIME=1 "
                    "(a plain server's step times: decode rows; an NGRAM server's: verify rows "
                    "at its --speculative-num-draft-tokens, drafting included), recognised "
                    "from their content, and write one cost table: each point the median of "
                    "its values in ms.  Points given by several files pool their values; "
                    "conflicts are warned about, holes in the grid noted.")
    imp.add_argument("files", nargs="+", metavar="FILE",
                     help="SGLang's result files (JSON or JSON Lines)")
    imp.add_argument("--out", required=True, metavar="FILE.csv",
                     help="the cost table to write (whole or not at all); '-' prints it and "
                          "the report goes to stderr")


def run(args: argparse.Namespace, out: TextIO) -> int:
    """The one subcommand, ``import``."""
    from ..costs.records import import_records

    to_stdout = args.out == "-"
    if not to_stdout:
        check_out_file("--out", args.out)
    imported = import_records(args.files)
    report = sys.stderr if to_stdout else out
    for rec in imported.files:
        report.write(f"read {rec.summary()}\n")
    for line in imported.notes:
        report.write(f"note: {line}\n")
    for line in imported.warnings:
        report.write(f"warning: {line}\n")
    text = imported.to_csv()
    if to_stdout:
        out.write(text)
        return 0
    write_atomic(args.out, text)
    batches = sorted({b for b, _, _ in imported.points})
    tokens = sorted({n for _, n, _ in imported.points})
    grid = "a full grid" if not imported.missing else f"{len(imported.missing)} point(s) missing"
    report.write(f"wrote {args.out}: {len(imported.points)} points, batch {batches} x tokens "
                 f"{tokens} ({grid})\n")
    return 0
