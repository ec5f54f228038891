"""``ngramspec simulate`` and ``ngramspec sweep``: will n-gram speculation pay off on my traffic?

``simulate`` replays SGLang's serving loop on recorded greedy streams (default: the corpus
shipped with the package) and prints tokens per verify step, acceptance by depth and, with a
cost model, the predicted speed-up.  ``sweep`` does that over a grid of settings in parallel
processes and ranks them.  Run ``ngramspec simulate --help`` for every option.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any, Sequence, TextIO

from . import config as config_module
from .config import MATCH_TYPES, PROFILES, NgramConfig
from .costmodel import CostModel, Prediction
from .simulate import SimulationResult, simulate
from .streams import StreamError, embedded_streams_path, read_streams

__all__ = ["main"]

_STR_OPTIONS = {"match_type": MATCH_TYPES, "profile": PROFILES}


class ProgressBar:
    """A one-line progress bar on a stream (stderr), shown only for runs longer than
    ``delay`` seconds and only where that stream is a terminal (unless ``force``)."""

    def __init__(self, label: str, *, stream: TextIO | None = None, force: bool | None = None,
                 delay: float = 0.5, width: int = 30) -> None:
        self.stream = stream or sys.stderr
        self.enabled = force if force is not None else self.stream.isatty()
        self.label, self.delay, self.width = label, delay, width
        self.start = time.perf_counter()
        self.shown = False

    def __call__(self, done: int, total: int) -> None:
        if not self.enabled or (not self.shown and time.perf_counter() - self.start < self.delay):
            return
        self.shown = True
        frac = done / total if total else 1.0
        fill = int(round(self.width * frac))
        self.stream.write(f"\r{self.label} [{'#' * fill}{'.' * (self.width - fill)}] "
                          f"{100 * frac:5.1f}% {done:,}/{total:,}")
        self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


# --- argument parsing ---------------------------------------------------------------------


def _config_fields() -> list[dataclasses.Field]:
    return list(dataclasses.fields(NgramConfig))


def _parse_bool(text: str) -> bool:
    low = text.strip().lower()
    if low in ("1", "true", "yes", "on"):
        return True
    if low in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{text!r} is not a boolean (true/false, yes/no, 1/0)")


def _kind(f: dataclasses.Field) -> Any:
    """How a config field's value is parsed from the command line."""
    if f.name in _STR_OPTIONS:
        return _STR_OPTIONS[f.name]
    if isinstance(f.default, bool):
        return bool
    if isinstance(f.default, float):
        return float
    return int


def _parse_value(name: str, text: str, kind: Any) -> Any:
    item = text.strip()
    if kind is bool:
        try:
            return _parse_bool(item)
        except ValueError as e:
            raise ValueError(f"{_flag(name)}: {e}") from None
    if kind in (int, float):
        try:
            return kind(item)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise ValueError(f"{_flag(name)}: {item!r} is not {what}") from None
    if item not in kind:
        raise ValueError(f"{_flag(name)}: {item!r} is not one of {', '.join(kind)}")
    return item


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_common(p: argparse.ArgumentParser, *, grid: bool) -> None:
    p.add_argument("streams", nargs="*", metavar="STREAMS",
                   help="recorded streams: .jsonl, .jsonl.gz or .parquet files with fields id, "
                        "prompt_ids, output_ids (default: the corpus shipped with ngramspec)")
    g = p.add_argument_group("drafter settings (NgramConfig; SGLang's server defaults)"
                             + ("; comma lists make the grid" if grid else ""))
    for f in _config_fields():
        kind = _kind(f)
        what = {bool: "true or false", float: "number", int: "integer"}.get(
            kind, f"one of {', '.join(kind)}" if not isinstance(kind, type) else "")
        help_ = what + (f" (default {f.default})" if f.default is not None
                        else " (profile's default)")
        metavar = "LIST" if grid else {bool: "BOOL", float: "X", int: "N"}.get(kind, "NAME")
        # Values are parsed (and errors named) in _config_options, not by argparse.
        g.add_argument(_flag(f.name), dest=f.name, metavar=metavar, help=help_)
    s = p.add_argument_group("serving")
    if grid:
        s.add_argument("--concurrency", default="1", metavar="LIST",
                       help="requests decoded together (comma list; default 1)")
    else:
        s.add_argument("--concurrency", type=int, default=1, metavar="N",
                       help="requests decoded together (default 1)")
    s.add_argument("--backend", default="numba", choices=["numba", "reference"],
                   help="numba: the compiled loop (default); reference: pure Python, slow")
    s.add_argument("--limit", type=int, metavar="N", help="replay only the first N requests")
    c = p.add_argument_group("cost model (milliseconds; measured or linear)")
    c.add_argument("--decode-ms", type=float, help="one plain decode step")
    c.add_argument("--verify-ms", type=float, help="one verify step of this tree size")
    c.add_argument("--step-ms", type=float, help="linear model: fixed time per forward")
    c.add_argument("--token-ms", type=float, help="linear model: time per token in a forward")
    c.add_argument("--draft-ms", type=float,
                   help="drafting CPU time per step (default: measured by the replay)")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    o.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ngramspec", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True, metavar="{simulate,sweep}")
    sim = sub.add_parser("simulate", help="replay SGLang's serving loop on recorded streams",
                         description="Replay SGLang's NGRAM serving loop on recorded greedy "
                                     "streams and report tokens per verify step.")
    _add_common(sim, grid=False)
    sim.add_argument("--corpus", action="append", metavar="FILE", default=[],
                     help="external corpus loaded before the traffic (repeatable; needs "
                          "--external-sam-budget): JSONL, one document per line, a list of "
                          "token ids or (with --tokenizer) a string; its id is the path")
    sim.add_argument("--tokenizer", metavar="DIR", help="local Hugging Face tokenizer "
                     "directory for text corpora (needs transformers)")
    sim.add_argument("--by", metavar="FIELD", help="also report per value of this metadata "
                                                   "field (e.g. task)")
    sw = sub.add_parser("sweep", help="rank a grid of settings",
                        description="Simulate a grid of settings (comma lists) in parallel "
                                    "and rank them by predicted speed-up (with a cost model) "
                                    "or tokens per step.")
    _add_common(sw, grid=True)
    sw.add_argument("--jobs", type=int, default=os.cpu_count() or 1, metavar="N",
                    help="parallel processes (default: CPU count)")
    sw.add_argument("--top", type=int, metavar="K", help="print only the best K settings")
    sw.add_argument("--plot", metavar="PATH.png",
                    help="plot tokens/step and speed-up against draft_token_num (matplotlib)")
    return ap


def _cost_model(args: argparse.Namespace) -> CostModel | None:
    given = {k: getattr(args, k) for k in ("decode_ms", "verify_ms", "step_ms", "token_ms")
             if getattr(args, k) is not None}
    if not given:
        if args.draft_ms is not None:
            raise ValueError("--draft-ms needs a cost model: --decode-ms and --verify-ms, or "
                             "--step-ms and --token-ms")
        return None
    try:
        return CostModel(**given)
    except ValueError as e:
        raise ValueError(f"cost model: {e} (flags --decode-ms and --verify-ms, or --step-ms and "
                         "--token-ms)") from None


def _load(args: argparse.Namespace) -> tuple[list[dict], str]:
    sources = args.streams or [embedded_streams_path()]
    rows = read_streams(sources)
    if args.limit is not None:
        if args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        rows = rows[:args.limit]
    label = ", ".join(os.path.basename(str(s)) for s in sources)
    return rows, label


def verify_share(config: NgramConfig, share_steps_with_draft: float) -> float:
    """Share of steps that need a verify forward: all of them for SGLang's modes (which send
    their padded tree every step), the steps with a draft for ADAPTIVE (which may send none)."""
    return share_steps_with_draft if config.match_type == "ADAPTIVE" else 1.0


def _predict(model: CostModel, result: SimulationResult, draft_ms: float | None) -> Prediction:
    return model.predict(result.tokens_per_step, draft_token_num=result.config.draft_token_num,
                         concurrency=result.concurrency,
                         draft_ms=result.draft_ms_per_step if draft_ms is None else draft_ms,
                         verify_share=verify_share(result.config,
                                                   result.summary.share_steps_with_draft))


# --- simulate -----------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _config_line(cfg: NgramConfig) -> str:
    """Every set option; options beyond SGLang only where they differ from their default."""
    beyond = set(getattr(config_module, "BEYOND_SGLANG", ()))
    defaults = {f.name: f.default for f in _config_fields()}
    return " ".join(f"{k}={v}" for k, v in dataclasses.asdict(cfg).items()
                    if v is not None and not (k in beyond and v == defaults[k]))


def format_report(result: SimulationResult, *, by: str | None = None, source: str = "",
                  prediction: Prediction | None = None) -> str:
    """The readable report of one simulation (what ``ngramspec simulate`` prints)."""
    s = result.summary
    lines = [f"ngramspec simulate: {s.requests} requests, {int(result.output_lens.sum()):,} "
             f"output tokens{' from ' + source if source else ''}",
             f"config: {_config_line(result.config)}",
             f"serving: concurrency {result.concurrency}, backend {result.backend}", ""]
    head = (f"{'group':<18} {'requests':>8} {'verify steps':>12} {'tokens/step':>11} "
            f"{'drafts/step':>11} {'steps with a draft':>18}")
    lines += [head, "-" * len(head)]

    def row(name: str, x) -> str:
        return (f"{name:<18} {x.requests:>8,} {x.verify_steps:>12,} {x.tokens_per_step:>11.3f} "
                f"{x.draft_nodes_per_step:>11.2f} {_pct(x.share_steps_with_draft):>18}")

    lines.append(row("all", s))
    if by:
        for name, g in result.by(by).items():
            lines.append(row(f"  {name}"[:18], g))
    lines += ["", "acceptance by depth (share of verify steps accepting at least k drafts):"]
    ks = range(1, len(s.acceptance_by_depth) + 1)
    lines.append("  k  " + "".join(f"{k:>7}" for k in ks))
    lines.append("     " + "".join(f"{_pct(a):>7}" for a in s.acceptance_by_depth))
    lines += ["", f"drafting CPU time: {result.draft_ms_per_step * 1e3:.1f} µs per serving step "
              f"({result.batch_steps:,} steps); replay took {result.wall_seconds:.2f} s "
              f"({result.output_tokens_per_second:,.0f} output tokens/s)"]
    if prediction is not None:
        p = prediction
        verdict = "faster" if p.speedup > 1 else "SLOWER" if p.speedup < 1 else "no change"
        lines += ["", f"cost model: decode step {p.decode_step_ms:.3g} ms, verify step "
                  f"{p.verify_step_ms:.3g} ms + drafting {p.draft_ms:.3g} ms",
                  f"  without speculation: {p.baseline_tokens_per_s:8.1f} tokens/s per request",
                  f"  with speculation:    {p.speculative_tokens_per_s:8.1f} tokens/s per request",
                  f"  speed-up: {p.speedup:.2f}x ({verdict}); break-even at "
                  f"{p.break_even_tokens_per_step:.2f} tokens/step, measured "
                  f"{p.tokens_per_step:.2f}"]
    return "\n".join(lines)


def _config_options(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: _parse_value(f.name, getattr(args, f.name), _kind(f))
            for f in _config_fields() if getattr(args, f.name) is not None}


def _cmd_simulate(args: argparse.Namespace, out: TextIO) -> int:
    config = NgramConfig(**_config_options(args))
    model = _cost_model(args)
    rows, label = _load(args)
    bar = ProgressBar("simulate", force=args.progress)
    try:
        result = simulate(rows, config, concurrency=args.concurrency, backend=args.backend,
                          progress=bar, corpora=_corpora(args))
    finally:
        bar.close()
    prediction = _predict(model, result, args.draft_ms) if model else None
    out.write(format_report(result, by=args.by, source=label, prediction=prediction) + "\n")
    if args.json:
        report = result.to_dict(by=args.by)
        if prediction is not None:
            report["cost"] = prediction.to_dict()
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f)
    return 0


def _corpora(args: argparse.Namespace) -> dict[str, Any] | None:
    """``--corpus`` files read as documents (ids: the paths), with ``--tokenizer`` for text."""
    from .corpora import read_corpus

    if not args.corpus:
        return None
    tokenizer = None
    if args.tokenizer:
        try:
            from transformers import AutoTokenizer
        except ImportError:
            raise ValueError("--tokenizer needs the transformers package "
                             "(pip install transformers)") from None
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
    return {path: read_corpus(path, tokenizer=tokenizer) for path in args.corpus}


# --- sweep --------------------------------------------------------------------------------

_WORKER_ROWS: list[dict] = []


def _init_worker(rows: list[dict]) -> None:
    _WORKER_ROWS[:] = rows


def _run_one(job: tuple[dict, int, str]) -> dict:
    options, concurrency, backend = job
    r = simulate(_WORKER_ROWS, NgramConfig(**options), concurrency=concurrency, backend=backend)
    s = r.summary
    return dict(options=options, concurrency=concurrency, tokens_per_step=s.tokens_per_step,
                draft_nodes_per_step=s.draft_nodes_per_step,
                share_steps_with_draft=s.share_steps_with_draft,
                acceptance_by_depth=s.acceptance_by_depth,
                draft_ms_per_step=r.draft_ms_per_step,
                draft_token_num=r.config.draft_token_num, match_type=r.config.match_type)


def _parse_list(name: str, text: str, kind: Any) -> list:
    items = text.split(",")
    if any(not i.strip() for i in items):
        raise ValueError(f"{_flag(name)}: empty item in {text!r}")
    return [_parse_value(name, i, kind) for i in items]


def _grid(args: argparse.Namespace) -> list[tuple[dict, int]]:
    axes: dict[str, list] = {}
    for f in _config_fields():
        text = getattr(args, f.name)
        if text is not None:
            axes[f.name] = _parse_list(f.name, text, _kind(f))
    conc = _parse_list("concurrency", args.concurrency, int)
    if min(conc) < 1:
        raise ValueError(f"--concurrency values must be >= 1, got {conc}")
    grid = []
    for combo in itertools.product(*axes.values()):
        options = dict(zip(axes, combo))
        NgramConfig(**options)  # validate every point before running any
        for c in conc:
            grid.append((options, c))
    return grid


def _plot(rows: list[dict], path: str, with_cost: bool, cost_label: str = "") -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'ngramspec[plot]'") from None
    varied = [k for k in sorted({k for r in rows for k in r["options"]})
              if k not in ("draft_token_num", "match_type")
              and len({r["options"].get(k) for r in rows}) > 1]
    if len({r["concurrency"] for r in rows}) > 1:
        varied.append("concurrency")
    lines: dict[str, list[dict]] = {}
    for r in rows:
        extra = ", ".join(f"{k}={r['options'].get(k, r.get(k))}" for k in varied)
        label = r["match_type"] + (f" ({extra})" if extra else "")
        lines.setdefault(label, []).append(r)
    panels = 2 if with_cost else 1
    fig, axes = plt.subplots(1, panels, figsize=(6 * panels, 4.2), squeeze=False)
    for label, pts in lines.items():
        pts = sorted(pts, key=lambda r: r["draft_token_num"])
        xs = [p["draft_token_num"] for p in pts]
        axes[0][0].plot(xs, [p["tokens_per_step"] for p in pts], marker="o", label=label)
        if with_cost:
            axes[0][1].plot(xs, [p["speedup"] for p in pts], marker="o", label=label)
    axes[0][0].set_title("tokens per verify step (pooled)")
    axes[0][0].set_ylabel("tokens / step")
    if with_cost:
        axes[0][1].axhline(1.0, color="grey", linestyle="--", linewidth=1)
        axes[0][1].set_title(f"predicted speed-up ({cost_label or 'cost model'})", fontsize=10)
        axes[0][1].set_ylabel("speed-up (x)")
    for ax in axes[0]:
        ax.set_xlabel("draft_token_num (tree size, root included)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def _cmd_sweep(args: argparse.Namespace, out: TextIO) -> int:
    if args.jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {args.jobs}")
    if args.top is not None and args.top < 1:
        raise ValueError(f"--top must be >= 1, got {args.top}")
    model = _cost_model(args)
    grid = _grid(args)
    rows, label = _load(args)
    jobs = [(options, c, args.backend) for options, c in grid]
    bar = ProgressBar("sweep", force=args.progress, delay=0.0)
    results: list[dict] = []
    t0 = time.perf_counter()
    try:
        if args.jobs == 1 or len(jobs) == 1:
            _init_worker(rows)
            for job in jobs:
                results.append(_run_one(job))
                bar(len(results), len(jobs))
        else:
            with ProcessPoolExecutor(max_workers=min(args.jobs, len(jobs)),
                                     initializer=_init_worker, initargs=(rows,)) as pool:
                for res in pool.map(_run_one, jobs):
                    results.append(res)
                    bar(len(results), len(jobs))
    finally:
        bar.close()
    for r in results:
        if model is not None:
            p = model.predict(r["tokens_per_step"], draft_token_num=r["draft_token_num"],
                              concurrency=r["concurrency"],
                              draft_ms=r["draft_ms_per_step"] if args.draft_ms is None
                              else args.draft_ms,
                              verify_share=verify_share(NgramConfig(**r["options"]),
                                                        r["share_steps_with_draft"]))
            r["speedup"] = p.speedup
            r["speculative_tokens_per_s"] = p.speculative_tokens_per_s
            r["break_even_tokens_per_step"] = p.break_even_tokens_per_step
    key = "speedup" if model is not None else "tokens_per_step"
    results.sort(key=lambda r: -r[key])
    shown = results[:args.top] if args.top else results
    names = sorted({k for r in results for k in r["options"]})
    if len({r["concurrency"] for r in results}) > 1:
        names.append("concurrency")
    out.write(f"ngramspec sweep: {len(results)} settings on {len(rows)} requests from {label} "
              f"({time.perf_counter() - t0:.1f} s, {args.jobs} jobs); ranked by "
              f"{'predicted speed-up' if model else 'tokens per verify step'}\n\n")
    cols = ["rank"] + names + ["tokens/step", "drafts/step", "steps with a draft"]
    if model is not None:
        cols += ["speed-up", "tokens/s"]
    table = []
    for i, r in enumerate(shown, 1):
        cells = [str(i)] + [str(r["options"].get(n, r.get(n, "-"))) for n in names]
        cells += [f"{r['tokens_per_step']:.3f}", f"{r['draft_nodes_per_step']:.2f}",
                  _pct(r["share_steps_with_draft"])]
        if model is not None:
            cells += [f"{r['speedup']:.2f}x", f"{r['speculative_tokens_per_s']:.1f}"]
        table.append(cells)
    widths = [max(len(c), *(len(t[i]) for t in table)) for i, c in enumerate(cols)]
    out.write("  ".join(c.rjust(w) for c, w in zip(cols, widths)) + "\n")
    out.write("  ".join("-" * w for w in widths) + "\n")
    for t in table:
        out.write("  ".join(c.rjust(w) for c, w in zip(t, widths)) + "\n")
    if model is not None:
        base = model.decode_step_ms(1)
        out.write(f"\nwithout speculation: {1000 / base:.1f} tokens/s per request "
                  f"(decode step {base:.3g} ms)\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cost_model": dataclasses.asdict(model) if model else None,
                       "results": results}, f)
    if args.plot:
        label = ""
        if model is not None:
            label = (f"decode {model.decode_ms:g} ms, verify {model.verify_ms:g} ms at every "
                     "size" if model.kind == "measured" else
                     f"{model.step_ms:g} ms + {model.token_ms:g} ms/token")
        _plot(results, args.plot, model is not None, label)
        out.write(f"plot written to {args.plot}\n")
    return 0


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None) -> int:
    """Entry point of the ``ngramspec`` command; returns the exit status.

    Examples
    --------
    >>> from ngramspec.cli import main
    >>> main(["simulate", "--limit", "3", "--max-bfs-breadth", "0"])  # message on stderr
    2
    """
    args = _parser().parse_args(argv)
    out = stdout or sys.stdout
    try:
        if args.command == "simulate":
            return _cmd_simulate(args, out)
        return _cmd_sweep(args, out)
    except (ValueError, TypeError, KeyError, StreamError, OSError) as e:
        msg = e.args[0] if isinstance(e, KeyError) and e.args else e
        print(f"ngramspec: error: {msg}", file=sys.stderr)
        return 2
