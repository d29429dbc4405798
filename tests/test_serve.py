"""mha_core.ui.serve: the kernel cap, the graces' settings, and the installed Jupyter files.

The cap and the graces are exercised against real servers by tests/test_dashboard_load.py
(GET flood) and tests/test_dashboard_browser.py (every route); here, what needs no server.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from mha_core.ui import serve

REPO = Path(__file__).resolve().parents[1]

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def test_cap_refuses_with_503_before_starting_anything():
    km = serve.BoundedKernelManager(max_kernels=1)
    km._starting = 1  # one start in flight fills the cap
    with pytest.raises(serve.KernelCapReached) as err:
        asyncio.run(km.start_kernel(kernel_name="python3"))
    assert err.value.status_code == 503
    assert "busy" in err.value.reason
    assert km.refused == 1 and km.live_kernels() == 1


@pytest.mark.parametrize(("trait", "value"), [("max_kernels", 0), ("connect_grace", -1.0),
                                              ("disconnect_grace", -5.0), ("check_interval", 0.0)])
def test_settings_are_validated(trait, value):
    with pytest.raises(ValueError, match=trait):
        serve.BoundedKernelManager(**{trait: value})


def test_reaper_leaves_connected_and_unknown_kernels_alone():
    km = serve.BoundedKernelManager(connect_grace=0.01)

    class Kernel:
        execution_state = "idle"
        last_activity = None

    km._kernels["a"] = Kernel()
    km._kernel_connections["a"] = 1  # a page is connected
    km._clock["a"] = 0.0
    km._kernels["b"] = Kernel()  # not started by this manager's start_kernel: its clock starts now
    assert asyncio.run(km.reap_unconnected()) == []
    assert "b" in km._clock


def test_installed_files_match_the_wheel_data_files(tmp_path):
    """`python -m mha_core.ui.serve` (editable installs) copies exactly what a wheel installs."""
    written = serve.install_jupyter_files(prefix=tmp_path, root=REPO)
    installed = sorted(str(Path(p).relative_to(tmp_path)) for p in written)
    data_files = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    from_wheel = sorted(f"{dst}/{path.name}" for dst, patterns in data_files.items()
                        for pattern in patterns for path in REPO.glob(pattern) if path.is_file())
    assert installed == from_wheel
    voila = json.loads((tmp_path / "etc" / "jupyter" / "voila.json").read_text())
    assert voila["VoilaConfiguration"]["template"] == "mha"
    assert voila["VoilaConfiguration"]["multi_kernel_manager_class"] == "mha_core.ui.serve.BoundedKernelManager"
    assert voila["BoundedKernelManager"]["max_kernels"] == serve.DEFAULT_MAX_KERNELS
    assert (tmp_path / "share/jupyter/voila/templates/mha/503.html").is_file()


def test_install_needs_the_repository_root(tmp_path):
    with pytest.raises(FileNotFoundError, match="root="):
        serve.install_jupyter_files(prefix=tmp_path, root=tmp_path)


def test_a_pool_start_refused_at_the_cap_is_retried_when_there_is_room():
    km = serve.BoundedKernelManager(max_kernels=2)
    refills = []
    km.fill_if_needed = lambda delay, notebook_name: refills.append(notebook_name)  # voila's pool API

    async def scenario():
        refused = asyncio.get_running_loop().create_future()
        refused.set_exception(serve.KernelCapReached(2))
        km._pools = {"nb.ipynb": [refused]}
        km._starting = 2  # at the cap: the refused entry goes, no refill yet
        await km.reap_unconnected()
        assert km._pools["nb.ipynb"] == [] and refills == []
        again = asyncio.get_running_loop().create_future()
        again.set_exception(serve.KernelCapReached(2))
        km._pools["nb.ipynb"].append(again)
        km._starting = 0  # room again: refill
        await km.reap_unconnected()
        assert refills == ["nb.ipynb"]

    asyncio.run(scenario())
