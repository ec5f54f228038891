"""``ngramspec simulate``: replay the serving loop on recorded streams, report, predict."""

from __future__ import annotations

import argparse
import itertools
import json
import os
from typing import Any, TextIO

from ..streams.chat_template import import_transformers
from ..config import NgramConfig
from ..costs import CostTable, ServingPrediction, parse_concurrency, predict_serving, verdict
from ..integrations.timing import time_drafting
from ..costs.uncertainty import LEVEL, bootstrap, with_interval
from ..simulate import SimulationResult, pool_results, simulate, simulate_stream
from ..streams import embedded_streams_path, iter_streams
from ..sweep import EXECUTORS, make_executor, plan_shards, run_shard, shard_values
from ._options import (add_common, base_options, check_cost_covers, check_engine,
                       check_executor_args, check_in_files, check_limit, check_out_file, config_options,
                       cost_label, cost_model, default_jobs, levels, load, make_config)
from ..sweep.jobs import auto_costs
from ._report import (ProgressBar, check_plot, config_line, format_predictions, format_report,
                      pct, plot_concurrency, format_table)

HELP = "replay SGLang's serving loop on recorded streams"
DESCRIPTION = ("Replay SGLang's NGRAM serving loop on recorded streams, report tokens per "
               "verify step and, with a cost table or model, predict the serving speed-up per "
               "concurrency level.")


def add_arguments(sim: argparse.ArgumentParser) -> None:
    add_common(sim, grid=False)
    sim.add_argument("--corpus", action="append", metavar="FILE", default=[],
                     help="external corpus loaded before the traffic (repeatable; needs "
                          "--external-sam-budget): JSONL, one document per line, a list of "
                          "token ids or (with --tokenizer) a string; its id is the path")
    sim.add_argument("--tokenizer", metavar="DIR", help="local Hugging Face tokenizer "
                     "directory for text corpora (needs transformers)")
    sim.add_argument("--trust-remote-code", action="store_true",
                     help="let --tokenizer run the Python code its directory ships (some "
                          "large models' tokenizers need it); it runs with your permissions: "
                          "only for a directory you trust")
    sim.add_argument("--by", metavar="FIELD", help="also report per value of this metadata "
                                                   "field (e.g. task)")
    sim.add_argument("--plot", metavar="PATH.png",
                     help="plot the predicted speed-up against concurrency (matplotlib)")
    big = sim.add_argument_group("corpora larger than memory")
    big.add_argument("--stream", action="store_true",
                     help="read the requests as they are admitted (memory bounded by the "
                          "running requests and the trie); pooled figures, no per-request "
                          "report; STREAMS may be directories of shards or glob patterns")
    big.add_argument("--shard-by", metavar="FIELD",
                     help="replay each value of this metadata field (e.g. tenant) as an "
                          "independent shard, in parallel; reported per shard and pooled "
                          "(implies --stream)")
    big.add_argument("--executor", choices=EXECUTORS, default="local",
                     help="where the shards run: local processes (default) or Ray")
    big.add_argument("--jobs", type=int, default=None, metavar="N",
                     help="parallel shards (local processes, or CPUs of a local Ray cluster; "
                          "default: CPU count)")
    big.add_argument("--address", metavar="HOST:PORT",
                     help="a running Ray cluster's head (--executor ray)")


#: The last line of a report printed without a cost: how to get the pay-off answer.
NEXT_STEP = ("next: measure forward times (ngramspec calibrate MODEL_DIR --out costs.csv) and "
             "rerun with --cost-table costs.csv --concurrency 1,4,16 for the predicted "
             "speed-up and a verdict (or price steps with --decode-ms and --verify-ms)")


def run(args: argparse.Namespace, out: TextIO) -> int:
    config = make_config(base_options(args), config_options(args), args)
    cost = cost_model(args)
    check_engine(args, cost, config)
    if args.stream or args.shard_by is not None:
        return _run_streamed(args, config, cost, out)
    for flag, given in (("--executor", args.executor != "local"),
                        ("--jobs", args.jobs is not None), ("--address", args.address)):
        if given:
            raise ValueError(f"{flag} applies to --shard-by (shards run in parallel)")
    if args.plot and cost is None:
        raise ValueError("--plot draws the predicted speed-up: give a cost (--cost-table, or "
                         "--decode-ms and --verify-ms)")
    # Every input is checked before the replay starts.
    check_in_files("--corpus", args.corpus)
    if args.json is not None:
        check_out_file("--json", args.json)
    if args.plot:
        check_plot(args.plot)
    rows, label = load(args)
    asked_run = levels(args, len(rows))
    check_cost_covers(cost, [(max(c for _, c in asked_run), config.draft_token_num)])
    done: list[tuple[int, SimulationResult, ServingPrediction | None]] = []
    corpora = _corpora(args)
    for asked, c in asked_run:
        bar = ProgressBar(f"simulate c={c}", force=args.progress)
        try:
            result = simulate(rows, config=config, concurrency=c, backend=args.backend,
                              progress=bar, corpora=corpora, costs=auto_costs(config, cost))
        finally:
            bar.close()
        pred = None
        if cost is not None:
            if args.draft_ms is None and not getattr(cost, "drafting_included", False):
                time_drafting(result, args.engine)  # what the engine pays, on these streams
            pred = predict_serving(result, cost, draft_ms=args.draft_ms, engine=args.engine)
            pred = with_interval(pred, bootstrap(result, cost, engine=args.engine,
                                                 draft_ms=pred.draft_ms))
        done.append((asked, result, pred))
    first = done[0][1]
    first_interval = (done[0][2].interval if done[0][2] is not None else bootstrap(first))
    out.write(format_report(first, by=args.by, source=label, asked=done[0][0],
                            interval=first_interval) + "\n")
    if cost is not None or len(done) > 1:
        out.write("\n" + format_predictions(done, cost_label(cost, args) if cost else "")
                  + "\n")
    if getattr(cost, "drafting_included", False) and args.engine != "sglang":
        out.write("note: this cost table's verify rows are an NGRAM server's step times "
                  "(drafting included): --engine sglang prices them as that server runs\n")
    if cost is not None and args.engine == "sglang" and config.min_expected_accept != 0:
        out.write(f"note: min_expected_accept={config.min_expected_accept} empties trees that "
                  "are not expected to pay, but SGLang verifies draft_token_num slots at "
                  "every step anyway: there it saves no forward time, only drafts\n")
    if args.json:
        report = first.to_dict(by=args.by)
        report["summary"].update(tokens_per_step_low=first_interval.tokens_per_step[0],
                                 tokens_per_step_high=first_interval.tokens_per_step[1])
        report["interval"] = {"level": LEVEL, "resamples": first_interval.resamples,
                              "requests": first_interval.requests,
                              "method": "bootstrap over whole requests, fixed seed"}
        if len(done) > 1:
            report["levels"] = [{"concurrency": asked, "run_at": r.concurrency,
                                 **r.summary.to_dict()} for asked, r, _ in done]
        if cost is not None:
            cost_table = cost if isinstance(cost, CostTable) else None
            report["cost_table"] = {"source": cost_label(cost, args),
                                    "points": cost_table.points() if cost_table else None,
                                    "extrapolate": bool(args.extrapolate)}
            report["engine"] = args.engine
            report["prediction"] = [dict(p.to_dict(), concurrency=asked)
                                    for asked, _, p in done]
            report["verdict"] = verdict([p for _, _, p in done])
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f)
    if args.plot:
        plot_concurrency({"": [(asked, p.speed_up) for asked, _, p in done]}, args.plot,
                         cost_label(cost, args))
        out.write(f"plot written to {args.plot}\n")
    if cost is None:
        out.write("\n" + NEXT_STEP + "\n")
    return 0


def _run_streamed(args: argparse.Namespace, config: NgramConfig, cost: Any,
                  out: TextIO) -> int:
    """simulate --stream / --shard-by: pooled figures from requests read as they run."""
    what = "--shard-by" if args.shard_by is not None else "--stream"
    for flag, given in (("--backend reference", args.backend != "numba"),
                        ("--corpus", bool(args.corpus)), ("--plot", bool(args.plot)),
                        ("a cost (--cost-table, --decode-ms, ...)", cost is not None),
                        ("--min-expected-accept auto", config.min_expected_accept == "auto")):
        if given:
            raise ValueError(f"{what} reports acceptance figures from the compiled loop: "
                             f"{flag} needs the in-memory path (leave out {what})")
    if args.limit is not None:
        check_limit(args)
        if args.shard_by is not None:
            raise ValueError("--limit applies to one corpus, not to --shard-by")
    check_executor_args(args, args.jobs)
    sources = [str(s) for s in (args.streams or [embedded_streams_path()])]
    label = ", ".join(os.path.basename(s) for s in sources)
    conc = parse_concurrency(args.concurrency)
    shards: dict[str, list[tuple[str, Any]]] = {}
    if args.shard_by is None:
        if args.executor != "local" or args.jobs is not None or args.address:
            raise ValueError("--executor, --jobs and --address apply to --shard-by")
        pooled_levels = []
        for c in conc:
            src: Any = sources
            if args.limit is not None:
                src = itertools.islice(iter_streams(sources), args.limit)
            bar = ProgressBar(f"simulate c={c}", force=args.progress)
            try:
                pooled_levels.append((c, simulate_stream(src, config=config, concurrency=c,
                                                         by=args.by, progress=bar)))
            finally:
                bar.close()
    else:
        shards, pooled_levels = _run_shards(args, sources, config, conc)
        label += f", {len(shards[str(conc[0])])} shards by {args.shard_by}"
    for c, pooled in pooled_levels:
        s = pooled.summary
        out.write(f"ngramspec simulate (streamed): {s.requests:,} requests, "
                  f"{pooled.output_tokens:,} output tokens from {label}\n"
                  f"config: {config_line(config)}\nserving: concurrency {pooled.concurrency}"
                  f"{' per shard' if args.shard_by else ''}, backend numba\n\n")
        rows = []
        if args.shard_by is not None:
            for v, r in shards[str(c)]:
                rows.append([f"{args.shard_by}={v}", r.summary])
            rows.append(["pooled", s])
        else:
            rows.append(["all", s])
        for name, g in (pooled.groups.items() if args.by else []):
            rows.append([f"  {args.by}={name}", g])
        cols = ["", "requests", "verify steps", "tokens/step", "drafts/step",
                "steps with a draft"]
        out.write("\n".join(format_table(cols, [[n, f"{x.requests:,}", f"{x.verify_steps:,}",
                                           f"{x.tokens_per_step:.3f}",
                                           f"{x.draft_nodes_per_step:.2f}",
                                           pct(x.share_steps_with_draft)]
                                          for n, x in rows])) + "\n")
        out.write(f"replay took {pooled.wall_seconds:.2f} s "
                  f"({pooled.output_tokens_per_second:,.0f} output tokens/s"
                  f"{', summed over shards' if args.shard_by else ''})\n\n")
    if args.json:
        report: dict[str, Any] = {"levels": []}
        for c, pooled in pooled_levels:
            entry = {"concurrency": c, **pooled.to_dict()}
            if args.shard_by is not None:
                entry["shard_by"] = args.shard_by
                entry["shards"] = {v: r.to_dict() for v, r in shards[str(c)]}
            report["levels"].append(entry)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f)
    return 0


def _run_shards(args: argparse.Namespace, sources: list[str], config: NgramConfig,
                conc: list[int]) -> tuple[dict[str, list[tuple[str, Any]]], list]:
    """--shard-by: every shard at every level on the executor; per level, the shards'
    results and their pool."""
    field = args.shard_by
    values = shard_values(sources, field)
    tasks = plan_shards(sources, list(values), config=config, concurrency=conc, field=field,
                        by=args.by)
    bar = ProgressBar("shards", force=args.progress, delay=0.0)
    got: dict[int, Any] = {}
    failed = []
    try:
        with make_executor(args.executor, jobs=default_jobs(args), address=args.address) as ex:
            for oc in ex.run(run_shard, tasks):
                if oc.error is not None:
                    failed.append(f"shard {field}={tasks[oc.index].value} at concurrency "
                                  f"{tasks[oc.index].concurrency}: {oc.error}")
                else:
                    got[oc.index] = oc.value
                bar(len(got) + len(failed), len(tasks))
    finally:
        bar.close()
    if failed:
        raise ValueError("; ".join(failed))
    shards, pooled_levels = {}, []
    for j, c in enumerate(conc):
        per = [(v, got[j * len(values) + k]) for k, v in enumerate(values)]
        shards[str(c)] = per
        pooled_levels.append((c, pool_results([r for _, r in per])))
    return shards, pooled_levels


def _corpora(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--corpus`` files read as documents (ids: the paths), with ``--tokenizer`` for text."""
    from ..cache.corpora import read_corpus

    if not args.corpus:
        return None
    tokenizer = None
    if args.tokenizer:
        AutoTokenizer = import_transformers("--tokenizer").AutoTokenizer
        try:
            # trust_remote_code given, never None: transformers would ask on stdin.
            tokenizer = AutoTokenizer.from_pretrained(
                args.tokenizer, local_files_only=True,
                trust_remote_code=bool(args.trust_remote_code))
        except Exception as e:  # transformers raises OSError, ValueError, KeyError, ...
            hint = ("; it needs its own code: pass --trust-remote-code, only for a directory "
                    "you trust" if "trust_remote_code" in str(e) else "")
            first = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise ValueError(f"--tokenizer {args.tokenizer}: no tokenizer could be loaded "
                             f"from there ({first}){hint}") from None
    return {path: read_corpus(path, tokenizer=tokenizer) for path in args.corpus}
