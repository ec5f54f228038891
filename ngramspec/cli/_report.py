"""Printing: progress bars, the reports and tables of the commands, plots."""

from __future__ import annotations

import dataclasses
import sys
import time
from typing import Any, TextIO

from ..config import NgramConfig
from ..config.modes import BEYOND_SGLANG
from ..costs import ENGINES, ServingPrediction, verdict
from ..costs import speed_up_text
from ..costs.uncertainty import MIN_REQUESTS, Interval
from ..simulate import SimulationResult
from ._options import check_out_file, config_fields

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

    def clear(self) -> None:
        """Wipe the bar's line (before printing a message); the next update redraws it."""
        if self.shown:
            self.stream.write("\r" + " " * (len(self.label) + self.width + 40) + "\r")
            self.stream.flush()

    def close(self) -> None:
        if self.shown:
            self.stream.write("\n")
            self.stream.flush()


def pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def config_line(cfg: NgramConfig) -> str:
    """Every set option; options beyond SGLang only where they differ from their default."""
    if cfg.vllm:  # vLLM's proposer reads these alone
        return (f"profile={cfg.profile} prompt_lookup_min={cfg.prompt_lookup_min} "
                f"prompt_lookup_max={cfg.prompt_lookup_max} "
                f"num_speculative_tokens={cfg.num_speculative_tokens}")
    beyond = set(BEYOND_SGLANG)
    defaults = {f.name: f.default for f in config_fields()}
    return " ".join(f"{k}={v}" for k, v in dataclasses.asdict(cfg).items()
                    if v is not None and not (k in beyond and v == defaults[k]))


def _decoding_line(result: SimulationResult) -> str:
    d = result.decoding
    if d["kind"] == "greedy":
        cfg = result.config
        if cfg.sglang_exact:
            return ("decoding: greedy (no sampling fields): the accept lengths are SGLang's, "
                    "exactly")
        if cfg.vllm:
            return ("decoding: greedy (no sampling fields): the accept lengths of vLLM 0.33's "
                    "n-gram proposer under vLLM's greedy chain verification, exactly")
        if cfg.chain:
            return ("decoding: greedy (no sampling fields): the exact accept lengths of "
                    "ngramspec's chains under greedy chain verification (vLLM serves them "
                    "through ngramspec.integrations.vllm.Proposer)")
        return ("decoding: greedy (no sampling fields): the exact accept lengths of this "
                "configuration, which goes beyond SGLang's options (SGLang's server runs it "
                "only on ngramspec's drafter: ngramspec sglang-launch)")
    sets = "; ".join(" ".join(f"{k}={v}" for k, v in st.items() if v is not None)
                     for st in d["settings"][:3]) + ("; ..." if len(d["settings"]) > 3 else "")
    head = (f"decoding: sampled ({sets})" if d["kind"] == "sampled" else
            f"decoding: mixed ({d['greedy']} greedy, {d['sampled']} sampled: {sets})")
    return (head + ": sampled accept lengths are one draw of their distribution, valid for "
            "serving at the recorded settings with SGLang's default thresholds")


def format_report(result: SimulationResult, *, by: str | None = None, source: str = "",
                  asked: int | None = None, interval: Interval | None = None) -> str:
    """The readable report of one simulation (what ``ngramspec simulate`` prints first)."""
    s = result.summary
    clamp = (f" (asked {asked:,}; at most {result.concurrency} requests can share a step)"
             if asked is not None and asked != result.concurrency else "")
    lines = [f"ngramspec simulate: {s.requests} requests, {int(result.output_lens.sum()):,} "
             f"output tokens{' from ' + source if source else ''}",
             f"config: {config_line(result.config)}",
             f"serving: concurrency {result.concurrency}{clamp}, backend {result.backend}",
             _decoding_line(result), ""]
    head = (f"{'group':<18} {'requests':>8} {'verify steps':>12} {'tokens/step':>11} "
            f"{'drafts/step':>11} {'steps with a draft':>18}")
    lines += [head, "-" * len(head)]

    def row(name: str, x) -> str:
        return (f"{name:<18} {x.requests:>8,} {x.verify_steps:>12,} {x.tokens_per_step:>11.3f} "
                f"{x.draft_nodes_per_step:>11.2f} {pct(x.share_steps_with_draft):>18}")

    lines.append(row("all", s))
    if by:
        for name, g in result.by(by).items():
            lines.append(row(f"  {name}"[:18], g))
    if interval is not None:
        lo, hi = interval.tokens_per_step
        lines.append(f"tokens/step {s.tokens_per_step:.3f} ({lo:.3f}–{hi:.3f}): 90% interval, "
                     f"bootstrap over {interval.requests} requests"
                     + (f" (fewer than {MIN_REQUESTS}: rough)" if interval.few else ""))
    lines += ["", "acceptance by depth (share of verify steps accepting at least k drafts):"]
    ks = range(1, len(s.acceptance_by_depth) + 1)
    lines.append("  k  " + "".join(f"{k:>7}" for k in ks))
    lines.append("     " + "".join(f"{pct(a):>7}" for a in s.acceptance_by_depth))
    if s.accepted_by_source is not None:
        lines += ["", _sources_line(s.accepted_by_source)]
    lines += ["", f"drafting CPU time: {result.draft_ms_per_step * 1e3:.1f} µs per serving step "
              f"({result.batch_steps:,} steps); replay took {result.wall_seconds:.2f} s "
              f"({result.output_tokens_per_second:,.0f} output tokens/s)"]
    # Only where a prediction has already timed it (timing compiles the step API's kernels).
    api = result.step_api_ms_per_step if getattr(result, "step_api_timed", False) else None
    if api is not None:
        lines.append(f"drafting in a custom loop (Drafter.propose + verify_greedy + accept, "
                     f"timed on the first {result.step_api_steps} steps): {api * 1e3:,.1f} µs "
                     "per serving step; predictions add this")
    return "\n".join(lines)


def _sources_line(by_source: dict[str, int]) -> str:
    """Where the accepted draft tokens came from: the trie's part of the merged trees or a
    corpus's (shares of all accepted draft tokens, bonus tokens excluded)."""
    total = sum(by_source.values())
    if total == 0:
        return "accepted draft tokens: none (no draft token was accepted)"
    shares = ", ".join(f"{name} {pct(count / total)}" for name, count in by_source.items())
    return f"accepted draft tokens: {shares} (of {total:,})"


def format_table(cols: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(cols)]
    return (["  ".join(c.rjust(w) for c, w in zip(cols, widths)),
             "  ".join("-" * w for w in widths)]
            + ["  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows])


def format_predictions(levels: list[tuple[int, SimulationResult, ServingPrediction | None]],
                       cost_label: str = "") -> str:
    """One row per concurrency level (asked, result, prediction) and, with a cost, the
    verdict."""
    with_cost = all(p is not None for _, _, p in levels)
    cols = ["concurrency", "tokens/step", "steps"]
    if with_cost:
        cols += ["baseline steps", "tok/s with", "tok/s without", "speed-up",
                 "TPOT ms mean/p50/p90", "(without)"]
    rows = []
    for asked, r, p in levels:
        iv = p.interval if p is not None else None
        tps = f"{r.tokens_per_step:.3f}"
        if iv is not None:
            tps += f" ({iv.tokens_per_step[0]:.3f}–{iv.tokens_per_step[1]:.3f})"
        cells = [f"{asked:,}" + ("*" if asked != r.concurrency else ""), tps,
                 f"{r.batch_steps:,}"]
        if p is not None:
            t, b = p.tpot_ms, p.baseline_tpot_ms
            word = "faster" if p.speed_up > 1 else "SLOWER" if p.speed_up < 1 else "same"
            cells += [f"{p.baseline_steps:,}", f"{p.speculative_tokens_per_s:,.1f}",
                      f"{p.baseline_tokens_per_s:,.1f}", f"{speed_up_cell(p)} {word}",
                      f"{t['mean']:.2f}/{t['p50']:.2f}/{t['p90']:.2f}",
                      f"({b['mean']:.2f}/{b['p50']:.2f}/{b['p90']:.2f})"]
        rows.append(cells)
    lines = []
    if with_cost:
        first = levels[0][2]
        lines.append(f"predicted serving on {ENGINES[first.engine].words}")
        lines.append(f"  cost: {cost_label}; drafting {_drafting(levels)}; prefill not "
                     "modelled")
    else:
        lines.append("per concurrency level (no cost given: --cost-table, or --decode-ms and "
                     "--verify-ms, for the prediction):")
    lines += format_table(cols, rows)
    if any(asked != r.concurrency for asked, r, _ in levels):
        lines.append("* clamped to the number of requests")
    if with_cost:
        lines.append("tok/s: decode tokens of all requests / total time; TPOT: per request, "
                     "its decode time / its decode tokens; (low–high): 90% interval, "
                     "bootstrap over requests")
        lines.append("verdict: " + verdict([p for _, _, p in levels]))
    return "\n".join(lines)


def speed_up_cell(p: ServingPrediction) -> str:
    """A predicted speed-up with its 90% interval where known: ``1.21x (1.15–1.27)``."""
    text = speed_up_text(p.speed_up)
    if p.interval is not None and p.interval.speed_up is not None:
        lo, hi = p.interval.speed_up
        text += f" ({lo:.2f}–{hi:.2f})"
    return text


def _drafting(levels: list[tuple[int, SimulationResult, ServingPrediction | None]]) -> str:
    """The drafting time the prediction adds per step, and where it comes from."""
    preds = [p for _, _, p in levels if p is not None]
    ms = sorted({round(p.draft_ms, 4) for p in preds})
    if len(ms) == 1:
        shown = f"{ms[0]:.3g} ms per step"
    else:
        shown = f"{ms[0]:.3g}-{ms[-1]:.3g} ms per step (by level)"
    return f"{shown} ({preds[0].draft_source})" if preds[0].draft_source else shown


def options_label(options: dict, rows: list[dict]) -> str:
    if not rows:
        return ", ".join(f"{k}={v}" for k, v in options.items())
    varied = [k for k in sorted({k for r in rows for k in r["options"]})
              if len({r["options"].get(k) for r in rows}) > 1]
    return ", ".join(f"{k}={options.get(k)}" for k in varied) or "default settings"


def plot_concurrency(lines: dict[str, list[tuple[int, float]]], path: str,
                      cost_label: str) -> None:
    """Predicted speed-up against concurrency, one line per config."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for label, pts in lines.items():
        pts = sorted(pts)
        ax.plot([c for c, _ in pts], [s for _, s in pts], marker="o", label=label or None)
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=1)
    ax.set_xscale("log", base=2)
    cs = sorted({c for pts in lines.values() for c, _ in pts})
    ax.set_xticks(cs)
    ax.set_xticklabels([str(c) for c in cs])
    ax.set_xlabel("concurrency (requests decoded together)")
    ax.set_ylabel("predicted speed-up (x)")
    ax.set_title(f"speculation vs plain decoding ({cost_label})", fontsize=9)
    ax.grid(True, alpha=0.3)
    if any(lines):
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'ngramspec[plot]'") from None
    return plt


def check_plot(path: str) -> None:
    """Before any work: --plot can be drawn (matplotlib installed) and written."""
    pyplot()
    check_out_file("--plot", path)


def plot_sweep(rows: list[dict], path: str, with_cost: bool, cost_label: str = "") -> None:
    plt = pyplot()
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


def sglang_flags(args: dict[str, Any]) -> str:
    """SGLang server arguments (``NgramConfig.to_sglang_args()``) as one command-line string.

    Examples
    --------
    >>> sglang_flags(NgramConfig(max_bfs_breadth=8).to_sglang_args())[:60]
    '--speculative-algorithm NGRAM --speculative-ngram-max-trie-d'
    """
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in args.items())
