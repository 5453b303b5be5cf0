"""The import graph is one way: console (agentops) -> runtime -> models. The runtime imports
nothing from the console, and the models import nothing of the runtime but its vocabulary of
keys (a module that imports nothing)."""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[2] / "runtime"


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_the_runtime_imports_nothing_from_the_console():
    modules = sorted(RUNTIME.rglob("*.py"))
    assert len(modules) > 20  # the walk found the package
    offending = {
        str(path.relative_to(RUNTIME)): sorted(
            name for name in imported(path) if name.partition(".")[0] in ("agentops", "demo")
        )
        for path in modules
    }
    assert {path: names for path, names in offending.items() if names} == {}


def test_the_models_import_only_the_keys_vocabulary_of_the_runtime():
    ours = {name for name in imported(RUNTIME / "models.py") if name.startswith("runtime")}
    assert ours <= {"runtime", "runtime.keys"}
    assert not {name for name in imported(RUNTIME / "keys.py") if name.startswith("runtime")}
