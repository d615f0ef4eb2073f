"""House rules of CONTRIBUTING checked on the source tree: no import cycles, no private imports, short functions."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src"
MAX_FUNCTION_LINES = 60


def _modules() -> dict[str, tuple[Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package __init__)."""
    out = {}
    for path in sorted((SRC / "gpupred").rglob("*.py")):
        parts = list(path.relative_to(SRC).with_suffix("").parts)
        is_pkg = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_pkg else parts)] = (path, is_pkg)
    return out


def _imported_modules(node: ast.AST, name: str, is_pkg: bool, modules: dict[str, tuple[Path, bool]]) -> list[str]:
    """The gpupred modules an import statement imports (a ``from`` import of a submodule counts as that module)."""
    if isinstance(node, ast.Import):
        targets = [a.name for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            pkg = name.split(".") if is_pkg else name.split(".")[:-1]
            base = ".".join(pkg[: len(pkg) - node.level + 1] + ([node.module] if node.module else []))
        targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names]
    else:
        return []
    out = []
    for target in targets:
        while target not in modules and "." in target:
            target = target.rsplit(".", 1)[0]
        if target in modules and target != name:
            out.append(target)
    return out


def import_graph() -> dict[str, set[str]]:
    """Which gpupred modules each module imports: at top level, inside functions and for type checkers alike."""
    modules = _modules()
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, (path, is_pkg) in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            graph[name].update(_imported_modules(node, name, is_pkg, modules))
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan): every import cycle is inside one."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_cycle_finder_finds_a_cycle() -> None:
    """The checker itself: a -> b -> c -> a is one cycle, d on its own none."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles() -> None:
    """No gpupred modules import each other in a circle, lazily or not (type-checking imports included)."""
    graph = import_graph()
    assert len(graph) > 50 and "gpupred.graph.features" in graph["gpupred.graph.table"]  # the checker sees imports
    assert cycles(graph) == []


def package_graph(graph: dict[str, set[str]], units: set[str] | None = None) -> dict[str, set[str]]:
    """The import graph between gpupred's top-level packages and modules (``gpupred.graph.loader`` counts as
    ``gpupred.graph``), or between the module map's units where one is a subpackage or module of a package
    (``gpupred.step.physics.kernels`` counts as ``gpupred.step.physics``, a unit of the physics layer, not as
    ``gpupred.step``); the package root, the lazy public face, is left out."""
    units = units if units is not None else design_units()

    def top(module: str) -> str:
        parts = module.split(".")
        for n in range(len(parts), 2, -1):  # the longest unit of the map that holds the module
            if ".".join(parts[:n]) in units:
                return ".".join(parts[:n])
        return ".".join(parts[:2])

    out: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if module == "gpupred":
            continue
        out.setdefault(top(module), set()).update(top(m) for m in imported if m != "gpupred" and top(m) != top(module))
    return out


def test_no_package_imports_another_in_a_circle() -> None:
    """No two gpupred packages import each other, even through different modules (graph -> importers -> graph)."""
    assert cycles(package_graph({"gpupred.a.x": {"gpupred.b.y"}, "gpupred.b.z": {"gpupred.a.w"}, "gpupred.a.w": set(),
                                 "gpupred.b.y": set()}, set())) == [["gpupred.a", "gpupred.b"]]  # the checker sees them
    assert cycles(package_graph({"gpupred.a.x": {"gpupred.b.y"}, "gpupred.b.z": {"gpupred.a.w.v"},
                                 "gpupred.a.w.v": set(), "gpupred.b.y": set()}, {"gpupred.a.w"})) == []  # a unit
    graph = package_graph(import_graph())
    assert "gpupred.importers" in graph["gpupred.cli"]
    assert cycles(graph) == []


ESTIMATOR_MODULES = {"physics.py", "correction.py", "evaluate.py", "estimator.py",  # each estimator's own modules,
                     "baselines.py"}  # and the comparators its evaluation scores it against


def test_no_two_modules_share_a_file_name() -> None:
    """A file name says which module it is: only package inits and the estimator pattern repeat."""
    seen: dict[str, list[str]] = {}
    for path in sorted((SRC / "gpupred").rglob("*.py")):
        if path.name not in {"__init__.py", "__main__.py", *ESTIMATOR_MODULES}:
            seen.setdefault(path.name, []).append(str(path.relative_to(SRC)))
    assert {name: paths for name, paths in seen.items() if len(paths) > 1} == {}


def test_no_private_name_is_imported_from_another_module() -> None:
    """``from gpupred.x import _name`` appears nowhere in src/, tests/ or benchmarks/."""
    offenders = []
    for folder in ("src", "tests", "benchmarks"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("gpupred")):
                    offenders += [f"{path.relative_to(REPO)}:{node.lineno} {a.name}" for a in node.names
                                  if a.name.startswith("_") and not a.name.startswith("__")]
    assert offenders == []


def test_functions_fit_a_screen() -> None:
    """No function or method in src/ is longer than MAX_FUNCTION_LINES lines (longer ones are split into steps)."""
    long = []
    for path in sorted((SRC / "gpupred").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                n = node.end_lineno - node.lineno + 1  # type: ignore[operator]
                if n > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(REPO)}::{node.name} ({n} lines)")
    assert long == []


def test_the_design_module_map_names_every_package_and_module() -> None:
    """docs/DESIGN.md's module map names every top-level package and module of gpupred, so it matches the code."""
    text = (REPO / "docs" / "DESIGN.md").read_text()
    table = text.split("## Module map", 1)[1].split("\n## ", 1)[0]
    names = {p.stem if p.is_file() else p.name for p in (SRC / "gpupred").iterdir()
             if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()}
    assert len(names) > 20 and [n for n in sorted(names) if f"`{n}`" not in table] == []


def design_layers() -> list[set[str]]:
    """The layers of docs/DESIGN.md's module map, lowest first: the packages and modules each row names."""
    import re

    table = (REPO / "docs" / "DESIGN.md").read_text().split("## Module map", 1)[1].split("\n## ", 1)[0]
    rows = [line.split("|") for line in table.splitlines() if line.startswith("| ") and "`" in line]
    return [{f"gpupred.{n}" for n in re.findall(r"`([\w.]+)`", cells[2])} for cells in rows]


def design_units() -> set[str]:
    """Every package, module or subpackage (``step.physics``) the module map places in a layer."""
    return set().union(*design_layers())


def test_no_package_imports_from_a_layer_above_its_own() -> None:
    """The module map's layers hold: a package imports its own layer and those below only."""
    layer = {name: i for i, names in enumerate(design_layers()) for name in names}
    graph = package_graph(import_graph())
    assert layer["gpupred.config"] == 0 and layer["gpupred.cli"] == max(layer.values())
    upward = [f"{a} -> {b}" for a, imported in graph.items() for b in imported if layer[b] > layer[a]]
    assert upward == []


def test_what_ships_imports_no_evaluation_code() -> None:
    """The predictor, the three estimators and `gpupred predict` never import an estimator's evaluate module, not
    even lazily (evaluation code is the notebooks' only)."""
    graph = import_graph()
    evaluation = {m for m in graph if m.endswith(".evaluate")}
    assert {"gpupred.step.evaluate", "gpupred.memory.evaluate", "gpupred.slowdown.evaluate"} <= evaluation

    def reached(start: str) -> set[str]:
        seen: set[str] = set()
        todo = [start]
        while todo:
            for m in graph[todo.pop()] - seen:
                seen.add(m)
                todo.append(m)
        return seen

    shipped = ("gpupred.predictor.jobs", "gpupred.predictor.predictor", "gpupred.predictor.card",
               "gpupred.predictor.training", "gpupred.predictor.loading", "gpupred.predictor.core",
               "gpupred.step.estimator", "gpupred.memory.estimator", "gpupred.slowdown.estimator", "gpupred.cli.predict")
    assert {m: sorted(reached(m) & evaluation) for m in shipped} == {m: [] for m in shipped}


def test_every_correction_speaks_the_same_words() -> None:
    """Each estimator's correction module names its setting ``CorrectionSetting`` (a frozen dataclass with
    ``describe()``) and its inputs ``correction_features``, and fits with ``fit_correction`` or the step's
    ``Correction`` class (docs/DESIGN.md, under the module map); no other name for a setting survives."""
    import dataclasses
    import importlib

    for package in ("step", "memory", "slowdown"):
        module = importlib.import_module(f"gpupred.{package}.correction")
        setting = module.CorrectionSetting
        assert dataclasses.is_dataclass(setting) and setting.__dataclass_params__.frozen, package
        assert callable(setting.describe) and callable(module.correction_features), package
        assert callable(getattr(module, "fit_correction", None)) or hasattr(module, "Correction"), package
        assert not [n for n in vars(module) if n in ("CorrectionSettings", "CANDIDATES", "correction_matrix",
                                                    "correction_design", "fit_correction_model")], package
    grid = importlib.import_module("gpupred.slowdown.correction").CORRECTION_GRID
    assert [s.describe() for s in grid.values()] == ["boosted x 1", "boosted x 0.5", "linear x 1"]
