"""The asv suite: one class per operation, data built in ``setup``, run from the repository's
root by ``asv run`` (``asv.conf.json`` names this folder).

asv imports this folder as a top-level package of its own (named after the folder) from a
temporary working directory, where the repository's ``benchmarks`` package is not importable;
so the package registers ``benchmarks`` under its one name, from its file, for
``benchmarks.common`` to import as it does everywhere else.
"""

import importlib.util
import sys
from pathlib import Path


def _register_benchmarks() -> None:
    if __name__ == "benchmarks.asv" or "benchmarks" in sys.modules:
        return  # imported through the repository's package: nothing to do
    init = Path(__file__).resolve().parents[1] / "__init__.py"
    spec = importlib.util.spec_from_file_location(
        "benchmarks", init, submodule_search_locations=[str(init.parent)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["benchmarks"] = module
    spec.loader.exec_module(module)


_register_benchmarks()
