"""Offline acceptance simulation: SGLang's serving loop replayed on recorded greedy streams.

The loop (SGLang 0.5.23, greedy verification), exactly::

    queue = streams in file order; running = []
    until queue and running are empty:
        while queue and len(running) < concurrency:           # admission (prefill)
            take the next stream; out = [output_ids[0]]        # prefill emits the first token
            if it has more output tokens, append it to running # (prefill neither matches nor inserts)
        contexts   = last max_trie_depth tokens of prompt+out, per running request, in order
        total_lens = len(prompt) + len(out)
        drafts = cache.match(contexts, request_ids=ids, total_lens=total_lens)
        per request: greedy-verify its tree against the recorded continuation
            output_ids[len(out):] (the target's argmax along the recorded path is the next
            recorded token); emitted = accepted drafts + bonus, cut at the end of the recording
        cache.insert(contexts)                                 # the same windows, batch order
        append emitted to out; requests whose out is complete leave running (order kept)
        (and their match states are erased)

What is matched and inserted where and when follows the profile and the options as
:class:`~ngramspec.Drafter` defines it (for ``sglang-0.5.9`` that release's worker, for
``index_prompt`` & co. what they insert).  With the ``numba`` backend the whole loop runs in the
engine's compiled replay (:func:`ngramspec.engine.serving.replay.replay`), for every configuration;
with ``"reference"`` it is driven step by step through the public ``Drafter`` on the
pure-Python cache and :func:`~ngramspec.verify_greedy` (the readable path).  Both give identical
per-step counts (tested for every combination of profile, match type and options).
This package prepares the inputs and reports; it holds no engine array:
:mod:`~ngramspec.simulate.runs` (the entry points), :mod:`~ngramspec.simulate.results` (what
they return), :mod:`~ngramspec.simulate.stepwise` (the loop through the public calls).
"""

from .results import TOKEN_FIELDS, SimulationResult, StreamResult, Summary, pool_results  # noqa: F401
from .runs import simulate, simulate_stream
from .stepwise import TRIE_SOURCE, _recorded_argmax, _replay_stepwise, admit  # noqa: F401

__all__ = ["simulate", "SimulationResult", "Summary", "simulate_stream", "StreamResult",
           "pool_results", "admit"]
