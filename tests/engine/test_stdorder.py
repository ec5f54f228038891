"""The libstdc++ order emulations, checked against a real libstdc++ build when one is here.

A small C++ driver (ours) replays the same operations on ``std::unordered_map<int32_t,int32_t>``
and ``std::priority_queue`` and prints the orders; without a C++ compiler those tests skip, and
the fixed cases below (hand-traced in the spec) still run.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ngramspec.stdorder import HASHTABLE_BUCKET_COUNTS, StdPriorityQueue, UnorderedMapOrder

DRIVER = r"""
#include <cstdint>
#include <cstdio>
#include <queue>
#include <unordered_map>
#include <vector>
struct E { double p; int id; };
struct Less { bool operator()(const E& a, const E& b) const { return a.p < b.p; } };
int main() {
  int mode; while (std::scanf("%d", &mode) == 1) {
    if (mode == 0) {            // map: n keys, then print iteration order
      int n; std::scanf("%d", &n); std::unordered_map<int32_t, int32_t> m;
      for (int i = 0; i < n; ++i) { int32_t k; std::scanf("%d", &k); m.emplace(k, i); }
      for (auto& kv : m) std::printf("%d ", kv.first);
      std::printf("\n");
    } else {                    // heap: ops (+ prio_num prio_den | -), print popped ids
      int n; std::scanf("%d", &n); std::priority_queue<E, std::vector<E>, Less> q; int id = 0;
      for (int i = 0; i < n; ++i) {
        char c; std::scanf(" %c", &c);
        if (c == '+') { int a, b; std::scanf("%d %d", &a, &b); q.push({double(a) / b, id++}); }
        else { std::printf("%d ", q.top().id); q.pop(); }
      }
      std::printf("\n");
    }
  }
}
"""


@pytest.fixture(scope="module")
def libstdcxx(tmp_path_factory):
    cxx = shutil.which("g++")
    if cxx is None:
        pytest.skip("no g++ to build the libstdc++ driver")
    d = tmp_path_factory.mktemp("stdorder")
    (d / "driver.cpp").write_text(DRIVER)
    subprocess.run([cxx, "-O1", "-std=c++17", "-o", str(d / "driver"), str(d / "driver.cpp")],
                   check=True)

    def run(text: str) -> list[list[int]]:
        out = subprocess.run([str(d / "driver")], input=text, capture_output=True, text=True,
                             check=True).stdout
        return [[int(x) for x in line.split()] for line in out.splitlines()]

    return run


def emulated_order(keys):
    m = UnorderedMapOrder()
    for i, k in enumerate(keys):
        m[k] = i
    return list(m)


def test_reverse_insertion_order_for_distinct_buckets():
    assert emulated_order([44, 4]) == [4, 44]
    assert emulated_order([1, 2, 3]) == [3, 2, 1]


def test_same_bucket_joins_the_run_front():
    # 1 and 14 share bucket 1 of 13; 2 is alone and goes to the list front.
    assert emulated_order([1, 14, 2]) == [2, 14, 1]


def test_bucket_growth_sequence():
    m = UnorderedMapOrder()
    seen = []
    for k in range(130):
        m[k] = k
        if not seen or seen[-1] != m.bucket_count:
            seen.append(m.bucket_count)
    assert seen == list(HASHTABLE_BUCKET_COUNTS[:5])


keys_strategy = st.lists(
    st.one_of(st.integers(-40, 200), st.integers(-(2**31), 2**31 - 1)),
    unique=True, max_size=140)


@given(st.lists(keys_strategy, min_size=1, max_size=8))
def test_map_order_equals_libstdcxx(libstdcxx, key_sets):
    text = "".join(f"0 {len(ks)} {' '.join(map(str, ks))}\n" for ks in key_sets)
    assert libstdcxx(text) == [emulated_order(ks) for ks in key_sets]


def test_map_order_wide_fanouts(libstdcxx):
    # Rehash boundaries (13 -> 29 -> 59 -> 127) with keys colliding mod every bucket count.
    cases = [list(range(n)) for n in (13, 14, 29, 30, 59, 60, 64)]
    cases += [[k * 13 for k in range(20)], [k * 29 - 300 for k in range(40)]]
    text = "".join(f"0 {len(ks)} {' '.join(map(str, ks))}\n" for ks in cases)
    assert libstdcxx(text) == [emulated_order(ks) for ks in cases]


def emulated_pops(ops):
    q: StdPriorityQueue[int] = StdPriorityQueue()
    popped, next_id = [], 0
    for op in ops:
        if op is None:
            popped.append(q.pop()[1])
        else:
            q.push(op[0] / op[1], next_id)
            next_id += 1
    return popped


@st.composite
def heap_ops(draw):
    ops, size = [], 0
    for _ in range(draw(st.integers(1, 60))):
        if size and draw(st.booleans()):
            ops.append(None)
            size -= 1
        else:
            # Few distinct fractions, so ties (even 1/3 == (1/2)*(2/3)-like) are common.
            ops.append((draw(st.integers(1, 3)), draw(st.sampled_from([1, 2, 3, 6]))))
            size += 1
    ops += [None] * size
    return ops


def test_heap_tie_example_from_spec():
    q: StdPriorityQueue[str] = StdPriorityQueue()
    q.push(2 / 3, "3")
    q.push(1 / 3, "4")
    assert q.pop()[1] == "3"
    q.push(1 / 2 * (2 / 3), "7")
    q.push(1 / 2 * (2 / 3), "8")
    assert [q.pop()[1] for _ in range(3)] == ["4", "7", "8"]


def test_pop_empty_raises():
    with pytest.raises(IndexError):
        StdPriorityQueue().pop()


@given(st.lists(heap_ops(), min_size=1, max_size=5))
def test_heap_order_equals_libstdcxx(libstdcxx, sequences):
    text = ""
    for ops in sequences:
        words = ["-" if op is None else f"+ {op[0]} {op[1]}" for op in ops]
        text += f"1 {len(ops)} {' '.join(words)}\n"
    assert libstdcxx(text) == [emulated_pops(ops) for ops in sequences]
