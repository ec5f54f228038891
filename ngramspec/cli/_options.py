"""Reading the command line: flags shared by several commands and what they turn into
(configurations, costs, requests).  Every error names its flag."""

from __future__ import annotations

import argparse
import os
import tempfile
from typing import Any

import numpy as np

from ..config.flags import (add_config_flags, base_options, config_fields, config_options,  # noqa: F401
                            flag, kind_of, make_config, parse_list, parse_value, preset_of)
from ..costs import ENGINE_NAMES, ENGINES, CostModel, CostTable, parse_concurrency
from ..costs.table import add_cost_table_flags, read_cost_table  # noqa: F401
from ..costs.engines import check_engine_config
from ..streams import embedded_streams_path, read_streams

Cost = CostTable | CostModel


# --- flags --------------------------------------------------------------------------------


def add_common(p: argparse.ArgumentParser, *, grid: bool) -> None:
    """The flags simulate and sweep share: streams, settings, serving, cost, output."""
    p.add_argument("streams", nargs="*", metavar="STREAMS",
                   help="recorded streams: .jsonl, .jsonl.gz or .parquet files with fields id, "
                        "prompt_ids, output_ids (default: the corpus shipped with ngramspec)")
    add_config_flags(p, grid=grid)
    s = p.add_argument_group("serving")
    s.add_argument("--concurrency", default="1", metavar="LIST",
                   help="requests decoded together; a comma list (e.g. 1,4,16,48) predicts "
                        "each level (default 1; levels above the number of requests are "
                        "clamped to it)")
    s.add_argument("--backend", default="numba", choices=["numba", "reference"],
                   help="numba: the compiled loop (default); reference: pure Python, slow")
    s.add_argument("--limit", type=int, metavar="N", help="replay only the first N requests")
    c = p.add_argument_group("cost (milliseconds): a measured table, or a flat or linear model")
    add_cost_table_flags(c)
    c.add_argument("--decode-ms", type=float,
                   help="flat model: one plain decode step, at every batch size")
    c.add_argument("--verify-ms", type=float,
                   help="flat model: one verify step (any tree size), at every batch size")
    c.add_argument("--step-ms", type=float, help="linear model: fixed time per forward")
    c.add_argument("--token-ms", type=float,
                   help="linear model: time per query token in a forward (batch x tokens)")
    add_engine(c)
    c.add_argument("--draft-ms", type=float,
                   help="drafting time per serving step (default: what the --engine pays, "
                        "timed on these streams; 0 excludes it)")
    o = p.add_argument_group("output")
    o.add_argument("--json", metavar="PATH", help="write the full report as JSON")
    add_progress(o)


def add_engine(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    """--engine: which serving engine's rule prices a step (ngramspec.costs.engines)."""
    p.add_argument("--engine", choices=ENGINE_NAMES, default="custom",
                   help="the engine you deploy, priced by its rule: custom (a loop of your "
                        "own: real ADAPTIVE trees, a plain decode where nothing is drafted; "
                        "the default), sglang (SGLang's NGRAM worker: draft_token_num slots "
                        "per request at every step, its drafter's calls timed) or vllm (vLLM: "
                        "chains only, each request its own draft + 1 tokens, no padding; "
                        "--profile vllm-0.33 or --chain true)")


def add_progress(p: argparse.ArgumentParser | argparse._ArgumentGroup) -> None:
    p.add_argument("--progress", action=argparse.BooleanOptionalAction, default=None,
                   help="progress bar on stderr (default: when stderr is a terminal)")


def add_model(p: argparse.ArgumentParser) -> None:
    """MODEL_DIR of the commands that run a transformers model."""
    p.add_argument("model", metavar="MODEL_DIR", help="a local transformers model directory")


def add_torch_flags(p: argparse.ArgumentParser, *, threads: str) -> None:
    """--device, --dtype and --threads of the commands that run a transformers model."""
    p.add_argument("--device", default="cpu", help="torch device (default cpu; e.g. cuda)")
    p.add_argument("--dtype", default=None,
                   help="torch dtype (float32, bfloat16, float16, float64; default: the "
                        "model's)")
    p.add_argument("--threads", type=int, metavar="N", help=f"CPU threads for torch ({threads})")


# --- what the flags turn into -------------------------------------------------------------


def cost_model(args: argparse.Namespace) -> Cost | None:
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
        return read_cost_table(args)
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


def check_engine(args: argparse.Namespace, cost: Cost | None, config: Any = None) -> None:
    """--engine prices steps: anything but the default needs a cost, and a configuration the
    engine can serve (vLLM verifies chains only)."""
    if config is not None:
        check_engine_config(ENGINES[args.engine], config)
    if args.engine != "custom" and cost is None:
        raise ValueError(f"--engine {args.engine} prices the steps as that engine runs them: "
                         "give a cost (--cost-table, or --step-ms and --token-ms, or "
                         "--decode-ms and --verify-ms)")


def cost_label(cost: Cost, args: argparse.Namespace) -> str:
    if isinstance(cost, CostTable):
        return f"cost table {os.path.basename(args.cost_table)}"
    if cost.kind == "measured":
        return f"decode {cost.decode_ms:g} ms, verify {cost.verify_ms:g} ms at every size"
    return f"{cost.step_ms:g} ms + {cost.token_ms:g} ms per token"


def check_limit(args: argparse.Namespace) -> None:
    if args.limit is not None and args.limit < 1:
        raise ValueError(f"--limit must be >= 1, got {args.limit}")


def load(args: argparse.Namespace) -> tuple[list[dict], str]:
    """The requests of STREAMS (default: the shipped corpus), cut at --limit, and a label."""
    sources = args.streams or [embedded_streams_path()]
    rows = read_streams(sources)
    if args.limit is not None:
        check_limit(args)
        rows = rows[:args.limit]
    label = ", ".join(os.path.basename(str(s)) for s in sources)
    return rows, label


def levels(args: argparse.Namespace, n_requests: int) -> list[tuple[int, int]]:
    """(asked, run) per --concurrency level: levels above the number of requests run at that
    number (at most that many requests can ever share a step); never allocated as asked."""
    return [(c, min(c, n_requests)) for c in parse_concurrency(args.concurrency)]


def default_jobs(args: argparse.Namespace) -> int | None:
    """--jobs, or by default: every CPU for local processes, Ray's own choice for Ray."""
    return args.jobs if args.jobs is not None else (
        None if args.executor == "ray" else os.cpu_count() or 1)


def check_executor_args(args: argparse.Namespace, jobs: int | None) -> None:
    """--jobs and --address, checked before any work (sweep and simulate --shard-by)."""
    if jobs is not None and jobs < 1:
        raise ValueError(f"--jobs must be >= 1, got {jobs}")
    if args.address is not None and args.executor != "ray":
        raise ValueError("--address names a Ray cluster: it needs --executor ray")


def check_out_dir(flag_: str, path: str) -> None:
    """Before a long run: the folder a result goes to exists."""
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise ValueError(f"{flag_} {path}: no such directory {folder!r}")


def check_out_file(flag_: str, path: str) -> None:
    """Before any work: a file can be written at ``path`` (not a directory, its folder exists
    and takes new files)."""
    if os.path.isdir(path):
        raise ValueError(f"{flag_} {path}: is a directory; give a file name")
    check_out_dir(flag_, path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.access(folder, os.W_OK | os.X_OK) or (os.path.exists(path)
                                                   and not os.access(path, os.W_OK)):
        raise ValueError(f"{flag_} {path}: cannot be written (permission denied)")


def check_in_files(flag_: str, paths: list[str]) -> None:
    """Before any work: every file given with ``flag_`` exists and can be read."""
    for path in paths:
        if not os.path.exists(path):
            raise ValueError(f"{flag_} {path}: no such file")
        if os.path.isdir(path):
            raise ValueError(f"{flag_} {path}: is a directory, not a file")
        try:
            with open(path, "rb"):
                pass
        except OSError as e:
            raise ValueError(f"{flag_} {path}: cannot be read ({e.strerror or e})") from None


def check_cost_covers(cost: Cost | None, needs: list[tuple[int, int]]) -> None:
    """Before any run: --cost-table covers every forward the runs can price, each need
    ``(concurrency run, draft_token_num)`` asking for batch 1..concurrency and tokens
    1..draft_token_num (the same error, naming the point, as a run would raise)."""
    if not isinstance(cost, CostTable) or not needs:
        return
    batch = max(b for b, _ in needs)
    tokens = max(n for _, n in needs)
    try:
        cost.ms_array(np.array([1, 1, batch, batch]), np.array([1, tokens, 1, tokens]))
    except ValueError as e:
        raise type(e)(f"{e}; the settings asked for need batch 1..{batch} (--concurrency, "
                      f"clamped to the requests) and tokens 1..{tokens} (--draft-token-num)"
                      ) from None


def write_atomic(path: str, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file renamed over it: never half a
    file."""
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
