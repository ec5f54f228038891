"""The draft budget for an engine that verifies a fixed number of slots.

SGLang's NGRAM worker verifies ``draft_token_num`` slots per request at every step, so the
slots are the cost whatever the trees hold: the best ``draft_token_num`` for SGLang is found
by pricing each candidate with ``engine="sglang"`` (:func:`best_budget`).  :data:`BUDGETS`
is the grid searched when none is given (``ngramspec sweep --engine sglang``, ``ngramspec
sglang-launch --cost-table T --concurrency C``).  :data:`SGLANG_SLOTS` is what ``ngramspec
sglang-launch --preset recommended`` sends without a cost table
(``benchmarks/studies/sglang_budget.py``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence

from .._validate import as_positive_int, check_config
from ..config import NgramConfig
from ..costs import CostModel, CostTable, ServingPrediction, predict_serving
from ..streams.files import StreamSource, read_streams

__all__ = ["BUDGETS", "SGLANG_SLOTS", "BudgetChoice", "best_budget"]

#: ``draft_token_num`` values searched by default under SGLang's pricing (slots per request,
#: the root included): from a single draft to the ``recommended`` preset's 16.
BUDGETS = (2, 3, 4, 6, 8, 10, 12, 16)

#: The slots per request ``ngramspec sglang-launch --preset recommended`` sends to SGLang
#: without a cost table (``recommended()`` itself keeps 16, a custom loop's setting: there
#: ADAPTIVE sends only its real trees).  Chosen by ``benchmarks/studies/sglang_budget.py``
#: on the tuning part of the shipped streams, reported on the hold-out part
#: (``docs/sglang.md``).
SGLANG_SLOTS = 6


@dataclass(frozen=True)
class BudgetChoice:
    """The ``draft_token_num`` that :func:`best_budget` chose, and what it compared.

    Attributes
    ----------
    config : NgramConfig
        The configuration with the chosen ``draft_token_num``.
    draft_token_num : int
        The chosen slots per request.
    concurrency : int
        The concurrency simulated (clamped to the number of requests, as ``simulate`` does).
    predictions : mapping of int to ServingPrediction
        Per budget considered, in increasing order: its serving prediction under SGLang's
        pricing (``predict_serving(..., engine="sglang")``).
    tokens_per_step : mapping of int to float
        Per budget considered: tokens emitted per verify step.
    """

    config: NgramConfig
    draft_token_num: int
    concurrency: int
    predictions: Mapping[int, ServingPrediction]
    tokens_per_step: Mapping[int, float]

    @property
    def speed_up(self) -> float:
        """The chosen budget's predicted speed-up over decoding without speculation."""
        return self.predictions[self.draft_token_num].speed_up

    @property
    def pays(self) -> bool:
        """Whether speculation pays at this load: the best speed-up is above 1."""
        return self.speed_up > 1.0

    def lines(self) -> list[str]:
        """The comparison as text: one line per budget (tokens per step, predicted speed-up,
        the chosen one marked), then the choice."""
        out = []
        for n, p in self.predictions.items():
            mark = "  <- chosen" if n == self.draft_token_num else ""
            out.append(f"  draft_token_num {n:>2}: {self.tokens_per_step[n]:.3f} tokens per "
                       f"step, {p.speed_up:.2f}x predicted{mark}")
        out.append(f"draft_token_num {self.draft_token_num}: the highest predicted speed-up "
                   f"({self.speed_up:.2f}x at concurrency {self.concurrency})")
        return out


def _budgets(budgets: Any) -> tuple[int, ...]:
    if isinstance(budgets, (str, bytes)) or not isinstance(budgets, Sequence):
        raise TypeError(f"budgets must be a sequence of ints >= 1, got "
                        f"{type(budgets).__name__}")
    if not budgets:
        raise ValueError("budgets is empty: give at least one draft_token_num")
    out = [as_positive_int(b, "budgets", "slots per request, the root included")
           for b in budgets]
    twice = sorted({b for b in out if out.count(b) > 1})
    if twice:
        raise ValueError(f"budgets lists {', '.join(map(str, twice))} more than once")
    return tuple(sorted(out))


def best_budget(config: NgramConfig, streams: StreamSource, cost: CostTable | CostModel, *,
                concurrency: int, budgets: Sequence[int] = BUDGETS,
                draft_ms: float | None = None) -> BudgetChoice:
    """The ``draft_token_num`` with the highest predicted speed-up in SGLang's server.

    Each budget ``n`` of ``budgets`` replaces the configuration's ``draft_token_num``; the
    configuration is simulated on ``streams`` at ``concurrency`` and priced as SGLang's NGRAM
    worker runs it (``predict_serving(result, cost, engine="sglang")``: ``n`` slots per
    request at every step, plus the drafter's time).  The highest speed-up wins; on a tie
    the smaller budget.

    Parameters
    ----------
    config : NgramConfig
        The settings to deploy (profile ``sglang-0.5.23``); its ``draft_token_num`` is
        what is searched.
    streams : path, list of paths, or iterable of records
        Recorded streams like your traffic (:func:`~ngramspec.read_streams`).
    cost : CostTable or CostModel
        Forward times of your model; a table must cover ``t(b, n)`` for every batch up to
        ``concurrency`` and every budget ``n`` (or extrapolate).
    concurrency : int
        Requests decoded together in your server.
    budgets : sequence of int
        The ``draft_token_num`` values compared (default :data:`BUDGETS`).
    draft_ms : float, optional
        Drafting time per step for every budget; by default each budget's own, SGLang's
        worker calls timed on the streams (:attr:`~ngramspec.SimulationResult.
        sglang_ms_per_step`), which varies a little from run to run.

    Returns
    -------
    BudgetChoice
        The chosen budget, its configuration and every budget's prediction.

    Raises
    ------
    TypeError
        ``config`` is not an :class:`~ngramspec.NgramConfig`, ``cost`` not a cost table or
        model, a budget or ``concurrency`` not an int.
    ValueError
        A profile other than ``sglang-0.5.23``, a budget below 1, listed twice or invalid for
        the configuration, no budgets, or a cost table missing a point it needs.

    Examples
    --------
    >>> import ngramspec as ns
    >>> from ngramspec.sweep.budget import best_budget
    >>> rows = [{"id": i, "prompt_ids": [1, 2, 3], "output_ids": [1, 2, 3] * 6}
    ...         for i in range(4)]
    >>> choice = best_budget(ns.NgramConfig(capacity=1000), rows,
    ...                      ns.CostModel(step_ms=10, token_ms=1), concurrency=2,
    ...                      budgets=(2, 4, 8), draft_ms=0)
    >>> {n: round(p.speed_up, 3) for n, p in choice.predictions.items()}
    {2: 1.619, 4: 2.061, 8: 1.962}
    >>> choice.draft_token_num, choice.config.draft_token_num, choice.pays
    (4, 4, True)
    """
    config = check_config(config, default=False)
    if config.profile != "sglang-0.5.23":
        raise ValueError(f"best_budget prices SGLang 0.5.23's NGRAM worker: the configuration "
                         f"must have profile 'sglang-0.5.23', not {config.profile!r}")
    if not isinstance(cost, (CostTable, CostModel)):
        raise TypeError(f"cost must be a CostTable or a CostModel, got {type(cost).__name__}")
    concurrency = as_positive_int(concurrency, "concurrency", "requests decoded together")
    sizes = _budgets(budgets)
    candidates = {}
    for n in sizes:
        try:
            candidates[n] = config.replace(draft_token_num=n)
        except ValueError as e:
            raise ValueError(f"budgets: draft_token_num={n} does not suit the configuration "
                             f"({e})") from None
    rows = read_streams(streams)
    from ..integrations.timing import time_drafting
    from ..simulate import simulate  # the serving loop sits below; numba loads only here

    predictions: dict[int, ServingPrediction] = {}
    tokens: dict[int, float] = {}
    for n, cfg in candidates.items():
        auto = cfg.min_expected_accept == "auto"
        result = simulate(rows, config=cfg, concurrency=concurrency,
                          costs=cost if auto else None)
        if draft_ms is None and not getattr(cost, "drafting_included", False):
            time_drafting(result, "sglang")
        predictions[n] = predict_serving(result, cost, draft_ms=draft_ms, engine="sglang")
        tokens[n] = float(result.tokens_per_step)
    best = sizes[0]
    for n in sizes[1:]:
        if predictions[n].speed_up > predictions[best].speed_up:  # a tie keeps the smaller
            best = n
    return BudgetChoice(candidates[best], best, predictions[best].concurrency, predictions,
                        tokens)
