"""External corpora (SGLang 0.5.23, spec §3.6): the corpora of one cache, their order, the
budget split and the merge of their draft trees into the trie's.

A corpus is a list of token documents joined by the separator ``INT32_MIN`` into one stream,
from which a suffix automaton is built once (:mod:`ngramspec.reference.sam` is the readable
model, :mod:`ngramspec.engine.corpora.sam` the Numba one).  With ``external_sam_budget > 0`` every match
splits the draft budget between the trie and the loaded corpora, asks each corpus for its own
small tree and merges them in SGLang's corpus order, which is the iteration order of a
libstdc++ ``std::unordered_map<std::string, ...>`` (:class:`~ngramspec.stdorder.CorpusOrder`).

:class:`~ngramspec.NgramCache` owns one :class:`Corpora` and delegates ``add_corpus``,
``remove_corpus``, ``clear_corpora`` and ``corpora`` to it.
"""

from __future__ import annotations

import collections.abc
import json
import os
from typing import Any, Hashable, Iterable, Sequence

import numpy as np

from .. import _validate as v
from ..config import NgramConfig
from ..stdorder import CorpusOrder, string_hash

__all__ = ["SEPARATOR", "string_hash", "CorpusOrder", "Corpora", "corpus_stream", "read_corpus",
           "tree_paths", "automaton_bytes"]

#: The token SGLang puts between the documents of a corpus (``INT32_MIN``).
SEPARATOR = -(2**31)
_INT32_MAX = 2**31 - 1


def _as_document(doc: Any, i: int) -> np.ndarray:
    """One document as an int32 array; a clear error for anything else."""
    name = f"documents[{i}]"
    doc = v.host_array(doc, name)  # a tensor's values, on the host
    if isinstance(doc, (str, bytes, bytearray)) or not (
            isinstance(doc, (collections.abc.Sequence, np.ndarray))):
        raise TypeError(f"{name} must be a 1-D sequence of integer token ids (list, tuple, "
                        f"range or integer array), got {type(doc).__name__}")
    if isinstance(doc, np.ndarray):
        arr = doc
    else:
        items = list(doc)
        for t in items:
            if isinstance(t, (bool, np.bool_)) or not isinstance(t, (int, np.integer)):
                raise TypeError(f"{name} must hold integer token ids, found "
                                f"{type(t).__name__} {t!r}")
        try:
            arr = np.asarray(items, dtype=np.int64) if items else np.zeros(0, np.int64)
        except OverflowError:
            raise ValueError(f"{name} holds a token id outside int32 "
                             f"[{SEPARATOR}, {_INT32_MAX}]") from None
    if arr.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got an array of shape {arr.shape}")
    if arr.size and arr.dtype.kind not in "iu":
        raise TypeError(f"{name} must hold integer token ids, got dtype {arr.dtype}")
    if arr.size:
        lo, hi = int(arr.min()), int(arr.max())
        if lo < SEPARATOR or hi > _INT32_MAX:
            raise ValueError(f"{name} holds token ids outside int32 [{SEPARATOR}, "
                             f"{_INT32_MAX}]: min {lo}, max {hi}")
        if lo == SEPARATOR:
            raise ValueError(f"{name} holds the token id {SEPARATOR} (INT32_MIN), the document "
                             "separator; SGLang would silently split the document there")
    return arr.astype(np.int32, copy=False)


def corpus_stream(documents: Iterable[Any]) -> np.ndarray:
    """The token stream of a corpus: its non-empty documents joined by :data:`SEPARATOR`.

    Empty documents are skipped, as SGLang does.  Raises TypeError / ValueError naming the
    offending document.

    Examples
    --------
    >>> corpus_stream([[1, 2, 3], [], [7, 1]]).tolist()
    [1, 2, 3, -2147483648, 7, 1]
    """
    if isinstance(documents, (str, bytes, bytearray, np.ndarray)) and (
            not isinstance(documents, np.ndarray) or documents.ndim != 2):
        raise TypeError("documents must be an iterable of token-id sequences (one per "
                        f"document), got {type(documents).__name__}"
                        + (f" of shape {documents.shape}"
                           if isinstance(documents, np.ndarray) else ""))
    if not isinstance(documents, collections.abc.Iterable):
        raise TypeError("documents must be an iterable of token-id sequences, got "
                        f"{type(documents).__name__}")
    docs = list(documents)
    if docs and all(isinstance(t, (int, np.integer)) and not isinstance(t, bool) for t in docs):
        raise TypeError("documents must be a list of documents (token-id sequences), got a "
                        "flat sequence of ints; wrap one document as [tokens]")
    parts: list[np.ndarray] = []
    sep = np.full(1, SEPARATOR, np.int32)
    for i, doc in enumerate(docs):
        arr = _as_document(doc, i)
        if arr.size == 0:
            continue
        if parts:
            parts.append(sep)
        parts.append(arr)
    return np.concatenate(parts) if parts else np.zeros(0, np.int32)


def read_corpus(path: str | os.PathLike, *, tokenizer: Any = None) -> list[list[int]]:
    """The documents of a JSONL corpus file, read as SGLang reads
    ``--speculative-ngram-external-corpus-path``: blank lines are skipped, every other line is
    one document, a JSON string tokenised without special tokens.  ngramspec also accepts a
    JSON list of token ids per line (no tokenizer needed).

    Parameters
    ----------
    path : str or os.PathLike
    tokenizer : optional
        For string lines: an object with ``encode(text, add_special_tokens=False)`` (a Hugging
        Face tokenizer, e.g. ``AutoTokenizer.from_pretrained(local_dir)``) or a callable
        ``text -> token ids``.

    Examples
    --------
    >>> import os, tempfile
    >>> path = os.path.join(tempfile.mkdtemp(), "corpus.jsonl")
    >>> with open(path, "w") as f:
    ...     _ = f.write("[1, 2, 3]" + chr(10) + chr(10) + "[7, 1]" + chr(10))
    >>> read_corpus(path)
    [[1, 2, 3], [7, 1]]
    """
    docs: list[list[int]] = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{os.fspath(path)} line {number}: not JSON ({e.msg})") from None
            if isinstance(value, str):
                if tokenizer is None:
                    raise ValueError(
                        f"{os.fspath(path)} line {number} is text: pass a tokenizer (the "
                        "target model's, e.g. a local Hugging Face tokenizer directory), or "
                        "write each document as a JSON list of token ids")
                ids = (tokenizer.encode(value, add_special_tokens=False)
                       if hasattr(tokenizer, "encode") else tokenizer(value))
                docs.append([int(t) for t in ids])
            elif isinstance(value, list) and all(
                    isinstance(t, int) and not isinstance(t, bool) for t in value):
                docs.append(value)
            else:
                raise ValueError(f"{os.fspath(path)} line {number}: a document must be a JSON "
                                 f"string or a list of integer token ids, got "
                                 f"{type(value).__name__}")
    return docs


class Corpora:
    """The external corpora of one cache: automata, token counts, SGLang's corpus order.

    Not thread-safe by itself: :class:`~ngramspec.NgramCache` calls it under its lock.
    ``backend`` is ``"reference"`` (Python automata) or ``"numba"`` (flat arrays).
    """

    def __init__(self, config: NgramConfig, backend: str) -> None:
        self.config = config
        self.backend = backend
        self.order = CorpusOrder()
        self.automata: dict[str, Any] = {}
        self.tokens: dict[str, int] = {}
        self.streams: dict[str, np.ndarray] = {}  # kept for save(): 4 bytes per token
        #: The trees the last :meth:`match` merged, in merge order: ``("", trie result)`` then
        #: ``(corpus_id, corpus result)``; each result is ``(tokens, mask)`` for the batch.
        self.last_parts: list[tuple[str, tuple[np.ndarray, np.ndarray]]] = []
        #: Keep :attr:`last_parts` (numba backend: one call per corpus instead of one kernel
        #: for all; the reference backend always keeps them; matches with ``corpora=`` chosen
        #: per request keep none).
        self.record_parts = False
        self._kernel_list = None  # numba backend: the automata's pool, as the kernel takes it
        self._split = (0, config.budget)  # split() of the automata in _kernel_list
        self._cp: tuple = ()  # the fused kernel's corpus parameters and scratch (numba)
        self._cs: tuple = ()
        self._walks: list = []

    # Management ------------------------------------------------------------------------

    def add(self, corpus_id: Any, documents: Iterable[Any], max_bytes: Any = None) -> int:
        cfg = self.config
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(
                max_bytes, (int, np.integer)) or max_bytes < 1):
            raise ValueError(f"max_bytes must be a positive int (bytes) or None, got "
                             f"{max_bytes!r}")
        if not isinstance(corpus_id, str):
            raise TypeError(f"corpus_id must be a str, got {type(corpus_id).__name__} "
                            f"{corpus_id!r}")
        if not corpus_id:
            raise ValueError("corpus_id must be a non-empty string")
        try:
            corpus_id.encode("utf-8")  # SGLang hashes its UTF-8 bytes
        except UnicodeEncodeError:
            raise ValueError(f"corpus_id {corpus_id!r} is not valid Unicode text (it holds a "
                             "lone surrogate)") from None
        if cfg.external_sam_budget == 0:
            raise ValueError("external_sam_budget is 0, so corpora would never be consulted "
                             "(SGLang loads them and ignores them); create the cache with "
                             "external_sam_budget > 0 to draft from corpora")
        stream = corpus_stream(documents)
        if corpus_id in self.automata:
            raise ValueError(f"corpus {corpus_id!r} is already loaded; remove it before adding "
                             "a corpus with the same id")
        total = int(stream.size)
        if total == 0:
            raise ValueError(f"corpus {corpus_id!r} has no tokens (no documents, or only empty "
                             "ones)")
        cap = cfg.external_corpus_max_tokens
        if total > cap:
            raise ValueError(f"corpus {corpus_id!r} has {total} tokens (separators included), "
                             f"more than external_corpus_max_tokens ({cap}); nothing loaded "
                             "(SGLang would load the documents that fit and drop the rest)")
        left = cap - sum(self.tokens.values())
        if total > left:
            raise ValueError(f"corpus {corpus_id!r} has {total} tokens but only {left} of "
                             f"external_corpus_max_tokens ({cap}) are left by the loaded "
                             f"corpora; remove one first")
        # The bound: refused before building when even the fewest states and transitions a
        # stream of this length makes would exceed it, else after building (nothing kept).
        least = automaton_bytes(total + 1, total, prob=cfg.mode.ranked) + 4 * total
        if max_bytes is not None and least > max_bytes:
            raise ValueError(_over_bytes(corpus_id, f"at least {least}", max_bytes))
        automaton = self._build(stream)
        size = self._bytes(automaton) + 4 * total
        if max_bytes is not None and size > max_bytes:
            raise ValueError(_over_bytes(corpus_id, str(size), max_bytes))
        self.streams[corpus_id] = np.ascontiguousarray(stream, dtype=np.int32)
        self.automata[corpus_id] = automaton
        self.tokens[corpus_id] = total
        self.order.insert(corpus_id)
        self._kernel_list = None
        return total

    def _build(self, stream: np.ndarray):
        if self.backend == "numba":
            from ..engine.corpora.sam import FlatAutomaton
            return FlatAutomaton.build(stream, prob=self.config.mode.ranked)
        from ..reference.sam import SuffixAutomaton
        return SuffixAutomaton.build(stream.tolist())

    def _bytes(self, automaton: Any) -> int:
        """Bytes of an automaton in the engine's records, whichever backend holds it."""
        if self.backend == "numba":
            return int(automaton.nbytes())
        return int(automaton.nbytes(prob=self.config.mode.ranked))

    def remove(self, corpus_id: Any) -> None:
        if not isinstance(corpus_id, str):
            raise TypeError(f"corpus_id must be a str, got {type(corpus_id).__name__} "
                            f"{corpus_id!r}")
        if corpus_id not in self.automata:
            loaded = ", ".join(repr(c) for c in self.order) or "none"
            raise KeyError(f"no corpus {corpus_id!r} is loaded (loaded: {loaded})")
        del self.automata[corpus_id]
        del self.tokens[corpus_id]
        del self.streams[corpus_id]
        self.order.erase(corpus_id)
        self._kernel_list = None
        if self.backend == "numba":  # the pool held the removed records too: free them now
            for automaton in self.automata.values():
                automaton.own()

    def clear(self) -> None:
        self.automata.clear()
        self.tokens.clear()
        self.streams.clear()
        self.order.clear()
        self._kernel_list = None

    def counts(self) -> dict[str, int]:
        """``{corpus_id: token_count}`` in SGLang's corpus order."""
        return {cid: self.tokens[cid] for cid in self.order}

    def ordered_automata(self) -> list:
        """The automata in SGLang's corpus order (the merge order)."""
        return [self.automata[c] for c in self.order]

    def nbytes(self) -> dict[str, int]:
        """Bytes of each corpus's automaton in the engine's layout (both backends)."""
        return {cid: self._bytes(self.automata[cid]) for cid in self.order}

    def info(self) -> dict[str, dict[str, int]]:
        """Per corpus, in SGLang's order: ``tokens`` (separators included) and ``bytes`` (the
        automaton in the engine's layout and the token stream kept for saving)."""
        return {cid: {"tokens": self.tokens[cid],
                      "bytes": self._bytes(self.automata[cid]) + 4 * self.tokens[cid]}
                for cid in self.order}

    # Persistence -----------------------------------------------------------------------

    def export(self) -> dict[str, Any]:
        """The corpus fields of :class:`~ngramspec._canonical.CanonicalContent`."""
        order = self.order
        return dict(corpus_ids=list(order), corpus_streams=[self.streams[c] for c in order],
                    corpus_table=(order.bucket_count, order._next_resize))

    def restore(self, ids: list[str], streams: list[np.ndarray],
                table: tuple[int, int]) -> None:
        """Rebuild saved corpora (checked by the file reader) into this empty collection, the
        corpus table as it was (so that later adds land where they would have)."""
        for cid, stream in zip(ids, streams):
            self.automata[cid] = self._build(stream)
            self.tokens[cid] = int(stream.size)
            self.streams[cid] = stream
        self.order.restore(ids, *table)
        self._kernel_list = None

    # Matching --------------------------------------------------------------------------

    def split(self) -> tuple[int, int]:
        """``(per-corpus budget, trie budget)`` of SGLang's ``batchMatch`` (§3.6.7)."""
        if self._kernel_list is not None:  # unchanged since the last match
            return self._split
        total = self.config.budget
        k = len(self.automata)
        sam_total = min(self.config.external_sam_budget, total) if k else 0
        per = sam_total // k if k else 0
        if per == 0:
            return 0, total
        return per, total - per * k

    @property
    def active(self) -> bool:
        """Whether matches draft from corpora now (a budget of at least 1 per corpus)."""
        return self.split()[0] > 0

    def match(self, backend, contexts: Sequence[np.ndarray], keys: Sequence[Hashable] | None,
              total_lens: np.ndarray | None, selection: list | None = None,
              ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The trie's tree with the reduced budget, then each corpus's merged in, in corpus
        order; the same shapes as a trie-only match.  ``selection`` (from
        :meth:`check_selection`): per request, the corpora it draws from (None: all)."""
        if selection is None and self._kernel_list is not None and not self.record_parts:
            # Serving's common case: prepared, one fused kernel call (numba backend only
            # prepares a kernel list).
            return backend.match_corpora(contexts, keys, total_lens, self._split[1],
                                         self._kernel_list, self._cp, self._cs, self._walks)
        cfg = self.config
        if selection is not None and self.backend == "numba":
            if not self.automata:  # every request chose none: the trie alone
                return backend.match(contexts, keys, total_lens)
            if self._kernel_list is None:
                self._prepare_kernel(*self.split())
            index = {cid: k for k, cid in enumerate(self.order)}
            sel = np.zeros((len(contexts), len(index)), np.int32)
            for b, chosen in enumerate(selection):
                if chosen is None:
                    sel[b] = 1
                else:
                    sel[b, [index[c] for c in chosen]] = 1
            return backend.match_corpora(contexts, keys, total_lens, cfg.budget,
                                         self._kernel_list, self._cp, self._cs, self._walks,
                                         sel)
        if selection is not None:  # the reference: request by request, each its own split
            rows = [self._match_subset(backend, [ctx], None if keys is None else [keys[b]],
                                       None if total_lens is None else total_lens[b:b + 1],
                                       self.order if selection[b] is None else
                                       [c for c in self.order if c in selection[b]])
                    for b, ctx in enumerate(contexts)]
            return (np.concatenate([r[0] for r in rows]), np.concatenate([r[1] for r in rows]),
                    np.concatenate([r[2] for r in rows]))
        per, trie_budget = self.split()
        if self.backend == "numba" and not self.record_parts:
            if self._kernel_list is None:
                self._prepare_kernel(per, trie_budget)
            return backend.match_corpora(contexts, keys, total_lens, trie_budget,
                                         self._kernel_list, self._cp, self._cs, self._walks)
        return self._match_subset(backend, contexts, keys, total_lens, list(self.order),
                                  record=True)

    def match_serving(self, backend, one: tuple | None = None, packed: tuple | None = None,
                      keys: list | None = None) -> tuple | None:
        """Serving's calls, every corpus drawn from, the drafts in rows of the backend's output
        pool: one request ``one`` (context, id, total length) or a ``packed`` batch (flat
        tokens, offsets, total lengths) with ids ``keys``.  ``(pool, start, stop)``, or None
        where this backend has no pool (then :meth:`match`).  Only while :attr:`active`
        (checked by the caller): the kernel needs a budget of at least 1 per corpus."""
        if self.record_parts or not backend.pooled:
            return None
        if self._kernel_list is None:
            self._prepare_kernel(*self.split())
        args = (self._split[1], self._kernel_list, self._cp, self._cs, self._walks)
        if one is not None:
            pool, at = backend.match_one_corpora(*one, *args)
            return pool, at, at + 1
        return backend.match_packed_corpora(packed[0], packed[1], keys, packed[2], *args)

    def _match_subset(self, backend, contexts, keys, total_lens, ids: list[str],
                      record: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The readable path: the trie's tree for the split over ``ids``, then one merge per
        corpus of ``ids`` (in the order given)."""
        cfg = self.config
        k = len(ids)
        per = min(cfg.external_sam_budget, cfg.budget) // k if k else 0
        if per == 0:
            return backend.match(contexts, keys, total_lens)
        tokens, mask, num = backend.match(contexts, keys, total_lens,
                                          budget=cfg.budget - per * k)
        last = np.fromiter((int(c[-1]) for c in contexts), np.int32, len(contexts))
        if self.backend == "numba":
            from ..engine.corpora import sam as impl
        else:
            from ..reference import sam as impl  # type: ignore[no-redef]
        parts = [("", (tokens, mask))]
        for cid in ids:
            own = _draft_batch(self.automata[cid], contexts, per, cfg)
            parts.append((cid, own))
            tokens, mask, num = impl.merge_batch(last, cfg.draft_token_num, (tokens, mask), own)
        if record:
            self.last_parts = parts
        return tokens, mask, num

    def check_selection(self, corpora: Any, count: int) -> list | None:
        """``match(..., corpora=)`` checked: per request None (every loaded corpus) or a
        frozenset of loaded corpus ids; a clear error naming the request otherwise."""
        if corpora is None:
            return None
        if isinstance(corpora, (str, bytes)) or not isinstance(corpora, collections.abc.Sequence):
            raise TypeError("corpora must be a sequence with one entry per context (a "
                            "collection of corpus ids, or None for every loaded corpus), got "
                            f"{type(corpora).__name__}")
        if len(corpora) != count:
            raise ValueError(f"corpora has {len(corpora)} entries for {count} contexts; give "
                             "one per context")
        if self.config.external_sam_budget == 0:
            raise ValueError("corpora= chooses external corpora per request, but this cache "
                             "has external_sam_budget 0 (no corpora)")
        out: list = []
        for i, chosen in enumerate(corpora):
            if chosen is None:
                out.append(None)
                continue
            if isinstance(chosen, (str, bytes)) or not isinstance(chosen,
                                                                  collections.abc.Iterable):
                raise TypeError(f"corpora[{i}] must be a collection of corpus ids or None, got "
                                f"{type(chosen).__name__} {chosen!r}")
            try:
                ids = frozenset(chosen)
            except TypeError:
                raise TypeError(f"corpora[{i}] must hold corpus ids (str), got "
                                f"{chosen!r}") from None
            for cid in ids:
                if cid not in self.automata:
                    loaded = ", ".join(repr(c) for c in self.order) or "none"
                    raise ValueError(f"corpora[{i}] names {cid!r}, which is not loaded "
                                     f"(loaded: {loaded})")
            out.append(ids)
        return out

    def _prepare_kernel(self, per: int, trie_budget: int) -> None:
        """The fused kernel's inputs for the loaded corpora (rebuilt after every change)."""
        from ..engine.corpora.sam import automata_pool, corpus_scratch, corpus_walks

        cfg = self.config
        automata = [self.automata[c] for c in self.order]
        prob = cfg.mode.ranked
        self._split = (per, trie_budget)
        self._cp = (int(per), int(cfg.draft_token_num), int(cfg.trie_depth),
                    int(cfg.min_bfs_breadth), int(cfg.max_bfs_breadth), prob)
        # Sized for any split a request's choice of corpora can make (one corpus: the most
        # per corpus; the trie's row: the whole budget).
        self._cs = corpus_scratch(min(cfg.external_sam_budget, cfg.budget), cfg.draft_token_num,
                                  cfg.budget, cfg.trie_depth, cfg.max_bfs_breadth, prob,
                                  max((a.max_kids for a in automata), default=1))
        # One pool of records for all corpora; the automata keep views into it.
        self._kernel_list = automata_pool(automata, adopt=True)
        # The walks of the last matches, per match-state row: valid for these automata only.
        self._walks = [corpus_walks(1, cfg.trie_depth, len(automata))]


def automaton_bytes(states: int, transitions: int, *, prob: bool = False, root: int = 1) -> int:
    """Bytes of an automaton with these counts in the engine's records (see
    :meth:`ngramspec.reference.sam.SuffixAutomaton.nbytes`): per state four int32, per
    transition (separator included) a token and a target sorted by token, and as a child a
    token and a target (PROB: and its count); the ``root`` transitions again in a hash table
    of two int32 per slot, a power of two >= twice their number.

    Examples
    --------
    >>> automaton_bytes(1 + 1, 1)  # a one-token corpus: the root and one state, one edge
    64
    >>> automaton_bytes(1 + 1, 1, prob=True)
    68
    """
    slots = 2
    while slots < 2 * root:
        slots *= 2
    return 16 * states + (20 if prob else 16) * transitions + 8 * slots


def _over_bytes(corpus_id: str, size: str, max_bytes: int) -> str:
    return (f"corpus {corpus_id!r} would take {size} bytes, more than max_bytes ({max_bytes}); "
            "nothing loaded")


def tree_paths(tokens: np.ndarray, mask: np.ndarray) -> set[tuple[int, ...]]:
    """Token paths (root excluded) of every drafted node of one laid-out tree, padding
    excluded.

    Examples
    --------
    >>> import ngramspec as ns
    >>> cache = ns.NgramCache(draft_token_num=4, capacity=100)
    >>> cache.insert([[1, 2, 3]])
    >>> d = cache.match([[1]])
    >>> sorted(tree_paths(d.tokens[0], d.mask[0]))
    [(2,), (2, 3)]
    """
    n = len(tokens)
    paths: list[tuple[int, ...]] = [()]
    out = set()
    for i in range(1, n):
        parent = max(j for j in range(i) if mask[i][j])
        paths.append(paths[parent] + (int(tokens[i]),))
    real = {i for i in range(1, n) for j in range(1, n) if j != i and mask[j][i]}
    for i in range(1, n):
        # Padding: token 0 under the root with no children (indistinguishable from a real
        # token-0 leaf, which the merge drops the same way).
        if not (paths[i] == (0,) and i not in real):
            out.add(paths[i])
    return out


def _draft_batch(automaton, contexts: Sequence[np.ndarray], budget: int,
                 cfg: NgramConfig) -> tuple[np.ndarray, np.ndarray]:
    return automaton.draft_batch(contexts, budget, max_depth=cfg.trie_depth,
                                 min_breadth=cfg.min_bfs_breadth,
                                 max_breadth=cfg.max_bfs_breadth,
                                 prob=cfg.mode.ranked)
