"""Results shared by every dashboard kernel: computed once by ``mha_core``, then read from disk.

A class of 60 moves the same sliders: the same ``(h, N, mask)`` gives the same heatmaps, the same
sentence gives the same real-model forward. Each kernel would compute them again. ``shared``
keeps every result on disk, keyed by what it depends on, so the first kernel computes it and
every other kernel (this server's, or another on the same machine) reads it:

* the key is the function's name, its inputs and a fingerprint of the installed ``mha_core``
  (its source and shipped weights), so a changed package never reads an old result;
* a result is arrays plus JSON-able values (strings, lists, numbers); the arrays are stored as
  ``.npy`` files and read memory-mapped, so 60 kernels reading the same maps share their pages;
* writes are atomic (a temporary file, then a rename): a kernel never reads half a result;
* anything going wrong with the disk (read-only, full, a damaged file) falls back to computing:
  the cache can make a panel faster, never break it.

Only deterministic functions go through it, and only what ``mha_core`` computed is stored.
The folder is ``$MHA_SHARED_CACHE``, else ``$XDG_CACHE_HOME/mha_core/shared`` (``~/.cache/...``);
``MHA_SHARED_CACHE=off`` turns it off.

The panels of ``mha_core.ui`` never import this module: they take a ``cache`` with the signature
of ``shared`` (by default they compute in their own kernel), and the served page,
``notebooks/dashboard.ipynb``, passes ``cache=shared``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import tempfile
from collections.abc import Callable
from functools import cache
from pathlib import Path

import numpy as np

import mha_core

OFF = "off"


def cache_root() -> Path | None:
    """The shared folder, or None when turned off (``MHA_SHARED_CACHE=off``)."""
    setting = os.environ.get("MHA_SHARED_CACHE", "")
    if setting.lower() == OFF:
        return None
    if setting:
        return Path(setting)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "mha_core" / "shared"


@cache
def package_fingerprint() -> str:
    """SHA-256 (16 hex digits) of every source file and shipped weight file of ``mha_core``."""
    root = Path(mha_core.__file__).resolve().parent
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*")):
        if path.suffix in (".py", ".npz", ".json", ".js") and "__pycache__" not in path.parts:
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def key_digest(name: str, inputs: tuple) -> str:
    """The file stem of a result: the function name and a hash of its inputs and the package."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(f"name must be an identifier, got {name!r}")
    text = json.dumps([package_fingerprint(), list(inputs)], default=repr, ensure_ascii=False)
    return f"{name}-{hashlib.sha256(text.encode()).hexdigest()[:32]}"


def _split(result: tuple) -> tuple[list, dict[str, np.ndarray]]:
    """``result``'s JSON-able parts (arrays replaced by a marker) and its arrays."""
    plain, arrays = [], {}
    for i, part in enumerate(result):
        if isinstance(part, np.ndarray):
            arrays[f"a{i}"] = part
            plain.append({"__array__": f"a{i}"})
        else:
            plain.append(part)
    return plain, arrays


def _write(folder: Path, stem: str, result: tuple) -> None:
    plain, arrays = _split(result)
    folder.mkdir(parents=True, exist_ok=True)
    for label, array in arrays.items():  # arrays first: the .json marks the result complete
        fd, tmp = tempfile.mkstemp(dir=folder, suffix=".npy.tmp")
        with os.fdopen(fd, "wb") as f:
            np.save(f, np.ascontiguousarray(array), allow_pickle=False)
        os.replace(tmp, folder / f"{stem}.{label}.npy")
    fd, tmp = tempfile.mkstemp(dir=folder, suffix=".json.tmp")
    with os.fdopen(fd, "w") as f:
        json.dump(plain, f, ensure_ascii=False)
    os.replace(tmp, folder / f"{stem}.json")


def _read(folder: Path, stem: str) -> tuple | None:
    meta = folder / f"{stem}.json"
    if not meta.is_file():
        return None
    parts = []
    for part in json.loads(meta.read_text()):
        if isinstance(part, dict) and "__array__" in part:
            parts.append(np.load(folder / f"{stem}.{part['__array__']}.npy", mmap_mode="r", allow_pickle=False))
        else:
            parts.append(part)
    return tuple(parts)


STATS = {"hits": 0, "misses": 0, "errors": 0}


def shared(name: str, inputs: tuple, compute: Callable[[], tuple]) -> tuple:
    """``compute()``'s result for ``inputs``, read from the shared folder when another kernel has
    already computed it, else computed and stored there.

    Parameters
    ----------
    name : str
        The computation's name (an identifier), e.g. ``"head_weights"``.
    inputs : tuple
        Everything the result depends on besides the package itself (JSON-able or repr-able).
    compute : callable
        Returns a tuple of numpy arrays and JSON-able values (a list comes back as a list).
        Errors it raises (bad inputs) pass through and nothing is stored.

    Returns
    -------
    tuple: the result; its arrays are read-only (memory-mapped) when they come from disk.
    """
    if not isinstance(inputs, tuple):
        raise TypeError(f"inputs must be a tuple, got {type(inputs).__name__}")
    folder = cache_root()
    if folder is None:
        return compute()
    stem = key_digest(name, inputs)
    try:
        found = _read(folder, stem)
    except (OSError, ValueError):  # a damaged or half-deleted entry: compute it again
        found = None
        STATS["errors"] += 1
    if found is not None:
        STATS["hits"] += 1
        return found
    STATS["misses"] += 1
    result = compute()
    if not isinstance(result, tuple):
        raise TypeError(f"{name} must return a tuple to be shared, got {type(result).__name__}")
    with contextlib.suppress(OSError, TypeError, ValueError):  # read-only or full disk: still works
        _write(folder, stem, result)
    return result
