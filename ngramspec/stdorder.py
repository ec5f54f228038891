"""Emulations of the libstdc++ orders that make SGLang's outputs what they are.

SGLang's C++ core lays out the children of each draft-tree node in the iteration order of a
``std::unordered_map<int32_t, int32_t>``, merges external corpora in the iteration order of a
``std::unordered_map<std::string, ...>``, and breaks PROB priority ties by the exact sift rules
of ``std::priority_queue`` (``std::push_heap`` / ``std::pop_heap``).  None is insertion order,
and Python's ``heapq`` breaks ties differently, so all are modelled here, small and on their
own, so that they can be tested apart from the tries that use them.  The two maps share one
model of the table's list (:class:`_BucketList`) and differ in their keys' hash and growth.
The compiled twins are :mod:`ngramspec.engine.tree` (the int map) and
:mod:`ngramspec.engine.heap`.

The models are written for obviousness; they hold a handful of elements per tree node.
"""

from __future__ import annotations

from typing import Generic, Iterator, Sequence, TypeVar

__all__ = ["UnorderedMapOrder", "CorpusOrder", "StdPriorityQueue", "HASHTABLE_BUCKET_COUNTS",
           "string_hash"]

# Bucket counts an insert-only libstdc++ unordered_map passes through as it grows (measured with
# g++ 12.2: the first insert makes 13 buckets, the 14th element 29, the 30th 59, ...).  Each one
# is also the element count at which the next rehash triggers (max_load_factor 1.0).
HASHTABLE_BUCKET_COUNTS: tuple[int, ...] = (
    13, 29, 59, 127, 257, 541, 1109, 2357, 5087, 10273, 20753, 42043, 85229, 172933, 351061,
    712697, 1447153, 2938679, 5967347,
)

K = TypeVar("K")
V = TypeVar("V")


_MASK64 = (1 << 64) - 1


def string_hash(key: str) -> int:
    """libstdc++'s ``std::hash<std::string>`` on 64-bit Linux: ``_Hash_bytes`` (a MurmurHash2
    variant, seed ``0xc70f6907``) over the UTF-8 bytes.

    Examples
    --------
    >>> string_hash("docs"), string_hash("")
    (10897595616481244391, 6142509188972423790)
    """
    data = key.encode("utf-8")
    mul = 0xC6A4A7935BD1E995

    def shift_mix(v: int) -> int:
        return v ^ (v >> 47)

    h = (0xC70F6907 ^ (len(data) * mul)) & _MASK64
    full = len(data) // 8 * 8
    for i in range(0, full, 8):
        w = int.from_bytes(data[i:i + 8], "little")
        h = ((h ^ ((shift_mix((w * mul) & _MASK64) * mul) & _MASK64)) * mul) & _MASK64
    if len(data) % 8:
        h = ((h ^ int.from_bytes(data[full:], "little")) * mul) & _MASK64
    h = (shift_mix(h) * mul) & _MASK64
    return shift_mix(h)


class _BucketList:
    """The list of a libstdc++ hash table: its keys of one bucket stand together.  A new key
    goes just before the first key of its bucket's run, or at the front of the whole list when
    its bucket is empty; a rehash replays the list, front to back, with the same rule.
    Subclasses say what a key's hash code is (:meth:`_code`)."""

    __slots__ = ()

    def _code(self, key):
        raise NotImplementedError

    def _place(self, keys: list, key, bucket_count: int) -> None:
        b = self._code(key) % bucket_count
        for i, other in enumerate(keys):
            if self._code(other) % bucket_count == b:
                keys.insert(i, key)
                return
        keys.insert(0, key)

    def _replayed(self, keys: list, bucket_count: int) -> list:
        rehashed: list = []
        for key in keys:
            self._place(rehashed, key, bucket_count)
        return rehashed


class UnorderedMapOrder(_BucketList):
    """An insert-only ``std::unordered_map<int32_t, int32_t>`` that iterates as libstdc++ does.

    The container is a singly linked list whose elements of one bucket stand together.  A new
    key goes just before the first element of its bucket's run, or at the front of the whole
    list when its bucket is empty; a rehash replays the list, front to back, with the same rule.

    Examples
    --------
    >>> m = UnorderedMapOrder()
    >>> for token, slot in [(44, 1), (4, 2)]:
    ...     m[token] = slot
    >>> list(m.items())            # 44 % 13 != 4 % 13: reverse insertion order
    [(4, 2), (44, 1)]
    >>> m2 = UnorderedMapOrder()
    >>> for token, slot in [(1, 1), (14, 2), (2, 3)]:
    ...     m2[token] = slot
    >>> list(m2)                   # 14 joins the run of bucket 1, in front of 1
    [2, 14, 1]
    """

    __slots__ = ("_keys", "_values", "_bucket_count")

    def __init__(self) -> None:
        self._keys: list[int] = []  # iteration order, front first
        self._values: dict[int, int] = {}
        self._bucket_count = 1

    def __len__(self) -> int:
        return len(self._keys)

    def __contains__(self, key: object) -> bool:
        return key in self._values

    def get(self, key: int, default: int | None = None) -> int | None:
        return self._values.get(key, default)

    def __getitem__(self, key: int) -> int:
        return self._values[key]

    def __setitem__(self, key: int, value: int) -> None:
        if key in self._values:
            self._values[key] = value
            return
        if len(self._keys) + 1 > self._rehash_threshold():
            self._rehash(self._next_bucket_count())
        self._place(self._keys, key, self._bucket_count)
        self._values[key] = value

    def __iter__(self) -> Iterator[int]:
        return iter(list(self._keys))

    def items(self) -> Iterator[tuple[int, int]]:
        return iter([(k, self._values[k]) for k in self._keys])

    @property
    def bucket_count(self) -> int:
        return self._bucket_count

    def _rehash_threshold(self) -> int:
        # next_resize: 0 before the first insert, then the bucket count (max_load_factor 1.0).
        return 0 if self._bucket_count == 1 else self._bucket_count

    def _next_bucket_count(self) -> int:
        for count in HASHTABLE_BUCKET_COUNTS:
            if count > self._bucket_count:
                return count
        raise OverflowError("more children under one draft-tree node than modelled")

    def _code(self, key: int) -> int:
        # std::hash<int32_t> is the identity; the size_t conversion sign-extends negative ids.
        return key % (1 << 64)

    def _rehash(self, bucket_count: int) -> None:
        self._keys = self._replayed(self._keys, bucket_count)
        self._bucket_count = bucket_count


class CorpusOrder(_BucketList):
    """The iteration order of a libstdc++ ``unordered_map<std::string, ...>`` (spec §3.6.9).

    A list whose ids of one bucket stand together: a new id goes just before the first id of
    its bucket, or at the front when its bucket is empty; a rehash replays the list from the
    front.  Erasing takes an id out; clearing empties the list; neither shrinks the buckets.

    Examples
    --------
    >>> order = CorpusOrder()
    >>> for cid in ["docs", "wiki", "code"]:
    ...     order.insert(cid)
    >>> list(order)
    ['wiki', 'code', 'docs']
    >>> order.erase("docs"); order.insert("docs"); list(order)
    ['wiki', 'docs', 'code']
    """

    def __init__(self) -> None:
        self._ids: list[str] = []
        self._hash: dict[str, int] = {}  # cached hash codes, as libstdc++ keeps them
        self.bucket_count = 1
        self._next_resize = 0

    def __iter__(self):
        return iter(list(self._ids))

    def __len__(self) -> int:
        return len(self._ids)

    def insert(self, key: str) -> None:
        size = len(self._ids)
        if size + 1 > self._next_resize:
            want = max(size + 1, 11 if self._next_resize == 0 else 0)
            if want >= self.bucket_count:
                self._rehash(self._next_bucket_count(max(want + 1, 2 * self.bucket_count)))
            else:
                self._next_resize = self.bucket_count
        self._hash[key] = string_hash(key)
        self._place(self._ids, key, self.bucket_count)

    def restore(self, ids: Sequence[str], bucket_count: int, next_resize: int) -> None:
        """Take a saved state: ``ids`` in iteration order and the table's sizes.  Raises
        ValueError if the ids of a bucket do not stand together (no table has that order)."""
        hashes = {key: string_hash(key) for key in ids}
        seen: list[int] = []
        for key in ids:
            b = hashes[key] % bucket_count
            if b in seen and seen[-1] != b:
                raise ValueError(f"corpus order {list(ids)} is impossible with {bucket_count} "
                                 "buckets")
            if not seen or seen[-1] != b:
                seen.append(b)
        self._ids = list(ids)
        self._hash = hashes
        self.bucket_count = bucket_count
        self._next_resize = next_resize

    def erase(self, key: str) -> None:
        self._ids.remove(key)
        del self._hash[key]

    def clear(self) -> None:
        self._ids.clear()
        self._hash.clear()

    @staticmethod
    def _next_bucket_count(at_least: int) -> int:
        # libstdc++'s next_bkt: a small table below 14, else its next prime; growth by
        # doubling from 13 visits exactly the bucket counts the int map goes through.
        if at_least < 14:
            return (2, 2, 2, 3, 5, 5, 7, 7, 11, 11, 11, 11, 13, 13)[at_least]
        for count in HASHTABLE_BUCKET_COUNTS:
            if count >= at_least:
                return count
        raise OverflowError("more corpora than modelled")

    def _code(self, key: str) -> int:
        return self._hash[key]

    def _rehash(self, bucket_count: int) -> None:
        self._ids = self._replayed(self._ids, bucket_count)
        self.bucket_count = bucket_count
        self._next_resize = bucket_count


class StdPriorityQueue(Generic[V]):
    """``std::priority_queue`` with a "less by priority" comparator, as libstdc++ sifts it.

    Equal priorities never move past each other on the way up, and ``pop`` first sinks the hole
    to a leaf (taking the right child unless the left is strictly larger), then sifts the last
    element up from there.  Ties therefore pop in an order that depends on the whole history.

    Examples
    --------
    >>> q = StdPriorityQueue()
    >>> for prio, item in [(2 / 3, "3"), (1 / 3, "4")]:
    ...     q.push(prio, item)
    >>> q.pop()
    (0.6666666666666666, '3')
    >>> for prio, item in [(1 / 2 * (2 / 3), "7"), (1 / 2 * (2 / 3), "8")]:
    ...     q.push(prio, item)
    >>> [q.pop()[1] for _ in range(3)]   # all three tie at 1/3: the earliest-pushed survives on top
    ['4', '7', '8']
    """

    __slots__ = ("_c",)

    def __init__(self) -> None:
        self._c: list[tuple[float, V]] = []

    def __len__(self) -> int:
        return len(self._c)

    def __bool__(self) -> bool:
        return bool(self._c)

    def push(self, priority: float, item: V) -> None:
        c = self._c
        c.append((priority, item))
        self._sift_up(len(c) - 1, (priority, item))

    def _sift_up(self, hole: int, value: tuple[float, V]) -> None:
        c = self._c
        while hole > 0 and c[(hole - 1) // 2][0] < value[0]:
            c[hole] = c[(hole - 1) // 2]
            hole = (hole - 1) // 2
        c[hole] = value

    def pop(self) -> tuple[float, V]:
        c = self._c
        if not c:
            raise IndexError("pop from an empty priority queue")
        top = c[0]
        last = len(c) - 1
        value = c[last]
        c[last] = c[0]
        length = last
        hole = 0
        child = 0
        while child < (length - 1) // 2:
            child = 2 * (child + 1)
            if c[child][0] < c[child - 1][0]:
                child -= 1
            c[hole] = c[child]
            hole = child
        if length % 2 == 0 and child == (length - 2) // 2:
            child = 2 * (child + 1)
            c[hole] = c[child - 1]
            hole = child - 1
        self._sift_up(hole, value)
        c.pop()
        return top
