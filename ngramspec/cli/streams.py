"""``ngramspec streams import``: make stream files from traffic logs; ``ngramspec streams
check``: every problem of stream files at once."""

from __future__ import annotations

import argparse
import sys
import time
from typing import TextIO

from ._options import add_progress
from ._report import ProgressBar

HELP = "make stream files from traffic logs, or check them"
DESCRIPTION = "Make stream files from traffic logs (import), or check them (check)."


def add_arguments(st: argparse.ArgumentParser) -> None:
    st_sub = st.add_subparsers(dest="streams_command", required=True,
                               metavar="{import,check}")
    chk = st_sub.add_parser(
        "check", help="every problem of stream files at once",
        description="Read stream files as simulate and sweep do, but report every problem "
                    "(file, line or row, field) instead of stopping at the first: negative "
                    "ids, ids over the record's vocab_size, empty outputs, duplicate ids, "
                    "lines that are not JSON, empty or unreadable files.  Exit status 0 when "
                    "there is none, 1 when there are problems.")
    chk.add_argument("files", nargs="+", metavar="FILE",
                     help="stream files (.jsonl, .jsonl.gz, .parquet), directories or glob "
                          "patterns")
    chk.add_argument("--show", type=int, default=50, metavar="N",
                     help="print the first N problems (default 50; all are counted)")
    imp = st_sub.add_parser(
        "import", help="chat logs or token-id logs to a stream file",
        description="Convert chat logs (through the model's own chat template, from a local "
                    "tokenizer directory) or logs with token ids into a stream file for "
                    "simulate and sweep: one stream per assistant message.  Records that "
                    "cannot be imported are skipped and reported (file, line, field).")
    imp.add_argument("files", nargs="+", metavar="FILE",
                     help="JSON Lines (.gz too) or JSON files; for hf-dataset also .arrow, "
                          ".parquet or a directory saved with save_to_disk")
    imp.add_argument("--format", required=True, metavar="FORMAT",
                     help="openai-chat, sharegpt, hf-dataset or token-ids")
    imp.add_argument("--out", required=True, metavar="OUT.jsonl.gz",
                     help="the stream file to write (written whole or not at all)")
    imp.add_argument("--tokenizer", metavar="DIR",
                     help="local Hugging Face tokenizer directory with a chat template (text "
                          "formats; needs transformers: pip install 'ngramspec[import]')")
    imp.add_argument("--trust-remote-code", action="store_true",
                     help="run the Python code the --tokenizer directory ships when its "
                          "tokenizer_config.json names a tokenizer class of its own (auto_map), "
                          "as the tokenizers of some large models do.  Risk: that code runs "
                          "with your permissions; give it only for a directory you trust "
                          "(default: off, and such a tokenizer is refused)")
    imp.add_argument("--chat-template", metavar="FILE",
                     help="a Jinja chat template to use instead of the tokenizer's")
    imp.add_argument("--field", action="append", default=[], metavar="NAME=PATH",
                     help="token-ids: where prompt_ids, output_ids or id are, as a dotted path "
                          "(e.g. output_ids=outputs.0.token_ids); repeatable")
    imp.add_argument("--strict", action="store_true",
                     help="stop at the first record that cannot be imported (default: skip "
                          "it and report it)")
    imp.add_argument("--show-errors", type=int, default=20, metavar="N",
                     help="print the first N skipped records (default 20)")
    add_progress(imp)


def run(args: argparse.Namespace, out: TextIO) -> int:
    """``import`` or ``check``."""
    if args.streams_command == "check":
        return _run_check(args, out)
    return _run_import(args, out)


def _run_check(args: argparse.Namespace, out: TextIO) -> int:
    from ..streams import check_streams

    if args.show < 0:
        raise ValueError(f"--show must be >= 0, got {args.show}")
    good, problems = check_streams(args.files)
    for line in problems[:args.show]:
        out.write(line + "\n")
    if len(problems) > args.show:
        out.write(f"... and {len(problems) - args.show} more\n")
    out.write(f"{good} good record(s), {len(problems)} problem(s)\n")
    return 1 if problems else 0


def _run_import(args: argparse.Namespace, out: TextIO) -> int:
    from ..streams.importers import FORMATS, import_streams, load_chat_tokenizer

    if args.format not in FORMATS:
        raise ValueError(f"--format must be one of {', '.join(FORMATS)}, got {args.format!r}")
    if args.show_errors < 0:
        raise ValueError(f"--show-errors must be >= 0, got {args.show_errors}")
    fields: dict[str, str] = {}
    for item in args.field:
        name, sep, path = item.partition("=")
        if not sep or not name.strip() or not path.strip():
            raise ValueError(f"--field must be NAME=PATH (e.g. output_ids=outputs.0.token_ids), "
                             f"got {item!r}")
        fields[name.strip()] = path.strip()
    tokenizer = None
    if args.format != "token-ids":
        if args.tokenizer is None:
            raise ValueError(f"--format {args.format} needs --tokenizer DIR (a local Hugging "
                             "Face tokenizer directory with a chat template)")
        template = None
        if args.chat_template is not None:
            try:
                with open(args.chat_template, encoding="utf-8") as f:
                    template = f.read()
            except OSError as e:
                raise ValueError(f"--chat-template {args.chat_template}: cannot be read "
                                 f"({e.strerror or e})") from None
        tokenizer = load_chat_tokenizer(args.tokenizer, chat_template=template,
                                        trust_remote_code=args.trust_remote_code)
    elif (args.tokenizer is not None or args.chat_template is not None
          or args.trust_remote_code):
        raise ValueError("--format token-ids reads token ids: --tokenizer, --chat-template "
                         "and --trust-remote-code do not apply")
    bar = ProgressBar("import", force=args.progress, delay=0.0 if args.progress else 0.5)
    t0 = time.perf_counter()
    try:
        report = import_streams(args.files, args.out, format=args.format, tokenizer=tokenizer,
                                fields=fields or None, strict=args.strict,
                                max_errors=args.show_errors, progress=bar)
    finally:
        bar.close()
    for message in report.errors:
        print(f"ngramspec: skipped: {message}", file=sys.stderr)
    n_skipped = sum(report.skipped.values())
    if n_skipped > len(report.errors):
        print(f"ngramspec: ... and {n_skipped - len(report.errors):,} more skipped",
              file=sys.stderr)
    out.write(report.summary() + f" ({time.perf_counter() - t0:.1f} s)\n")
    if args.format != "token-ids":
        out.write("note: text re-tokenised through the chat template can differ from the ids "
                  "the model generated; logs with token ids (--format token-ids) are exact\n")
    return 0
