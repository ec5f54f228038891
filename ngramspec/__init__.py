"""ngramspec: SGLang's NGRAM speculative drafter as a Python library, bit for bit.

>>> import ngramspec as ns
>>> cache = ns.NgramCache(draft_token_num=4, capacity=1000)
>>> cache.insert([[5, 1, 2, 3, 7], [1, 2, 3, 8]])
>>> cache.match([[1, 2]]).tokens
array([[2, 3, 7, 8]], dtype=int32)
"""

from ._version import __version__  # noqa: F401
from .cache import NgramCache
from .config import NgramConfig
from .costs import CostModel, Prediction
from .costs import CostTable, CostTableError, ServingPrediction, predict_serving, schedule
from .drafter import Drafter
from .drafts import DraftBatch
from .drafts.verify import VerifyResult, verify_greedy, verify_greedy_logits, verify_sampling
from .errors import BackgroundInsertError, CacheFileError, IntegrityError
from .integrations.timing import time_drafting
from .simulate import SimulationResult, StreamResult, Summary, simulate, simulate_stream
from .streams import StreamError, iter_streams, read_streams

__all__ = ["NgramCache", "NgramConfig", "DraftBatch", "Drafter", "VerifyResult", "verify_greedy",
           "verify_greedy_logits", "verify_sampling", "simulate", "SimulationResult", "Summary",
           "read_streams", "StreamError", "CostModel", "Prediction", "CostTable", "CostTableError",
           "ServingPrediction", "predict_serving", "schedule", "IntegrityError", "CacheFileError",
           "BackgroundInsertError", "simulate_stream", "StreamResult", "iter_streams",
           "time_drafting"]


# Old import paths of the modules that moved into topic packages after 0.1.0: each keeps working
# for one release, as the module it moved to, with a DeprecationWarning naming the new path.
_MOVED = {
    "backends": "cache.backends", "calibrate": "measure.calibrate",
    "calibration_table": "config.acceptance_table", "chat_template": "streams.chat_template",
    "check": "measure.check", "config_presets": "config.presets", "config_sglang": "config.sglang",
    "config_toml": "config.toml", "config_vllm": "config.vllm", "corpora": "cache.corpora",
    "importers": "streams.importers", "persist": "cache.persist",
    "reliability": "measure.reliability", "verify": "drafts.verify",
}

_MOVED_SPECS: dict[str, object] = {}


class _MovedFinder:
    """Finds ``ngramspec.<old>`` for a moved module and hands back the module it moved to."""

    @staticmethod
    def find_spec(name: str, path: object = None, target: object = None) -> object:
        import importlib.util

        head, _, old = name.partition(".")
        if head != __name__ or old not in _MOVED:
            return None
        return importlib.util.spec_from_loader(name, _MovedFinder)

    @staticmethod
    def create_module(spec: object) -> object:
        import importlib
        import warnings

        old = spec.name.partition(".")[2]  # type: ignore[attr-defined]
        # stacklevel 2: the importing line (warnings skips the import system's own frames)
        warnings.warn(_moved_message(old), DeprecationWarning, stacklevel=2)
        module = importlib.import_module(f"{__name__}.{_MOVED[old]}")
        _MOVED_SPECS[module.__name__] = module.__spec__
        return module

    @staticmethod
    def exec_module(module: object) -> None:
        # Already executed: only its own spec back, which the import system replaced.
        module.__spec__ = _MOVED_SPECS[module.__name__]  # type: ignore[attr-defined]


def _moved_message(old: str) -> str:
    return (f"{__name__}.{old} moved to {__name__}.{_MOVED[old]}; the old path goes in the "
            "next release")


def __getattr__(name: str) -> object:  # ``ngramspec.verify``, ``from ngramspec import verify``
    if name in _MOVED:
        import importlib
        import sys
        import warnings

        warnings.warn(_moved_message(name), DeprecationWarning, stacklevel=2)
        module = importlib.import_module(f"{__name__}.{_MOVED[name]}")
        sys.modules.setdefault(f"{__name__}.{name}", module)
        globals()[name] = module
        return module
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _install_moved() -> None:
    import sys

    if not any(f is _MovedFinder for f in sys.meta_path):
        sys.meta_path.append(_MovedFinder)


_install_moved()
