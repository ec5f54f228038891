"""``ngramspec sweep``: rank a grid of settings (the work is :mod:`ngramspec.sweep`'s)."""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import shlex
import sys
import time
from typing import Any, TextIO

from ..config import NgramConfig
from ..config.toml import render_ranking
from ..config.vllm import ENV_CONFIG, batch_schedule, launch_line, speculative_config
from ..costs import (ENGINES, CostModel, CostTable, ServingPrediction, parse_concurrency,
                     verdict)
from ..costs import speed_up_text
from ..costs.engines import check_engine_config
from ..costs.uncertainty import RESAMPLES, Interval
from ..sweep.budget import BUDGETS
from ..sweep import (EXECUTORS, Job, ResultsFile, SweepPlan, expand_grid, make_executor,
                     pair_holdout, plan_sweep, rank, run_sweep)
from ._options import (add_common, base_options, check_cost_covers, check_engine,
                       check_executor_args,
                       check_out_file, config_fields, cost_label, cost_model, default_jobs,
                       kind_of, load, make_config, parse_list, preset_of, write_atomic)
from ._report import (ProgressBar, check_plot, options_label, pct, plot_concurrency,
                      plot_sweep, sglang_flags, format_table, speed_up_cell)

HELP = "rank a grid of settings"
DESCRIPTION = ("Simulate a grid of settings (comma lists) in parallel and rank them by "
               "predicted speed-up (with a cost model) or tokens per step.")


def add_arguments(sw: argparse.ArgumentParser) -> None:
    add_common(sw, grid=True)
    sw.add_argument("--jobs", type=int, default=None, metavar="N",
                    help="parallel processes (local), or CPUs of the local Ray cluster started "
                         "(default: CPU count)")
    sw.add_argument("--executor", choices=EXECUTORS, default="local",
                    help="local: processes on this machine (default); ray: one Ray task per "
                         "setting (pip install 'ngramspec[ray]')")
    sw.add_argument("--address", metavar="HOST:PORT",
                    help="a running Ray cluster's head (--executor ray; default: start a "
                         "local one)")
    sw.add_argument("--retries", type=int, default=2, metavar="N",
                    help="runs again a setting whose worker process died, at most N times "
                         "(default 2)")
    sw.add_argument("--out", metavar="RESULTS.jsonl|.parquet",
                    help="append each finished setting to this results file (config, "
                         "figures, per-group figures, timings, versions); the table is built "
                         "from it")
    sw.add_argument("--resume", action="store_true",
                    help="continue --out: skip the settings already in it")
    sw.add_argument("--by", metavar="FIELD",
                    help="also record figures per value of this metadata field (e.g. task)")
    sw.add_argument("--top", type=int, metavar="K", help="print only the best K settings")
    sw.add_argument("--holdout", type=float, metavar="FRACTION",
                    help="rank on one part of the requests and report the winner on the rest: "
                         "this share of them (e.g. 0.25), chosen by a hash of each id, is held "
                         "out; both parts keep file order")
    sw.add_argument("--holdout-by", metavar="FIELD=VALUE[,VALUE]",
                    help="hold out the requests whose metadata FIELD is one of the VALUEs "
                         "(e.g. day=2025-06-02 or tenant=b,c); rank on the others")
    sw.add_argument("--best-as", choices=["sglang", "vllm", "toml"], default=None,
                    help="print the winner as SGLang server flags (needs --engine sglang; "
                         "settings beyond SGLang: a TOML file and the sglang-launch line that "
                         "serves it), as vLLM's --speculative-config (needs --engine vllm; "
                         "ngramspec's chains: with the TOML its proposer reads) "
                         "or as a TOML file for --config: the preset the sweep "
                         "started from (preset = NAME), the fields that differ from it and "
                         "how it was ranked ([ranking])")
    sw.add_argument("--best-out", metavar="FILE",
                    help="write the winner to FILE in the --best-as format (default toml, a "
                         "file for --config); checked before the sweep starts")
    sw.add_argument("--plot", metavar="PATH.png",
                    help="plot tokens/step and speed-up against draft_token_num, or against "
                         "concurrency when several levels are given (matplotlib)")


def run(args: argparse.Namespace, out: TextIO) -> int:
    with contextlib.ExitStack() as files:
        return _run(args, out, files)


def _run(args: argparse.Namespace, out: TextIO, files: contextlib.ExitStack) -> int:
    jobs = default_jobs(args)
    check_executor_args(args, jobs)
    best_as, cost = _check_flags(args)
    base = base_options(args)
    grid, tree_sizes, searched = _grid(args, base, best_as)
    conc = parse_concurrency(args.concurrency)
    all_rows, label = load(args)
    if args.by is not None and not any(args.by in r for r in all_rows):
        fields = sorted({k for r in all_rows for k in r} - {"prompt_ids", "output_ids"})
        raise ValueError(f"--by {args.by}: no request has that field; fields: "
                         f"{', '.join(fields)}")
    holdout = args.holdout is not None or args.holdout_by is not None
    plan = plan_sweep(all_rows, grid, concurrency=conc, base=base, backend=args.backend,
                      cost=cost, draft_ms=args.draft_ms, engine=args.engine, by=args.by,
                      holdout=args.holdout if args.holdout is not None else args.holdout_by)
    rows = plan.parts["tune" if holdout else "all"]
    held, split = plan.parts.get("holdout", []), plan.holdout
    levels = [(c, min(c, len(rows))) for c in conc]
    keys = plan.keys
    widest = max((job.run_concurrency for job in plan.jobs), default=1)
    check_cost_covers(cost, [(widest, n) for n in tree_sizes])
    # Held (locked against a second sweep) until the table is written.
    results_file = (files.enter_context(ResultsFile(args.out, sweep=plan.fingerprint,
                                                    resume=args.resume))
                    if args.out else None)
    have = results_file.keys() if results_file is not None else set()
    todo = plan.pending(have)
    if results_file is not None and have:
        out.write(f"resuming {args.out}: {len(keys) - len(todo)} of {len(keys)} settings "
                  "already there\n")
    t0 = time.perf_counter()
    done, failed = _execute(args, plan, jobs, conc, results_file, todo)
    if results_file is not None:  # the table is built from the file
        done = {r["key"]: r for r in results_file.records()}
    results = pair_holdout(plan, done)
    if not results:
        raise ValueError(f"every setting failed ({len(failed)}); nothing to rank")
    key = "speedup" if cost is not None else "tokens_per_step"
    by_config: dict[str, list[dict]] = {}
    for r in results:
        by_config.setdefault(options_label(r["options"], results), []).append(r)
    results = rank(results, key=key)
    shown = results[:args.top] if args.top else results
    names = sorted({k for r in results for k in r["options"]})
    if len(conc) > 1:
        names.append("concurrency")
    ranked_on = (f"ranked on {len(rows)} of {len(all_rows)} requests from {label} "
                 f"(hold-out: {split})" if holdout else
                 f"on {len(rows)} requests from {label}")
    out.write(f"ngramspec sweep: {len(results)} settings {ranked_on} "
              f"({time.perf_counter() - t0:.1f} s, {_executor_label(args, jobs)}); ranked by "
              f"{'predicted speed-up' if cost else 'tokens per verify step'}"
              f"{' on ' + ENGINES[args.engine].words if cost else ''}\n")
    if searched:
        out.write(f"searched for SGLang's slots: {searched} (give the flags to choose "
                  "others)\n")
    out.write("\n")
    cols = ["rank"] + names + ["tokens/step"] + (["hold-out tokens/step"] if holdout else []) + [
        "drafts/step", "steps with a draft"]
    if cost is not None:
        cols += ["speed-up"] + (["hold-out speed-up"] if holdout else []) + [
            "tok/s with", "tok/s without"]
    out.write("\n".join(format_table(cols, _rows(shown, names, cost is not None, holdout)))
              + "\n")
    if holdout:
        out.write(_holdout_line(results, key, cost is not None, len(rows), len(held),
                                len(conc) > 1))
    if any(asked != c for asked, c in levels):
        out.write(f"(concurrency above {len(rows)} requests runs at {len(rows)})\n")
    if cost is not None:
        out.write(f"\ncost: {cost_label(cost, args)}; engine: {args.engine}; speed-up = "
                  "baseline time / speculative time of the whole run at that concurrency "
                  "(prefill not modelled)\n")
        if len(conc) > 1:
            ranked = sorted(by_config.items(), key=lambda kv: -max(r["speedup"] for r in kv[1]))
            out.write("verdicts (best configs first):\n")
            for name, rs in ranked[:args.top or 10]:
                preds = [_prediction(r) for r in rs]
                out.write(f"  {name}: {verdict(preds)}\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cost_model": dataclasses.asdict(cost) if isinstance(cost, CostModel)
                       else None,
                       "cost_table": cost.points() if isinstance(cost, CostTable) else None,
                       "engine": args.engine if cost is not None else None,
                       "base": base, "holdout": split or None,
                       "results": results}, f)
    if args.plot:
        label = cost_label(cost, args) if cost is not None else ""
        if len(conc) > 1 and cost is not None:
            plot_concurrency({name: [(r["concurrency"], r["speedup"]) for r in rs]
                              for name, rs in by_config.items()}, args.plot, label)
        else:
            plot_sweep(results, args.plot, cost is not None, label)
        out.write(f"plot written to {args.plot}\n")
    if best_as is not None:
        _write_best(args, out, results[0], base, best_as, cost, holdout,
                    _per_level_k(results, conc) if best_as == "vllm" else None)
    if results_file is not None:
        out.write(f"results in {args.out} ({len(done)} settings)\n")
    if failed:
        out.write(f"\n{len(failed)} of {len(keys)} settings failed (not ranked; errors on "
                  f"stderr{'; --resume runs them again' if results_file is not None else ''})\n")
        return 1
    return 0


def _check_flags(args: argparse.Namespace) -> tuple[str | None, Any]:
    """Every flag checked before the first setting runs: the winner's format (``--best-as``,
    or toml with ``--best-out``) and the cost."""
    if args.retries < 0:
        raise ValueError(f"--retries must be >= 0, got {args.retries}")
    if args.top is not None and args.top < 1:
        raise ValueError(f"--top must be >= 1, got {args.top}")
    if args.holdout is not None and args.holdout_by is not None:
        raise ValueError("give --holdout or --holdout-by, not both")
    if args.resume and not args.out:
        raise ValueError("--resume continues a results file: give it with --out")
    # Every input is checked before the first setting runs.
    best_as = args.best_as or ("toml" if args.best_out is not None else None)
    for flag, path in (("--json", args.json), ("--best-out", args.best_out)):
        if path is not None:
            check_out_file(flag, path)
    if args.plot:
        check_plot(args.plot)
    cost = cost_model(args)
    check_engine(args, cost)
    if best_as == "vllm" and args.engine != "vllm":
        raise ValueError("--best-as vllm chooses the setting for vLLM: rank it as vLLM runs "
                         "it, add --engine vllm (and a cost: --cost-table, or --step-ms and "
                         "--token-ms)")
    if best_as == "sglang" and args.engine != "sglang":
        raise ValueError("--best-as sglang chooses the setting for SGLang's server: rank it as "
                         "SGLang runs it, add --engine sglang (and a cost: --cost-table, or "
                         "--step-ms and --token-ms)")
    return best_as, cost


def _holdout_line(results: list[dict], key: str, priced: bool, tuned_n: int, held_n: int,
                  levels: bool) -> str:
    """The tuning part's winner and how it does on the hold-out part (rank there)."""
    best = results[0]
    on_hold = sorted(results, key=lambda r: -r["holdout"][key])
    place = next(i for i, r in enumerate(on_hold, 1) if r is best)
    what = "speed-up" if priced else "tokens/step"
    fmt = speed_up_text if priced else (lambda x: f"{x:.3f}")
    tuned = (speed_up_cell(_prediction(best)) if priced else
             f"{best[key]:.3f} ({best['tokens_per_step_low']:.3f}–"
             f"{best['tokens_per_step_high']:.3f})")
    return (f"winner on the tuning part ({tuned_n} requests): "
            f"{options_label(best['options'], results)}"
            f"{' at concurrency ' + str(best['concurrency']) if levels else ''}; "
            f"on the hold-out part ({held_n} requests) its {what} is "
            f"{fmt(best['holdout'][key])} (tuning: {tuned}), rank {place} of "
            f"{len(results)} there\n")


def _grid(args: argparse.Namespace, base: dict[str, Any], best_as: str | None
          ) -> tuple[list[dict], set[int], str]:
    """The grid of the comma lists, every point checked before any runs, the tree sizes
    (draft_token_num) of its settings, and the axes added for SGLang's slots (words; empty if
    none).

    Priced as SGLang runs it (``--engine sglang``), slots are the cost: without
    ``--draft-token-num`` the grid searches :data:`~ngramspec.sweep.budget.BUDGETS`, and for
    ADAPTIVE without ``--min-token-prob`` also 0 (drafts fill the slots SGLang verifies
    anyway) beside the setting's own value."""
    axes = {f.name: parse_list(f.name, getattr(args, f.name), kind_of(f))
            for f in config_fields() if getattr(args, f.name) is not None}
    added = []
    if args.engine == "sglang" and "draft_token_num" not in axes:
        axes["draft_token_num"] = list(BUDGETS)
        added.append("--draft-token-num " + ",".join(map(str, BUDGETS)))
        start = make_config(base, {k: v[0] for k, v in axes.items()}, args)
        if start.match_type == "ADAPTIVE" and "min_token_prob" not in axes and \
                start.min_token_prob > 0:
            axes["min_token_prob"] = [start.min_token_prob, 0.0]
            added.append(f"--min-token-prob {start.min_token_prob:g},0")
    grid = expand_grid(axes)
    sizes = set()
    for options in grid:
        cfg = make_config(base, options, args)
        sizes.add(cfg.draft_token_num)
        try:
            check_engine_config(ENGINES[args.engine], cfg)
        except ValueError as e:
            raise ValueError(f"--engine {args.engine}: {e} (in the setting "
                             f"{options_label(options, []) if options else 'given'})"
                             ) from None
        if best_as == "sglang":
            try:
                cfg.to_sglang_args(plugin=not cfg.sglang_exact)
            except ValueError as e:
                raise ValueError(f"--best-as sglang: {e} (in the setting "
                                 f"{options_label(options, []) if options else 'given'})"
                                 ) from None
        if best_as == "vllm":
            try:
                speculative_config(cfg)
            except ValueError as e:
                raise ValueError(f"--best-as vllm: {e} (in the setting "
                                 f"{options_label(options, []) if options else 'given'})"
                                 ) from None
    return grid, sizes, "; ".join(added)


def _ranking(args: argparse.Namespace, best: dict, cost: Any) -> dict[str, Any]:
    """How the winner was ranked: the ``[ranking]`` table of its TOML."""
    ranking: dict[str, Any] = {"engine": args.engine if cost is not None else "none",
                               "concurrency": int(best["concurrency"])}
    if cost is not None:
        ranking.update(speed_up=round(float(best["speedup"]), 4),
                       cost=cost_label(cost, args))
    return ranking


def _per_level_k(results: list[dict], conc: list[int]) -> dict[int, int] | None:
    """For vLLM's n-gram priced at several concurrencies: at each level, the best
    ``num_speculative_tokens`` among the settings that share the winner's other options (0
    where none pays); None where that does not apply."""
    best = results[0]
    if len(conc) < 2 or best["options"].get("profile") != "vllm-0.33" or \
            "speedup" not in best:
        return None
    rest = {k: v for k, v in best["options"].items() if k != "num_speculative_tokens"}
    per: dict[int, int] = {}
    for level in sorted({int(r["concurrency"]) for r in results}):
        same = [r for r in results if int(r["concurrency"]) == level and
                {k: v for k, v in r["options"].items() if k != "num_speculative_tokens"} == rest]
        top = max(same, key=lambda r: r["speedup"], default=None)
        if top is None:
            return None
        k = top["options"].get("num_speculative_tokens")
        per[level] = int(k) if k is not None and top["speedup"] > 1 else 0
    return per


def _write_best(args: argparse.Namespace, out: TextIO, best: dict, base: dict[str, Any],
                best_as: str, cost: Any, holdout: bool,
                per_level: dict[int, int] | None = None) -> None:
    """The winner as TOML (with how it was ranked) or as SGLang's server flags (the plugin's
    launch line for settings beyond SGLang), printed and, with --best-out, written."""
    best_cfg = NgramConfig(**{**base, **best["options"]})
    preset = preset_of(args)
    at = int(best["concurrency"])
    if cost is not None:
        figure = best["holdout"]["speedup"] if holdout else best["speedup"]
        if not figure > 1:
            where = "on the hold-out part " if holdout else ""
            out.write(f"\nwarning: the best setting is predicted {_x(figure)} {where}at "
                      f"concurrency {at}: do not enable speculation at this load\n")
    toml = best_cfg.to_toml(preset=preset) + render_ranking(_ranking(args, best, cost))
    if best_as == "toml":
        text = toml
        if args.best_as == "toml":  # asked to print it (--best-out alone only writes it)
            out.write(f"\nbest setting as TOML (save it and pass --config FILE, alone or "
                      f"with --preset {preset}):\n" + text)
    elif best_as == "vllm":
        text = _write_vllm(args, out, best_cfg, toml, per_level)
    elif best_cfg.sglang_exact:
        text = sglang_flags(best_cfg.to_sglang_args()) + "\n"
        out.write("\nbest setting as SGLang server flags:\n" + text)
    else:
        text = toml
        where = args.best_out or "best.toml"
        slots = best_cfg.draft_token_num
        keep = (f"this TOML is written to {where}" if args.best_out else
                f"save this TOML as {where}")
        out.write(f"\nbest setting: beyond SGLang's options, it runs on ngramspec's drafter "
                  f"in SGLang's server; {keep}:\n{text}\nand start the "
                  f"server with (it adds --speculative-num-draft-tokens {slots} and the other "
                  f"speculative flags):\n  ngramspec sglang-launch --config {where} -- "
                  "--model-path MODEL\n")
    if args.best_out is not None:
        write_atomic(args.best_out, text)
        how = ("SGLang server flags" if text is not toml and best_as == "sglang" else
               "vLLM's --speculative-config" if text is not toml else
               f"TOML; ngramspec simulate --config {args.best_out} runs it"
               + ("" if best_as == "toml" else
                  f", ngramspec sglang-launch --config {args.best_out} serves it"
                  if best_as == "sglang" else
                  f", vLLM's proposer reads it from {ENV_CONFIG}"))
        out.write(f"best setting written to {args.best_out} ({how})\n")


def _write_vllm(args: argparse.Namespace, out: TextIO, cfg: NgramConfig, toml: str,
                per_level: dict[int, int] | None) -> str:
    """The winner for vLLM: vLLM's own n-gram is its ``--speculative-config`` alone (the text
    written; with several concurrencies, ``k`` per batch size as vLLM's dynamic speculative
    decoding takes it); ngramspec's chains are a TOML (written) and the line that hands it
    to ``ngramspec.integrations.vllm.Proposer``."""
    if cfg.vllm:
        spec = speculative_config(cfg)
        if per_level is not None and len(set(per_level.values())) > 1 and \
                max(per_level.values()) > 0:
            spec["num_speculative_tokens"] = max(per_level.values())
            spec["num_speculative_tokens_per_batch_size"] = batch_schedule(per_level)
            levels = ", ".join(f"{k} at {c}" for c, k in sorted(per_level.items()))
            out.write(f"\nbest num_speculative_tokens by concurrency (0: none pays): {levels}; "
                      "vLLM's dynamic speculative decoding applies them by batch size "
                      "(num_speculative_tokens_per_batch_size; the last carries on to larger "
                      "batches)\n")
        text = json.dumps(spec) + "\n"
        out.write(f"\nbest setting as vLLM's --speculative-config:\n{text}\nserve it with:\n"
                  f"  vllm serve MODEL --speculative-config {shlex.quote(text.strip())}\n")
        return text
    where = args.best_out or "best.toml"
    keep = (f"this TOML is written to {where}" if args.best_out else
            f"save this TOML as {where}")
    out.write(f"\nbest setting: ngramspec's chains, served in vLLM by its custom_class "
              f"proposer (pip install ngramspec where vLLM runs); {keep}:\n{toml}\nand "
              f"serve it with:\n  {launch_line(cfg, toml_path=where)}\n")
    return toml


def _x(speed_up: float) -> str:
    return speed_up_text(speed_up)


def _tps_cell(record: dict) -> str:
    """Tokens per step with its 90% interval where the record has one."""
    text = f"{record['tokens_per_step']:.3f}"
    if record.get("tokens_per_step_low") is not None:
        text += f" ({record['tokens_per_step_low']:.3f}–{record['tokens_per_step_high']:.3f})"
    return text


def _prediction(record: dict) -> ServingPrediction:
    """What the ranking and the verdicts read of a record's prediction: its level, speed-up,
    engine and interval."""
    p = record["prediction"]
    iv = Interval((record["tokens_per_step_low"], record["tokens_per_step_high"]),
                  (p["speed_up_low"], p["speed_up_high"]), p["interval_requests"],
                  RESAMPLES)
    return ServingPrediction(record["concurrency"], 0, 0, 1.0, record["speedup"],
                             record["speedup"], 0, 0.0, engine=p["engine"], interval=iv)


def _part_label(job: Job, conc: list[int], holdout: bool) -> str:
    extra = [f"concurrency {job.concurrency}"] if len(conc) > 1 else []
    extra += [f"{job.part} part"] if holdout else []
    return f" ({', '.join(extra)})" if extra else ""


def _executor_label(args: argparse.Namespace, jobs: int | None) -> str:
    if args.executor == "ray":
        return f"Ray at {args.address}" if args.address else (
            f"local Ray cluster, {jobs} CPUs" if jobs else "local Ray cluster")
    return f"{jobs} jobs"


def _execute(args: argparse.Namespace, plan: SweepPlan, jobs: int | None, conc: list[int],
             results_file: ResultsFile | None, todo: list[int]
             ) -> tuple[dict[str, dict], list[tuple[int, str]]]:
    """Run the jobs still to do with a progress bar; failures on stderr as they come."""
    holdout = "holdout" in plan.parts
    keys = plan.keys
    bar = ProgressBar("sweep", force=args.progress, delay=0.0)
    done: dict[str, dict] = {}
    failed: list[tuple[int, str]] = []
    try:
        if todo:
            bar(len(keys) - len(todo), len(keys))
            with make_executor(args.executor, jobs=jobs, address=args.address,
                               retries=args.retries) as ex:
                for f in run_sweep(plan, ex, results=results_file, todo=todo):
                    if f.error is not None:
                        failed.append((f.index, f.error))
                        bar.clear()
                        job = plan.jobs[f.index]
                        print(f"ngramspec: setting failed: "
                              f"{options_label(job.options, []) or 'default settings'}"
                              f"{_part_label(job, conc, holdout)}: {f.error}",
                              file=sys.stderr)
                    else:
                        done[f.record["key"]] = f.record
                    bar(f.done, f.total)
    except KeyboardInterrupt:
        bar.clear()
        if results_file is not None:
            hint = (f"the finished settings are in {args.out}; the same command with --resume "
                    "continues from there")
        else:
            hint = ("nothing was kept; with --out FILE each setting is saved as it finishes, "
                    "and --resume continues an interrupted sweep")
        print(f"ngramspec: sweep interrupted: {hint}", file=sys.stderr)
        raise
    finally:
        bar.close()
    return done, failed


def _rows(shown: list[dict], names: list[str], with_cost: bool, holdout: bool
          ) -> list[list[str]]:
    """The ranking table's cells, best first."""
    lines = []
    for i, r in enumerate(shown, 1):
        cells = [str(i)] + [str(r["options"].get(n, r.get(n, "-"))) for n in names]
        cells += [_tps_cell(r)]
        if holdout:
            cells += [_tps_cell(r["holdout"])]
        cells += [f"{r['draft_nodes_per_step']:.2f}", pct(r["share_steps_with_draft"])]
        if with_cost:
            cells += [speed_up_cell(_prediction(r))]
            if holdout:
                h = r["holdout"]
                cells += [speed_up_cell(_prediction({**h, "concurrency": r["concurrency"]}))
                          if h.get("prediction") else speed_up_text(h["speedup"])]
            cells += [f"{r['speculative_tokens_per_s']:,.1f}",
                      f"{r['baseline_tokens_per_s']:,.1f}"]
        lines.append(cells)
    return lines
