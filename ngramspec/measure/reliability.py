"""How well ADAPTIVE's accept-length estimates hold: predicted beside realised, per verify step.

:func:`reliability` replays the serving loop step by step (as
:func:`~ngramspec.simulate` with ``backend="reference"`` does) and records, for every verify
step, the tree's expected accept length (``DraftBatch.expected_accept_lens``) and the tokens the
step emitted.  :class:`Reliability` bins them and draws the reliability plot.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from .. import _validate as v
from ..cache import BACKENDS
from ..config import NgramConfig
from ..drafter import Drafter
from ..simulate import _recorded_argmax, admit
from ..streams import read_streams
from ..drafts.verify import verify_greedy

__all__ = ["Reliability", "reliability", "DEFAULT_BINS"]

#: Bin edges of the predicted expected accept length in :meth:`Reliability.bins`.
DEFAULT_BINS = (1.0, 1.0 + 1e-9, 1.5, 2.0, 2.5, 3.0, 4.0, 6.0, 9.0, math.inf)


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
    lengths = [o.size for o in outputs]
    pred: list[float] = []
    real: list[int] = []
    out_len = [0] * len(rows)
    nxt, running = 0, []
    while nxt < len(rows) or running:
        nxt = admit(nxt, running, concurrency, lengths,
                    lambda r: drafter.add_request(ids[r], prompts[r], int(outputs[r][0])),
                    out_len)
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
