"""The compile-free clock: what a first run spends compiling is never timed as drafting."""

from __future__ import annotations

import importlib.util
import os
import threading
import time
from pathlib import Path

import pytest

from ngramspec._jit import compile_free_clock

pytestmark = pytest.mark.skipif(os.environ.get("NUMBA_DISABLE_JIT") == "1",
                                reason="nothing compiles without the JIT")


def _fresh_kernel(tmp_path: Path, name: str):
    """A kernel no cache holds: a new module with its own function, compiled on first call."""
    path = tmp_path / f"{name}.py"
    path.write_text("from ngramspec._jit import jit\n\n\n@jit\n"
                    f"def {name}(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n"
                    "    return s\n")
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def test_a_compile_in_the_timed_region_is_not_counted(tmp_path: Path) -> None:
    kernel = _fresh_kernel(tmp_path, "fresh_kernel_a")
    with compile_free_clock() as clock:
        t = clock.now()
        assert kernel(10) == 285
        wall, cpu = clock.since(t)
    # The compile takes tenths of a second; the call and the dispatcher's typing far less.
    assert clock.compile_wall > 0.02 and clock.compile_cpu > 0.01
    assert wall < clock.compile_wall / 4 and cpu < clock.compile_cpu / 4
    # Outside a compile the clock runs as the plain one does.
    with compile_free_clock() as clock:
        t, w0 = clock.now(), time.perf_counter()
        time.sleep(0.05)
        assert clock.since(t)[0] >= 0.05 - 1e-3
        assert clock.compile_wall == 0.0 and time.perf_counter() - w0 >= 0.05


def test_a_compile_in_another_thread_does_not_stop_this_clock(tmp_path: Path) -> None:
    kernel = _fresh_kernel(tmp_path, "fresh_kernel_b")
    with compile_free_clock() as clock:
        t = clock.now()
        other = threading.Thread(target=kernel, args=(3,))
        other.start()
        other.join()
        wall, _ = clock.since(t)
    assert clock.compile_wall == 0.0  # (this thread compiled nothing: its wait is its time)
    assert wall > 0.02


def test_the_disk_cache_is_keyed_on_every_kernel_source(tmp_path: Path) -> None:
    """An edit to any kernel source (a helper inlined into kernels of other files) changes the
    stamp every ngramspec kernel's cache index checks; a touch without an edit does not."""
    from ngramspec import _jit
    from ngramspec.engine import heap

    root = tmp_path / "pkg"
    for d in ("engine/corpora", "config"):
        (root / d).mkdir(parents=True)
    for name in ("_jit.py", "stdorder.py", "_canonical.py", "errors.py", "config/modes.py",
                 "config/settings.py", "engine/heap.py", "engine/tree.py",
                 "engine/corpora/sam.py"):
        (root / name).write_text(f"# {name}\n")
    before = _jit._sources_stamp(str(root))
    os.utime(root / "engine" / "heap.py", (1, 1))
    assert _jit._sources_stamp(str(root)) == before
    for name in ("engine/heap.py", "config/modes.py", "engine/corpora/sam.py"):  # any depth
        (root / name).write_text("# edited\n")
        assert _jit._sources_stamp(str(root)) != before
        before = _jit._sources_stamp(str(root))
    # Every ngramspec kernel checks that stamp (its locator is ours; the directory Numba's).
    locator = heap.heap_push._cache._impl.locator
    assert type(locator).__name__.startswith("Ngramspec")
    assert locator.get_source_stamp() == _jit._sources_stamp()


def test_an_index_pickled_against_a_module_that_moved_is_a_cache_miss(tmp_path: Path) -> None:
    """A cache written before a module moved (an upgrade) names types by their old module
    path; Numba unpickles the index before it compares stamps and would raise.  For
    ngramspec's kernels it is a miss (recompiled and rewritten); other code keeps Numba's
    behaviour."""
    import pickle
    import sys
    import types

    from numba.core import caching

    from ngramspec import _jit
    from ngramspec.engine import heap

    ours = heap.heap_push._cache._cache_file._source_stamp  # the stamp ngramspec's kernels use
    assert ours == _jit._sources_stamp()
    gone = types.ModuleType("ngramspec_moved_away")
    exec("class Key:\n    pass\n", gone.__dict__)
    gone.Key.__module__ = gone.__name__
    sys.modules[gone.__name__] = gone
    files = {}
    for name, stamp in (("ours", ours), ("theirs", (1.0, 2))):
        files[name] = caching.IndexDataCacheFile(cache_path=str(tmp_path), filename_base=name,
                                                 source_stamp=stamp)
        files[name]._save_index({(gone.Key(),): "data"})
        assert len(files[name]._load_index()) == 1  # readable while the module exists
    del sys.modules[gone.__name__]
    try:
        assert files["ours"]._load_index() == {}
        with pytest.raises(ModuleNotFoundError, match="ngramspec_moved_away"):
            files["theirs"]._load_index()
    finally:
        sys.modules.pop(gone.__name__, None)
