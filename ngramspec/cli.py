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
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import os
import sys
import time
import zlib
from typing import Any, Sequence, TextIO

from . import config as config_module
from .config import MATCH_TYPES, PRESETS, PROFILES, NgramConfig, toml_options
from .costmodel import CostModel
from .executors import (EXECUTORS, SCHEMA_VERSION, ResultsFile, fingerprint,
                        make_executor, versions)
from .costs import (CostTable, ServingPrediction, parse_concurrency, predict_serving, schedule,
                    verdict)
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

    def clear(self) -> None:
        """Wipe the bar's line (before printing a message); the next update redraws it."""
        if self.shown:
            self.stream.write("\r" + " " * (len(self.label) + self.width + 40) + "\r")
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
    if name == "min_expected_accept" and item == "auto":
        return item  # tree sizes from the cost given (--cost-table, --decode-ms, ...)
    if kind in (int, float):
        try:
            return kind(item)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            if name == "min_expected_accept":
                what += " or 'auto'"
            raise ValueError(f"{_flag(name)}: {item!r} is not {what}") from None
    if item not in kind:
        raise ValueError(f"{_flag(name)}: {item!r} is not one of {', '.join(kind)}")
    return item


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def _add_config_flags(p: argparse.ArgumentParser, *, grid: bool = False) -> None:
    """--preset, --config and one flag per NgramConfig field."""
    pc = p.add_argument_group("starting point (flags below override it)")
    pc.add_argument("--preset", metavar="NAME",
                    help=f"named settings: {', '.join(PRESETS)} (default: sglang, SGLang's "
                         "server defaults)")
    pc.add_argument("--config", metavar="FILE.toml",
                    help="NgramConfig fields from a TOML file (e.g. written by sweep "
                         "--best-as toml); over the preset, under the flags")
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


def _add_common(p: argparse.ArgumentParser, *, grid: bool) -> None:
    p.add_argument("streams", nargs="*", metavar="STREAMS",
                   help="recorded streams: .jsonl, .jsonl.gz or .parquet files with fields id, "
                        "prompt_ids, output_ids (default: the corpus shipped with ngramspec)")
    _add_config_flags(p, grid=grid)
    s = p.add_argument_group("serving")
    s.add_argument("--concurrency", default="1", metavar="LIST",
                   help="requests decoded together; a comma list (e.g. 1,4,16,48) predicts "
                        "each level (default 1; levels above the number of requests are "
                        "clamped to it)")
    s.add_argument("--backend", default="numba", choices=["numba", "reference"],
                   help="numba: the compiled loop (default); reference: pure Python, slow")
    s.add_argument("--limit", type=int, metavar="N", help="replay only the first N requests")
    c = p.add_argument_group("cost (milliseconds): a measured table, or a flat or linear model")
    c.add_argument("--cost-table", metavar="FILE",
                   help="CSV (batch,tokens,ms) or JSON of measured forward times, e.g. from "
                        "ngramspec calibrate")
    c.add_argument("--extrapolate", action="store_true",
                   help="extend the cost table linearly beyond its measured grid (default: "
                        "an error naming the missing point)")
    c.add_argument("--decode-ms", type=float,
                   help="flat model: one plain decode step, at every batch size")
    c.add_argument("--verify-ms", type=float,
                   help="flat model: one verify step (any tree size), at every batch size")
    c.add_argument("--step-ms", type=float, help="linear model: fixed time per forward")
    c.add_argument("--token-ms", type=float,
                   help="linear model: time per query token in a forward (batch x tokens)")
    c.add_argument("--draft-ms", type=float,
                   help="drafting time per serving step (default: measured by the replay; "
                        "0 excludes it)")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    o.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")


def _add_torch_flags(p: argparse.ArgumentParser, *, threads: str) -> None:
    """--device, --dtype and --threads of the commands that run a transformers model."""
    p.add_argument("--device", default="cpu", help="torch device (default cpu; e.g. cuda)")
    p.add_argument("--dtype", default=None,
                   help="torch dtype (float32, bfloat16, float16, float64; default: the "
                        "model's)")
    p.add_argument("--threads", type=int, metavar="N", help=f"CPU threads for torch ({threads})")


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="ngramspec", description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="command", required=True,
                            metavar="{simulate,sweep,calibrate,check,streams}")
    sim = sub.add_parser("simulate", help="replay SGLang's serving loop on recorded streams",
                         description="Replay SGLang's NGRAM serving loop on recorded streams, "
                                     "report tokens per verify step and, with a cost table or "
                                     "model, predict the serving speed-up per concurrency "
                                     "level.")
    _add_common(sim, grid=False)
    sim.add_argument("--corpus", action="append", metavar="FILE", default=[],
                     help="external corpus loaded before the traffic (repeatable; needs "
                          "--external-sam-budget): JSONL, one document per line, a list of "
                          "token ids or (with --tokenizer) a string; its id is the path")
    sim.add_argument("--tokenizer", metavar="DIR", help="local Hugging Face tokenizer "
                     "directory for text corpora (needs transformers)")
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
    sw = sub.add_parser("sweep", help="rank a grid of settings",
                        description="Simulate a grid of settings (comma lists) in parallel "
                                    "and rank them by predicted speed-up (with a cost model) "
                                    "or tokens per step.")
    _add_common(sw, grid=True)
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
    sw.add_argument("--best-as", choices=["sglang", "toml"], default=None,
                    help="print the winner as SGLang server flags (SGLang-exact settings "
                         "only) or as a TOML file for --config")
    sw.add_argument("--plot", metavar="PATH.png",
                    help="plot tokens/step and speed-up against draft_token_num, or against "
                         "concurrency when several levels are given (matplotlib)")
    st = sub.add_parser("streams", help="make stream files from traffic logs",
                        description="Make stream files from traffic logs.")
    st_sub = st.add_subparsers(dest="streams_command", required=True, metavar="{import}")
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
    imp.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress bar on stderr (default: when stderr is a terminal)")
    cal = sub.add_parser("calibrate", help="measure a cost table for a transformers model",
                         description="Measure step times of a transformers causal LM on "
                                     "this machine (KV cache of --context tokens per request, "
                                     "--tokens query tokens under a draft-tree mask; by "
                                     "default everything a decoding loop pays per step: "
                                     "inputs built and uploaded, forward, verdict read back, "
                                     "accepted KV rows kept) and write the cost table "
                                     "(batch,tokens,ms) for --cost-table.")
    cal.add_argument("model", metavar="MODEL_DIR", help="a local transformers model directory")
    cal.add_argument("--batch", default="1,2,3,4,16,48", metavar="LIST",
                     help="batch sizes (default 1,2,3,4,16,48: simulate's 1,4,16,48 and the "
                          "batches of 2 and 3 that concurrency 4 drains through)")
    cal.add_argument("--tokens", default=",".join(map(str, range(1, 17))), metavar="LIST",
                     help="query tokens per request; 1 = plain decode (default 1 to 16: every "
                          "tree size up to the recommended preset's 16, as ADAPTIVE trees vary)")
    cal.add_argument("--context", type=int, default=1024, metavar="N",
                     help="tokens in each request's KV cache (default 1024)")
    cal.add_argument("--repeats", type=int, default=5, metavar="N",
                     help="timed forwards per point; the median is kept (default 5)")
    cal.add_argument("--warmup", type=int, default=2, metavar="N",
                     help="untimed forwards before each point (default 2)")
    cal.add_argument("--timing", default="loop", choices=["loop", "forward"],
                     help="loop: everything a decoding loop pays per step (default); "
                          "forward: the forward alone")
    cal.add_argument("--out", required=True, metavar="FILE.csv", help="where to write the table")
    _add_torch_flags(cal, threads="default: torch's; 1 is steadier on a busy machine")
    cal.add_argument("--seed", type=int, default=0, help="seed of the random token ids")
    cal.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress bar on stderr (default: when stderr is a terminal)")
    chk = sub.add_parser("check", help="hold the predicted speed-up against the real model",
                         description="Decode recorded streams on a transformers model, "
                                     "teacher-forced (the recording decides, every forward "
                                     "runs for real), plainly and speculatively at each "
                                     "--concurrency level; compare the realised speed-up "
                                     "with the one predicted from --cost-table.")
    chk.add_argument("model", metavar="MODEL_DIR", help="a local transformers model directory")
    chk.add_argument("streams", nargs="+", metavar="STREAMS",
                     help="recorded streams (.jsonl, .jsonl.gz or .parquet), decoded in order")
    chk.add_argument("--cost-table", required=True, metavar="FILE",
                     help="the cost table to check (e.g. from ngramspec calibrate MODEL_DIR)")
    chk.add_argument("--extrapolate", action="store_true",
                     help="extend the cost table linearly beyond its measured grid")
    _add_config_flags(chk)
    chk.add_argument("--concurrency", default="1", metavar="LIST",
                     help="requests decoded together; a comma list checks each level "
                          "(default 1)")
    chk.add_argument("--max-requests", type=int, metavar="N",
                     help="decode only the first N requests")
    chk.add_argument("--max-output", type=int, metavar="N",
                     help="cut every recorded output to N tokens")
    _add_torch_flags(chk, threads="use what calibrate used")
    chk.add_argument("--json", metavar="PATH", help="write the rows, table and config as JSON")
    chk.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                     help="progress bar on stderr (default: when stderr is a terminal)")
    return ap


def _cost_model(args: argparse.Namespace) -> CostTable | CostModel | None:
    """The cost given on the command line: a table (--cost-table), a flat model (--decode-ms,
    --verify-ms) or a linear one (--step-ms, --token-ms); None without any."""
    given = {k: getattr(args, k) for k in ("decode_ms", "verify_ms", "step_ms", "token_ms")
             if getattr(args, k) is not None}
    if args.draft_ms is not None and (args.draft_ms != args.draft_ms or args.draft_ms < 0
                                      or args.draft_ms == float("inf")):
        raise ValueError(f"--draft-ms must be a finite number of milliseconds >= 0, got "
                         f"{args.draft_ms}")
    if args.cost_table is not None:
        if given:
            raise ValueError("give either --cost-table or a model (--decode-ms/--verify-ms, "
                             "--step-ms/--token-ms), not both")
        return CostTable.read(args.cost_table, extrapolate=args.extrapolate)
    if args.extrapolate:
        raise ValueError("--extrapolate applies to --cost-table only")
    if not given:
        if args.draft_ms is not None:
            raise ValueError("--draft-ms needs a cost model: --cost-table, --decode-ms and "
                             "--verify-ms, or --step-ms and --token-ms")
        return None
    try:
        return CostModel(**given)
    except ValueError as e:
        raise ValueError(f"cost model: {e} (flags --decode-ms and --verify-ms, or --step-ms and "
                         "--token-ms)") from None


def _cost_label(cost: CostTable | CostModel, args: argparse.Namespace) -> str:
    if isinstance(cost, CostTable):
        return f"cost table {os.path.basename(args.cost_table)}"
    if cost.kind == "measured":
        return f"decode {cost.decode_ms:g} ms, verify {cost.verify_ms:g} ms at every size"
    return f"{cost.step_ms:g} ms + {cost.token_ms:g} ms per token"


def _load(args: argparse.Namespace) -> tuple[list[dict], str]:
    sources = args.streams or [embedded_streams_path()]
    rows = read_streams(sources)
    if args.limit is not None:
        if args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        rows = rows[:args.limit]
    label = ", ".join(os.path.basename(str(s)) for s in sources)
    return rows, label


def _levels(args: argparse.Namespace, n_requests: int) -> list[tuple[int, int]]:
    """(asked, run) per --concurrency level: levels above the number of requests run at that
    number (at most that many requests can ever share a step); never allocated as asked."""
    return [(c, min(c, n_requests)) for c in parse_concurrency(args.concurrency)]


# --- simulate -----------------------------------------------------------------------------


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def _config_line(cfg: NgramConfig) -> str:
    """Every set option; options beyond SGLang only where they differ from their default."""
    beyond = set(getattr(config_module, "BEYOND_SGLANG", ()))
    defaults = {f.name: f.default for f in _config_fields()}
    return " ".join(f"{k}={v}" for k, v in dataclasses.asdict(cfg).items()
                    if v is not None and not (k in beyond and v == defaults[k]))


def _decoding_line(result: SimulationResult) -> str:
    d = result.decoding
    if d["kind"] == "greedy":
        return ("decoding: greedy (no sampling fields): the accept lengths are SGLang's, "
                "exactly")
    sets = "; ".join(" ".join(f"{k}={v}" for k, v in st.items() if v is not None)
                     for st in d["settings"][:3]) + ("; ..." if len(d["settings"]) > 3 else "")
    head = (f"decoding: sampled ({sets})" if d["kind"] == "sampled" else
            f"decoding: mixed ({d['greedy']} greedy, {d['sampled']} sampled: {sets})")
    return (head + ": sampled accept lengths are one draw of their distribution, valid for "
            "serving at the recorded settings with SGLang's default thresholds")


def format_report(result: SimulationResult, *, by: str | None = None, source: str = "",
                  asked: int | None = None) -> str:
    """The readable report of one simulation (what ``ngramspec simulate`` prints first)."""
    s = result.summary
    clamp = (f" (asked {asked:,}; at most {result.concurrency} requests can share a step)"
             if asked is not None and asked != result.concurrency else "")
    lines = [f"ngramspec simulate: {s.requests} requests, {int(result.output_lens.sum()):,} "
             f"output tokens{' from ' + source if source else ''}",
             f"config: {_config_line(result.config)}",
             f"serving: concurrency {result.concurrency}{clamp}, backend {result.backend}",
             _decoding_line(result), ""]
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
    shares = ", ".join(f"{name} {_pct(count / total)}" for name, count in by_source.items())
    return f"accepted draft tokens: {shares} (of {total:,})"


def _table(cols: list[str], rows: list[list[str]]) -> list[str]:
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
        cells = [f"{asked:,}" + ("*" if asked != r.concurrency else ""),
                 f"{r.tokens_per_step:.3f}", f"{r.batch_steps:,}"]
        if p is not None:
            t, b = p.tpot_ms, p.baseline_tpot_ms
            word = "faster" if p.speed_up > 1 else "SLOWER" if p.speed_up < 1 else "same"
            cells += [f"{p.baseline_steps:,}", f"{p.speculative_tokens_per_s:,.1f}",
                      f"{p.baseline_tokens_per_s:,.1f}", f"{p.speed_up:.2f}x {word}",
                      f"{t['mean']:.2f}/{t['p50']:.2f}/{t['p90']:.2f}",
                      f"({b['mean']:.2f}/{b['p50']:.2f}/{b['p90']:.2f})"]
        rows.append(cells)
    lines = []
    if with_cost:
        draft = levels[0][2].draft_ms if levels else 0.0
        lines.append(f"predicted serving ({cost_label}; drafting {draft:.3g} ms per step; "
                     "prefill not modelled):")
    else:
        lines.append("per concurrency level (no cost given: --cost-table, or --decode-ms and "
                     "--verify-ms, for the prediction):")
    lines += _table(cols, rows)
    if any(asked != r.concurrency for asked, r, _ in levels):
        lines.append("* clamped to the number of requests")
    if with_cost:
        lines.append("tok/s: decode tokens of all requests / total time; TPOT: per request, "
                     "its decode time / its decode tokens")
        lines.append("verdict: " + verdict([p for _, _, p in levels]))
    return "\n".join(lines)


def _config_options(args: argparse.Namespace) -> dict[str, Any]:
    return {f.name: _parse_value(f.name, getattr(args, f.name), _kind(f))
            for f in _config_fields() if getattr(args, f.name) is not None}


def _base_options(args: argparse.Namespace) -> dict[str, Any]:
    """The options of --preset, then those of --config over them (flags go on top)."""
    options: dict[str, Any] = {}
    if args.preset is not None:
        if args.preset not in PRESETS:
            raise ValueError(f"--preset: unknown preset {args.preset!r}; presets: "
                             f"{', '.join(PRESETS)}")
        options.update(NgramConfig.preset_options(args.preset))
    if args.config is not None:
        from pathlib import Path
        options.update(toml_options(Path(args.config))[0])
    return options


def _layers(args: argparse.Namespace) -> str:
    given = [f"--preset {args.preset}" if args.preset else "",
             f"--config {args.config}" if args.config else ""]
    return ", then ".join([g for g in given if g] + ["flags"])


def _make_config(base: dict[str, Any], options: dict[str, Any],
                 args: argparse.Namespace) -> NgramConfig:
    try:
        return NgramConfig(**{**base, **options})
    except (TypeError, ValueError) as e:
        if args.preset is None and args.config is None:
            raise
        raise type(e)(f"{e} (settings from {_layers(args)})") from None


def _auto_costs(config: NgramConfig, cost: CostTable | CostModel | None
                ) -> CostTable | CostModel | None:
    """The cost that ``min_expected_accept auto`` sizes trees from (None otherwise)."""
    if config.min_expected_accept != "auto":
        return None
    if cost is None:
        raise ValueError("--min-expected-accept auto chooses tree sizes from step costs: give "
                         "--cost-table, or --decode-ms and --verify-ms, or --step-ms and "
                         "--token-ms")
    return cost


def _cmd_simulate(args: argparse.Namespace, out: TextIO) -> int:
    config = _make_config(_base_options(args), _config_options(args), args)
    cost = _cost_model(args)
    if args.stream or args.shard_by is not None:
        return _cmd_simulate_stream(args, config, cost, out)
    for flag, given in (("--executor", args.executor != "local"),
                        ("--jobs", args.jobs is not None), ("--address", args.address)):
        if given:
            raise ValueError(f"{flag} applies to --shard-by (shards run in parallel)")
    if args.plot and cost is None:
        raise ValueError("--plot draws the predicted speed-up: give a cost (--cost-table, or "
                         "--decode-ms and --verify-ms)")
    rows, label = _load(args)
    levels = _levels(args, len(rows))
    done: list[tuple[int, SimulationResult, ServingPrediction | None]] = []
    corpora = _corpora(args)
    for asked, c in levels:
        bar = ProgressBar(f"simulate c={c}", force=args.progress)
        try:
            result = simulate(rows, config=config, concurrency=c, backend=args.backend,
                              progress=bar, corpora=corpora, costs=_auto_costs(config, cost))
        finally:
            bar.close()
        pred = predict_serving(result, cost, draft_ms=args.draft_ms) if cost else None
        done.append((asked, result, pred))
    first = done[0][1]
    out.write(format_report(first, by=args.by, source=label, asked=done[0][0]) + "\n")
    if cost is not None or len(done) > 1:
        out.write("\n" + format_predictions(done, _cost_label(cost, args) if cost else "")
                  + "\n")
    if args.json:
        report = first.to_dict(by=args.by)
        if len(done) > 1:
            report["levels"] = [{"concurrency": asked, "run_at": r.concurrency,
                                 **r.summary.to_dict()} for asked, r, _ in done]
        if cost is not None:
            table = cost if isinstance(cost, CostTable) else None
            report["cost_table"] = {"source": _cost_label(cost, args),
                                    "points": table.points() if table else None,
                                    "extrapolate": bool(args.extrapolate)}
            report["prediction"] = [dict(p.to_dict(), concurrency=asked)
                                    for asked, _, p in done]
            report["verdict"] = verdict([p for _, _, p in done])
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f)
    if args.plot:
        _plot_concurrency({"": [(asked, p.speed_up) for asked, _, p in done]}, args.plot,
                          _cost_label(cost, args))
        out.write(f"plot written to {args.plot}\n")
    return 0


def _cmd_simulate_stream(args: argparse.Namespace, config: NgramConfig, cost: Any,
                         out: TextIO) -> int:
    """simulate --stream / --shard-by: pooled figures from requests read as they run."""
    from .simulate import pool_results, simulate_stream
    from .streams import iter_streams

    what = "--shard-by" if args.shard_by is not None else "--stream"
    for flag, given in (("--backend reference", args.backend != "numba"),
                        ("--corpus", bool(args.corpus)), ("--plot", bool(args.plot)),
                        ("a cost (--cost-table, --decode-ms, ...)", cost is not None),
                        ("--min-expected-accept auto", config.min_expected_accept == "auto")):
        if given:
            raise ValueError(f"{what} reports acceptance figures from the compiled loop: "
                             f"{flag} needs the in-memory path (leave out {what})")
    if args.limit is not None:
        if args.limit < 1:
            raise ValueError(f"--limit must be >= 1, got {args.limit}")
        if args.shard_by is not None:
            raise ValueError("--limit applies to one corpus, not to --shard-by")
    _check_executor_args(args, args.jobs)
    sources = [str(s) for s in (args.streams or [embedded_streams_path()])]
    label = ", ".join(os.path.basename(s) for s in sources)
    conc = parse_concurrency(args.concurrency)
    if args.shard_by is None:
        if args.executor != "local" or args.jobs is not None or args.address:
            raise ValueError("--executor, --jobs and --address apply to --shard-by")
        levels = []
        for c in conc:
            src: Any = sources
            if args.limit is not None:
                src = itertools.islice(iter_streams(sources), args.limit)
            bar = ProgressBar(f"simulate c={c}", force=args.progress)
            try:
                levels.append((c, simulate_stream(src, config=config, concurrency=c,
                                                  by=args.by, progress=bar)))
            finally:
                bar.close()
        shards: dict[str, list[tuple[int, Any]]] = {}
    else:
        field = args.shard_by
        values: dict[str, int] = {}
        for rec in iter_streams(sources):  # one pass: the shards, and clashing ids refused
            v = str(rec.get(field, "(missing)"))
            values[v] = values.get(v, 0) + 1
        if set(values) == {"(missing)"}:
            raise ValueError(f"--shard-by {field}: no request has that field")
        tasks = [(sources, config, c, field, v, args.by) for c in conc for v in values]
        jobs = args.jobs if args.jobs is not None else (
            None if args.executor == "ray" else os.cpu_count() or 1)
        bar = ProgressBar("shards", force=args.progress, delay=0.0)
        got: dict[int, Any] = {}
        failed = []
        try:
            with make_executor(args.executor, jobs=jobs, address=args.address) as ex:
                for oc in ex.run(_run_shard, tasks):
                    if oc.error is not None:
                        failed.append(f"shard {field}={tasks[oc.index][4]} at concurrency "
                                      f"{tasks[oc.index][2]}: {oc.error}")
                    else:
                        got[oc.index] = oc.value
                    bar(len(got) + len(failed), len(tasks))
        finally:
            bar.close()
        if failed:
            raise ValueError("; ".join(failed))
        shards = {}
        levels = []
        for j, c in enumerate(conc):
            per = [(v, got[j * len(values) + k]) for k, v in enumerate(values)]
            shards[str(c)] = per
            levels.append((c, pool_results([r for _, r in per])))
        label += f", {len(values)} shards by {field}"
    for c, pooled in levels:
        s = pooled.summary
        out.write(f"ngramspec simulate (streamed): {s.requests:,} requests, "
                  f"{pooled.output_tokens:,} output tokens from {label}\n"
                  f"config: {_config_line(config)}\nserving: concurrency {pooled.concurrency}"
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
        out.write("\n".join(_table(cols, [[n, f"{x.requests:,}", f"{x.verify_steps:,}",
                                             f"{x.tokens_per_step:.3f}",
                                             f"{x.draft_nodes_per_step:.2f}",
                                             _pct(x.share_steps_with_draft)]
                                            for n, x in rows])) + "\n")
        out.write(f"replay took {pooled.wall_seconds:.2f} s "
                  f"({pooled.output_tokens_per_second:,.0f} output tokens/s"
                  f"{', summed over shards' if args.shard_by else ''})\n\n")
    if args.json:
        report: dict[str, Any] = {"levels": []}
        for c, pooled in levels:
            entry = {"concurrency": c, **pooled.to_dict()}
            if args.shard_by is not None:
                entry["shard_by"] = args.shard_by
                entry["shards"] = {v: r.to_dict() for v, r in shards[str(c)]}
            report["levels"].append(entry)
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(report, f)
    return 0


def _run_shard(task: tuple, shared: Any) -> Any:
    """One shard at one concurrency level, in a worker."""
    from .simulate import simulate_stream

    sources, config, c, field, value, by = task
    return simulate_stream(sources, config=config, concurrency=c, by=by, where=(field, value))


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
        try:
            tokenizer = AutoTokenizer.from_pretrained(args.tokenizer, local_files_only=True)
        except (OSError, ValueError) as e:
            raise ValueError(f"--tokenizer {args.tokenizer}: no tokenizer could be loaded "
                             f"from there ({e})") from None
    return {path: read_corpus(path, tokenizer=tokenizer) for path in args.corpus}


def _plot_concurrency(lines: dict[str, list[tuple[int, float]]], path: str,
                      cost_label: str) -> None:
    """Predicted speed-up against concurrency, one line per config."""
    plt = _pyplot()
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


def _pyplot():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'ngramspec[plot]'") from None
    return plt


# --- sweep --------------------------------------------------------------------------------

def _run_one(job: tuple, parts: dict[str, list[dict]]) -> dict:
    """One sweep setting, in a worker: the results record (see executors.RESULT_FIELDS)."""
    options, asked, concurrency, backend, cost, draft_ms, base, part, by, sweep = job
    config = NgramConfig(**{**base, **options})
    r = simulate(parts[part], config=config, concurrency=concurrency, backend=backend,
                 costs=_auto_costs(config, cost))
    s = r.summary
    out = dict(schema_version=SCHEMA_VERSION, **versions(), sweep=sweep,
               key=_job_key(options, asked, part), part=part, concurrency=asked,
               run_concurrency=r.concurrency, options=options,
               config=dataclasses.asdict(r.config), match_type=r.config.match_type,
               draft_token_num=r.config.draft_token_num, backend=backend,
               requests=s.requests, verify_steps=s.verify_steps,
               emitted_tokens=s.emitted_tokens, batch_steps=r.batch_steps,
               tokens_per_step=s.tokens_per_step, acceptance_by_depth=s.acceptance_by_depth,
               draft_nodes_per_step=s.draft_nodes_per_step,
               share_steps_with_draft=s.share_steps_with_draft, speedup=None,
               speculative_tokens_per_s=None, baseline_tokens_per_s=None, prediction=None,
               group_by=by, groups=None if by is None else
               {k: v.to_dict() for k, v in r.by(by).items()},
               draft_ms_per_step=r.draft_ms_per_step, wall_seconds=r.wall_seconds,
               task_seconds=None, finished_at=None)
    if cost is not None:
        # Predicted in the worker: the per-request step counts need not travel back.
        p = predict_serving(r, cost, draft_ms=draft_ms)
        out.update(prediction=dict(p.to_dict(), concurrency=asked), speedup=p.speed_up,
                   speculative_tokens_per_s=p.speculative_tokens_per_s,
                   baseline_tokens_per_s=p.baseline_tokens_per_s)
    return out


def _job_key(options: dict, asked: int, part: str) -> str:
    return json.dumps({"options": options, "concurrency": asked, "part": part},
                      sort_keys=True, separators=(",", ":"))


def _streams_digest(parts: dict[str, list[dict]]) -> str:
    """Identifies the requests of a sweep (ids and lengths) for its results file."""
    h = zlib.crc32(b"")
    for part, rows in parts.items():
        for r in rows:
            h = zlib.crc32(json.dumps([part, r["id"], len(r["prompt_ids"]),
                                      len(r["output_ids"])]).encode("utf-8"), h)
    return f"{h:08x}"


def holdout_split(rows: list[dict], *, fraction: float | None = None,
                  by: str | None = None) -> tuple[list[dict], list[dict], str]:
    """Split requests into a tuning part and a hold-out part, deterministically.

    ``fraction``: the ``round(fraction * n)`` requests with the smallest CRC-32 of their id
    (as JSON text; ties by position) are held out, so the split depends on the ids alone,
    not on the file order or on the other requests.  ``by="FIELD=V1,V2"``: the requests whose
    ``str(record[FIELD])`` is one of the values are held out (a split by tenant, day, ...).
    Both parts keep file order; each is replayed from an empty cache.  Returns
    ``(tune, holdout, description)``.

    Examples
    --------
    >>> rows = [{"id": i, "day": "mon" if i < 3 else "tue"} for i in range(5)]
    >>> tune, hold, what = holdout_split(rows, by="day=tue")
    >>> [r["id"] for r in tune], [r["id"] for r in hold], what
    ([0, 1, 2], [3, 4], 'day in {tue}: 2 of 5 requests')
    """
    n = len(rows)
    if (fraction is None) == (by is None):
        raise ValueError("give one of --holdout FRACTION and --holdout-by FIELD=VALUE")
    if fraction is not None:
        if not 0 < fraction < 1:
            raise ValueError(f"--holdout must be a fraction strictly between 0 and 1, got "
                             f"{fraction}")
        k = round(fraction * n)
        if not 1 <= k <= n - 1:
            left = "no" if k < 1 else "every"
            raise ValueError(f"--holdout {fraction} of {n} requests leaves {left} request held "
                             "out; both parts need at least one")
        order = sorted(range(n), key=lambda i: (zlib.crc32(
            json.dumps(rows[i]["id"]).encode("utf-8")), i))
        held = set(order[:k])
        what = f"{fraction:g} of the requests by a hash of their id: {k} of {n}"
    else:
        assert by is not None
        field, sep, values = by.partition("=")
        field = field.strip()
        wanted = {v.strip() for v in values.split(",")}
        if not sep or not field or "" in wanted:
            raise ValueError(f"--holdout-by must be FIELD=VALUE[,VALUE...], got {by!r}")
        if not any(field in r for r in rows):
            raise ValueError(f"--holdout-by: no request has the field {field!r}")
        held = {i for i, r in enumerate(rows) if field in r and str(r[field]) in wanted}
        if not held:
            seen = sorted({str(r[field]) for r in rows if field in r})
            raise ValueError(f"--holdout-by: no request has {field} in "
                             f"{{{', '.join(sorted(wanted))}}}; its values: "
                             f"{', '.join(seen[:10])}{' ...' if len(seen) > 10 else ''}")
        if len(held) == n:
            raise ValueError(f"--holdout-by {by}: every request would be held out; nothing is "
                             "left to rank on")
        what = f"{field} in {{{', '.join(sorted(wanted))}}}: {len(held)} of {n} requests"
    tune = [r for i, r in enumerate(rows) if i not in held]
    hold = [r for i, r in enumerate(rows) if i in held]
    return tune, hold, what


def _parse_list(name: str, text: str, kind: Any) -> list:
    items = text.split(",")
    if any(not i.strip() for i in items):
        raise ValueError(f"{_flag(name)}: empty item in {text!r}")
    return [_parse_value(name, i, kind) for i in items]


def _grid(args: argparse.Namespace, base: dict[str, Any]) -> list[dict]:
    axes: dict[str, list] = {}
    for f in _config_fields():
        text = getattr(args, f.name)
        if text is not None:
            axes[f.name] = _parse_list(f.name, text, _kind(f))
    grid = []
    for combo in itertools.product(*axes.values()):
        options = dict(zip(axes, combo))
        cfg = _make_config(base, options, args)  # validate every point before running any
        if args.best_as == "sglang":
            try:
                cfg.to_sglang_args()
            except ValueError as e:
                raise ValueError(f"--best-as sglang: {e} (in the setting "
                                 f"{_options_label(options, []) if options else 'given'})"
                                 ) from None
        grid.append(options)
    return grid


def _options_label(options: dict, rows: list[dict]) -> str:
    if not rows:
        return ", ".join(f"{k}={v}" for k, v in options.items())
    varied = [k for k in sorted({k for r in rows for k in r["options"]})
              if len({r["options"].get(k) for r in rows}) > 1]
    return ", ".join(f"{k}={options.get(k)}" for k in varied) or "default settings"


def _plot(rows: list[dict], path: str, with_cost: bool, cost_label: str = "") -> None:
    plt = _pyplot()
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


def _check_executor_args(args: argparse.Namespace, jobs: int | None) -> None:
    """--jobs and --address, checked before any work (sweep and simulate --shard-by)."""
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if args.address is not None and args.executor != "ray":
        raise ValueError("--address names a Ray cluster: it needs --executor ray")


def _cmd_sweep(args: argparse.Namespace, out: TextIO) -> int:
    jobs = args.jobs if args.jobs is not None else (
        None if args.executor == "ray" else os.cpu_count() or 1)
    _check_executor_args(args, jobs)
    if args.retries < 0:
        raise ValueError(f"--retries must be >= 0, got {args.retries}")
    if args.top is not None and args.top < 1:
        raise ValueError(f"--top must be >= 1, got {args.top}")
    if args.holdout is not None and args.holdout_by is not None:
        raise ValueError("give --holdout or --holdout-by, not both")
    if args.resume and not args.out:
        raise ValueError("--resume continues a results file: give it with --out")
    cost = _cost_model(args)
    base = _base_options(args)
    grid = _grid(args, base)
    conc = parse_concurrency(args.concurrency)
    all_rows, label = _load(args)
    if args.by is not None and not any(args.by in r for r in all_rows):
        fields = sorted({k for r in all_rows for k in r} - {"prompt_ids", "output_ids"})
        raise ValueError(f"--by {args.by}: no request has that field; fields: "
                         f"{', '.join(fields)}")
    holdout = args.holdout is not None or args.holdout_by is not None
    if holdout:
        rows, held, split = holdout_split(all_rows, fraction=args.holdout, by=args.holdout_by)
        parts = {"tune": rows, "holdout": held}
    else:
        rows, held, split = all_rows, [], ""
        parts = {"all": rows}
    levels = [(c, min(c, len(rows))) for c in conc]
    sweep = fingerprint({"streams": _streams_digest(parts), "base": base,
                         "backend": args.backend, "draft_ms": args.draft_ms, "by": args.by,
                         "cost": _cost_fingerprint(cost), "holdout": split})
    jobs_list = [(options, asked, min(asked, len(part_rows)), args.backend, cost,
                  args.draft_ms, base, part, args.by, sweep)
                 for part, part_rows in parts.items() for options in grid for asked in conc]
    keys = [_job_key(j[0], j[1], j[7]) for j in jobs_list]
    results_file = ResultsFile(args.out, sweep=sweep, resume=args.resume) if args.out else None
    have = results_file.keys() if results_file is not None else set()
    todo = [i for i, k in enumerate(keys) if k not in have]
    if results_file is not None and have:
        out.write(f"resuming {args.out}: {len(keys) - len(todo)} of {len(keys)} settings "
                  "already there\n")
    bar = ProgressBar("sweep", force=args.progress, delay=0.0)
    done: dict[str, dict] = {}
    failed: list[tuple[int, str]] = []
    t0 = time.perf_counter()
    try:
        if todo:
            bar(len(keys) - len(todo), len(keys))
            if args.executor == "local" and (jobs or 1) > 1 and len(todo) > 1 and \
                    args.backend == "numba":
                _warm_kernels(base, jobs_list[todo[0]][0])
            with make_executor(args.executor, jobs=jobs, address=args.address,
                               retries=args.retries) as ex:
                finished = len(keys) - len(todo)
                for oc in ex.run(_run_one, [jobs_list[i] for i in todo], shared=parts):
                    finished += 1
                    i = todo[oc.index]
                    if oc.error is not None:
                        failed.append((i, oc.error))
                        bar.clear()
                        print(f"ngramspec: setting failed: "
                              f"{_options_label(jobs_list[i][0], []) or 'default settings'}"
                              f"{_part_label(jobs_list[i], conc, holdout)}: {oc.error}",
                              file=sys.stderr)
                    else:
                        rec = dict(oc.value, task_seconds=oc.seconds,
                                   finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                             time.gmtime()))
                        if results_file is not None:
                            results_file.append(rec)
                        done[rec["key"]] = rec
                    bar(finished, len(keys))
    finally:
        bar.close()
    if results_file is not None:  # the table is built from the file
        done = {r["key"]: r for r in results_file.records()}
    ordered = [done[k] for k in keys if k in done]
    if not any(r["part"] != "holdout" for r in ordered):
        raise ValueError(f"every setting failed ({len(failed)}); nothing to rank")
    key = "speedup" if cost is not None else "tokens_per_step"
    results = [r for r in ordered if r["part"] != "holdout"]
    if holdout:
        # Each hold-out figure beside the same setting's tuning figure.
        for r in results:
            h = done.get(_job_key(r["options"], r["concurrency"], "holdout"))
            r["holdout"] = ({k: v for k, v in h.items() if k not in ("options", "concurrency")}
                            if h is not None else {"tokens_per_step": float("nan"),
                                                   "speedup": float("nan")})
    by_config: dict[str, list[dict]] = {}
    for r in results:
        by_config.setdefault(_options_label(r["options"], results), []).append(r)
    results.sort(key=lambda r: -r[key])
    shown = results[:args.top] if args.top else results
    names = sorted({k for r in results for k in r["options"]})
    if len(conc) > 1:
        names.append("concurrency")
    ranked_on = (f"ranked on {len(rows)} of {len(all_rows)} requests from {label} "
                 f"(hold-out: {split})" if holdout else
                 f"on {len(rows)} requests from {label}")
    out.write(f"ngramspec sweep: {len(results)} settings {ranked_on} "
              f"({time.perf_counter() - t0:.1f} s, {_executor_label(args, jobs)}); ranked by "
              f"{'predicted speed-up' if cost else 'tokens per verify step'}\n\n")
    cols = ["rank"] + names + ["tokens/step"] + (["hold-out tokens/step"] if holdout else []) + [
        "drafts/step", "steps with a draft"]
    if cost is not None:
        cols += ["speed-up"] + (["hold-out speed-up"] if holdout else []) + [
            "tok/s with", "tok/s without"]
    table = []
    for i, r in enumerate(shown, 1):
        cells = [str(i)] + [str(r["options"].get(n, r.get(n, "-"))) for n in names]
        cells += [f"{r['tokens_per_step']:.3f}"]
        if holdout:
            cells += [f"{r['holdout']['tokens_per_step']:.3f}"]
        cells += [f"{r['draft_nodes_per_step']:.2f}", _pct(r["share_steps_with_draft"])]
        if cost is not None:
            cells += [f"{r['speedup']:.2f}x"]
            if holdout:
                cells += [f"{r['holdout']['speedup']:.2f}x"]
            cells += [f"{r['speculative_tokens_per_s']:,.1f}",
                      f"{r['baseline_tokens_per_s']:,.1f}"]
        table.append(cells)
    out.write("\n".join(_table(cols, table)) + "\n")
    if holdout:
        best = results[0]
        on_hold = sorted(results, key=lambda r: -r["holdout"][key])
        rank = next(i for i, r in enumerate(on_hold, 1) if r is best)
        what = "speed-up" if cost is not None else "tokens/step"
        fmt = (lambda x: f"{x:.2f}x") if cost is not None else (lambda x: f"{x:.3f}")
        out.write(f"winner on the tuning part ({len(rows)} requests): "
                  f"{_options_label(best['options'], results)}"
                  f"{' at concurrency ' + str(best['concurrency']) if len(conc) > 1 else ''}; "
                  f"on the hold-out part ({len(held)} requests) its {what} is "
                  f"{fmt(best['holdout'][key])} (tuning: {fmt(best[key])}), rank {rank} of "
                  f"{len(results)} there\n")
    if any(asked != c for asked, c in levels):
        out.write(f"(concurrency above {len(rows)} requests runs at {len(rows)})\n")
    if cost is not None:
        out.write(f"\ncost: {_cost_label(cost, args)}; speed-up = baseline time / speculative "
                  "time of the whole run at that concurrency (prefill not modelled)\n")
        if len(conc) > 1:
            ranked = sorted(by_config.items(), key=lambda kv: -max(r["speedup"] for r in kv[1]))
            out.write("verdicts (best configs first):\n")
            for name, rs in ranked[:args.top or 10]:
                preds = [ServingPrediction(r["concurrency"], 0, 0, 1.0, r["speedup"],
                                           r["speedup"], 0, 0.0) for r in rs]
                out.write(f"  {name}: {verdict(preds)}\n")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"cost_model": dataclasses.asdict(cost) if isinstance(cost, CostModel)
                       else None,
                       "cost_table": cost.points() if isinstance(cost, CostTable) else None,
                       "base": base, "holdout": split or None,
                       "results": results}, f)
    if args.plot:
        label = _cost_label(cost, args) if cost is not None else ""
        if len(conc) > 1 and cost is not None:
            _plot_concurrency({name: [(r["concurrency"], r["speedup"]) for r in rs]
                               for name, rs in by_config.items()}, args.plot, label)
        else:
            _plot(results, args.plot, cost is not None, label)
        out.write(f"plot written to {args.plot}\n")
    if args.best_as is not None:
        best_cfg = NgramConfig(**{**base, **results[0]["options"]})
        if args.best_as == "toml":
            out.write("\nbest setting as TOML (save it and pass --config FILE):\n"
                      + best_cfg.to_toml())
        else:
            out.write("\nbest setting as SGLang server flags:\n"
                      + sglang_flags(best_cfg.to_sglang_args()) + "\n")
    if results_file is not None:
        out.write(f"results in {args.out} ({len(done)} settings)\n")
    if failed:
        out.write(f"\n{len(failed)} of {len(keys)} settings failed (not ranked; errors on "
                  f"stderr{'; --resume runs them again' if results_file is not None else ''})\n")
        return 1
    return 0


def _warm_kernels(base: dict[str, Any], options: dict[str, Any]) -> None:
    """Load the compiled replay here, before the worker processes are forked from this one:
    they inherit it instead of each loading it again (a second or so per worker)."""
    rows = [{"id": 0, "prompt_ids": [1, 2], "output_ids": [1, 2, 3]}]
    simulate(rows, config=NgramConfig(**{**base, **options, "capacity": 64}))


def _part_label(job: tuple, conc: list[int], holdout: bool) -> str:
    extra = [f"concurrency {job[1]}"] if len(conc) > 1 else []
    extra += [f"{job[7]} part"] if holdout else []
    return f" ({', '.join(extra)})" if extra else ""


def _executor_label(args: argparse.Namespace, jobs: int | None) -> str:
    if args.executor == "ray":
        return f"Ray at {args.address}" if args.address else (
            f"local Ray cluster, {jobs} CPUs" if jobs else "local Ray cluster")
    return f"{jobs} jobs"


def _cost_fingerprint(cost: CostTable | CostModel | None) -> Any:
    if cost is None:
        return None
    if isinstance(cost, CostTable):
        return cost.points()
    return dataclasses.asdict(cost)


def sglang_flags(args: dict[str, Any]) -> str:
    """SGLang server arguments (``NgramConfig.to_sglang_args()``) as one command-line string.

    Examples
    --------
    >>> sglang_flags(NgramConfig(max_bfs_breadth=8).to_sglang_args())[:60]
    '--speculative-algorithm NGRAM --speculative-ngram-max-trie-d'
    """
    return " ".join(f"--{k.replace('_', '-')} {v}" for k, v in args.items())


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
    args = _parser().parse_args(argv)
    out = stdout or sys.stdout
    try:
        if args.command == "simulate":
            return _cmd_simulate(args, out)
        if args.command == "calibrate":
            return _cmd_calibrate(args, out)
        if args.command == "check":
            return _cmd_check(args, out)
        if args.command == "streams":
            return _cmd_streams_import(args, out)
        return _cmd_sweep(args, out)
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


def _write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it: never half a
    file."""
    import tempfile

    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".ngramspec-", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _check_out_dir(flag: str, path: str) -> None:
    """Before a long run: the folder a result goes to exists."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{flag} {path}: no such directory {folder!r}")


def _cmd_calibrate(args: argparse.Namespace, out: TextIO) -> int:
    from .calibrate import measure

    batch = parse_concurrency(args.batch, flag="--batch")
    tokens = parse_concurrency(args.tokens, flag="--tokens")
    for name, v in (("--context", args.context), ("--repeats", args.repeats)):
        if v < 1:
            raise ValueError(f"{name} must be >= 1, got {v}")
    if args.warmup < 0:
        raise ValueError(f"--warmup must be >= 0, got {args.warmup}")
    _check_out_dir("--out", args.out)
    bar = ProgressBar("calibrate", force=args.progress, delay=0.0)
    try:
        points = measure(args.model, batch=batch, tokens=tokens, context=args.context,
                          repeats=args.repeats, warmup=args.warmup, device=args.device,
                          dtype=args.dtype, seed=args.seed, threads=args.threads,
                          timing=args.timing, progress=bar)
    finally:
        bar.close()
    table = CostTable([p[:3] for p in points], source=f"calibrated {args.model}")
    _write_atomic(args.out, table.to_csv())
    if points.failed:
        shown = "; ".join(f"batch {b}, tokens {n}: {why}" for b, n, why in points.failed[:3])
        more = f" and {len(points.failed) - 3} more" if len(points.failed) > 3 else ""
        gone = [f"batch {', '.join(map(str, points.left_out[k]))}" if k == "batch" else
                f"tokens {', '.join(map(str, points.left_out[k]))}"
                for k in ("batch", "tokens") if points.left_out[k]]
        out.write(f"warning: {len(points.failed)} point(s) failed ({shown}{more}); the table "
                  f"leaves out {' and '.join(gone) or 'nothing'}\n")
    out.write(f"cost table for {args.model} on {args.device} (context {args.context} tokens, "
              f"{args.timing} timing, median of {args.repeats}), written to {args.out}:\n")
    cols = ["batch \\ tokens"] + [str(int(n)) for n in table.tokens]
    rows = [[str(int(b))] + [f"{table.grid[i, j]:.3f}" for j in range(table.tokens.size)]
            for i, b in enumerate(table.batches)]
    out.write("\n".join(_table(cols, rows)) + "\n")
    noisy = [(b, n, lo, hi) for b, n, _, lo, hi in points if hi > 1.5 * lo]
    if noisy:
        b, n, lo, hi = max(noisy, key=lambda p: p[3] / p[2])
        out.write(f"warning: noisy timings at {len(noisy)} of {len(points)} points (e.g. batch "
                  f"{b}, tokens {n}: {lo:.3g} to {hi:.3g} ms); other work on this machine? "
                  "try --threads 1 or more --repeats\n")
    if points.drift is not None:
        b, n, first, last = points.drift
        spread = 100 * points.spread
        out.write(f"steadiness: batch {b}, tokens {n} measured again at the end: {first:.3f} "
                  f"then {last:.3f} ms ({spread:+.1f}%)\n")
        if abs(spread) > 10:
            out.write(f"warning: timings drifted {spread:+.1f}% during the run; other work on "
                      "this machine? try --threads 1, or measure again\n")
    out.write(f"use it: ngramspec simulate --cost-table {args.out} --concurrency "
              f"{','.join(str(int(b)) for b in table.batches)}\n"
              f"check it: ngramspec check {args.model} STREAMS --cost-table {args.out} "
              "--concurrency 1,4\n")
    return 0


def _cmd_check(args: argparse.Namespace, out: TextIO) -> int:
    from .check import TOLERANCE, check_against_model

    levels = parse_concurrency(args.concurrency)
    for flag, v in (("--max-requests", args.max_requests), ("--max-output", args.max_output),
                    ("--threads", args.threads)):
        if v is not None and v < 1:
            raise ValueError(f"{flag} must be >= 1, got {v}")
    config = _make_config(_base_options(args), _config_options(args), args)
    if args.json:
        _check_out_dir("--json", args.json)
    if not os.path.isdir(args.model):
        raise ValueError(f"MODEL_DIR {args.model!r}: no such directory (a local transformers "
                         "model directory, with config.json and weights)")
    table = CostTable.read(args.cost_table, extrapolate=args.extrapolate)
    rows = read_streams(args.streams)
    bar = ProgressBar("check", force=args.progress, delay=0.0)
    try:
        report = check_against_model(
            args.model, rows, cost_table=table, config=config, concurrency=levels,
            device=args.device, dtype=args.dtype, threads=args.threads,
            max_requests=args.max_requests, max_output=args.max_output, progress=bar)
    finally:
        bar.close()
    out.write(f"{report.requests} requests from "
              f"{', '.join(os.path.basename(s) for s in args.streams)} on {args.model} "
              f"({report.device}), teacher-forced; prediction from cost table "
              f"{os.path.basename(args.cost_table)}\nconfig: {_config_line(config)}\n")
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
                      f"{r.predicted_speed_up:.2f}x", f"{r.realised_speed_up:.2f}x",
                      f"{r.ratio:.2f}", flag])
    if not any(line[-1] for line in lines):  # no flags: no empty column
        cols, lines = cols[:-1], [line[:-1] for line in lines]
    out.write("\n".join(_table(cols, lines)) + "\n")
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
        _write_atomic(args.json, json.dumps(report.to_dict()))
        out.write(f"report written to {args.json}\n")
    return 0


def _cmd_streams_import(args: argparse.Namespace, out: TextIO) -> int:
    from .importers import FORMATS, import_streams, load_chat_tokenizer

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
        tokenizer = load_chat_tokenizer(args.tokenizer, chat_template=template)
    elif args.tokenizer is not None or args.chat_template is not None:
        raise ValueError("--format token-ids reads token ids: --tokenizer and --chat-template "
                         "do not apply")
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
