"""The environment: environment.yml (Binder/conda) and pyproject.toml (pip) list the same packages
and ranges, no Python file of the project needs a newer Python than ``requires-python``, and
`make help` lists every documented Makefile target."""

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

ROOT = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: tomli, a test dependency there (pyproject.toml)
    import tomli as tomllib


def _pyproject_requirements() -> dict[str, str]:
    """Requirements as pip sees them on the Binder Python (3.11)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    reqs = [Requirement(r) for r in (*project["dependencies"], *project["optional-dependencies"]["test"])]
    on_311 = [r for r in reqs if r.marker is None or r.marker.evaluate({"python_version": "3.11"})]
    return {r.name.lower(): str(r.specifier) for r in on_311}


def _conda_requirements() -> tuple[dict[str, str], dict]:
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    conda = {}
    pip_section = None
    for dep in env["dependencies"]:
        if isinstance(dep, dict):
            pip_section = dep
            continue
        req = Requirement(dep.replace("=", "==", 1) if dep.startswith("python=") else dep)
        conda[req.name.lower()] = str(req.specifier)
    return conda, {"env": env, "pip": pip_section}


def test_same_packages_and_ranges():
    pip = _pyproject_requirements()
    conda, _ = _conda_requirements()
    conda.pop("python")
    conda.pop("pip")
    assert conda == pip


def test_binder_ready():
    conda, extra = _conda_requirements()
    assert extra["env"]["channels"] == ["conda-forge"]
    assert conda["python"] == "==3.11"
    assert extra["pip"] == {"pip": ["-e ."]}


def test_make_help_lists_every_documented_target():
    documented = re.findall(r"^([a-zA-Z_-]+):[^#\n]*## (.+)$", (ROOT / "Makefile").read_text(), flags=re.M)
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    listed = dict(re.findall(r"^make (\S+) +(.+)$", out, flags=re.M))
    assert listed == dict(documented)
    for target in ("test", "test-slow", "test-fast", "dashboard", "help"):
        assert target in listed, f"make help does not list {target}"
def _requires_python() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["requires-python"]


def _notebook_sources(out: Path) -> list[Path]:
    """Each notebook's code cells as one .py file (IPython magics and shell lines left out)."""
    files = []
    for nb in sorted((ROOT / "notebooks").rglob("*.ipynb")):
        cells = json.loads(nb.read_text())["cells"]
        code = ["".join(c["source"]) for c in cells if c["cell_type"] == "code"]
        lines = [ln for cell in code for ln in cell.splitlines() if not ln.lstrip().startswith(("%", "!"))]
        path = out / f"{nb.parent.name}_{nb.stem}.py"
        path.write_text("\n".join(lines) + "\n")
        files.append(path)
    return files


def test_no_module_needs_a_newer_python_than_requires_python(tmp_path):
    """vermin (a test dependency) finds the minimum Python of every module of the packages, the
    tests, the scripts, the benchmarks and every notebook's code, and checks it against
    ``requires-python``. A 3.11 feature (``tomllib``, ``except*``, ...) fails here, naming the file."""
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    if vermin is None:
        pytest.skip("vermin is not installed: pip install -e '.[test]' (make test does this)")
    spec = SpecifierSet(_requires_python())
    lowest = min(s.version for s in spec if s.operator == ">=")
    targets = ["mha_core", "mha_serve", "tests", "scripts", "benchmarks", *map(str, _notebook_sources(tmp_path))]
    proc = subprocess.run([vermin, "--no-tips", "--violations", "--eval-annotations", f"-t={lowest}-",
                           *targets], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"needs a newer Python than requires-python {spec}:\n{proc.stdout}{proc.stderr}"
    analysed = int(proc.stdout.split("Analyzing ")[1].split(" files")[0])
    assert analysed > 100, proc.stdout  # the whole tree, not an empty selection


def test_vermin_catches_a_311_feature(tmp_path):
    """The check above can fail: a file importing tomllib unguarded is reported against 3.10."""
    vermin = shutil.which("vermin", path=str(Path(sys.executable).parent)) or shutil.which("vermin")
    if vermin is None:
        pytest.skip("vermin is not installed: pip install -e '.[test]' (make test does this)")
    (tmp_path / "new.py").write_text("import tomllib\n")
    proc = subprocess.run([vermin, "--no-tips", "--violations", "-t=3.10-", str(tmp_path / "new.py")],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0 and "tomllib" in proc.stdout
