import subprocess
import sys

import numpy as np
from numpy.testing import assert_array_equal

import ngramspec as ns


def test_import_does_not_import_numba():
    code = "import sys, ngramspec; print('numba' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_warmup_leaves_the_cache_untouched():
    c = ns.NgramCache(max_trie_depth=4, draft_token_num=4, capacity=100)
    c.insert([[1, 2, 3, 4]])
    before = c.match([[2, 3]]).tokens.copy()
    assert c.warmup() is c
    assert len(c) == 1 + 4 + 3 + 2 + 1
    assert_array_equal(c.match([[2, 3]]).tokens, before)


def test_memory_grows_with_use_not_capacity():
    c = ns.NgramCache(capacity=10_000_000)
    assert c._backend.trie.nbytes < 2**20  # SGLang preallocates ~1.76 GB here
    c.insert([np.arange(1000, dtype=np.int32)])
    assert len(c) == 1 + sum(min(1000 - i, 18) for i in range(1000))
