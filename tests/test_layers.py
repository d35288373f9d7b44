"""The package's layers: lower ones never import higher ones (read from the source, so a
lazy import inside a function counts too)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "ascent"

# What each part of the package may import from ascent (besides itself).
ALLOWED = {
    "algos": {"registry", "errors"},
    "config": {"errors", "algos", "registry"},
    "rundir": {"config", "errors"},
    "observe": {"config", "errors", "rundir", "api"},
    "models": {"config", "errors", "algos", "registry", "rollout.batch"},
}


def ascent_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [node.module]
        elif isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        else:
            continue
        found |= {n.removeprefix("ascent.") for n in names if n.startswith("ascent.")}
    return found


@pytest.mark.parametrize("part", sorted(ALLOWED))
def test_a_layer_imports_only_what_is_below_it(part):
    files = [PACKAGE / f"{part}.py"] if (PACKAGE / f"{part}.py").is_file() else []
    files += sorted((PACKAGE / part).rglob("*.py")) if (PACKAGE / part).is_dir() else []
    assert files
    allowed = ALLOWED[part] | {part}
    bad = {
        f"{path.relative_to(PACKAGE)} imports ascent.{name}"
        for path in files
        for name in ascent_imports(path)
        if not any(name == a or name.startswith(a + ".") for a in allowed)
    }
    assert sorted(bad) == []
