"""Switching ngramspec's drafter on in SGLang 0.5.23's server: the one module that imports
SGLang, and only inside its functions.

``ngramspec sglang-launch --preset recommended -- --model-path M ...`` (or ``python -m
ngramspec.integrations.sglang_launch ...``) resolves the configuration as every ngramspec
command does (:mod:`ngramspec.config.flags`), adds the server
arguments that :meth:`~ngramspec.NgramConfig.to_sglang_args` gives with ``plugin=True``,
hands the configuration to every process of the server in the environment variable
:data:`ENV_CONFIG` (TOML text) and runs ``sglang.launch_server``.  The scheduler runs in a
spawned process, so the switch happens there: SGLang's ``run_scheduler_process`` is replaced
by :func:`run_scheduler_process` (a module-level function, so the spawned process finds it by
name), which calls :func:`install` and then SGLang's own.  SGLang's plugin entry point
(group ``sglang.srt.plugins``, name ``ngramspec``, value
``ngramspec.integrations.sglang_launch:plugin``) does the same for servers started any other
way, whenever :data:`ENV_CONFIG` is set: SGLang's scheduler process loads its general
plugins (``load_plugins``) when it starts, from the entry points of the packages installed
in its Python environment, so ngramspec must be installed there.  ``--print-args`` prints
that form, ready to paste: ``NGRAMSPEC_SGLANG_CONFIG='...' python -m sglang.launch_server
ARGS``.

SGLang-exact settings (those :meth:`~ngramspec.NgramConfig.to_sglang_args` expresses without
``plugin=True``) need no plugin: the launcher runs them on SGLang's own drafter, and
``--print-args`` prints a line without the variable.

``draft_token_num`` is the slots per request SGLang's worker verifies at every step.  With
``--cost-table T --concurrency C`` it is chosen for that cost and load
(:func:`ngramspec.sweep.budget.best_budget`); a load where no budget pays gets a warning and
exit status 1 (``--force`` launches anyway).  Without a cost table ``--preset recommended``
sends :data:`ngramspec.sweep.budget.SGLANG_SLOTS` (``docs/sglang.md``: the study behind it).

:func:`install` replaces ``NgramCorpus`` in SGLang's worker module by
:class:`ngramspec.integrations.sglang.NgramCorpus` bound to the configuration, and wraps the
worker's draft preparation so that the drafter hears of each new request's prompt (at its
extend batch, before the prefill forward: its index is built meanwhile) and of each departed
request's final tokens (:meth:`~ngramspec.integrations.sglang.NgramCorpus.
note_prompts`, :meth:`~ngramspec.integrations.sglang.NgramCorpus.note_finished`); it logs
``ngramspec: SGLang's NGRAM drafter is ngramspec's NgramCorpus (...)`` when the worker
creates the drafter.
"""

from __future__ import annotations

import argparse
import functools
import logging
import os
import runpy
import shlex
import sys
import types
import warnings
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:
    from ..sweep.budget import BudgetChoice

__all__ = [
    "ENV_CONFIG",
    "LaunchError",
    "install",
    "launch",
    "main",
    "plugin",
    "run_scheduler_process",
    "server_flags",
]

logger = logging.getLogger("ngramspec.integrations.sglang")

#: The environment variable that carries the configuration (TOML text) to the server's
#: processes; when it is set, :func:`plugin` switches the drafter on.
ENV_CONFIG = "NGRAMSPEC_SGLANG_CONFIG"

_WORKER = "sglang.srt.speculative.ngram_worker"
_CORPUS = "sglang.srt.speculative.cpp_ngram.ngram_corpus"
_SCHEDULER = "sglang.srt.managers.scheduler"
_installed: list[Any] = []


def _config_from_env():
    from ..config import NgramConfig

    text = os.environ.get(ENV_CONFIG)
    return None if not text else NgramConfig.from_toml(text)


def install(config: Any = None) -> bool:
    """Put ngramspec's drafter into SGLang's NGRAM worker in this process.

    Parameters
    ----------
    config : NgramConfig, preset name or TOML path, optional
        Default: the configuration in :data:`ENV_CONFIG`.

    Returns
    -------
    bool
        Whether it was installed (False: no configuration given or in the environment).
        Idempotent: a second call changes nothing.
    """
    import importlib

    from .sglang import NgramCorpus, resolve_config

    cfg = _config_from_env() if config is None else resolve_config(config)
    if cfg is None:
        return False
    if _installed:
        return True
    worker = importlib.import_module(_WORKER)
    corpus_mod = importlib.import_module(_CORPUS)

    class ConfiguredNgramCorpus(NgramCorpus):
        """ngramspec's NgramCorpus with the server's configuration."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, config=cfg, **kwargs)
            logger.warning("ngramspec: SGLang's NGRAM drafter is ngramspec's NgramCorpus "
                           "(match_type=%s, draft_token_num=%d, max_trie_depth=%d, "
                           "sglang_exact=%s)", cfg.match_type, cfg.draft_token_num,
                           cfg.max_trie_depth, cfg.sglang_exact)

    worker.NgramCorpus = ConfiguredNgramCorpus
    corpus_mod.NgramCorpus = ConfiguredNgramCorpus
    cls = worker.NGRAMWorker
    cls._prepare_draft_tokens = _hooked(cls._prepare_draft_tokens)
    if hasattr(cls, "_prepare_for_speculative_decoding"):
        cls._prepare_for_speculative_decoding = _hooked_extend(
            cls._prepare_for_speculative_decoding)
    _installed.append(cfg)
    return True


def _noted(worker: Any) -> set:
    """The ids whose prompts the worker's drafter was told (until they leave the batch)."""
    return worker.__dict__.setdefault("_ngramspec_noted", set())


def _tell_prompts(worker: Any, reqs: Any) -> None:
    """``note_prompts`` of those of ``reqs`` not told yet."""
    noted = _noted(worker)
    new = [req for req in reqs if req.rid not in noted]
    if new:
        worker.ngram_corpus.note_prompts([req.rid for req in new],
                                         [list(req.origin_input_ids_unpadded) for req in new])
        noted.update(req.rid for req in new)


def _hooked(prepare):
    """The worker's draft preparation, telling the drafter first what its calls do not."""

    @functools.wraps(prepare)
    def _prepare_draft_tokens(self, batch, *args, **kwargs):
        corpus = self.ngram_corpus
        if hasattr(corpus, "note_prompts") and not corpus.config.sglang_exact:
            previous = getattr(self, "_ngramspec_reqs", {})
            current = {req.rid: req for req in batch.reqs}
            gone = [rid for rid in previous if rid not in current]
            if gone:
                corpus.note_finished(gone, [list(previous[r].origin_input_ids_unpadded)
                                            + list(previous[r].output_ids) for r in gone])
                _noted(self).difference_update(gone)
            _tell_prompts(self, [req for rid, req in current.items() if rid not in previous])
            self._ngramspec_reqs = current
        return prepare(self, batch, *args, **kwargs)

    _prepare_draft_tokens.__ngramspec__ = True
    return prepare if getattr(prepare, "__ngramspec__", False) else _prepare_draft_tokens


def _hooked_extend(prepare):
    """The worker's per-batch preparation, telling the drafter the prompts of an extend
    (prefill) batch before its forward runs, once per request (a chunked prefill's later
    chunks are not told again): their own indexes are built meanwhile."""

    @functools.wraps(prepare)
    def _prepare_for_speculative_decoding(self, batch, *args, **kwargs):
        corpus = self.ngram_corpus
        mode = getattr(batch, "forward_mode", None)
        if (hasattr(corpus, "note_prompts") and not corpus.config.sglang_exact
                and mode is not None and not mode.is_decode()):
            _tell_prompts(self, batch.reqs)
        return prepare(self, batch, *args, **kwargs)

    _prepare_for_speculative_decoding.__ngramspec__ = True
    return prepare if getattr(prepare, "__ngramspec__", False) else \
        _prepare_for_speculative_decoding


def plugin() -> None:
    """SGLang's general-plugin entry point: installs the drafter when :data:`ENV_CONFIG` is
    set, else does nothing."""
    if os.environ.get(ENV_CONFIG):
        install()


def run_scheduler_process(*args: Any, **kwargs: Any) -> Any:
    """SGLang's scheduler process entry, with the drafter installed first."""
    import importlib

    install()
    sched = importlib.import_module(_SCHEDULER)
    # A spawned process imported SGLang afresh: its module holds SGLang's own function.
    original = getattr(sched, "_ngramspec_original", sched.run_scheduler_process)
    return original(*args, **kwargs)


def _route_scheduler() -> None:
    """Make the server spawn :func:`run_scheduler_process` instead of SGLang's (every module
    already holding SGLang's function gets ours)."""
    import importlib

    sched = importlib.import_module(_SCHEDULER)
    original = sched.__dict__.get("_ngramspec_original", sched.run_scheduler_process)
    sched._ngramspec_original = original
    with warnings.catch_warnings():  # looking at deprecated objects (torch's) warns
        warnings.simplefilter("ignore")
        _route_holders(original)


def _route_holders(original: Any) -> None:
    for mod in list(sys.modules.values()):
        names = getattr(mod, "__dict__", None)
        if not isinstance(names, dict):
            continue
        for name, value in list(names.items()):
            try:
                if value is original and name != "_ngramspec_original":
                    setattr(mod, name, run_scheduler_process)
                elif isinstance(value, type) and \
                        value.__dict__.get("run_scheduler_process_func") is not None and \
                        value.run_scheduler_process_func is original:  # Engine's hook
                    value.run_scheduler_process_func = staticmethod(run_scheduler_process)
                elif isinstance(value, types.FunctionType) and value.__defaults__ and \
                        any(d is original for d in value.__defaults__):  # launch_server's
                    value.__defaults__ = tuple(run_scheduler_process if d is original else d
                                               for d in value.__defaults__)
            except (AttributeError, TypeError):  # read-only or odd objects: not ours to route
                continue


def server_flags(config: Any, given: list[str]) -> list[str]:
    """The ``--speculative-...`` flags of ``config.to_sglang_args(plugin=True)`` that
    ``given`` (SGLang's command line) lacks; a flag given with another value than the
    drafter needs (draft slots, trie depth, algorithm) is an error."""
    args = config.to_sglang_args(plugin=True)
    args.pop("ngramspec_config")
    out: list[str] = []
    for key, value in args.items():
        flag = "--" + key.replace("_", "-")
        if flag in given:
            i = given.index(flag)
            have = given[i + 1] if i + 1 < len(given) else None
            strict = key in ("speculative_algorithm", "speculative_num_draft_tokens",
                             "speculative_ngram_max_trie_depth")
            if strict and have != str(value):
                raise ValueError(f"{flag} {have} conflicts with the configuration, which "
                                 f"needs {flag} {value}")
            continue
        out += [flag, str(value)]
    return out


#: What the launcher says of SGLang-exact settings: it starts SGLang's own drafter.
EXACT_NOTE = "SGLang-exact settings: SGLang's own drafter runs them from these flags alone"
#: What ``--print-args`` adds for them (its line has no variable).
EXACT_PASTE = EXACT_NOTE + f", so the server needs neither ngramspec nor {ENV_CONFIG}"
#: What ``--print-args`` says of settings beyond SGLang (the variable in the line).
PLUGIN_NOTE = ("settings beyond SGLang: " + ENV_CONFIG + " carries them, and SGLang's plugin "
               "entry point (group sglang.srt.plugins) switches ngramspec's drafter on in the "
               "server's processes, so ngramspec must be installed in the server's Python "
               "environment")
#: What the launcher says without ``--preset`` and ``--config``: the defaults of every
#: ngramspec command, SGLang's own.
DEFAULT_NOTE = ("no --preset or --config: SGLang's server defaults (preset sglang, as in every "
                "ngramspec command); --preset recommended runs ngramspec's drafter")
#: The one line said when SGLang cannot be imported (and ``--print-args`` is not given).
NO_SGLANG = ("sglang-launch needs SGLang 0.5.23 in this environment (pip install "
             "'sglang==0.5.23'); --print-args prints the command without it")
_SLOTS_FLAG = "--speculative-num-draft-tokens"


class LaunchError(ValueError):
    """A launch refused before anything started; the message is one line."""


class _Parser(argparse.ArgumentParser):
    """argparse, its errors one line (raised, not printed with the usage)."""

    def error(self, message: str) -> "NoReturn":  # type: ignore[override]
        if message.startswith("unrecognized arguments"):
            message += " (SGLang's own arguments follow '--')"
        raise LaunchError(message)


def _parser() -> _Parser:
    from ..config.flags import add_config_flags
    from ..costs.table import add_cost_table_flags

    parser = _Parser(
        prog="ngramspec sglang-launch",
        description="Run SGLang's server (python -m sglang.launch_server ARGS) with "
                    "ngramspec's NGRAM drafter; SGLang's arguments follow '--'.  The "
                    "settings flags are those of ngramspec simulate, with its defaults "
                    "(SGLang's own without --preset or --config).")
    add_config_flags(parser)
    parser.add_argument("--print-args", action="store_true",
                        help="print SGLang's command line, ready to paste, and exit (nothing "
                             "is started; SGLang need not be installed)")
    budget = parser.add_argument_group(
        "draft_token_num from your costs (the slots per request SGLang verifies every step)")
    add_cost_table_flags(budget)
    budget.add_argument("--concurrency", type=int, metavar="C",
                        help="requests decoded together in your server (with --cost-table)")
    budget.add_argument("--streams", nargs="+", metavar="FILE",
                        help="recorded streams like your traffic (default: the corpus "
                             "shipped with ngramspec)")
    budget.add_argument("--force", action="store_true",
                        help="launch even where speculation is predicted not to pay")
    return parser


def _check_budget_flags(opts: argparse.Namespace) -> None:
    if opts.cost_table is None:
        given = [flag for flag, value in (("--concurrency", opts.concurrency),
                                          ("--streams", opts.streams),
                                          ("--extrapolate", opts.extrapolate),
                                          ("--force", opts.force)) if value]
        if given:
            raise LaunchError(f"{given[0]} applies with --cost-table FILE (the costs that "
                              "choose draft_token_num)")
        return
    if opts.concurrency is None:
        raise LaunchError("--cost-table needs --concurrency C: the requests your server "
                          "decodes together, which the best draft_token_num depends on")
    if opts.concurrency < 1:
        raise LaunchError(f"--concurrency must be >= 1, got {opts.concurrency}")


def _need_sglang() -> None:
    """One line, not a traceback, when SGLang cannot be imported here."""
    import importlib

    try:
        importlib.import_module("sglang")
    except ModuleNotFoundError as e:
        if e.name in (None, "sglang"):
            raise LaunchError(NO_SGLANG) from None
        raise LaunchError(f"SGLang cannot be imported here (no module {e.name!r}); "
                          f"{NO_SGLANG}") from None
    except ImportError as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise LaunchError(f"SGLang cannot be imported here ({first}); {NO_SGLANG}") from None
    try:
        from importlib.metadata import PackageNotFoundError, version

        have = version("sglang")
    except PackageNotFoundError:  # a source tree on the path: nothing to compare
        return
    if have != "0.5.23":
        print(f"ngramspec sglang-launch: warning: SGLang {have} is installed; the drafter is "
              "built and tested for SGLang 0.5.23", file=sys.stderr)


def _read_config(opts: argparse.Namespace) -> Any:
    """The configuration to launch, read as every command reads one (the preset, the file
    over it, the flags on top: :mod:`ngramspec.config.flags`); a sweep's winner must have
    been ranked for SGLang."""
    from pathlib import Path

    from ..config.flags import base_options, config_options, make_config
    from ..config.toml import read_ranking

    cfg = make_config(base_options(opts), config_options(opts), opts)
    if opts.config is None:
        return cfg
    ranking = read_ranking(Path(opts.config))
    engine = None if ranking is None else ranking.get("engine")
    if ranking is not None and engine != "sglang":
        how = {"custom": "priced as a custom loop (real ADAPTIVE trees, plain decodes), not "
                         "as SGLang's worker",
               "none": "by tokens per verify step, without a cost"}.get(
            engine, f"with engine {engine!r}")
        raise LaunchError(f"{opts.config}: its [ranking] says it was ranked {how}; rerun the "
                          "sweep with --engine sglang and a cost (--cost-table FILE, or "
                          "--step-ms and --token-ms) to rank it for SGLang's server (or delete "
                          "the [ranking] table to launch it as it is)")
    return cfg


def _slots(cfg: Any, opts: argparse.Namespace, theirs: list[str]) -> tuple[Any, str | None]:
    """``draft_token_num`` without a cost table or a file: ``--draft-token-num`` or SGLang's
    own flag as given (not both), else :data:`~ngramspec.sweep.budget.SGLANG_SLOTS` for
    ``--preset recommended`` (its 16 are for a custom loop) and the preset's own otherwise;
    the note to print (None: nothing to say)."""
    from ..sweep.budget import SGLANG_SLOTS

    if opts.draft_token_num is not None:
        if _SLOTS_FLAG in theirs:
            raise LaunchError(f"{_SLOTS_FLAG} (after '--') and --draft-token-num both set the "
                              "slots per request: give one")
        return cfg, f"draft_token_num {cfg.draft_token_num}: as given (--draft-token-num)"
    if _SLOTS_FLAG in theirs:
        i = theirs.index(_SLOTS_FLAG)
        text = theirs[i + 1] if i + 1 < len(theirs) else ""
        try:
            n = int(text)
            cfg = cfg.replace(draft_token_num=n)
        except ValueError as e:
            detail = "not an integer" if not text.lstrip("-").isdigit() else str(e)
            raise LaunchError(f"{_SLOTS_FLAG} {text!r}: {detail}") from None
        return cfg, f"draft_token_num {n}: as given ({_SLOTS_FLAG})"
    if opts.preset != "recommended":
        return cfg, None
    return cfg.replace(draft_token_num=SGLANG_SLOTS), (
        f"draft_token_num {SGLANG_SLOTS}: the slots per request SGLang verifies at every step "
        f"(recommended() has {cfg.draft_token_num} for a custom loop; docs/sglang.md); "
        "--cost-table T --concurrency C chooses it for your model and load")


def _choose_budget(opts: argparse.Namespace, cfg: Any) -> tuple[BudgetChoice, list[str]]:
    """The budget search of ``--cost-table``: its :class:`~ngramspec.sweep.budget.BudgetChoice`
    and the lines to print."""
    from ..costs.table import read_cost_table
    from ..streams import embedded_streams_path
    from ..sweep.budget import best_budget

    table = read_cost_table(opts)
    sources = opts.streams or [embedded_streams_path()]
    label = ", ".join(os.path.basename(str(s)) for s in sources)
    print(f"# choosing draft_token_num for {os.path.basename(opts.cost_table)} at concurrency "
          f"{opts.concurrency} on {label}, priced as SGLang's worker runs it ...", flush=True)
    choice = best_budget(cfg, sources, table, concurrency=opts.concurrency)
    return choice, choice.lines()


def launch(argv: list[str]) -> int:
    """``ngramspec sglang-launch [--preset NAME] [--config FILE] [--FIELD VALUE ...]
    [--cost-table T --concurrency C [--streams FILE ...] [--extrapolate] [--force]]
    [--print-args] -- ARGS``: run ``sglang.launch_server ARGS`` with the configuration's flags
    and, for settings beyond SGLang, ngramspec's drafter.

    The configuration is read as ``ngramspec simulate`` reads it (:mod:`ngramspec.config.
    flags`: the preset, the file over it, one flag per field on top; without ``--preset`` and
    ``--config``, SGLang's server defaults).  ``--cost-table`` chooses ``draft_token_num``
    (:func:`ngramspec.sweep.budget.best_budget`); without it ``--preset recommended`` sends
    :data:`ngramspec.sweep.budget.SGLANG_SLOTS` unless ``--draft-token-num`` or SGLang's
    ``--speculative-num-draft-tokens`` gives a number.
    SGLang-exact settings run on SGLang's own drafter (no variable, nothing installed).

    Returns
    -------
    int
        0 when launched (or printed); 1 when speculation is predicted not to pay at that
        load (nothing started unless ``--force``); 2 for an error, said in one line on
        stderr.
    """
    ours, _sep, theirs = _split(argv)
    try:
        opts = _parser().parse_args(ours)
        _check_budget_flags(opts)
        if opts.cost_table is not None and _SLOTS_FLAG in theirs:
            raise LaunchError(f"{_SLOTS_FLAG} (after '--') and --cost-table both set the slots "
                              "per request: give one")
        if opts.cost_table is not None and opts.draft_token_num is not None:
            raise LaunchError("--draft-token-num and --cost-table both set the slots per "
                              "request: give one")
        if not opts.print_args:
            _need_sglang()
        cfg = _read_config(opts)
        notes: list[str] = []
        if opts.preset is None and opts.config is None:
            notes.append(DEFAULT_NOTE)
        choice = None
        if opts.cost_table is not None:
            choice, lines = _choose_budget(opts, cfg)
            notes += lines
            cfg = choice.config
        elif opts.config is None:
            cfg, note = _slots(cfg, opts, theirs)
            if note is not None:
                notes.append(note)
        flags = server_flags(cfg, theirs)
        exact = _sglang_exact(cfg)
    except (ValueError, TypeError, OSError) as e:  # ours, the config's, the table's, streams'
        print(f"ngramspec sglang-launch: error: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print("# " + note)
    if choice is not None and not choice.pays:
        print(f"ngramspec sglang-launch: warning: do not enable speculation at this load "
              f"(best {choice.speed_up:.2f}x at concurrency {choice.concurrency}); "
              + ("launching anyway (--force)" if opts.force else
                 "start SGLang without --speculative-algorithm, or add --force"),
              file=sys.stderr)
        if not opts.force:
            return 1
    command = [*theirs, *flags]
    server = shlex.join(["python", "-m", "sglang.launch_server", *command])
    if opts.print_args:
        if exact:
            print("# " + EXACT_PASTE)
            print(server)
        else:
            print("# " + PLUGIN_NOTE)
            print(f"{ENV_CONFIG}={shlex.quote(cfg.to_toml())} {server}")
        return 0
    if exact:  # SGLang's own drafter; a variable left in the environment must not switch
        os.environ.pop(ENV_CONFIG, None)
        print("# " + EXACT_NOTE)
    else:
        os.environ[ENV_CONFIG] = cfg.to_toml()
        install(cfg)  # this process too (a scheduler started in-process, fork start method)
        _route_scheduler()
    sys.argv = ["sglang.launch_server", *command]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    return 0


def _sglang_exact(cfg: Any) -> bool:
    """Whether SGLang's own flags express ``cfg`` (no plugin needed)."""
    try:
        cfg.to_sglang_args()
    except ValueError:
        return False
    return True


def _split(argv: list[str]) -> tuple[list[str], bool, list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], True, argv[i + 1:]
    return list(argv), False, []


def main() -> None:
    """``python -m ngramspec.integrations.sglang_launch``."""
    logging.basicConfig(level=logging.INFO)
    raise SystemExit(launch(sys.argv[1:]))


if __name__ == "__main__":
    # Run from the module under its importable name: the spawned scheduler finds
    # run_scheduler_process by that name (this copy is "__main__").
    from ngramspec.integrations.sglang_launch import main as _main

    _main()
