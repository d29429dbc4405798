"""mha_serve.shared_cache: results computed once by mha_core, read by every other kernel.

The panels take it as ``cache=`` (the served dashboard passes it); by default they compute in
their own kernel."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import types

import numpy as np
import pytest

from mha_core.ui.heads_panel import HeadExplorer, head_weights
from mha_serve import shared_cache as sc


@pytest.fixture
def folder(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_SHARED_CACHE", str(tmp_path / "shared"))
    for k in sc.STATS:
        monkeypatch.setitem(sc.STATS, k, 0)
    return tmp_path / "shared"


def _counting(result):
    calls = []

    def compute():
        calls.append(1)
        return result

    return compute, calls


def test_computed_once_then_read_memory_mapped(folder):
    compute, calls = _counting((["a", "b"], np.arange(6, dtype=np.float32).reshape(2, 3), "title", 3))
    first = sc.shared("demo", (1, "x"), compute)
    second = sc.shared("demo", (1, "x"), compute)
    assert len(calls) == 1 and sc.STATS["hits"] == 1 and sc.STATS["misses"] == 1
    assert second[0] == ["a", "b"] and second[2:] == ("title", 3)
    np.testing.assert_array_equal(second[1], first[1])
    assert isinstance(second[1], np.memmap) and not second[1].flags.writeable  # shared pages, read-only
    sc.shared("demo", (2, "x"), compute)  # other inputs: computed again
    assert len(calls) == 2


def test_another_process_reads_what_this_one_computed(folder):
    """The point of the cache: a second kernel (here a second Python) computes nothing."""
    labels, weights, title = sc.shared("head_weights", (4, 12, False, "random"),
                                       lambda: head_weights(4, 12, causal=False, kind="random"))
    code = ("import sys, numpy as np; from mha_serve import shared_cache as sc\n"
            "out = sc.shared('head_weights', (4, 12, False, 'random'), lambda: sys.exit('recomputed'))\n"
            "np.save(sys.stdout.buffer, np.asarray(out[1]))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                          env={**__import__("os").environ, "MHA_SHARED_CACHE": str(folder)}, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()[-2000:]
    import io

    np.testing.assert_array_equal(np.load(io.BytesIO(proc.stdout)), weights)


def test_off_computes_every_time_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_SHARED_CACHE", "off")
    compute, calls = _counting((np.zeros(2),))
    sc.shared("demo", (), compute)
    sc.shared("demo", (), compute)
    assert len(calls) == 2 and sc.cache_root() is None


def test_errors_of_the_computation_pass_through_and_nothing_is_stored(folder):
    with pytest.raises(ValueError, match="h"):
        sc.shared("head_weights", (3, 12, False, "random"), lambda: head_weights(3, 12))
    assert not list(folder.glob("*.json")) if folder.exists() else True


def test_a_damaged_entry_is_computed_again(folder):
    compute, calls = _counting((np.ones(3),))
    sc.shared("demo", ("k",), compute)
    stem = sc.key_digest("demo", ("k",))
    (folder / f"{stem}.a0.npy").write_bytes(b"not an array")
    out = sc.shared("demo", ("k",), compute)
    assert len(calls) == 2 and sc.STATS["errors"] == 1
    np.testing.assert_array_equal(out[0], np.ones(3))


def test_an_unwritable_folder_still_computes(tmp_path, monkeypatch):
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("MHA_SHARED_CACHE", str(blocker / "sub"))  # cannot be created
    compute, calls = _counting((np.ones(2), "t"))
    assert sc.shared("demo", (), compute)[1] == "t"
    assert sc.shared("demo", (), compute)[1] == "t" and len(calls) == 2


def test_the_key_changes_with_the_inputs_and_the_package(monkeypatch):
    a = sc.key_digest("head_weights", (4, 12, False, "random"))
    assert a == sc.key_digest("head_weights", (4, 12, False, "random"))
    assert a != sc.key_digest("head_weights", (4, 12, True, "random"))
    assert a != sc.key_digest("head_weights", (4, 12, "False", "random"))  # a forged string is another key
    monkeypatch.setattr(sc, "package_fingerprint", lambda: "0" * 16)
    assert a != sc.key_digest("head_weights", (4, 12, False, "random"))


@pytest.mark.parametrize(("name", "inputs", "error"), [("not a name", (), ValueError), ("demo", [1], TypeError)])
def test_arguments_are_checked(folder, name, inputs, error):
    with pytest.raises(error):
        sc.shared(name, inputs, lambda: (np.zeros(1),))


def test_two_head_panels_compute_once(folder):
    """Two kernels' head explorers at the same setting: the second reads the first's weights."""
    first = HeadExplorer(cache=sc.shared)
    misses = sc.STATS["misses"]
    second = HeadExplorer(cache=sc.shared)
    assert sc.STATS["misses"] == misses and sc.STATS["hits"] >= 1
    np.testing.assert_array_equal(first._weights(*_setting(first)[:4])[1], second._weights(*_setting(second)[:4])[1])
    written = json.loads(next(folder.glob("head_weights-*.json")).read_text())
    assert written[0] == first._weights(*_setting(first)[:4])[0]  # the token labels


def test_a_panel_without_a_cache_computes_in_its_kernel(folder):
    """The lesson's panels do not know the shared cache: only a cache passed in reaches the disk."""
    HeadExplorer()
    assert sc.STATS == {"hits": 0, "misses": 0, "errors": 0} and not folder.exists()


def test_the_fingerprint_hashes_the_files_of_mha_core_only(tmp_path, monkeypatch):
    """The key hashes mha_core's own files (where mha_core is installed), not the folder this
    module lives in: a changed lesson file is a new key, a file beside the package is not."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("x = 1\n")
    monkeypatch.setattr(sc, "mha_core", types.SimpleNamespace(__file__=str(pkg / "__init__.py")))

    def fingerprint():
        sc.package_fingerprint.cache_clear()
        return sc.package_fingerprint()

    try:
        before = fingerprint()
        (pkg / "__init__.py").write_text("x = 2\n")
        changed = fingerprint()
        (tmp_path / "beside.py").write_text("y = 1\n")
        beside = fingerprint()
    finally:
        sc.package_fingerprint.cache_clear()
    assert before != changed and changed == beside


def _setting(panel):
    v = panel.values()
    return v["h"], v["N"], v["causal"], v["kind"], v["query"]


def test_lookup_against_compute_same_run(folder):
    """A slider move that another kernel has already made is a lookup: timed against computing
    it, in the same run (printed as a ratio; no threshold)."""
    settings = [(h, n, c, "random") for h in (4, 8, 16) for n in (16, 32, 64) for c in (False, True)]
    t0 = time.perf_counter()
    computed = [head_weights(h, n, causal=c, kind=k) for h, n, c, k in settings]
    compute_s = time.perf_counter() - t0
    for s, result in zip(settings, computed, strict=True):
        sc.shared("head_weights", s, lambda r=result: r)  # stored by "the first kernel"
    t0 = time.perf_counter()
    looked_up = [sc.shared("head_weights", s, lambda: pytest.fail("recomputed")) for s in settings]
    lookup_s = time.perf_counter() - t0
    for (_, w, _), (_, w2, _) in zip(computed, looked_up, strict=True):
        np.testing.assert_array_equal(w, w2)
    print(f"\nshared cache: {len(settings)} head-panel settings computed in {compute_s * 1000:.0f} ms, "
          f"read in {lookup_s * 1000:.0f} ms: lookup / compute = {lookup_s / compute_s:.2f} (same run)")
