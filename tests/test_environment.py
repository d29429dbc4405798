"""environment.yml (Binder/conda) and pyproject.toml (pip) must list the same packages and ranges;
`make help` lists every documented Makefile target."""

import re
import subprocess
from pathlib import Path

import yaml
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
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
    for target in ("test", "test-fast", "dashboard", "help"):
        assert target in listed, f"make help does not list {target}"
