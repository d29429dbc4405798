"""Lesson markers: ``pytest -m lesson03`` runs the tests that defend notebook 03.

A pytest plugin, loaded by ``pytest_plugins = ["lesson_markers"]`` in tests/conftest.py. It
registers the markers ``lesson00`` ... ``lesson14`` (one per lesson notebook in notebooks/) and
marks, at collection:

* the lesson notebook itself (nbval's items of ``notebooks/03_worked_example.ipynb``);
* its claims, ``tests/test_lesson_claims_03.py`` (``test_lesson_claims_09_11.py``: 09, 10 and 11);
* any test whose id names the notebook (``test_prose_numbers.py::...[03_worked_example]``);
* the test files of :data:`LESSONS_OF_FILE`, the one place that says which other test files
  defend which lessons.

A file missing from the tree, or present but absent from the mapping, is fine: it is simply
not selected by a lesson marker.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"
LESSON_NOTEBOOK = re.compile(r"^(\d\d)_\w+\.ipynb$")
CLAIMS_FILE = re.compile(r"^test_lesson_claims_(\d\d)(?:_(\d\d))?\.py$")

# test file -> the lessons (notebook numbers) whose content it defends, beyond the claims files.
LESSONS_OF_FILE: dict[str, tuple[str, ...]] = {
    # attention, softmax, masks, heads: the layer the lessons build
    "test_softmax.py": ("00", "01"),
    "test_attention.py": ("00", "01"),
    "test_masks.py": ("00", "02", "04"),
    "test_heads.py": ("02", "07"),  # split_heads / merge_heads
    "test_mha.py": ("01", "02", "06"),  # the fused layer, batches, GQA/MQA
    "test_config.py": ("01",),
    "test_demo.py": ("00", "04"),  # the demo sentence
    # the shape ledger and the counts
    "test_ledger.py": ("02", "03"),
    "test_trace.py": ("03", "05"),
    "test_shape_ledger.py": ("02",),
    "test_shapes_panel.py": ("02",),
    "test_counts.py": ("03", "05", "06"),  # count_params, count_macs, kv_cache_bytes
    # the panels a lesson embeds
    "test_head_grid.py": ("04",),
    "test_heads_panel.py": ("04",),
    "test_kv_panel.py": ("06",),
    # exercises and pitfalls
    "test_exercises.py": ("00", "01", "02", "04", "07", "14"),
    "test_pitfalls.py": ("02", "07"),
    "test_block_exercises.py": ("09", "10"),
    "test_solutions.py": ("00", "01", "02", "04", "07", "14"),  # the solved exercises of exercises.py
    # decoding, training, the block, real models, long context
    "test_decode.py": ("06",),
    "test_trainer.py": ("08",),
    "test_tasks.py": ("08",),
    "test_toy_models.py": ("08",),
    "test_backward.py": ("08",),
    "test_models_blocks.py": ("09", "10"),
    "test_rope.py": ("09", "11"),
    "test_models_minilm.py": ("09", "10", "11"),
    "test_models_smollm2.py": ("09", "10", "11"),
    "test_models_model.py": ("09", "10", "11"),
    "test_models_patterns.py": ("11",),
    "test_real_head_figures.py": ("11",),
    "test_flash.py": ("12",),
    "test_tiled.py": ("12",),
    # the model that writes: the decoder layer, the loop, the encoder-decoder
    "test_decoder_exercises.py": ("13",),
    "test_cross_attention_exercises.py": ("13",),
    "test_seq2seq.py": ("13",),
    "test_capstone.py": ("14",),  # the capstone's counts and timing
}


def lesson_notebooks() -> dict[str, str]:
    """Lesson number -> notebook stem, from notebooks/ (``"03": "03_worked_example"``)."""
    return {m.group(1): p.stem for p in sorted(NOTEBOOKS.glob("*.ipynb"))
            if (m := LESSON_NOTEBOOK.match(p.name))}


def lessons_of(path: Path, nodeid: str = "", stems: dict[str, str] | None = None) -> set[str]:
    """The lessons a test item defends, from its file name and its id."""
    stems = lesson_notebooks() if stems is None else stems
    name = path.name
    found = set(LESSONS_OF_FILE.get(name, ()))
    if m := CLAIMS_FILE.match(name):  # test_lesson_claims_09_11.py: 09 to 11
        first, last = m.group(1), m.group(2) or m.group(1)
        found |= {f"{n:02d}" for n in range(int(first), int(last) + 1)}
    if (m := LESSON_NOTEBOOK.match(name)) and path.parent == NOTEBOOKS:
        found.add(m.group(1))
    found |= {n for n, stem in stems.items() if re.search(rf"(?<![\w]){re.escape(stem)}(?![\w])", nodeid)}
    return found


def pytest_configure(config):
    for number, stem in lesson_notebooks().items():
        config.addinivalue_line("markers", f"lesson{number}: the tests that defend notebooks/{stem}.ipynb")


@pytest.hookimpl(tryfirst=True)  # before -m deselects
def pytest_collection_modifyitems(config, items):
    stems = lesson_notebooks()
    for item in items:
        for number in sorted(lessons_of(Path(str(item.path)), item.nodeid, stems)):
            item.add_marker(f"lesson{number}")
