"""Admission into a :class:`~ngramspec.Drafter` (a mixin, as ``accept.py`` is of its
``accept``): a request's checks and its row (``add_request``), and ``prepare``, which indexes a
prompt and writes its row in a background thread while its prefill runs, for ``add_request``
or ``add_prepared`` to take up."""

from __future__ import annotations

from typing import Any, Hashable

import numpy as np

from .. import _validate as v
from ..cache import NgramCache
from ..errors import UnknownRequestError


__all__ = ["PrepareSteps"]

# The reference own tries' capacity: none they reach (nodes are made as they are used).
_UNBOUNDED = 2**31 - 1


class PrepareSteps:
    """:meth:`Drafter.prepare`'s machinery: ``_prepared`` holds each prepared id's prompt
    and its build (a future; None where nothing is built ahead), ``_indexer`` the one thread
    that builds them."""

    def _admit(self, key: Hashable, prompt: np.ndarray, first: int, built: Any,
               filled: int | None = None) -> None:
        """A checked request into a row (``built``: its prompt's own index, or None;
        ``filled``: a claimed row that holds its prompt already)."""
        store = self._store
        slot = (store.take(prompt, first) if filled is None
                else store.take_filled(filled, prompt.size, first))
        if len(self._local) < store.size.size:
            self._local += [None] * (store.size.size - len(self._local))
        cfg = self.config
        mem = self._mem
        if mem is not None:  # (with local_index, the admission's counts into its own trie)
            mem.grow(store.size.size)
            mem.start(store.buf, store.size, slot, 0 if cfg.index_prompt else prompt.size,
                      built)
            if cfg.local_index:
                self._slot[key] = slot
                self._local[slot] = mem.own(slot)
                return
        if cfg.local_index:
            # Its own trie counts exactly, whatever the shared one does, and never evicts (the
            # model of the compiled own index: its window rule is in _count).
            self._local[slot] = NgramCache(config=cfg.replace(
                index_prompt=False, exact_counts=True, local_index=False,
                shared_prompt_window=None, capacity=_UNBOUNDED), backend=self.cache.backend)
            self._own_base[slot] = max(0, (0 if cfg.index_prompt else prompt.size)
                                       - cfg.trie_depth + 1)
        self._slot[key] = slot
        if self._exact:
            self._count([slot], [0 if cfg.index_prompt else prompt.size])
        elif cfg.index_prompt and prompt.size:
            self.cache.insert([prompt])

    def _new_request(self, rid: Any, prompt_ids: Any, convert: bool = True
                     ) -> tuple[Hashable, np.ndarray]:
        """The checked id (not in flight) and prompt of a request to add or prepare (int32,
        or with ``convert=False`` an integer array checked to fit it)."""
        key = v.as_request_id(rid, "rid")
        if key in self._slot:
            raise ValueError(f"rid {rid!r} is already in flight; finish() it first or use a "
                             "new id")
        if not convert:
            return key, v.checked_ids(prompt_ids, "prompt_ids")
        return key, v.refuse_negative(v.as_sequence(prompt_ids, "prompt_ids"), "prompt_ids")

    @property
    def prepared(self) -> list[Hashable]:
        """Ids given to :meth:`prepare` and not added yet, in the order they came."""
        return list(self._prepared)

    def prepare(self, rid: Any, prompt_ids: Any) -> None:
        """Index a request's prompt now, in a background thread, while its prefill runs.

        With ``local_index`` (``recommended()``), :meth:`add_request` builds the request's own
        index of its whole prompt (about 0.3 µs per prompt token: 5 ms at 16k tokens).  Called
        when the prompt is known, before the prefill forward, ``prepare`` builds it in this
        drafter's indexing thread instead (its kernels release the GIL), together with the
        request's row, so that :meth:`add_request` (or :meth:`add_prepared`, which is not
        handed the prompt again) only waits for what is left of it and appends the first
        token.  An integer array is checked now and copied to int32 in that thread: it must
        not change until the request is added.
        The drafts are the same either way: ``add_request`` with the same prompt takes the
        prepared index (waiting for it if need be), with another prompt it builds afresh.
        Without ``local_index``, or on the reference backend, there is nothing to build
        ahead: the prompt is only checked and held.  :meth:`finish` forgets a prepared
        request that is never added.

        Parameters
        ----------
        rid : str or int
            The request's id (not in flight).
        prompt_ids : 1-D sequence of int
            The prompt's token ids, as :meth:`add_request` will get them.

        Examples
        --------
        >>> import ngramspec as ns
        >>> drafter = ns.Drafter(config=ns.NgramConfig.recommended())
        >>> drafter.prepare("a", [1, 2, 3, 4, 1, 2, 3])   # then the prefill forward runs
        >>> drafter.prepared
        ['a']
        >>> drafter.add_request("a", [1, 2, 3, 4, 1, 2, 3], first_token=4)
        >>> drafter.propose(["a"]).tokens[0, :4].tolist()
        [4, 1, 2, 3]
        """
        self.prepare_many([rid], [prompt_ids])

    def prepare_many(self, rids: Any, prompts: Any) -> list[np.ndarray]:
        """:meth:`prepare` of several requests (a server's extend batch): all checked before
        anything changes, the store's rows and width reserved once for all of them, and
        their builds handed to the indexing thread last, in one call (it would share the
        caller's core while the caller is still here).

        Parameters
        ----------
        rids : sequence of str or int
            The requests' ids (none in flight).
        prompts : sequence of 1-D sequences of int
            Their prompts, in the same order.

        Returns
        -------
        list of numpy.ndarray
            The prompts as held: an integer array as given, checked (its int32 copy is made
            in the indexing thread, so it must not change until the request is added),
            anything else as a new int32 array.
        """
        rids, prompts = list(rids), list(prompts)
        if len(rids) != len(prompts):
            raise ValueError(f"{len(rids)} rids but {len(prompts)} prompts")
        # Checked now, converted to int32 in the indexing thread: the serving thread pays a
        # reduction or two per prompt, not a copy (2 ms for 48 prompts of 16k int64 ids).
        checked = [self._new_request(rid, p, convert=False) for rid, p in zip(rids, prompts)]
        if not checked:
            return []
        for key, _ in checked:
            self._drop_prepared(key)
        store = self._store
        store.reserve(store.room_for(max(p.size for _, p in checked)))  # (no growth at add)
        store.reserve_rows(len(self._slot) + len(self._prepared) + len(checked))
        build = self._mem is not None and self.config.local_index
        if self._mem is not None:
            self._mem.grow(store.size.size)
        if build:
            from concurrent.futures import Future, ThreadPoolExecutor

            if self._indexer is None:
                self._indexer = ThreadPoolExecutor(1, thread_name_prefix="ngramspec-index")
        jobs = []
        for key, prompt in checked:
            job = Future() if build else None
            slot = store.claim() if build else None  # (its row written with the build)
            self._prepared[key] = (prompt, job, slot)
            if build:
                jobs.append((job, prompt, slot))
        if jobs:  # one hand-over for all of them, built in order
            self._indexer.submit(_build_all, self._mem, store, jobs,
                                 not self.config.index_prompt)
        return [p for _, p in checked]

    def add_prepared(self, rid: Any, first_token: int) -> None:
        """:meth:`add_request` of a prepared request with the prompt given to :meth:`prepare`
        (which was checked then, and is not compared again): the request starts drafting
        without its prompt passing the serving thread a second time.

        Parameters
        ----------
        rid : str or int
            An id given to :meth:`prepare` and not added or finished since.
        first_token : int
            The token the prefill emitted.

        Raises
        ------
        UnknownRequestError
            ``rid`` is not prepared (see :attr:`prepared`).

        Examples
        --------
        >>> import ngramspec as ns
        >>> drafter = ns.Drafter(config=ns.NgramConfig.recommended())
        >>> drafter.prepare("a", [1, 2, 3, 4, 1, 2, 3])
        >>> drafter.add_prepared("a", first_token=4)
        >>> drafter.propose(["a"]).tokens[0, :4].tolist()
        [4, 1, 2, 3]
        """
        key = v.as_request_id(rid, "rid")
        first = v.as_token(first_token, "first_token")
        got = self._prepared.pop(key, None)
        if got is None:
            raise UnknownRequestError(key, len(self._slot), prepared=len(self._prepared))
        held, job, slot = got
        if job is None:
            self._admit(key, np.ascontiguousarray(held, np.int32), first, None)
        else:
            row, built = job.result()
            self._admit(key, row, first, built, slot)

    def _take_prepared(self, key: Hashable, prompt: np.ndarray) -> tuple[Any, int | None]:
        """The own index :meth:`prepare` built for ``key``'s ``prompt`` and the row that holds
        the prompt ((None, None): none, or one of another prompt, which is dropped)."""
        got = self._prepared.get(key)
        if got is None or got[1] is None:
            self._prepared.pop(key, None)
            return None, None
        held = got[0]
        if held.size != prompt.size or not np.array_equal(held, prompt):
            self._drop_prepared(key)
            return None, None
        del self._prepared[key]
        return got[1].result()[1], got[2]

    def _drop_prepared(self, key: Hashable) -> bool:
        got = self._prepared.pop(key, None)
        if got is not None and got[1] is not None:
            job, slot, store = got[1], got[2], self._store
            if job.cancel():
                store.release(slot)
            else:  # (built or being built: its row is free once its fill is done)
                job.add_done_callback(lambda _: store.release(slot))
        return got is not None


def _build_all(mem: Any, store: Any, jobs: list, prompt_uncounted: bool) -> None:
    """The indexing thread's work for one :meth:`PrepareSteps.prepare_many`: each prompt's
    own index into its future, and the prompt into its claimed row, in order (a cancelled
    one skipped, a failure kept in its future for :meth:`~ngramspec.Drafter.add_request` to
    raise): ``(int32 prompt, index)``."""
    for job, prompt, slot in jobs:
        if not job.set_running_or_notify_cancel():
            continue
        try:
            row = np.ascontiguousarray(prompt, np.int32)
            built = mem.build(row, row.size, row.size if prompt_uncounted else 0, row.size + 1)
            store.fill(slot, row)
            job.set_result((row, built))
        except BaseException as e:  # raised where the request is added
            job.set_exception(e)
