"""The package keeps the layering that docs/architecture.md writes down.

The layer table and the exceptions are read from the document itself, so the two cannot drift:
every module belongs to one layer and every package lies in one layer whole, the lowest layer
holds leaves only, nothing imports up a layer except the listed exceptions, no imports form a
cycle (imports inside functions included, and imports by name: ``importlib.import_module``
and ``"module:attr"`` registries), the top level stays the public front and a few leaves, and
no module outgrows 700 lines.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ngramspec"
DOC = ROOT / "docs" / "architecture.md"
MAX_LINES = 700
MAX_TOP_LEVEL = 8  # modules beside the packages (``__init__`` not counted)
MAX_PACKAGE = 12  # modules in one package directory (its ``__init__`` and subpackages not counted)
MAX_LINES = 550  # lines in one module
MAX_FUNCTION = 120  # lines in one function outside reference/ (its docstring included)
# Numba kernels above that, each one compiled function today (splitting a kernel changes what
# Numba inlines and LLVM optimises, so it is measured first): none may grow, none may join.
LONG_KERNELS = {"engine/adaptive.py:_expand_source": 126,
                "engine/corpora/automaton.py:_build_kernel": 184,
                "engine/serving/replay_kernel.py:replay_kernel": 339,
                "engine/trie.py:insert_suffixes": 125}


def _modules() -> dict[str, Path]:
    out = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(ROOT).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def _imports(name: str, path: Path, modules: dict[str, Path]) -> dict[str, int]:
    """The package modules ``name`` imports, each with the first line that does."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: dict[str, int] = {}
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets = []
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            for alias in node.names:
                sub = f"{source}.{alias.name}"
                targets.append(sub if sub in modules else source)
        elif isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        else:
            targets = _by_name(node)
        for target in targets:
            if target in modules and target != name:
                found.setdefault(target, node.lineno)
    return found


def _by_name(node: ast.AST) -> list[str]:
    """Modules ``node`` imports by name: ``import_module("a.b")`` or ``import_module(f"a.b.{x}")``
    (the package ``a.b``), and a ``"a.b:attr"`` registry entry."""
    if isinstance(node, ast.Call):
        fn = node.func
        name = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
        if name == "import_module" and node.args:
            arg = node.args[0]
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                return [arg.value]
            if isinstance(arg, ast.JoinedStr) and arg.values \
                    and isinstance(arg.values[0], ast.Constant):
                return [str(arg.values[0].value).rstrip(".")]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        m = re.fullmatch(r"(ngramspec(?:\.\w+)*):\w+", node.value)
        if m:
            return [m.group(1)]
    return []


def _table(marker: str) -> list[list[str]]:
    text = DOC.read_text(encoding="utf-8")
    body = text.split(f"<!-- {marker}:", 1)[1].split(f"<!-- end {marker} -->", 1)[0]
    rows = [line for line in body.splitlines() if line.startswith("|")][2:]  # header, rule
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows]


def _layer_of(modules: dict[str, Path]) -> dict[str, int]:
    patterns = [(int(row[0]), name) for row in _table("layers")
                for name in re.findall(r"`([^`]+)`", row[2])]
    layer = {}
    for module in modules:
        hits = {n for n, p in patterns
                if p == module or (p.endswith(".*") and module.startswith(p[:-1]))}
        assert len(hits) <= 1, f"{module} is in layers {sorted(hits)}"
        if hits:
            layer[module] = hits.pop()
    return layer


MODULES = _modules()
GRAPH = {m: _imports(m, p, MODULES) for m, p in MODULES.items()}


def test_every_module_has_a_layer():
    layer = _layer_of(MODULES)
    assert sorted(set(MODULES) - set(layer)) == []


def test_every_package_lies_in_one_layer():
    layer = _layer_of(MODULES)
    packages = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    split = sorted(f"{m}: {sorted({layer[m]} | {layer[s] for s in MODULES if s.startswith(m + '.')})}"
                   for m in packages - {"ngramspec"}
                   if {layer[s] for s in MODULES if s.startswith(m + ".")} - {layer[m]})
    assert split == []


def test_the_lowest_layer_holds_leaves_only():
    layer = _layer_of(MODULES)
    assert sorted(f"{m} -> {sorted(GRAPH[m])}" for m in MODULES
                  if layer[m] == 0 and GRAPH[m]) == []


def test_the_top_level_is_the_front_and_a_few_leaves():
    top = sorted(p.stem for p in PACKAGE.glob("*.py") if p.stem != "__init__")
    assert len(top) <= MAX_TOP_LEVEL, top


@pytest.mark.parametrize("package", sorted({p.parent for p in PACKAGE.rglob("__init__.py")}
                                            - {PACKAGE}), ids=lambda p: p.name)
def test_no_package_outgrows_a_dozen_modules(package):
    modules = sorted(p.stem for p in package.glob("*.py") if p.stem != "__init__")
    assert len(modules) <= MAX_PACKAGE, f"{package.name}: {modules} (group them by topic)"


def test_no_module_outgrows_550_lines():
    long = sorted(f"{p.relative_to(PACKAGE)}: {n}" for p in PACKAGE.rglob("*.py")
                  if (n := len(p.read_text().splitlines())) > MAX_LINES)
    assert long == [], "split them along their seams"


def test_no_function_outgrows_120_lines_but_the_listed_kernels():
    grown = {}
    for p in PACKAGE.rglob("*.py"):
        if "reference" in p.relative_to(PACKAGE).parts:
            continue
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1
                key = f"{p.relative_to(PACKAGE).as_posix()}:{node.name}"
                if n > LONG_KERNELS.get(key, MAX_FUNCTION):
                    grown[key] = n
    assert grown == {}, "split them along their seams"


def test_no_import_goes_up_a_layer_but_the_listed_exceptions():
    layer = _layer_of(MODULES)
    allowed = {(row[0].strip("`"), row[1].strip("`")) for row in _table("exceptions")}
    assert len(allowed) <= 2
    upward = sorted(f"{a} -> {b} (line {line})" for a, targets in GRAPH.items()
                    for b, line in targets.items()
                    if layer.get(b, -1) > layer.get(a, -1) and (a, b) not in allowed)
    assert upward == []


def test_no_import_cycle():
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            part = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                part.append(w)
                if w == v:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert cycles == []


@pytest.mark.parametrize("name", sorted(MODULES))
def test_module_size(name):
    lines = len(MODULES[name].read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_LINES, f"{name}: {lines} lines (split it by topic)"


def test_the_checker_sees_a_planted_cycle_and_an_upward_import(tmp_path):
    """The import reader resolves relative imports the way Python does."""
    pkg = {"ngramspec.a": tmp_path / "a.py", "ngramspec.b": tmp_path / "b.py"}
    pkg["ngramspec.a"].write_text("from . import b\n")
    pkg["ngramspec.b"].write_text("def f():\n    from .a import x\n")
    assert _imports("ngramspec.a", pkg["ngramspec.a"], pkg) == {"ngramspec.b": 1}
    assert _imports("ngramspec.b", pkg["ngramspec.b"], pkg) == {"ngramspec.a": 2}


def test_the_checker_sees_imports_by_name(tmp_path):
    pkg = {"ngramspec.a": tmp_path / "a.py", "ngramspec.b": tmp_path / "b.py",
           "ngramspec.c": tmp_path / "c" / "__init__.py"}
    pkg["ngramspec.a"].write_text("import importlib\n\ndef f(x):\n"
                                  "    return importlib.import_module(f'ngramspec.c.{x}')\n")
    pkg["ngramspec.b"].write_text("TABLE = {'x': 'ngramspec.a:f'}\n")
    assert _imports("ngramspec.a", pkg["ngramspec.a"], pkg) == {"ngramspec.c": 4}
    assert _imports("ngramspec.b", pkg["ngramspec.b"], pkg) == {"ngramspec.a": 1}
