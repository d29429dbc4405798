"""Installing the dashboard's offline Voila templates and server settings into an environment.

``python -m mha_serve`` copies ``share/jupyter/voila/templates`` and ``etc/jupyter`` (``voila.json``,
``jupyter_server_config.json``: the template, the kernel manager of ``mha_serve.kernels`` and its
settings) into ``{sys.prefix}/share/jupyter`` and ``{sys.prefix}/etc/jupyter``, where Voila,
Jupyter Server and a JupyterHub user server look for them.
"""

from __future__ import annotations

import sys

# (source under the repository root, destination under sys.prefix): the same pairs as
# [tool.setuptools.data-files] in pyproject.toml.
JUPYTER_FILES = (("share/jupyter/voila/templates", "share/jupyter/voila/templates"),
                 ("etc/jupyter", "etc/jupyter"))


def install_jupyter_files(prefix: str | None = None, root=None) -> list[str]:
    """Copy the offline templates and the server settings into ``prefix`` (default ``sys.prefix``).

    A wheel (``pip install .``) installs them as data files. An editable install
    (``pip install -e .``) does not: setuptools' editable wheels carry no data files (checked
    with setuptools 80 and pip 23), so ``make venv`` and Binder's ``postBuild`` call this (``python -m mha_serve``).

    Parameters
    ----------
    prefix : str, optional
        The environment's prefix; Jupyter looks in ``{prefix}/share/jupyter`` and ``{prefix}/etc/jupyter``.
    root : path, optional
        The repository root holding ``share/`` and ``etc/`` (default: the one above this package).

    Returns
    -------
    list of str: the files written.
    """
    import shutil
    from pathlib import Path

    prefix = Path(sys.prefix if prefix is None else prefix)
    root = Path(__file__).resolve().parents[1] if root is None else Path(root)
    if not (root / "etc" / "jupyter" / "voila.json").is_file():
        raise FileNotFoundError(f"root={str(root)!r} holds no etc/jupyter/voila.json: pass the repository root")
    written = []
    for src, dst in JUPYTER_FILES:
        for path in sorted((root / src).rglob("*")):
            if path.is_file():
                target = prefix / dst / path.relative_to(root / src)
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(path, target)
                written.append(str(target))
    return written
