"""The package's layers (docs/layers.toml): no module of ascent/ imports from a part in a
higher layer or from another part of its own layer, and no import cycle exists between modules
or between parts. Imports are read from the source, so one inside a function or under
TYPE_CHECKING counts too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import tomllib

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "ascent"
LAYERS = tomllib.loads((ROOT / "docs" / "layers.toml").read_text())["layers"]
LAYER_OF = {part: i for i, parts in enumerate(LAYERS) for part in parts}


def modules() -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = modules()


def _resolve(name: str) -> str | None:
    """The module an imported name lives in (`ascent.x.y.Name` -> `ascent.x.y`)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The ascent modules `module` imports, anywhere in its file, relative imports resolved."""
    path = MODULES[module]
    here = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(here[: len(here) - node.level + 1] + ([base] if base else []))
            names = [base] + [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for name in names:
            target = _resolve(name) if name.split(".")[0] == "ascent" else None
            # a module importing its own package (its __init__) is not an edge
            if target and target != module and not module.startswith(target + "."):
                found.add(target)
    return found


GRAPH = {module: imports_of(module) for module in MODULES}


def part(module: str) -> str:
    """`ascent.train.llm` -> "train"; the package itself -> "ascent"."""
    names = module.split(".")
    return names[1] if len(names) > 1 else "ascent"


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one node (Tarjan)."""
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


def test_every_part_has_a_layer_and_every_layer_names_a_part():
    parts = {part(m) for m in MODULES}
    assert sorted(parts - set(LAYER_OF)) == [], "parts missing from docs/layers.toml"
    assert sorted(set(LAYER_OF) - parts) == [], "docs/layers.toml names parts that do not exist"


@pytest.mark.parametrize("layer", [p for parts in LAYERS for p in parts])
def test_a_part_imports_only_from_the_layers_below_it(layer):
    bad = sorted(
        f"{module} imports {target} ({part(target)} is not below {layer})"
        for module in MODULES
        if part(module) == layer
        for target in GRAPH[module]
        if part(target) != layer and LAYER_OF[part(target)] >= LAYER_OF[layer]
    )
    assert bad == []


def test_no_import_cycle_between_modules():
    assert cycles(GRAPH) == []


def test_no_import_cycle_between_parts():
    parts: dict[str, set[str]] = {}
    for module, targets in GRAPH.items():
        parts.setdefault(part(module), set()).update(
            part(t) for t in targets if part(t) != part(module)
        )
    assert cycles(parts) == []


def test_the_checks_see_lazy_imports_and_the_cycles_they_make():
    """The reader and the cycle finder on a case made for them: an import inside a function
    and one under TYPE_CHECKING both count, and a two-module loop is a cycle."""
    assert "ascent.cluster.runtime" in GRAPH["ascent.train.llm_setup"]  # inside build_run
    assert cycles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []
