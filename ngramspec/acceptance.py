"""Acceptance estimates: calibrated probabilities, cost-optimal tree sizes, reliability.

ADAPTIVE scores a draft node by the probability that the target produces its whole path.
From counts alone (``freq(child) / total``) that estimate is optimistic where counts are small
or the matched context is short (a continuation seen once after a one-token match is far
from certain) and pessimistic on long matches in the request's own text (copying).  With
``NgramConfig(calibrated_estimates=True)`` each child's conditional probability is instead

    a + b * freq(child) / total        (clipped to [0, 1])

with ``(a, b)`` looked up by the child's *cell*: its source (the request's own trie or the
shared one), the length of the matched context it continues (bins ``CONTEXT_EDGES``), its
parent's count total (bins ``TOTAL_EDGES``), its parent's level below its anchor (bins
``LEVEL_EDGES``: how many drafted tokens of the path the child continues; once a long copy
has started, the next token is likelier than after one token) and whether it is its
parent's first candidate.
The table was fitted on the tuning part of the shipped streams (:mod:`ngramspec.holdout`) by
``benchmarks/fit_acceptance.py``; the construction is otherwise unchanged (best first by path
probability, now the calibrated one).

``min_expected_accept="auto"`` chooses the tree size from step costs: after construction,
every tree of a step is cut to its first ``k`` nodes (creation order, so every cut is a tree),
``k`` chosen for the batch, possibly 0 (a plain decode), to maximise
``sum_b E_b(k) - lam * t(batch, k + 1)``: the expected emitted tokens less the step's time
valued at ``lam``, the expected tokens per unit of time the run has made so far (so that the
run's tokens per unit of time are the largest, not each step's).  The step costs are
:func:`step_costs` of a :class:`~ngramspec.CostTable` or :class:`~ngramspec.CostModel`.

:func:`reliability` measures how well the estimates hold: per verify step the predicted
expected accept length beside the realised one, binned.

Examples
--------
Under the seed's flat costs (a verify step 2.46 decode steps), a weak tree alone is not worth
a verify; in a batch whose other tree makes the step a verify anyway, it rides along:

>>> import ngramspec as ns
>>> cfg = ns.NgramConfig(match_type="ADAPTIVE", min_expected_accept="auto", capacity=1000,
...                      draft_token_num=6)
>>> flat = ns.CostModel(decode_ms=12.2, verify_ms=30.0)
>>> cache = ns.NgramCache(config=cfg)
>>> cache.insert([[1, 2, 3, 4, 5, 6], [7, 8], [7, 9], [7, 10]])
>>> cache.match([[7]], costs=flat).num_drafts          # 3 guesses of 1/3 each: no draft
array([0], dtype=int32)
>>> cache.match([[7], [1]], costs=flat).num_drafts
array([3, 5], dtype=int32)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from ._acceptance_table import COEFFICIENTS, CONTEXT_EDGES, LEVEL_EDGES, TOTAL_EDGES
from .config import NgramConfig

__all__ = ["calibration_array", "step_costs", "check_costs", "Reliability", "reliability",
           "DEFAULT_BINS"]

#: Bin edges of the predicted expected accept length in :meth:`Reliability.bins`.
DEFAULT_BINS = (1.0, 1.0 + 1e-9, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 9.0, math.inf)


def _table() -> np.ndarray:
    nc, nt, nl = len(CONTEXT_EDGES), len(TOTAL_EDGES), len(LEVEL_EDGES)
    coef = np.asarray(COEFFICIENTS, np.float64).reshape(-1)
    if coef.size != 2 * 2 * nc * nt * nl * 2:
        raise RuntimeError("the acceptance table does not match its bin edges")
    return np.concatenate([[nc, nt, nl], CONTEXT_EDGES, TOTAL_EDGES, LEVEL_EDGES,
                           coef]).astype(np.float64)


_TABLE = _table()
_OFF = np.zeros(0, np.float64)


def calibration_array(config: NgramConfig) -> np.ndarray:
    """The table as the kernels take it: ``[nc, nt, nl, context edges, total edges, level
    edges, (a, b) per cell]`` (float64), or an empty array when
    ``config.calibrated_estimates`` is off.

    Examples
    --------
    >>> import ngramspec as ns
    >>> calibration_array(ns.NgramConfig.recommended()).size
    0
    >>> t = calibration_array(ns.NgramConfig.preset("calibrated"))
    >>> int(t[0]), int(t[1]), int(t[2]), t.size
    (10, 4, 5, 1622)
    """
    return _TABLE if config.calibrated_estimates else _OFF


def check_costs(config: NgramConfig, costs: Any) -> Any:
    """``costs`` checked against ``config``: required with ``min_expected_accept="auto"``
    (a :class:`~ngramspec.CostTable` or :class:`~ngramspec.CostModel`), refused otherwise."""
    from .costmodel import CostModel
    from .costs import CostTable

    auto = config.min_expected_accept == "auto"
    if costs is None:
        if auto:
            raise ValueError("min_expected_accept='auto' chooses tree sizes from step costs: "
                             "pass costs= (a CostTable, or a CostModel such as "
                             "CostModel(decode_ms=12.2, verify_ms=30))")
        return None
    if not isinstance(costs, (CostTable, CostModel)):
        raise TypeError(f"costs must be a CostTable or a CostModel, got "
                        f"{type(costs).__name__}")
    if not auto:
        raise ValueError(f"costs= only applies with min_expected_accept='auto' (this config "
                         f"has min_expected_accept={config.min_expected_accept!r})")
    return costs


def step_costs(costs: Any, batch_size: int, draft_token_num: int) -> np.ndarray:
    """``(draft_token_num,)`` float64: the time of a step of ``batch_size`` requests whose
    largest tree holds ``k`` drafts, ``t(batch_size, k + 1)``, for ``k = 0 .. n - 1``.

    Examples
    --------
    >>> import ngramspec as ns
    >>> step_costs(ns.CostModel(decode_ms=12.2, verify_ms=30.0), 4, 4).tolist()
    [12.2, 30.0, 30.0, 30.0]
    >>> step_costs(ns.CostModel(step_ms=10, token_ms=0.5), 2, 3).tolist()
    [11.0, 12.0, 13.0]
    """
    from .costmodel import CostModel
    from .costs import CostTable

    if isinstance(batch_size, bool) or not isinstance(batch_size, (int, np.integer)) or \
            batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1 (requests in the step's forward), "
                         f"got {batch_size!r}")
    n = int(draft_token_num)
    if isinstance(costs, CostModel):
        costs = CostTable.from_model(costs, max_batch=int(batch_size), max_tokens=max(n, 2))
    if not isinstance(costs, CostTable):
        raise TypeError(f"costs must be a CostTable or a CostModel, got "
                        f"{type(costs).__name__}")
    return costs.ms_array(np.full(n, int(batch_size)), np.arange(1, n + 1))


def cost_matrix(costs: Any, max_batch: int, draft_token_num: int) -> np.ndarray:
    """``(max_batch + 1, n)``: row ``b`` is :func:`step_costs` at batch ``b`` (row 0 unused)."""
    out = np.ones((max_batch + 1, draft_token_num), np.float64)
    for b in range(1, max_batch + 1):
        out[b] = step_costs(costs, b, draft_token_num)
    return out


@dataclass(frozen=True)
class Reliability:
    """Predicted and realised accept lengths, per verify step.

    Attributes
    ----------
    predicted : np.ndarray
        (S,) float64: ``DraftBatch.expected_accept_lens`` of the step's tree.
    realised : np.ndarray
        (S,) int64: tokens the step emitted (accepted drafts + bonus, cut at the end of the
        recording).
    """

    predicted: np.ndarray
    realised: np.ndarray

    def bins(self, edges: Sequence[float] = DEFAULT_BINS) -> list[dict[str, float]]:
        """Per bin ``[lo, hi)`` of the predicted value: ``lo``, ``hi``, ``steps``, ``share``,
        ``predicted`` and ``realised`` means and ``ratio`` (predicted / realised)."""
        p, r = self.predicted, self.realised
        out = []
        for lo, hi in zip(edges[:-1], edges[1:]):
            m = (p >= lo) & (p < hi)
            k = int(m.sum())
            if not k:
                continue
            pm, rm = float(p[m].mean()), float(r[m].mean())
            out.append(dict(lo=float(lo), hi=float(hi), steps=k, share=k / p.size,
                            predicted=pm, realised=rm, ratio=pm / rm))
        return out

    def worst(self, edges: Sequence[float] = DEFAULT_BINS, *, min_share: float = 0.01
              ) -> float:
        """The largest ``|ratio - 1|`` over the bins holding at least ``min_share`` of the
        steps."""
        return max((abs(b["ratio"] - 1.0) for b in self.bins(edges)
                    if b["share"] >= min_share), default=0.0)

    def plot(self, path: str, *, title: str = "", edges: Sequence[float] = DEFAULT_BINS,
             other: "Reliability | None" = None, labels: tuple[str, str] = ("", "")) -> None:
        """A reliability plot (needs matplotlib: ``pip install 'ngramspec[plot]'``): mean
        realised against mean predicted accept length per bin, marker area by share."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5.2, 4.6))
        top = 1.0
        for rel, label, color in ((self, labels[0], "C0"), (other, labels[1], "C3")):
            if rel is None:
                continue
            b = rel.bins(edges)
            x = [v["predicted"] for v in b]
            y = [v["realised"] for v in b]
            ax.plot(x, y, "-o", color=color, label=label or None, alpha=0.85)
            ax.scatter(x, y, s=[2000 * v["share"] for v in b], color=color, alpha=0.25)
            top = max(top, max(x), max(y))
        top = math.ceil(top + 0.5)
        ax.plot([1, top], [1, top], ":", color="gray", label="perfect")
        xs = np.linspace(1, top, 50)
        ax.fill_between(xs, xs / 1.1, xs / 0.9, color="gray", alpha=0.12, label="within 10%")
        ax.set_xlabel("predicted accept length (bin mean)")
        ax.set_ylabel("realised accept length (bin mean)")
        ax.set_xlim(1, top)
        ax.set_ylim(1, top)
        if title:
            ax.set_title(title, fontsize=10)
        ax.legend(loc="upper left", fontsize=8)
        fig.tight_layout()
        fig.savefig(path, dpi=110)
        plt.close(fig)


def reliability(streams: Any, *, config: NgramConfig, concurrency: int = 1,
                costs: Any = None, backend: str = "numba") -> Reliability:
    """Replay the serving loop (as :func:`~ngramspec.simulate` does, step by step through
    :class:`~ngramspec.Drafter`) and record every verify step's predicted and realised accept
    length.

    Parameters
    ----------
    streams : path, list of paths, or iterable of records
        Recorded greedy streams (:func:`~ngramspec.read_streams`).
    config : NgramConfig
        An ADAPTIVE configuration (the others estimate nothing).
    concurrency : int
        Requests decoded together.
    costs : CostTable or CostModel, optional
        With ``min_expected_accept="auto"``.
    backend : {"numba", "reference"}

    Examples
    --------
    >>> import ngramspec as ns
    >>> rows = [{"id": i, "prompt_ids": [1, 2, 3, 1, 2], "output_ids": [3, 1, 2, 3, 9]}
    ...         for i in range(2)]
    >>> rel = reliability(rows, config=ns.NgramConfig(match_type="ADAPTIVE", capacity=1000))
    >>> rel.predicted.tolist(), rel.realised.tolist()
    ([1.0, 4.5, 3.0], [1, 3, 4])
    """
    from . import _validate as v
    from .cache import BACKENDS
    from .drafter import Drafter
    from .simulate import _recorded_argmax
    from .streams import read_streams
    from .verify import verify_greedy

    config = v.check_config(config)
    if config.match_type != "ADAPTIVE":
        raise ValueError(f"reliability needs match_type='ADAPTIVE' (only it estimates accept "
                         f"lengths), got {config.match_type!r}")
    v.as_positive_int(concurrency, "concurrency", "requests decoded together")
    rows = read_streams(streams)
    drafter = Drafter(config=config, backend=v.check_backend(backend, BACKENDS), costs=costs)
    prompts = [np.asarray(r["prompt_ids"], np.int32) for r in rows]
    outputs = [np.asarray(r["output_ids"], np.int32) for r in rows]
    ids = [r["id"] for r in rows]
    pred: list[float] = []
    real: list[int] = []
    out_len = [0] * len(rows)
    nxt, running = 0, []
    while nxt < len(rows) or running:
        while nxt < len(rows) and len(running) < concurrency:
            out_len[nxt] = 1
            if outputs[nxt].size > 1:
                drafter.add_request(ids[nxt], prompts[nxt], int(outputs[nxt][0]))
                running.append(nxt)
            nxt += 1
        if not running:
            continue
        d = drafter.propose([ids[r] for r in running])
        result = verify_greedy(d, _recorded_argmax(d, running, outputs,
                                                   [out_len[r] for r in running]))
        expected = d.expected_accept_lens
        accepted = {}
        for b, r in enumerate(running):
            e = min(int(result.accept_lens[b]), outputs[r].size - out_len[r])
            pred.append(float(expected[b]))
            real.append(e)
            accepted[ids[r]] = outputs[r][out_len[r]:out_len[r] + e]
            out_len[r] += e
        drafter.accept(accepted)
        for r in running:
            if out_len[r] == outputs[r].size:
                drafter.finish(ids[r])
        running = [r for r in running if out_len[r] < outputs[r].size]
    return Reliability(np.asarray(pred, np.float64), np.asarray(real, np.int64))
