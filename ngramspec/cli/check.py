"""``ngramspec check``: hold the predicted speed-up against the real model, teacher-forced."""

from __future__ import annotations

import argparse
import json
import os
from typing import TextIO

from ..costs import ENGINES, parse_concurrency
from ..costs import speed_up_text
from ..costs.table import add_cost_table_flags
from ..streams import read_streams
from ._options import (add_config_flags, add_engine, add_model, add_progress, add_torch_flags,
                       base_options, check_out_dir, config_options, make_config,
                       read_cost_table, write_atomic)
from ._report import ProgressBar, config_line, format_table, speed_up_cell

HELP = "hold the predicted speed-up against the real model"
DESCRIPTION = ("Decode recorded streams on a transformers model, teacher-forced (the recording "
               "decides, every forward runs for real), plainly and speculatively at each "
               "--concurrency level; compare the realised speed-up with the one predicted from "
               "--cost-table.")


def add_arguments(chk: argparse.ArgumentParser) -> None:
    add_model(chk)
    chk.add_argument("streams", nargs="+", metavar="STREAMS",
                     help="recorded streams (.jsonl, .jsonl.gz or .parquet), decoded in order")
    add_cost_table_flags(chk, required=True, what="the measured forward times to check")
    add_config_flags(chk)
    add_engine(chk)
    chk.add_argument("--concurrency", default="1", metavar="LIST",
                     help="requests decoded together; a comma list checks each level "
                          "(default 1)")
    chk.add_argument("--max-requests", type=int, metavar="N",
                     help="decode only the first N requests")
    chk.add_argument("--max-output", type=int, metavar="N",
                     help="cut every recorded output to N tokens")
    add_torch_flags(chk, threads="use what calibrate used")
    chk.add_argument("--json", metavar="PATH", help="write the rows, table and config as JSON")
    add_progress(chk)


def run(args: argparse.Namespace, out: TextIO) -> int:
    from ..measure.check import TOLERANCE, check_against_model

    levels = parse_concurrency(args.concurrency)
    for flag, v in (("--max-requests", args.max_requests), ("--max-output", args.max_output),
                    ("--threads", args.threads)):
        if v is not None and v < 1:
            raise ValueError(f"{flag} must be >= 1, got {v}")
    config = make_config(base_options(args), config_options(args), args)
    if args.json:
        check_out_dir("--json", args.json)
    if not os.path.isdir(args.model):
        raise ValueError(f"MODEL_DIR {args.model!r}: no such directory (a local transformers "
                         "model directory, with config.json and weights)")
    table = read_cost_table(args)
    rows = read_streams(args.streams)
    bar = ProgressBar("check", force=args.progress, delay=0.0)
    try:
        report = check_against_model(
            args.model, rows, cost_table=table, config=config, concurrency=levels,
            device=args.device, dtype=args.dtype, threads=args.threads,
            max_requests=args.max_requests, max_output=args.max_output, progress=bar,
            engine=args.engine)
    finally:
        bar.close()
    out.write(f"{report.requests} requests from "
              f"{', '.join(os.path.basename(s) for s in args.streams)} on {args.model} "
              f"({report.device}), teacher-forced; prediction from cost table "
              f"{os.path.basename(args.cost_table)}\nconfig: {config_line(config)}\n"
              f"engine: {report.engine}, {ENGINES[report.engine].words}: the loop's forwards "
              "and the prediction alike; the prediction's drafting: "
              f"{report.rows[0].prediction.draft_source}\n")
    cols = ["concurrency", "steps loop/sim", "tokens", "predicted", "realised",
            "realised/predicted", ""]
    lines = []
    for r in report.rows:
        c = str(r.concurrency) if r.run_at == r.concurrency else \
            f"{r.concurrency} (run {r.run_at})"
        flag = f"<-- differs by {100 * abs(r.ratio - 1):.0f}%" if r.flagged else ""
        if r.steps != r.simulated_steps:
            flag = (flag + " " if flag else "") + "<-- steps differ"
        lines.append([c, f"{r.steps}/{r.simulated_steps}", str(r.tokens),
                      speed_up_cell(r.prediction), speed_up_text(r.realised_speed_up),
                      f"{r.ratio:.2f}", flag])
    if not any(line[-1] for line in lines):  # no flags: no empty column
        cols, lines = cols[:-1], [line[:-1] for line in lines]
    out.write("\n".join(format_table(cols, lines)) + "\n")
    out.write(f"emitted tokens equal the recording: {'yes' if report.identical else 'NO'}; "
              "the model's own argmax agreed with the recording on "
              + ", ".join(f"{100 * r.agreement:.0f}%" for r in report.rows)
              + " of the accepted slots\n")
    bad = [r for r in report.rows if r.flagged]
    out.write(("prediction held within " if not bad else "prediction off by more than ")
              + f"{100 * TOLERANCE:.0f}% at "
              + ("every level checked" if not bad else
                 "concurrency " + ", ".join(str(r.concurrency) for r in bad))
              + "\n")
    if report.engine == "sglang" and config.min_expected_accept != 0:
        out.write(f"note: min_expected_accept={config.min_expected_accept} empties trees that "
                  "are not expected to pay, but SGLang verifies draft_token_num slots at "
                  "every step anyway: there it saves no forward time, only drafts\n")
    if any(r.steps != r.simulated_steps for r in report.rows):
        out.write("warning: the loop's step counts differ from the simulator's (a bug)\n")
    for r in report.rows:
        gap = r.interpolated
        if gap.get("batches") or gap.get("tokens"):
            where, fix = [], []
            for key, flag in (("batches", "batch"), ("tokens", "tokens")):
                if gap[key]:
                    have = getattr(report.cost_table, "batches" if flag == "batch" else flag)
                    where.append(f"{flag} {', '.join(map(str, gap[key]))}")
                    fix.append(f"--{flag} "
                               + ",".join(map(str, sorted(set(have.tolist()) | set(gap[key])))))
            out.write(f"note: at concurrency {r.concurrency} the table is interpolated at "
                      f"{' and '.join(where)} ({100 * gap['plain_steps']:.0f}% of the plain "
                      f"steps, {100 * gap['speculative_steps']:.0f}% of the speculative ones); "
                      f"step times need not be linear: calibrate {' '.join(fix)} measures "
                      "them\n")
    if args.json:
        write_atomic(args.json, json.dumps(report.to_dict()))
        out.write(f"report written to {args.json}\n")
    return 0
