"""``make release`` and ``make grade`` (scripts/coursework.py): the students' copy in nbgrader's
format holds no solution and no answer, and grading names what each student got right or wrong.

The submissions are made here: the released exercise notebooks filled in with the code of
``notebooks/solutions/`` (every exercise must pass), with known mistakes (each must be named),
left blank, or not handed in.
"""

from __future__ import annotations

import ast
import builtins
import csv
import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from hidden_answers import NOTEBOOKS, REPO, flat, guide_answer_phrases, solution_code_lines

_spec = importlib.util.spec_from_file_location("coursework", REPO / "scripts" / "coursework.py")
coursework = importlib.util.module_from_spec(_spec)
sys.modules["coursework"] = coursework  # dataclasses look their module up there
_spec.loader.exec_module(coursework)


@pytest.fixture(scope="module")
def released(tmp_path_factory):
    root = tmp_path_factory.mktemp("release")
    summary = coursework.release(root / "release", root / "source", log=lambda *_: None)
    return root / "release", root / "source", summary


def test_the_exercises_are_the_lessons_stubs():
    found = {ex.grade_id: ex for ex in coursework.exercises()}
    assert list(found) == [
        "00-softmax", "01-scale", "01-attention", "02-split_heads", "04-causal_mask", "07-merge_heads",
        "09-rms_norm", "10-encoder_layer", "13-decoder_layer", "13-generation_loop", "13-cross_attention",
        "14-multi_head_attention", "14-decoder_layer", "14-generation_loop", "14-param_count", "14-macs_per_token",
        "14-kv_bytes", "14-params_768_12", "14-d_k_768_12", "14-attention_macs_512_8_2000", "14-kv_cache_gqa_mib"]
    assert found["01-scale"].check == "check_scale(my_scale, d_model=big.d_model, n_heads=big.h)"
    # a checker called on the library's own pitfall (07's demonstration) is not an exercise
    assert coursework.cell_exercise("verdict = check_attention(pf.attention_mask_after_softmax)", "07_x", 0) is None


def test_the_release_holds_no_solution_and_no_answer(released):
    out, _, summary = released
    code, answers = solution_code_lines(), guide_answer_phrases()
    assert len(code) > 50 and len(answers) > 20
    text = {p: flat(p.read_text(encoding="utf-8")) for p in out.rglob("*")
            if p.is_file() and p.suffix in {".ipynb", ".py", ".md", ".json", ".txt", ".toml", ".yml", ".j2", ".js", ""}}
    assert len(text) > 100
    assert [(p.name, line) for p, t in text.items() for line in code if line in t] == []
    assert [(p.name, a) for p, t in text.items() for a in answers if a in t] == []
    assert not (out / "notebooks" / "solutions").exists() and not (out / "docs" / "teachers_guide.md").exists()
    assert not (out / "tests").exists()
    # the lessons' links to the solutions say where they come from instead of dangling
    for p in (out / "notebooks").glob("*.ipynb"):
        assert "solutions/" not in text[p], p.name
    assert "teachers_guide.md" not in text[out / "README.md"]


def test_the_release_is_in_nbgraders_format(released):
    """Each exercise cell is an answer cell, followed by a locked graded cell whose hidden test
    the students' copy leaves out and the teacher's copy keeps; the checksums are nbgrader's."""
    from nbgrader.utils import compute_checksum

    out, source, summary = released
    for ex in summary["exercises"]:
        student = nbformat.read(out / "notebooks" / ex.notebook, as_version=4)
        teacher = nbformat.read(source / ex.notebook, as_version=4)
        for nb, hidden in ((student, False), (teacher, True)):
            ids = [c.metadata.get("nbgrader", {}).get("grade_id") for c in nb.cells]
            i = ids.index(f"{ex.grade_id}-answer")
            answer, test = nb.cells[i], nb.cells[i + 1]
            assert answer.metadata.nbgrader.solution and not answer.metadata.nbgrader.grade
            expected = {"grade": True, "grade_id": ex.grade_id, "locked": True, "points": 1,
                        "schema_version": 3, "solution": False, "task": False}
            assert {k: test.metadata.nbgrader.get(k) for k in expected} == expected
            assert (ex.check in test.source) is hidden and coursework.TEST_HEADER in test.source
            if not hidden:
                assert test.metadata.nbgrader["checksum"] == compute_checksum(test)
    # a student running the release top to bottom sees "not attempted yet", never a failed test
    assert "NotImplementedError" in nbformat.read(out / "notebooks" / "00_on_ramp.ipynb", as_version=4).cells[8].source


# -- submissions ----------------------------------------------------------------------------------

def _solution_cells() -> tuple[dict, dict]:
    """From notebooks/solutions/: each checker's first right answer (its argument and the
    statements before it), and every function the right answers' cells define. A right answer is
    a call whose verdict the cell asserts ``ok``, or a checker called on the exercise's own name
    (``verdict = check_split_heads(my_split_heads)``, ``check_rms_norm(my_rms_norm)``), while the
    wrong answers have names of their own or are lambdas; for a numeric question, its first
    ``check_answer`` (the wrong ones follow it)."""
    answers = {ex.answer for ex in coursework.exercises()}
    calls, functions = {}, {}
    for path in sorted((NOTEBOOKS / "solutions").glob("*.ipynb")):
        cells = [ast.parse(c.source).body for c in nbformat.read(path, as_version=4).cells if c.cell_type == "code"]
        imports = [s for body in cells for s in body if isinstance(s, (ast.Import, ast.ImportFrom))]
        for body in cells:
            asserted = any(isinstance(s, ast.Assert) and ast.unparse(s.test) == "verdict.ok" for s in body)
            for i, s in enumerate(body):
                call = s.value if isinstance(s, (ast.Assign, ast.Expr)) else None
                if isinstance(s, ast.For) and len(s.body) == 1 and isinstance(s.body[0], ast.Expr):
                    call = s.body[0].value  # for prompt in (...): print(check_x(answer, prompt=prompt))
                if isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id == "print":
                    call = call.args[0] if call.args else None
                if not (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                        and call.func.id.startswith("check_")):
                    continue
                arg = call.args[1] if call.func.id == "check_answer" else call.args[0]
                if asserted or call.func.id == "check_answer" or (isinstance(arg, ast.Name) and arg.id in answers):
                    key = call.func.id + (f":{call.args[0].value}" if call.func.id == "check_answer" else "")
                    calls.setdefault(key, (imports, body[:i], arg))
                    functions.update({f.name: f for f in body if isinstance(f, ast.FunctionDef)})
                break
    return calls, functions


def _solved(ex) -> str:
    """The statements that define ``ex.answer`` as notebooks/solutions/ does, with the functions
    they call that other solution cells define (a capstone needs its own split and merge) and the
    imports of their solutions notebook (13's layer uses names 13 itself does not import)."""
    calls, functions = _solution_cells()
    call = ast.parse(ex.check).body[0].value
    key = call.func.id + (f":{call.args[0].value}" if call.func.id == "check_answer" else "")
    imports, before, arg = calls[key]
    stmts = list(before)
    if not (isinstance(arg, ast.Name) and arg.id == ex.answer):
        stmts.append(ast.parse(f"{ex.answer} = {ast.unparse(arg)}").body[0])
    defined = {s.name for s in stmts if isinstance(s, ast.FunctionDef)}
    needed = {n.id for s in stmts for n in ast.walk(s) if isinstance(n, ast.Name)} - defined - set(dir(builtins))
    helpers = [functions[n] for n in functions if n in needed]
    return "\n\n\n".join(ast.unparse(s) for s in [*imports, *helpers, *stmts])


def _fill(nb, answers: dict[str, str]):
    """A released notebook with some answer cells' stubs replaced by the given code."""
    for cell in nb.cells:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id", "").removesuffix("-answer")
        if cell.metadata.get("nbgrader", {}).get("solution") and grade_id in answers:
            kept = [ast.unparse(s) for s in ast.parse(cell.source).body if not coursework._is_stub(s)]
            cell.source = answers[grade_id] + "\n\n\n" + "\n".join(kept)
    return nb


def _hand_in(released, submissions, student: str, notebook: str, answers: dict[str, str]) -> None:
    out, _, _ = released
    folder = submissions / student / "mha"
    folder.mkdir(parents=True, exist_ok=True)
    nb = _fill(nbformat.read(out / "notebooks" / notebook, as_version=4), answers)
    nbformat.write(nb, folder / notebook)


CAPSTONE = "14_capstone.ipynb"
ROUND_TRIP = "02_shape_round_trip.ipynb"
MISTAKES = {  # a student's wrong answer, and the name the checker must give it
    "01-scale": ("my_scale = 1 / np.sqrt(big.d_model)", "scale_sqrt_d_model"),
    "02-split_heads": ("def my_split_heads(x, n_heads):\n    *lead, n, width = x.shape\n"
                       "    return x.reshape(*lead, n_heads, n, width // n_heads)", "split_without_transpose"),
}


def _rows(csv_path):
    with csv_path.open(encoding="utf-8") as f:
        return {r["student"]: r for r in csv.DictReader(f)}


@pytest.mark.models  # the capstone loads SmolLM2
def test_grading_names_each_students_result(released, tmp_path):
    """The capstone and 02: a student with the solutions' code passes every exercise
    of both (but the capstone's two on SmolLM2, left blank here to keep the test fast: the slow
    test below solves them; the cache's bytes, which count what that loop keeps, are then "not
    attempted" too); known mistakes are named; a blank notebook is "not attempted"; a
    missing one is "not handed in"; the tables have a row per student and a column per exercise."""
    found = coursework.exercises()
    on_the_model = {"14-decoder_layer", "14-generation_loop", "14-kv_bytes"}
    ids = [ex.grade_id for ex in found if ex.notebook in (CAPSTONE, ROUND_TRIP) and ex.grade_id not in on_the_model]
    solved = {ex.grade_id: _solved(ex) for ex in found if ex.grade_id in ids}
    subs = tmp_path / "submitted"
    _hand_in(released, subs, "ada", CAPSTONE, solved)
    _hand_in(released, subs, "ada", ROUND_TRIP, solved)
    _hand_in(released, subs, "bob", ROUND_TRIP, {"02-split_heads": MISTAKES["02-split_heads"][0]})
    _hand_in(released, subs, "cy", CAPSTONE, {})
    table = coursework.grade(subs, log=lambda *_: None)
    assert [table["ada"][g].label for g in ids] == ["passed"] * len(ids)
    assert {table["ada"][g].label for g in on_the_model} == {"not attempted"}
    assert table["bob"]["02-split_heads"].label == "mistake: split_without_transpose"
    assert table["bob"]["02-split_heads"].message  # the checker's own words, for the feedback
    assert {table["bob"][g].label for g in ids if g.startswith("14-")} == {"not handed in"}
    assert {table["cy"][g].label for g in [*ids, *on_the_model] if g.startswith("14-")} == {"not attempted"}
    assert table["cy"]["00-softmax"].label == "not handed in"
    csv_path, md_path = coursework.write_tables(table, tmp_path / "grades")
    rows = _rows(csv_path)
    assert list(rows) == ["ada", "bob", "cy"]
    assert list(rows["ada"]) == ["student", *(ex.grade_id for ex in found), "passed"]
    assert rows["ada"]["passed"] == str(len(ids)) and rows["bob"]["02-split_heads"] == "mistake: split_without_transpose"
    md = md_path.read_text(encoding="utf-8")
    assert "| ada |" in md and table["bob"]["02-split_heads"].message.split()[0] in md


def test_a_changed_test_cell_is_not_trusted(released, tmp_path):
    """A student who empties a graded cell, or deletes it, is graded by the teacher's test."""
    out, _, _ = released
    nb = nbformat.read(out / "notebooks" / CAPSTONE, as_version=4)
    tests = [c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade")]
    tests[0].source = "pass"
    nb.cells.remove(tests[1])
    graded = coursework.graded_notebook(nb, NOTEBOOKS / CAPSTONE)
    sources = [c.source for c in graded.cells if c.metadata.get("nbgrader", {}).get("grade")]
    assert len(sources) == len(tests) and all("### BEGIN HIDDEN TESTS" in s for s in sources)


@pytest.mark.slow  # runs the seven exercise notebooks, 09 with the real models
@pytest.mark.models
def test_the_solutions_pass_every_exercise_and_mistakes_are_named(released, tmp_path):
    found = coursework.exercises()
    solved = {ex.grade_id: _solved(ex) for ex in found}
    subs = tmp_path / "submitted"
    for notebook in dict.fromkeys(ex.notebook for ex in found):
        _hand_in(released, subs, "solutions", notebook, solved)
    _hand_in(released, subs, "slips", "01_one_head.ipynb", {"01-scale": MISTAKES["01-scale"][0]})
    _hand_in(released, subs, "slips", ROUND_TRIP, {"02-split_heads": MISTAKES["02-split_heads"][0]})
    table = coursework.grade(subs, log=lambda *_: None)
    assert {g: r.label for g, r in table["solutions"].items()} == {ex.grade_id: "passed" for ex in found}
    for grade_id, (_, pitfall) in MISTAKES.items():
        assert table["slips"][grade_id].label == f"mistake: {pitfall}"


@pytest.mark.slow  # nbgrader's own command line: generate_assignment, autograde, export (about a minute)
def test_nbgrader_itself_generates_and_autogrades_the_source(released, tmp_path):
    """The teacher's copy (build/release-source/) is an nbgrader source as nbgrader reads it: its
    generate_assignment accepts it, and its autograde, with its SQLite gradebook, scores a student
    who solved the capstone 10 points (the capstone's ten exercises) and one who got a number wrong 0."""
    _, source, summary = released
    course = tmp_path / "course"
    shutil.copytree(source, course / "source" / "mha")
    (course / "nbgrader_config.py").write_text(
        f'c = get_config()\nc.CourseDirectory.course_id = "mha"\nc.CourseDirectory.root = r"{course}"\n')
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
           "OPENBLAS_NUM_THREADS": "1"}

    def nbgrader(*args):
        return subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                              capture_output=True, text=True, check=True)

    nbgrader("generate_assignment", "mha", "--force")
    assert sorted(p.name for p in (course / "release" / "mha").glob("*.ipynb")) == \
        sorted({ex.notebook for ex in summary["exercises"]})
    capstone = [ex for ex in summary["exercises"] if ex.notebook == CAPSTONE]
    handed = {"ada": {ex.grade_id: _solved(ex) for ex in capstone},
              "bob": {"14-params_768_12": "params_768_12 = 12 * 4 * 768 * 768"}}  # the x h slip
    for student, answers in handed.items():
        nbgrader("db", "student", "add", student)
        folder = course / "submitted" / student / "mha"
        folder.mkdir(parents=True)
        nb = nbformat.read(course / "release" / "mha" / CAPSTONE, as_version=4)
        nbformat.write(_fill(nb, answers), folder / CAPSTONE)
    nbgrader("autograde", "mha")
    nbgrader("export", f"--to={tmp_path / 'grades.csv'}")
    with (tmp_path / "grades.csv").open() as f:
        scores = {r["student_id"]: (float(r["score"]), float(r["max_score"])) for r in csv.DictReader(f)}
    assert scores == {"ada": (len(capstone), len(summary["exercises"])), "bob": (0, len(summary["exercises"]))}
