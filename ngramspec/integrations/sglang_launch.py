"""Switching ngramspec's drafter on in SGLang 0.5.23's server: the one module that imports
SGLang, and only inside its functions.

``ngramspec sglang-launch --preset recommended -- --model-path M ...`` (or ``python -m
ngramspec.integrations.sglang_launch ...``) resolves the configuration, adds the server
arguments that :meth:`~ngramspec.NgramConfig.to_sglang_args` gives with ``plugin=True``,
hands the configuration to every process of the server in the environment variable
:data:`ENV_CONFIG` (TOML text) and runs ``sglang.launch_server``.  The scheduler runs in a
spawned process, so the switch happens there: SGLang's ``run_scheduler_process`` is replaced
by :func:`run_scheduler_process` (a module-level function, so the spawned process finds it by
name), which calls :func:`install` and then SGLang's own.  SGLang's plugin entry point
(group ``sglang.srt.plugins``, name ``ngramspec``, value
``ngramspec.integrations.sglang_launch:plugin``) does the same for servers started any other
way, whenever :data:`ENV_CONFIG` is set.

:func:`install` replaces ``NgramCorpus`` in SGLang's worker module by
:class:`ngramspec.integrations.sglang.NgramCorpus` bound to the configuration, and wraps the
worker's draft preparation so that the drafter hears of each new request's prompt and of
each departed request's final tokens (:meth:`~ngramspec.integrations.sglang.NgramCorpus.
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
import sys
import warnings
import types
from typing import Any

__all__ = [
    "ENV_CONFIG",
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
    _installed.append(cfg)
    return True


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
            new = [req for rid, req in current.items() if rid not in previous]
            if new:
                corpus.note_prompts([req.rid for req in new],
                                    [list(req.origin_input_ids_unpadded) for req in new])
            self._ngramspec_reqs = current
        return prepare(self, batch, *args, **kwargs)

    _prepare_draft_tokens.__ngramspec__ = True
    return prepare if getattr(prepare, "__ngramspec__", False) else _prepare_draft_tokens


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


def launch(argv: list[str]) -> int:
    """``ngramspec sglang-launch [--preset NAME | --config FILE] [--print-args] -- ARGS``:
    run ``sglang.launch_server ARGS`` with ngramspec's drafter.  Returns the exit status."""
    from ..config import PRESETS
    from .sglang import resolve_config

    ours, _sep, theirs = _split(argv)
    parser = argparse.ArgumentParser(
        prog="ngramspec sglang-launch",
        description="Run SGLang's server (python -m sglang.launch_server ARGS) with "
                    "ngramspec's NGRAM drafter; SGLang's arguments follow '--'.")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--preset", choices=PRESETS, default=None,
                       help="a named configuration (default: recommended)")
    group.add_argument("--config", metavar="FILE", help="a TOML configuration file")
    parser.add_argument("--print-args", action="store_true",
                        help="print SGLang's command line and exit (nothing is started)")
    opts = parser.parse_args(ours)
    cfg = resolve_config(opts.config or opts.preset or "recommended")
    try:
        flags = server_flags(cfg, theirs)
    except ValueError as e:
        parser.error(str(e))
    command = [*theirs, *flags]
    if opts.print_args:
        print(f"{ENV_CONFIG}=<TOML> python -m sglang.launch_server {' '.join(command)}")
        return 0
    os.environ[ENV_CONFIG] = cfg.to_toml()
    install(cfg)  # this process too (a scheduler started in-process, fork start method)
    _route_scheduler()
    sys.argv = ["sglang.launch_server", *command]
    runpy.run_module("sglang.launch_server", run_name="__main__", alter_sys=True)
    return 0


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
