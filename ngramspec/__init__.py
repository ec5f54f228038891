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
from .drafts import DraftBatch
from .drafter import Drafter
from .errors import BackgroundInsertError, CacheFileError, IntegrityError
from .integrations.timing import time_drafting
from .simulate import SimulationResult, StreamResult, Summary, simulate, simulate_stream
from .streams import StreamError, iter_streams, read_streams
from .verify import VerifyResult, verify_greedy, verify_greedy_logits, verify_sampling

__all__ = ["NgramCache", "NgramConfig", "DraftBatch", "Drafter", "VerifyResult", "verify_greedy",
           "verify_greedy_logits", "verify_sampling", "simulate", "SimulationResult", "Summary",
           "read_streams", "StreamError", "CostModel", "Prediction", "CostTable", "CostTableError",
           "ServingPrediction", "predict_serving", "schedule", "IntegrityError", "CacheFileError",
           "BackgroundInsertError", "simulate_stream", "StreamResult", "iter_streams",
           "time_drafting"]
