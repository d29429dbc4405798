"""The folder tree is the architecture: the core imports none of the other subpackages, and no
module of the package imports itself back through others (no import cycle). The lesson's package
serves nothing: no module of ``mha_core`` imports Jupyter Server, Tornado, Voila or ``mha_serve``
(the serving package, which imports ``mha_core``)."""

from __future__ import annotations

import ast
import graphlib
from pathlib import Path

import pytest

import mha_core

PACKAGE = Path(mha_core.__file__).parent
CORE = PACKAGE / "core"


def _module_name(path: Path, root: Path = PACKAGE.parent) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in PACKAGE.rglob("*.py")}


def _imported_modules(path: Path, root: Path = PACKAGE.parent, modules=MODULES) -> list[str]:
    """Absolute names of every module that ``path`` imports, anywhere in the file (inside
    functions too), relative imports resolved. ``from pkg import name`` names ``pkg.name`` when
    that is a module of ``modules``, else ``pkg``."""
    package = ".".join(path.relative_to(root).with_suffix("").parts[:-1])
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(p for p in (base, node.module or "") if p)
            subs = [f"{module}.{a.name}" for a in node.names if f"{module}.{a.name}" in modules]
            names += subs if len(subs) == len(node.names) else [module, *subs]
    return names


def import_graph(modules: dict[str, Path], root: Path = PACKAGE.parent) -> dict[str, set[str]]:
    """Each module of ``modules`` (name -> file) -> the modules of ``modules`` it imports."""
    return {name: {m for m in _imported_modules(path, root, modules) if m in modules and m != name}
            for name, path in modules.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` (its modules, the first repeated at the end), or None."""
    try:
        graphlib.TopologicalSorter(graph).prepare()
    except graphlib.CycleError as e:
        return e.args[1]
    return None


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


def test_no_import_cycle_in_the_package():
    graph = import_graph(MODULES)
    assert len(graph) > 30 and any(graph.values()), "the import graph came out empty"
    cycle = find_cycle(graph)
    assert cycle is None, "import cycle: " + " -> ".join(cycle)


def test_the_cycle_check_sees_imports_inside_functions(tmp_path):
    # the shape of the cycle this test was written for: trace.trace_shapes imported mha inside the
    # function, while mha imported trace at the top
    pkg = tmp_path / "mha_core" / "core"
    pkg.mkdir(parents=True)
    (pkg / "mha.py").write_text("from .trace import NO_TRACER\n")
    (pkg / "trace.py").write_text("def trace_shapes():\n    from .mha import multi_head_attention\n")
    modules = {_module_name(p, tmp_path): p for p in pkg.glob("*.py")}
    cycle = find_cycle(import_graph(modules, tmp_path))
    assert cycle is not None and set(cycle) == {"mha_core.core.mha", "mha_core.core.trace"}


# Which subpackages each subpackage may import (besides itself); mha_core/__init__.py says the same.
ALLOWED = {"core": set(), "teaching": {"core", "models", "training"}, "training": {"core"}, "models": {"core"},
           "ui": {"core", "teaching", "training", "models"}}


def test_subpackages_import_only_what_the_package_docstring_allows():
    assert set(ALLOWED) == {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()}
    for name, imports in import_graph(MODULES).items():
        sub = name.split(".")[1] if name.count(".") else None
        for target in imports:
            other = target.split(".")[1] if target.count(".") else None
            if sub and other and other != sub:
                assert other in ALLOWED[sub], f"{name} imports {target}"


# The serving side: the classroom server's libraries and the package that holds its glue.
SERVING = {"jupyter_server", "tornado", "voila", "mha_serve"}
REPO = PACKAGE.parent


def _serving_imports(modules: dict[str, Path], root: Path = REPO) -> list[str]:
    return [f"{name} imports {m}" for name, path in modules.items() for m in _imported_modules(path, root, modules)
            if m.split(".")[0] in SERVING]


def test_the_lesson_package_imports_no_server_and_not_mha_serve():
    """``mha_core`` is the course: the kernel manager, the shared cache and the Voila and
    JupyterHub glue live in ``mha_serve``, which may import ``mha_core``, never the reverse."""
    assert len(MODULES) > 30
    assert _serving_imports(MODULES) == []


def test_the_serving_check_sees_imports_inside_functions(tmp_path):
    pkg = tmp_path / "mha_core" / "ui"
    pkg.mkdir(parents=True)
    (pkg / "panel.py").write_text("def show():\n    from mha_serve.shared_cache import shared\n")
    (pkg / "app.py").write_text("import numpy\n\n\ndef serve():\n    import tornado.web\n"
                                "    from jupyter_server.services import kernels\n")
    (pkg / "fine.py").write_text("from .panel import show\n")
    modules = {_module_name(p, tmp_path): p for p in pkg.glob("*.py")}
    assert sorted(_serving_imports(modules, tmp_path)) == [
        "mha_core.ui.app imports jupyter_server.services", "mha_core.ui.app imports tornado.web",
        "mha_core.ui.panel imports mha_serve.shared_cache"]


def test_only_the_served_page_imports_mha_serve():
    """The lessons are the course too: of the notebooks, only the dashboard Voila serves to a
    class reads mha_serve (its shared cache)."""
    import json

    readers = []
    for nb in sorted((REPO / "notebooks").rglob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        if any("mha_serve" in "".join(c["source"]) for c in cells if c["cell_type"] == "code"):
            readers.append(nb.relative_to(REPO).as_posix())
    assert readers == ["notebooks/dashboard.ipynb"]
