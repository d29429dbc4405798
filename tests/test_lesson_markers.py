"""tests/lesson_markers.py: each lesson notebook has a marker, and the right tests carry it."""

from __future__ import annotations

from pathlib import Path

from lesson_markers import LESSONS_OF_FILE, NOTEBOOKS, lesson_notebooks, lessons_of

TESTS = Path(__file__).resolve().parent


def test_every_lesson_notebook_has_a_number():
    lessons = lesson_notebooks()
    assert lessons["03"] == "03_worked_example" and "00" in lessons and "14" in lessons
    assert all(n in lessons for numbers in LESSONS_OF_FILE.values() for n in numbers)


def test_claims_files_notebooks_and_ids_name_their_lessons():
    assert lessons_of(TESTS / "test_lesson_claims_03.py") == {"03"}
    assert lessons_of(TESTS / "test_lesson_claims_09_11.py") == {"09", "10", "11"}  # a range
    assert lessons_of(NOTEBOOKS / "03_worked_example.ipynb", "notebooks/03_worked_example.ipynb::Cell 0") == {"03"}
    assert lessons_of(TESTS / "test_prose_numbers.py",
                      "tests/test_prose_numbers.py::test_every_prose_number_is_printed_or_checked[05_cost]") == {"05"}
    assert lessons_of(TESTS / "test_counts.py") == {"03", "05", "06"}
    assert lessons_of(TESTS / "test_architecture.py", "tests/test_architecture.py::test_no_cycle") == set()
    assert lessons_of(NOTEBOOKS / "solutions" / "solutions.ipynb") == set()
