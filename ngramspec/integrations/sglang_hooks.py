"""What SGLang's worker calls cannot tell the drop-in, told by the launcher's worker hook: each
new request's full prompt (``note_prompts``, at its extend batch, before the prefill forward) and
each departed request's full sequence (``note_finished``).  A mixin of
:class:`~ngramspec.integrations.sglang.NgramCorpus`."""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np

from .. import _validate as v

__all__ = ["NOTED_MAX", "WorkerHooks"]

#: Noted prompts of requests not drafted yet that are held at most (see
#: :meth:`~ngramspec.integrations.sglang.NgramCorpus.note_prompts`): a request aborted during
#: its prefill is never erased.
NOTED_MAX = 1024


class WorkerHooks:
    """``note_prompts`` and ``note_finished``, and what the drafting path reads of them:
    ``_prompts`` (noted prompts, as checked) and ``_final`` (departed requests' sequences)."""

    def note_prompts(self, req_ids: Sequence[Hashable], prompts: Sequence[Sequence[int]]) -> None:
        """The full prompts of requests not drafted yet (for ``index_prompt`` & co.; the
        worker's contexts hold only their last ``max_trie_depth`` tokens).  With
        ``local_index``, each new prompt's own index is built in the background from here on
        (:meth:`~ngramspec.Drafter.prepare`): the launcher's hook tells the prompts before the
        prefill forward, so their first ``batch_get`` finds them indexed.  A prompt noted
        again unchanged is skipped; of more than :data:`NOTED_MAX` requests noted and not
        drafted yet, the oldest are forgotten (they are indexed at their first ``batch_get``
        from what it shows)."""
        self._ready()
        keys = v.as_request_ids(list(req_ids))
        if isinstance(prompts, (str, bytes)) or not hasattr(prompts, "__len__"):
            raise TypeError("prompts must be a list of 1-D integer sequences, got "
                            f"{type(prompts).__name__}")
        if len(prompts) != len(keys):
            raise ValueError(f"{len(keys)} req_ids but {len(prompts)} prompts")
        dr = self._drafter
        new_at, keep = [], {}
        for i, (k, p) in enumerate(zip(keys, prompts)):
            held = self._prompts.get(k)
            fresh = dr is not None and k not in dr  # (in flight: already indexed)
            if held is None and fresh:
                new_at.append(i)  # checked by prepare_many, which keeps it as checked
                continue
            # checked, not converted: the drafter's indexing thread makes the int32 copies
            seq = v.checked_ids(p, f"prompts[{i}]")
            if held is not None and held.size == seq.size and np.array_equal(held, seq):
                continue  # noted again unchanged
            if fresh:
                new_at.append(i)  # (changed: prepared afresh)
            else:
                keep[k] = seq
        if new_at:  # checked there (once), all before anything changes
            try:
                held_new = dr.prepare_many([keys[i] for i in new_at],
                                           [prompts[i] for i in new_at])
            except (TypeError, ValueError):
                for i in new_at:  # the first bad one, by its place in this call
                    v.checked_ids(prompts[i], f"prompts[{i}]")
                raise
            keep.update(zip((keys[i] for i in new_at), held_new))
        self._prompts.update(keep)
        if len(self._prompts) > NOTED_MAX:
            flying = set(dr.requests) if dr is not None else set()
            idle = [k for k in self._prompts if k not in flying]
            for k in idle[:max(0, len(idle) - NOTED_MAX)]:
                self._forget(k)

    def note_finished(self, req_ids: Sequence[Hashable],
                      sequences: Sequence[Sequence[int]]) -> None:
        """The full sequences (prompt + output) of requests that left the batch, before the
        next ``batch_get``: their last step's tokens, which no later context shows."""
        keys = v.as_request_ids(list(req_ids))
        seqs = v.as_batch(list(sequences), "sequences")
        if len(seqs) != len(keys):
            raise ValueError(f"{len(keys)} req_ids but {len(seqs)} sequences")
        self._final.update(zip(keys, seqs))

    def _forget(self, key: Hashable) -> None:
        noted = self._prompts.pop(key, None) is not None
        self._final.pop(key, None)
        dr = self._drafter
        if noted and dr is not None and key in dr.prepared:
            dr.finish(key)  # its prepared prompt, never drafted

    def _first_sequence(self, key: Hashable, tail: np.ndarray, total: int
                        ) -> tuple[np.ndarray, int]:
        """(prompt, first token) of a request seen for the first time: its noted prompt and
        the first token after it, else its visible tail."""
        prompt = self._prompts.get(key)
        if prompt is not None:
            after = total - prompt.size
            if 1 <= after <= tail.size:
                return prompt, int(tail[tail.size - after])
        return tail[:-1], int(tail[-1])
