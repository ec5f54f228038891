"""Adapters to serving engines' interfaces.

:mod:`ngramspec.integrations.sglang`
    ``NgramCorpus``: a drop-in for SGLang 0.5.23's NGRAM drafter class, backed by ngramspec
    (any :class:`~ngramspec.NgramConfig`); imports nothing of SGLang.
:mod:`ngramspec.integrations.sglang_legacy`
    ``NgramCache``: the same for SGLang 0.5.9's window-era class.
:mod:`ngramspec.integrations.sglang_replay`
    SGLang's worker's call sequence on recorded streams, against either class (checks).
:mod:`ngramspec.integrations.sglang_launch`
    Switching it on in SGLang's server (``ngramspec sglang-launch``, SGLang's plugin entry
    point); the one place that imports SGLang, and only when run.
:mod:`ngramspec.integrations.vllm`
    ``Proposer``: ngramspec's chains as vLLM 0.33's ``custom_class`` speculative proposer
    (configured from the environment; imports nothing of vLLM).

Nothing is imported here eagerly: ``import ngramspec`` loads only
:mod:`ngramspec.integrations.timing` (``ngramspec.time_drafting``: what each engine pays for
drafting, timed on a simulation's streams), which loads the drop-in only when asked.
"""
