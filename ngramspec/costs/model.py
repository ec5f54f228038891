"""Will n-gram speculation pay off?  Predicted decode speed with and without it.

Without speculation every decode step emits one token per request and costs a plain decode
forward.  With it, every step is a verify forward over the draft tree (``draft_token_num``
tokens per request) plus the drafter's CPU time, and emits ``tokens_per_step`` tokens per
request on average (the simulator's pooled accept length).  So, per request::

    tokens/s without = 1000 / decode_ms
    tokens/s with    = 1000 * tokens_per_step / (verify_ms + draft_ms)
    speed-up         = tokens_per_step * decode_ms / (verify_ms + draft_ms)
    break-even       = (verify_ms + draft_ms) / decode_ms     (tokens per step needed)

A drafter that may send no draft at all (ngramspec's ADAPTIVE with ``min_expected_accept``;
SGLang always sends its padded tree) runs those steps as plain decodes: with a share
``verify_share`` of steps verifying, a step costs on average
``verify_share * verify_ms + (1 - verify_share) * decode_ms + draft_ms``, and that replaces
``verify_ms + draft_ms`` above.

This is the per-request formula for one accept length.  The serving prediction at a
concurrency, from measured forward times per batch and tree size and the simulated per-step
batch composition, is :mod:`ngramspec.costs` (which treats these models as special cases of a
cost table).

Step times come either measured (``decode_ms``, and ``verify_ms`` for a verify forward of the
tree size used) or from a linear model of a forward's time in the tokens it processes:
``step_ms + token_ms * tokens`` with ``concurrency`` tokens for a decode step and
``concurrency * draft_token_num`` for a verify step.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["CostModel", "Prediction"]


def _check_ms(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a number of milliseconds, got {type(value).__name__}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number of milliseconds >= 0, got {value}")
    return float(value)


@dataclass(frozen=True)
class Prediction:
    """What a :class:`CostModel` predicts for one accept length.

    Attributes
    ----------
    tokens_per_step : float
        Accept length used (accepted drafts + bonus, per verify step).
    decode_step_ms, verify_step_ms, draft_ms : float
        A plain decode forward, a speculative step's forward (a verify forward, or with
        ``verify_share < 1`` the mean over verify and plain steps), and the drafter's CPU time
        per step.
    baseline_tokens_per_s, speculative_tokens_per_s : float
        Per-request decode speed without and with speculation.
    speedup : float
        ``speculative / baseline``; below 1 speculation slows decoding down.
    break_even_tokens_per_step : float
        The accept length at which both are equally fast.
    """

    tokens_per_step: float
    decode_step_ms: float
    verify_step_ms: float
    draft_ms: float
    baseline_tokens_per_s: float
    speculative_tokens_per_s: float
    speedup: float
    break_even_tokens_per_step: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


@dataclass(frozen=True)
class CostModel:
    """Step times of the target model: measured (``decode_ms`` + ``verify_ms``) or linear
    (``step_ms`` + ``token_ms`` per token in the forward).  Keyword-only, milliseconds.

    Examples
    --------
    The measured case that started this (a plain decode step 12.2 ms, a verify step 30 ms):

    >>> from ngramspec import CostModel
    >>> m = CostModel(decode_ms=12.2, verify_ms=30.0)
    >>> p = m.predict(1.72)
    >>> round(p.baseline_tokens_per_s, 1), round(p.speculative_tokens_per_s, 1)
    (82.0, 57.3)
    >>> round(p.speedup, 2), round(p.break_even_tokens_per_step, 2)
    (0.7, 2.46)

    A linear model: 10 ms per forward plus 0.05 ms per token processed.

    >>> p = CostModel(step_ms=10, token_ms=0.05).predict(1.72, draft_token_num=12)
    >>> round(p.decode_step_ms, 2), round(p.verify_step_ms, 2), round(p.speedup, 2)
    (10.05, 10.6, 1.63)
    """

    decode_ms: float | None = None
    verify_ms: float | None = None
    step_ms: float | None = None
    token_ms: float | None = None

    def __post_init__(self) -> None:
        for name in ("decode_ms", "verify_ms", "step_ms", "token_ms"):
            object.__setattr__(self, name, _check_ms(name, getattr(self, name)))
        measured = self.decode_ms is not None or self.verify_ms is not None
        linear = self.step_ms is not None or self.token_ms is not None
        if measured and linear:
            raise ValueError("give either decode_ms and verify_ms (measured step times) or "
                             "step_ms and token_ms (linear model), not both")
        if measured and (self.decode_ms is None or self.verify_ms is None):
            raise ValueError("the measured model needs both decode_ms and verify_ms")
        if linear and (self.step_ms is None or self.token_ms is None):
            raise ValueError("the linear model needs both step_ms and token_ms")
        if not (measured or linear):
            raise ValueError("give decode_ms and verify_ms, or step_ms and token_ms")
        if self.decode_step_ms() <= 0:
            raise ValueError("a decode step must take more than 0 ms")

    @property
    def kind(self) -> str:
        """``"measured"`` or ``"linear"``."""
        return "measured" if self.decode_ms is not None else "linear"

    def decode_step_ms(self, concurrency: int = 1) -> float:
        """A plain decode forward (one token per request)."""
        if self.decode_ms is not None:
            return self.decode_ms
        assert self.step_ms is not None and self.token_ms is not None
        return self.step_ms + self.token_ms * concurrency

    def verify_step_ms(self, draft_token_num: int = 12, concurrency: int = 1) -> float:
        """A verify forward over trees of ``draft_token_num`` slots (root included)."""
        if self.verify_ms is not None:
            return self.verify_ms
        assert self.step_ms is not None and self.token_ms is not None
        return self.step_ms + self.token_ms * concurrency * draft_token_num

    def predict(self, tokens_per_step: float, *, draft_token_num: int = 12,
                concurrency: int = 1, draft_ms: float = 0.0,
                verify_share: float = 1.0) -> Prediction:
        """Predicted speeds for an accept length (see the module docstring for the formulas).

        Parameters
        ----------
        tokens_per_step : float
            Pooled tokens emitted per verify step (>= 1), e.g. ``SimulationResult.
            tokens_per_step``.
        draft_token_num, concurrency : int
            Tree size and batch size; used by the linear model only.
        draft_ms : float
            Drafting CPU time per step (e.g. ``SimulationResult.draft_ms_per_step``), added to
            the verify step.
        verify_share : float
            Share of steps that run a verify forward (default 1: all, as SGLang); the others
            emit their one token from a plain decode forward.  For a drafter that drafts
            nothing on some steps, ``Summary.share_steps_with_draft``.

        Examples
        --------
        Drafting only on the 40% of steps where it expects to pay off:

        >>> p = CostModel(decode_ms=12.2, verify_ms=30.0).predict(1.9, verify_share=0.4)
        >>> round(p.verify_step_ms, 2), round(p.speedup, 2)
        (19.32, 1.2)
        """
        if isinstance(tokens_per_step, bool) or not isinstance(tokens_per_step, (int, float)):
            raise TypeError(f"tokens_per_step must be a number, got "
                            f"{type(tokens_per_step).__name__}")
        if not tokens_per_step >= 1:
            raise ValueError(f"tokens_per_step must be >= 1 (every step emits its bonus token), "
                             f"got {tokens_per_step}")
        for name, v in (("draft_token_num", draft_token_num), ("concurrency", concurrency)):
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an int >= 1, got {v!r}")
        draft = _check_ms("draft_ms", draft_ms) or 0.0
        if isinstance(verify_share, bool) or not isinstance(verify_share, (int, float)) or \
                not 0.0 <= verify_share <= 1.0:
            raise ValueError(f"verify_share must be a number in [0, 1], got {verify_share!r}")
        dec = self.decode_step_ms(concurrency)
        ver = (verify_share * self.verify_step_ms(draft_token_num, concurrency)
               + (1.0 - verify_share) * dec + draft)
        base = 1000.0 / dec
        spec = 1000.0 * tokens_per_step / ver if ver > 0 else math.inf
        return Prediction(tokens_per_step=float(tokens_per_step), decode_step_ms=dec,
                          verify_step_ms=ver - draft, draft_ms=draft,
                          baseline_tokens_per_s=base, speculative_tokens_per_s=spec,
                          speedup=spec / base, break_even_tokens_per_step=ver / dec)
