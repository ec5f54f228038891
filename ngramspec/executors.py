"""Moved to :mod:`ngramspec.sweep` (executors and results files); this path keeps working.

>>> from ngramspec.executors import LocalExecutor, ResultsFile
>>> LocalExecutor is __import__("ngramspec.sweep", fromlist=["x"]).LocalExecutor
True
"""

from .sweep.executors import (EXECUTORS, Executor, LocalExecutor, Outcome,  # noqa: F401
                              RayExecutor, make_executor, versions)
from .sweep.results import (RESULT_FIELDS, RESULTS_SUFFIXES, SCHEMA_VERSION,  # noqa: F401
                            TIMING_FIELDS, ResultsFile, ResultsFileError, fingerprint)

__all__ = ["Executor", "LocalExecutor", "RayExecutor", "Outcome", "make_executor",
           "ResultsFile", "ResultsFileError", "EXECUTORS", "RESULT_FIELDS", "TIMING_FIELDS",
           "versions"]
