"""Readable model of SGLang 0.5.23's external corpora: a suffix automaton per corpus, its BFS
and PROB draft trees, and the merge of those trees into the trie's.

One Python object per automaton state, plain dicts and lists, written to be read beside the
spec (§3.6).  The Numba engine (:mod:`ngramspec.engine.corpora.sam`) is tested against this.

The trie's tree builders (:mod:`ngramspec.reference.tree`) are reused as they are: a state
offers them what a trie node does (``token``, ``freq``, ``lru``, ``by_frequency()``), with its
children ordered by last occurrence (BFS) and by occurrence count (PROB).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..stdorder import UnorderedMapOrder
from .tree import BreadthSchedule, build_bfs, build_prob, fill_result

__all__ = ["SEPARATOR", "State", "SuffixAutomaton", "leaf_paths", "merge", "merge_batch"]

#: The token SGLang puts between the documents of a corpus (``INT32_MIN``).
SEPARATOR = -(2**31)


class State:
    """A state of the automaton: the set of substrings that end at the same positions.

    ``token`` is the last token of those substrings (every transition into a state carries
    the same token), ``occ`` how often they occur, ``last_end`` where the last one ends.
    """

    __slots__ = ("token", "link", "length", "trans", "occ", "last_end", "lru", "by_freq")

    def __init__(self, token: int, length: int, link: int, occ: int, last_end: int) -> None:
        self.token = token
        self.length = length
        self.link = link
        self.trans: dict[int, int] = {}  # token -> state index, the separator included
        self.occ = occ
        self.last_end = last_end
        self.lru: list[State] = []  # children for BFS: latest last occurrence first
        self.by_freq: list[State] = []  # children for PROB: most frequent first, then token

    @property
    def freq(self) -> int:
        return self.occ

    def by_frequency(self) -> list["State"]:
        return self.by_freq

    def __repr__(self) -> str:
        return (f"State(token={self.token}, len={self.length}, occ={self.occ}, "
                f"last_end={self.last_end}, children={len(self.by_freq)})")


class SuffixAutomaton:
    """The suffix automaton of one token stream (SGLang's ``SuffixAutomaton``, §3.6.3).

    Examples
    --------
    >>> sam = SuffixAutomaton.build([5, 6, 5, 7, 5, 6, 5, 6])
    >>> s = sam.walk([5, 6])
    >>> sam.states[s].occ, [c.token for c in sam.states[s].by_freq]
    (3, [5])
    >>> [(state.length, m) for state, m in sam.anchors([9, 5, 6], max_depth=4)]  # '6' = '5 6'
    [(2, 2)]
    """

    def __init__(self) -> None:
        self.states = [State(0, 0, -1, 0, -1)]
        self.last = 0
        self.size = 0  # tokens appended, separators included

    @classmethod
    def build(cls, stream: Sequence[int]) -> "SuffixAutomaton":
        """The finalised automaton of ``stream`` (token ids, separators included)."""
        sam = cls()
        for t in stream:
            sam.append(int(t))
        sam.finalize()
        return sam

    def append(self, t: int) -> None:
        """The textbook online construction, one token at position ``self.size``."""
        st = self.states
        cur = len(st)
        st.append(State(t, st[self.last].length + 1, -1, 1, self.size))
        p = self.last
        while p != -1 and t not in st[p].trans:
            st[p].trans[t] = cur
            p = st[p].link
        if p == -1:
            st[cur].link = 0
        else:
            q = st[p].trans[t]
            if st[p].length + 1 == st[q].length:
                st[cur].link = q
            else:
                clone = len(st)
                c = State(t, st[p].length + 1, st[q].link, 0, st[q].last_end)
                c.trans = dict(st[q].trans)
                st.append(c)
                while p != -1 and st[p].trans.get(t) == q:
                    st[p].trans[t] = clone
                    p = st[p].link
                st[q].link = clone
                st[cur].link = clone
        self.last = cur
        self.size += 1

    def finalize(self) -> None:
        """Occurrence counts and last end positions up the suffix links (longest states
        first), then each state's child lists, the separator left out."""
        st = self.states
        for s in sorted(range(1, len(st)), key=lambda i: -st[i].length):
            parent = st[st[s].link]
            parent.occ += st[s].occ
            parent.last_end = max(parent.last_end, st[s].last_end)
        for state in st:
            kids = [st[c] for t, c in state.trans.items() if t != SEPARATOR]
            state.by_freq = sorted(kids, key=lambda k: (-k.occ, k.token))
            state.lru = sorted(kids, key=lambda k: (-k.last_end, k.token))

    def walk(self, tokens: Sequence[int]) -> int:
        """The state reached by reading ``tokens`` from the root, or -1."""
        s = 0
        for t in tokens:
            s = self.states[s].trans.get(int(t), -1)
            if s == -1:
                return -1
        return s

    def anchors(self, context: Sequence[int], max_depth: int) -> list[tuple[State, int]]:
        """``(state, matched length)`` for the longest suffix of the last ``max_depth``
        context tokens found in the corpus, then along its suffix links; states without a
        (non-separator) continuation are skipped.  Longest first (§3.6.4)."""
        st = self.states
        s = m = 0
        for t in context[max(0, len(context) - max_depth):]:
            while s != 0 and t not in st[s].trans:
                s = st[s].link
                m = min(m, st[s].length)
            if t in st[s].trans:
                s = st[s].trans[t]
                m += 1
            else:
                s = m = 0
        out = []
        while s > 0 and m > 0:
            if st[s].by_freq:
                out.append((st[s], m))
            s = st[s].link
            if s <= 0:
                break
            m = min(m, st[s].length)
        return out

    def draft(self, context: Sequence[int], budget: int, *, max_depth: int, min_breadth: int,
              max_breadth: int, prob: bool) -> tuple[np.ndarray, np.ndarray, int]:
        """This corpus's own draft tree for ``context`` with ``budget`` nodes (§3.6.5-6):
        ``tokens`` (budget + 1,), ``mask`` and the drafted node count."""
        anchors = self.anchors(context, max_depth)
        if prob:
            tree, used = build_prob(anchors, budget, max_breadth)
        else:
            schedule = BreadthSchedule.sglang_0523(max_depth, min_breadth, max_breadth)
            tree, used = build_bfs(anchors, budget, schedule)
        tokens, mask = fill_result(int(context[-1]), budget + 1, tree)
        return tokens, mask, used

    def draft_batch(self, contexts: Sequence[np.ndarray], budget: int, *, max_depth: int,
                    min_breadth: int, max_breadth: int,
                    prob: bool) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`draft` for each context: tokens ``(B, budget + 1)`` and masks."""
        n = budget + 1
        tokens = np.zeros((len(contexts), n), np.int32)
        mask = np.zeros((len(contexts), n, n), bool)
        for b, ctx in enumerate(contexts):
            tokens[b], mask[b], _ = self.draft(ctx.tolist(), budget, max_depth=max_depth,
                                               min_breadth=min_breadth,
                                               max_breadth=max_breadth, prob=prob)
        return tokens, mask

    def nbytes(self, *, prob: bool = False) -> int:
        """The bytes the engine's records hold for this automaton built for PROB (``prob``)
        or BFS (per state: four int32; per transition, separator included: four int32, five
        for PROB; the root's transitions again in a hash table of two int32 per slot, a power
        of two >= twice their number), so that both backends report and bound the same size;
        the Python objects themselves take far more."""
        states = len(self.states)
        edges = sum(len(s.trans) for s in self.states)
        slots = 2
        while slots < 2 * len(self.states[0].trans):
            slots *= 2
        return 16 * states + (20 if prob else 16) * edges + 8 * slots


def leaf_paths(tokens: np.ndarray, mask: np.ndarray) -> list[list[int]]:
    """Root-to-leaf token paths of a laid-out tree, leaves in slot order, the root token left
    out; a path ``[0]`` (padding, or a real depth-1 token-0 leaf) is dropped (§3.6.8)."""
    n = len(tokens)
    if n <= 1:
        return []
    parent = [-1] + [max(j for j in range(i) if mask[i][j]) for i in range(1, n)]
    is_parent = set(parent[1:])
    paths = []
    for i in range(1, n):
        if i in is_parent:
            continue
        path, j = [], i
        while j > 0:
            path.append(int(tokens[j]))
            j = parent[j]
        path.reverse()
        if path != [0]:
            paths.append(path)
    return paths


def merge(last_token: int, n: int, primary: tuple[np.ndarray, np.ndarray],
          secondary: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray, int]:
    """SGLang's ``combineRootResults_``: the leaf paths of ``primary`` then of ``secondary``
    inserted into one fresh tree of ``n`` slots, laid out again (§3.6.8).  Returns tokens,
    mask and the node count."""
    tree = [UnorderedMapOrder() for _ in range(n)]
    cursor = 1
    for path in leaf_paths(*primary) + leaf_paths(*secondary):
        par = 0
        for t in path:
            if t in tree[par]:
                par = tree[par][t]
                continue
            if cursor >= n:
                break
            tree[par][t] = cursor
            par = cursor
            cursor += 1
        if cursor >= n:
            break
    tokens, mask = fill_result(last_token, n, tree)
    return tokens, mask, cursor - 1


def merge_batch(last_tokens: np.ndarray, n: int, primary: tuple[np.ndarray, np.ndarray],
                secondary: tuple[np.ndarray, np.ndarray],
                ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`merge` for each request of a batch: tokens ``(B, n)``, masks, node counts."""
    count = len(last_tokens)
    tokens = np.zeros((count, n), np.int32)
    mask = np.zeros((count, n, n), bool)
    num = np.zeros(count, np.int32)
    for b in range(count):
        tokens[b], mask[b], num[b] = merge(int(last_tokens[b]), n,
                                           (primary[0][b], primary[1][b]),
                                           (secondary[0][b], secondary[1][b]))
    return tokens, mask, num
