"""vLLM 0.33's own n-gram proposer and custom-proposer loader, taken from its PyPI wheel.

vLLM's n-gram (prompt lookup) drafter is one Python file of the ``vllm==0.33.0`` wheel,
``vllm/v1/spec_decode/ngram_proposer.py`` (``NgramProposer`` and its Numba kernels, among them
``_find_longest_matched_ngram_and_propose_tokens``); the loader of a proposer class named by
``speculative_config.model`` is ``vllm/v1/spec_decode/custom_class_proposer.py``
(``create_custom_proposer``).  This module downloads the wheel with pip (``pip download
vllm==0.33.0 --no-deps``: nothing of vLLM is stored in this repository, nor imported by
ngramspec), extracts those two files once into ``$NGRAMSPEC_PEER_DIR/vllm-0.33.0/py`` (default:
``benchmarks/peers/.build``, git-ignored) and executes them unchanged as modules.  What they
import from vLLM is answered by small stand-ins of ours (``vllm.config.VllmConfig``: a bare
class, used only in annotations; ``vllm.logger.init_logger``: ``logging.getLogger``), present in
``sys.modules`` only while the files execute, so an installed vLLM is never shadowed.  NumPy,
Numba and torch are the real ones (the proposer file imports torch for an annotation).

Used by the differential tests under the ``vllm`` marker (``tests/integrations/``).

>>> from benchmarks.peers import vllm as vllm_peer          # doctest: +SKIP
>>> find = vllm_peer.find_longest_matched_ngram()           # doctest: +SKIP
>>> find(np.array([1, 1, 1], np.int32), 2, 2, 1 << 40, 5)   # doctest: +SKIP
array([1], dtype=int32)
"""

from __future__ import annotations

import functools
import importlib
import logging
import types
from pathlib import Path
from typing import Any, Callable

from . import sglang as base

PeerUnavailable = base.PeerUnavailable

VLLM_VERSION = "0.33.0"

#: The wheel's files loaded here (wheel path -> module name while loading).
PY_FILES = {
    "vllm/v1/spec_decode/ngram_proposer.py": "vllm.v1.spec_decode.ngram_proposer",
    "vllm/v1/spec_decode/custom_class_proposer.py": "vllm.v1.spec_decode.custom_class_proposer",
}
NGRAM_FILE, CUSTOM_FILE = PY_FILES

#: ``max_model_len`` standing for "unlimited" (vLLM drafts at most ``max_model_len - len``
#: tokens; the simulator and ``ngramspec.reference.lookup`` take no such cap).
UNLIMITED = 1 << 40


def _out_dir() -> Path:
    return base._cache_dir() / f"vllm-{VLLM_VERSION}"


def python_files() -> dict[str, Path]:
    """The wheel's two Python files (wheel path -> local path), extracted once."""
    py = _out_dir() / "py"
    paths = {name: py / name for name in PY_FILES}
    if all(p.exists() for p in paths.values()):
        return paths
    base.extract_from_wheel(VLLM_VERSION, paths.get, package="vllm")
    missing = [name for name, p in paths.items() if not p.exists()]
    if missing:
        raise PeerUnavailable(f"vllm=={VLLM_VERSION}'s wheel lacks {', '.join(missing)}")
    return paths


class VllmConfig:
    """Stands in for ``vllm.config.VllmConfig`` (the wheel's files name it in annotations
    only; the objects they are given are :func:`make_config`'s namespaces)."""


def _stubs() -> dict[str, types.ModuleType]:
    """Stand-ins for what the wheel's files import from vLLM."""
    mods: dict[str, types.ModuleType] = {}
    for pkg in ("vllm", "vllm.v1", "vllm.v1.spec_decode"):
        mods[pkg] = types.ModuleType(pkg)
        mods[pkg].__path__ = []
    config = types.ModuleType("vllm.config")
    config.VllmConfig = VllmConfig
    logger = types.ModuleType("vllm.logger")
    logger.init_logger = logging.getLogger
    mods["vllm.config"] = config
    mods["vllm.logger"] = logger
    return mods


@functools.cache
def wheel_modules() -> dict[str, types.ModuleType]:
    """The wheel's two files executed as modules (module name -> module).

    Raises :class:`PeerUnavailable` without torch or numba, or where pip cannot download the
    wheel."""
    for dep in ("torch", "numba"):
        try:
            importlib.import_module(dep)
        except ImportError:
            raise PeerUnavailable(f"vLLM's ngram_proposer.py needs {dep}") from None
    paths = python_files()
    return base.exec_with_stubs({name: paths[f] for f, name in PY_FILES.items()}, _stubs())


def ngram_module() -> types.ModuleType:
    """The wheel's ``vllm/v1/spec_decode/ngram_proposer.py``, executed."""
    return wheel_modules()[PY_FILES[NGRAM_FILE]]


def find_longest_matched_ngram() -> Callable[..., Any]:
    """The wheel's ``_find_longest_matched_ngram_and_propose_tokens(origin_tokens, min_ngram,
    max_ngram, max_model_len, k)`` (a Numba dispatcher: ``origin_tokens`` a 1-D integer
    array; pass :data:`UNLIMITED` as ``max_model_len`` for no length cap)."""
    return ngram_module()._find_longest_matched_ngram_and_propose_tokens


def make_config(min_n: int, max_n: int, k: int, *, max_model_len: int, max_num_seqs: int = 8,
                model: str | None = None, tensor_parallel_size: int = 1,
                **extra: Any) -> types.SimpleNamespace:
    """A stand-in ``VllmConfig``: the attributes ``NgramProposer`` and
    ``create_custom_proposer`` read (``speculative_config.{prompt_lookup_min,
    prompt_lookup_max, num_speculative_tokens, model, method}``,
    ``model_config.max_model_len``, ``scheduler_config.max_num_seqs``,
    ``parallel_config.tensor_parallel_size``); ``extra`` adds to ``speculative_config``.

    Without ``model``: ``method="ngram"``, ``model="ngram"``.  With ``model`` (a proposer
    class's dotted path): ``method="custom_class"`` and, as vLLM 0.33's
    ``SpeculativeConfig.__post_init__`` sets them for that method, ``prompt_lookup_min =
    prompt_lookup_max = 0`` whatever ``min_n`` and ``max_n`` say (a custom proposer cannot
    read its n-gram sizes there)."""
    ns = types.SimpleNamespace
    if model is None:
        spec = ns(prompt_lookup_min=min_n, prompt_lookup_max=max_n, num_speculative_tokens=k,
                  model="ngram", method="ngram", **extra)
    else:
        spec = ns(prompt_lookup_min=0, prompt_lookup_max=0, num_speculative_tokens=k,
                  model=model, method="custom_class", **extra)
    return ns(speculative_config=spec, model_config=ns(max_model_len=max_model_len),
              scheduler_config=ns(max_num_seqs=max_num_seqs),
              parallel_config=ns(tensor_parallel_size=tensor_parallel_size))


def ngram_proposer(min_n: int, max_n: int, k: int, max_model_len: int,
                   max_num_seqs: int = 8) -> Any:
    """The wheel's ``NgramProposer`` built over :func:`make_config`'s stand-in.

    Its constructor runs one warm-up ``propose`` over a ``(1024, max_model_len)`` int32 array:
    keep ``max_model_len`` to what the contexts need (``propose`` skips requests of
    ``max_model_len`` tokens or more and drafts at most ``max_model_len - len`` tokens).
    ``propose(k, sampled_token_ids, num_tokens_no_spec, token_ids_cpu)`` as the model runner
    calls it: ``token_ids_cpu`` is ``(rows, max_model_len)`` int32 (row ``i`` holds request
    ``i``'s tokens, the first ``num_tokens_no_spec[i]`` of them valid), ``sampled_token_ids[i]``
    empty for a request not drafting this step; at most ``max_num_seqs`` rows."""
    cfg = make_config(min_n, max_n, k, max_model_len=max_model_len, max_num_seqs=max_num_seqs)
    return ngram_module().NgramProposer(cfg)


def create_custom_proposer() -> Callable[[Any], Any]:
    """The wheel's ``create_custom_proposer(vllm_config)``: imports the class named by
    ``vllm_config.speculative_config.model`` (``"package.module.Class"``), instantiates it with
    ``vllm_config`` and checks it has a callable ``propose`` (build the config with
    :func:`make_config`, ``model=...``)."""
    return wheel_modules()[PY_FILES[CUSTOM_FILE]].create_custom_proposer
