"""Step costs and the pay-off prediction: one room for everything priced in milliseconds.

- :mod:`~ngramspec.costs.model`: :class:`CostModel`, the per-request formula and its
  :class:`Prediction`;
- :mod:`~ngramspec.costs.table`: :class:`CostTable`, measured forward times ``t(batch,
  tokens)`` and their interpolation;
- :mod:`~ngramspec.costs.serving`: the concurrency-aware prediction (:func:`schedule`,
  :func:`predict_serving`, :func:`verdict`);
- :mod:`~ngramspec.costs.engines`: how each serving engine prices a step (a custom loop,
  SGLang's fixed-width verify), one small table of rules;
- :mod:`~ngramspec.costs.uncertainty`: how sure a prediction is, a bootstrap over requests
  (:func:`bootstrap`);
- :mod:`~ngramspec.costs.records`: cost tables from what a serving engine's own tools write
  (:func:`import_records`, ``ngramspec costs import``);
- :mod:`~ngramspec.costs.checks`: the ``costs=`` argument checked, and step costs as the
  drafting kernels read them.

This room imports nothing else of the package, so every layer may price a step.
"""

from .checks import check_costs, cost_matrix, step_costs
from .engines import ENGINE_NAMES, ENGINES, Engine, engine_of
from .model import CostModel, Prediction
from .records import import_records
from .serving import (Schedule, ServingPrediction, parse_concurrency, predict_serving, schedule,
                      speed_up_text, verdict)
from .table import Cost, CostTable, CostTableError
from .uncertainty import Interval, bootstrap

__all__ = ["CostModel", "Prediction", "CostTable", "CostTableError", "Cost", "Schedule",
           "ServingPrediction", "schedule", "predict_serving", "verdict", "parse_concurrency",
           "check_costs", "step_costs", "cost_matrix", "Engine", "ENGINES", "ENGINE_NAMES",
           "engine_of", "import_records", "Interval", "bootstrap", "speed_up_text"]
