"""The folder tree is the architecture: the core imports none of the other subpackages."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import mha_core

PACKAGE = Path(mha_core.__file__).parent
CORE = PACKAGE / "core"


def _imported_modules(path: Path) -> list[str]:
    """Absolute names of every module that ``path`` imports (relative imports resolved)."""
    package = ".".join(path.relative_to(PACKAGE.parent).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            names.append(".".join(p for p in (base, node.module or "") if p))
    return names


@pytest.mark.parametrize("path", sorted(CORE.glob("*.py")), ids=lambda p: p.name)
def test_core_imports_only_numpy_the_stdlib_and_itself(path):
    for name in _imported_modules(path):
        if name.startswith("mha_core"):
            assert name == "mha_core.core" or name.startswith("mha_core.core."), f"{path.name} imports {name}"
        else:
            # threadpoolctl: the tiled attention's worker threads keep their BLAS calls to one thread
            assert name.split(".")[0] in {"numpy", "math", "numbers", "dataclasses", "typing", "functools",
                                          "collections", "types", "__future__", "os", "concurrent",
                                          "threadpoolctl"}, f"{path.name} imports {name}"


def test_every_subpackage_is_documented_in_the_package_docstring():
    subpackages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists())
    assert subpackages, "no subpackages found"
    for name in subpackages:
        assert f"{name}/" in mha_core.__doc__, f"mha_core/{name}/ is missing from mha_core.__doc__"
