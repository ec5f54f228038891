"""How each serving engine prices a step: one small table of rules.

A simulated step of ``b`` requests costs ``t(b, n) + draft_ms``; the engine that runs the
drafts decides ``n`` (the query tokens per request the forward processes) and which
drafting time is added.  Each engine is one row of :data:`ENGINES`:

- ``"custom"``: a decode loop of your own around :class:`~ngramspec.Drafter`.  SGLang's BFS
  and PROB trees are sent whole (``draft_token_num`` slots, padding included); ADAPTIVE
  sends its real drafts + the root (the batch's largest tree), so a step where no request
  has a draft is a plain decode (``n = 1``).  Drafting: the step API timed on your streams
  (:attr:`~ngramspec.SimulationResult.step_api_ms_per_step`).
- ``"sglang"``: SGLang 0.5.23's NGRAM worker.  It verifies exactly ``draft_token_num`` slots
  for every request at every step (its ``ngram_worker.py`` asserts ``total_draft_token_num ==
  bs * draft_token_num``; the drop-in pads ADAPTIVE trees to that width), and while
  speculation is on no step is a plain decode: ``n = draft_token_num`` always.  Drafting: the
  worker's calls on ngramspec's drop-in ``NgramCorpus`` (``synchronize``, ``batch_get``,
  ``batch_put``, ``erase_match_state``, and the launcher hook's ``note_prompts`` /
  ``note_finished`` beyond SGLang) timed on your streams
  (:attr:`~ngramspec.SimulationResult.sglang_ms_per_step`).  For SGLang-exact settings that
  is SGLang's algorithm call for call, on ngramspec's kernels, standing in for SGLang's own
  C++ class (not needed to predict; ``benchmarks/studies/sglang_adapter.py`` compares the two
  per call).  A cost table whose verify rows were recorded on an NGRAM server already holds
  the drafter's time (``drafting_included``): nothing is added on top.

- ``"vllm"``: vLLM 0.33's speculative decoding, which verifies chains only (profile
  ``vllm-0.33``, vLLM's n-gram proposer, or ``chain=True``, ngramspec's drafter through
  ``ngramspec.integrations.vllm.Proposer``).  A step's forward processes the tokens it
  schedules, with no padding: each request its chain + 1, a request without a draft one (a
  plain decode row).  Of ``T`` tokens over ``b`` requests the step costs ``t(b, T / b)``:
  the table's batch row at the mean tokens per request, linear between the measured token
  counts (a forward's cost follows its total tokens: ``b`` rows of ``T / b``).  Drafting:
  vLLM's n-gram, the compiled replay's time of its lookup (ngramspec's twin of vLLM's
  compiled function, :attr:`~ngramspec.SimulationResult.draft_ms_per_step`); ngramspec's
  chains, the step API timed on your streams (the proposer runs on it).

The baseline (no speculation) is the same for every engine: one decode token per request
per step, ``t(b, 1)``.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Engine", "ENGINES", "ENGINE_NAMES", "engine_of", "check_engine_config", "step_tokens",
           "drafting_ms"]


@dataclass(frozen=True)
class Engine:
    """One engine's pricing rule.

    Attributes
    ----------
    name : str
        ``"custom"``, ``"sglang"`` or ``"vllm"`` (the ``engine=`` value and the ``--engine``
        flag).
    fixed_width : bool
        Every request sends ``draft_token_num`` slots at every step (no plain decode while
        speculation is on); else ADAPTIVE's real trees set the width.
    mean_width : bool
        The forward processes each request's own tokens (its drafts + 1, no padding): a step
        is priced at the mean tokens per request (vLLM); else at the widest request.
    chains_only : bool
        The engine verifies chains only: configurations drafting trees are refused.
    drafting : str
        The :class:`~ngramspec.SimulationResult` attribute holding the drafting time per
        step this engine pays (the compiled replay's own time where it is None).
    drafting_words : str
        How reports name that figure's source.
    words : str
        How reports name the engine.
    """

    name: str
    fixed_width: bool
    drafting: str
    drafting_words: str
    words: str
    mean_width: bool = False
    chains_only: bool = False


ENGINES: dict[str, Engine] = {
    "custom": Engine("custom", False, "step_api_ms_per_step", "the step API, timed",
                     "a custom loop (real ADAPTIVE trees, plain decodes without drafts)"),
    "sglang": Engine("sglang", True, "sglang_ms_per_step",
                     "SGLang's worker calls on the drop-in NgramCorpus, timed",
                     "SGLang's NGRAM worker (draft_token_num slots per request, every step)"),
    "vllm": Engine("vllm", False, "vllm_ms_per_step",
                   "vLLM's n-gram: the compiled lookup's time; ngramspec's chains: the step "
                   "API, timed",
                   "vLLM (chains; each request's own tokens, no padding)", mean_width=True,
                   chains_only=True),
}

#: The names ``engine=`` and ``--engine`` take.
ENGINE_NAMES = tuple(ENGINES)


def engine_of(engine: Any) -> Engine:
    """The rule named ``engine`` (an :class:`Engine` passes through).

    Examples
    --------
    >>> engine_of("sglang").fixed_width
    True
    >>> engine_of("trt")
    Traceback (most recent call last):
    ...
    ValueError: engine must be one of custom, sglang, vllm, got 'trt'
    """
    if isinstance(engine, Engine):
        return engine
    if isinstance(engine, str) and engine in ENGINES:
        return ENGINES[engine]
    raise ValueError(f"engine must be one of {', '.join(ENGINE_NAMES)}, got {engine!r}")


def check_engine_config(engine: Engine, config: Any) -> None:
    """Refuse a configuration the engine cannot serve, in one line naming the way out:
    trees on vLLM (it verifies chains only), vLLM's own proposer on SGLang's worker.

    Examples
    --------
    >>> from ngramspec import NgramConfig
    >>> check_engine_config(ENGINES["vllm"], NgramConfig(profile="vllm-0.33"))
    >>> check_engine_config(ENGINES["vllm"], NgramConfig())
    Traceback (most recent call last):
    ...
    ValueError: engine 'vllm' verifies chains only, and this configuration drafts trees: ...
    """
    if engine.chains_only and not config.chains:
        raise ValueError(f"engine {engine.name!r} verifies chains only, and this configuration "
                         "drafts trees: use profile 'vllm-0.33' (vLLM's n-gram proposer) or "
                         "chain=True (--chain true; ngramspec's drafter through "
                         "ngramspec.integrations.vllm.Proposer)")
    if engine.fixed_width and config.vllm:
        raise ValueError(f"profile {config.profile!r} is vLLM's proposer, which SGLang's worker "
                         "does not run: price it with engine 'vllm' (--engine vllm)")


def step_tokens(engine: Engine, *, draft_token_num: int, padded: bool, steps: int,
                step_of: np.ndarray, sent: np.ndarray) -> np.ndarray:
    """``n_s`` of every step: query tokens per request in its forward (float64 for an engine
    priced at the mean, ``mean_width``; int64 otherwise).

    Parameters
    ----------
    engine : Engine
    draft_token_num : int
        The configuration's slots per request.
    padded : bool
        Whether the match mode sends whole padded trees (SGLang's BFS and PROB).
    steps : int
        Steps in the run.
    step_of, sent : np.ndarray
        Per request-step, the run's step it falls in and its real drafts + 1 (the root).

    Examples
    --------
    >>> step_of, sent = np.array([0, 0, 1]), np.array([3, 1, 1])
    >>> step_tokens(ENGINES["custom"], draft_token_num=8, padded=False, steps=3,
    ...             step_of=step_of, sent=sent).tolist()
    [3, 1, 1]
    >>> step_tokens(ENGINES["sglang"], draft_token_num=8, padded=False, steps=3,
    ...             step_of=step_of, sent=sent).tolist()
    [8, 8, 8]
    >>> step_tokens(ENGINES["vllm"], draft_token_num=8, padded=False, steps=3,
    ...             step_of=step_of, sent=sent).tolist()
    [2.0, 1.0, 1.0]
    """
    if engine.mean_width:
        total = np.zeros(steps, np.float64)
        rows = np.zeros(steps, np.float64)
        np.add.at(total, step_of, sent)
        np.add.at(rows, step_of, 1.0)
        return np.where(rows > 0, total / np.maximum(rows, 1.0), 1.0)
    if engine.fixed_width or padded:
        return np.full(steps, draft_token_num, np.int64)
    tokens = np.ones(steps, np.int64)
    np.maximum.at(tokens, step_of, sent)
    return tokens


def drafting_ms(engine: Engine, result: Any, cost: Any) -> tuple[float, str]:
    """The drafting time per step ``engine`` pays on ``result``'s streams, and where the figure
    comes from (for reports).

    A cost table whose verify rows hold the drafter's time (``drafting_included``: step times
    of an NGRAM server) gives 0: the step times already hold it (such a table describes
    SGLang's server, which ``"sglang"`` prices as it runs)."""
    if getattr(cost, "drafting_included", False):
        return 0.0, "included in the cost table's verify rows"
    # A result type without the figure has none; an error while computing it is raised (a
    # default here would silently swap the figure for the replay's own time).
    try:
        inspect.getattr_static(result, engine.drafting)
    except AttributeError:
        measured = None
    else:
        measured = getattr(result, engine.drafting)
    if measured is not None:
        return float(measured), engine.drafting_words
    if getattr(result, "timing_streams", None) is not None:  # could be timed, was not
        raise ValueError(f"the result's drafting time for engine {engine.name!r} is not "
                         f"measured ({engine.drafting} is None): call "
                         f"ngramspec.time_drafting(result, engine={engine.name!r}) first, or "
                         "pass draft_ms=")
    return float(result.draft_ms_per_step), "the compiled replay's own time (a low estimate)"
