"""Hand out, collect and grade the exercises, in nbgrader's format.

    python scripts/coursework.py release [--out build/release]                  (make release)
    python scripts/coursework.py grade SUBMISSIONS [--out build/grades]         (make grade SUBMISSIONS=dir)

``release`` writes the students' copy of the course: the repository's files (``git ls-files``)
without the solutions (``notebooks/solutions/``), the teacher's guide, the tests and CI, and with
every exercise notebook in nbgrader's format. An exercise is a lesson cell that holds a stub (a
function whose body raises ``NotImplementedError``, or ``name = ...``) and calls its checker
(``check_softmax(my_softmax)``). In the release that cell is an nbgrader answer cell
(``solution: true``), as it is in the lesson, and it is followed by a locked, graded test cell
(``grade: true``, one point) whose hidden test runs the same checker and fails unless the
verdict is "correct": ``assert _verdict.ok, repr(_verdict)``. nbgrader's own ``ClearHiddenTests``
takes the hidden test out of the students' copy and ``ComputeChecksums`` records the cells'
checksums, as ``nbgrader generate_assignment`` does. A student's copy therefore runs top to
bottom as the lesson does ("not attempted yet"), and the teacher's copy of the test cells (with the
hidden tests) is written to ``build/release-source/`` for nbgrader itself: put those notebooks in
an nbgrader course's ``source/<assignment>/`` to use ``nbgrader autograde`` and its gradebook.

``grade`` reads a folder with one sub-folder per student (``SUBMISSIONS/<student>/**/NN_*.ipynb``,
as nbgrader's ``submitted/<student>/<assignment>/`` is laid out), puts the hidden tests back into
each submitted exercise notebook (a student's copy of a test cell is never trusted), runs it in a
fresh kernel, and reads each test cell's result: passed, not attempted, the mistake the checker
named (its pitfall, e.g. ``scale_sqrt_d_model``), another wrong answer, an error, or not handed in.
It writes ``grades.csv`` (one row per student, one column per exercise) and ``grades.md`` (the same
table, then each student's feedback: the checkers' own messages).

nbgrader is used as a library here (the ``test`` extra of pyproject.toml), never by the lessons.
"""

from __future__ import annotations

import argparse
import ast
import csv
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ROOT / "notebooks"
# Not in the students' copy: the answers, and what quotes or holds them.
HELD_BACK = ("notebooks/solutions/", "docs/teachers_guide.md", "tests/", ".ci/")
SOLUTIONS_GIVEN_OUT = "the solutions (your teacher gives them out)"
SCHEMA = 3  # nbgrader's cell-metadata schema version
TEST_HEADER = "# Autograded: the teacher's copy runs the checker of the cell above here (nbgrader)."
PASSED, NOT_ATTEMPTED, NOT_HANDED_IN = "passed", "not attempted", "not handed in"
VERDICT = re.compile(r"Feedback \((?P<headline>[^)]*)\): (?P<message>.*)", re.S)


@dataclass(frozen=True)
class Exercise:
    """One exercise: a stub cell of a lesson and the checker call that follows the stub."""

    notebook: str  # the lesson's file name, e.g. "00_on_ramp.ipynb"
    cell: int  # the index of its cell in the lesson
    grade_id: str  # e.g. "00-softmax", "14-params_768_12"
    check: str  # the checker call as the cell writes it, e.g. "check_softmax(my_softmax)"
    answer: str  # the name the student defines, e.g. "my_softmax"


def _is_stub(stmt: ast.stmt) -> str | None:
    """The name a stub statement leaves for the student to define, or None."""
    if isinstance(stmt, ast.FunctionDef) and any(
            isinstance(s, ast.Raise) and "NotImplementedError" in ast.unparse(s) for s in stmt.body):
        return stmt.name
    if (isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Constant)
            and stmt.value.value is Ellipsis and isinstance(stmt.targets[0], ast.Name)):
        return stmt.targets[0].id
    return None


def _checker_call(stmt: ast.stmt) -> ast.Call | None:
    if (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call)
            and isinstance(stmt.value.func, ast.Name) and stmt.value.func.id.startswith("check_")):
        return stmt.value
    return None


def cell_exercise(source: str, notebook: str, index: int) -> Exercise | None:
    """The exercise a code cell holds: a stub and a checker call on the stub's name."""
    try:
        body = ast.parse(source).body
    except SyntaxError:
        return None
    stubs = {name for name in map(_is_stub, body) if name}
    for call in filter(None, map(_checker_call, body)):
        names = [a.id for a in call.args if isinstance(a, ast.Name)]
        answer = next((n for n in names if n in stubs), None)
        if answer is None:
            continue
        what = call.func.id.removeprefix("check_")
        if what == "answer":  # check_answer("params_768_12", params_768_12): the question's id
            what = call.args[0].value
        return Exercise(notebook, index, f"{notebook[:2]}-{what}", ast.unparse(call), answer)
    return None


def exercises(notebooks: Path = NOTEBOOKS) -> list[Exercise]:
    """Every exercise of the numbered lessons, in reading order."""
    found = []
    for path in sorted(notebooks.glob("[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            if cell.cell_type == "code" and (ex := cell_exercise(cell.source, path.name, i)):
                found.append(ex)
    return found


# -- release -------------------------------------------------------------------------------------

def _nbgrader(grade_id: str, *, grade: bool, solution: bool, points: int = 0) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": grade, "schema_version": SCHEMA,
            "solution": solution, "task": False}
    if grade:
        meta["points"] = points
    return meta


def test_cell(ex: Exercise) -> nbformat.NotebookNode:
    """The graded cell after an exercise, with its hidden test (the teacher's copy)."""
    source = "\n".join([TEST_HEADER, "### BEGIN HIDDEN TESTS", f"_verdict = {ex.check}",
                        "assert _verdict.ok, repr(_verdict)", "### END HIDDEN TESTS"])
    cell = nbformat.v4.new_code_cell(source)
    cell.metadata["nbgrader"] = _nbgrader(ex.grade_id, grade=True, solution=False, points=1)
    cell.metadata["editable"] = cell.metadata["deletable"] = False
    return cell


def _without_answer_links(markdown: str) -> str:
    """Links to the solutions and to the teacher's guide, which the release leaves out, become
    text that says where they are."""
    markdown = re.sub(r"\[[^\]]*\]\([^)]*solutions/[^)]*\)|`[^`]*solutions/[^`]*`", SOLUTIONS_GIVEN_OUT, markdown)
    return re.sub(r"\[[^\]]*\]\([^)]*teachers_guide\.md[^)]*\)", "the teacher's guide (for teachers)", markdown)


def source_notebook(path: Path) -> nbformat.NotebookNode:
    """A lesson in nbgrader's format, the teacher's copy: each exercise cell an answer cell,
    followed by its graded test cell with the hidden test. Links to the solutions say where the
    solutions come from."""
    nb = nbformat.read(path, as_version=4)
    cells = []
    for i, cell in enumerate(nb.cells):
        if cell.cell_type == "markdown":
            cell.source = _without_answer_links(cell.source)
        cells.append(cell)
        if cell.cell_type == "code" and (ex := cell_exercise(cell.source, path.name, i)):
            cell.metadata["nbgrader"] = _nbgrader(f"{ex.grade_id}-answer", grade=False, solution=True)
            cells.append(test_cell(ex))
    nb.cells = cells
    return nb


def student_notebook(nb: nbformat.NotebookNode) -> nbformat.NotebookNode:
    """The students' copy of a source notebook: nbgrader's own preprocessors take the hidden
    tests out and record the checksums of the graded and answer cells."""
    from nbgrader.preprocessors import ClearHiddenTests, ComputeChecksums

    nb = nbformat.from_dict(nb)  # a copy
    for pre in (ClearHiddenTests(), ComputeChecksums()):
        nb, _ = pre.preprocess(nb, {})
    return nb


def release(out: Path, source_out: Path | None = None, log=print) -> dict:
    """Write the students' copy into ``out`` (emptied first), and the teacher's nbgrader source
    notebooks into ``source_out``. Returns the exercises and the files written."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, text=True,
                           check=True).stdout.split("\0")
    files = [f for f in files if f and not f.startswith(HELD_BACK) and (ROOT / f).is_file()]
    for folder in (out, source_out):
        if folder is not None and folder.exists():
            shutil.rmtree(folder)
    found = exercises()
    with_exercises = {ex.notebook for ex in found}
    for name in files:
        target = out / name
        target.parent.mkdir(parents=True, exist_ok=True)
        path = ROOT / name
        if path.suffix == ".md":
            target.write_text(_without_answer_links(path.read_text(encoding="utf-8")), encoding="utf-8")
        elif path.parent == NOTEBOOKS and path.suffix == ".ipynb":
            source = source_notebook(path)
            nbformat.write(student_notebook(source), target)
            if source_out is not None and path.name in with_exercises:
                source_out.mkdir(parents=True, exist_ok=True)
                nbformat.write(source, source_out / path.name)
        else:
            shutil.copy2(path, target)
    log(f"released {len(files)} files into {out}: {len(found)} exercises in {len(with_exercises)} notebooks"
        + (f"; the teacher's nbgrader source notebooks in {source_out}" if source_out else ""))
    return {"exercises": found, "files": files}


# -- grading ------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Result:
    status: str  # passed | not attempted | mistake | wrong | error | not handed in
    pitfall: str | None = None
    message: str = ""

    @property
    def label(self) -> str:
        """The table's cell: passed, or what is wrong, in a few words."""
        if self.status == "mistake":
            return f"mistake: {self.pitfall}"
        return self.status


def _result_of(cell: nbformat.NotebookNode) -> Result:
    errors = [o for o in cell.get("outputs", []) if o.output_type == "error"]
    if not errors:
        return Result(PASSED)
    err = errors[0]
    match = VERDICT.match(err.evalue) if err.ename == "AssertionError" else None
    if match is None:  # the answer cell failed, or its name is gone: the test could not run the checker
        return Result("error", message=f"{err.ename}: {err.evalue}")
    headline, message = match["headline"], match["message"]
    if headline == "not attempted yet":
        return Result(NOT_ATTEMPTED, message=message)
    pitfall = headline.split("pitfall ", 1)[1] if "pitfall " in headline else None
    return Result("mistake" if pitfall else "wrong", pitfall, message)


def graded_notebook(submitted: nbformat.NotebookNode, lesson: Path) -> nbformat.NotebookNode:
    """The submission with the teacher's test cells: every graded cell of the submission is
    dropped, and the teacher's one is put back after its answer cell (or at the end when the
    answer cell is gone)."""
    tests = {c.metadata["nbgrader"]["grade_id"]: c for c in source_notebook(lesson).cells
             if c.metadata.get("nbgrader", {}).get("grade")}
    cells, placed = [], set()
    for cell in submitted.cells:
        meta = cell.metadata.get("nbgrader", {})
        if meta.get("grade"):
            continue
        cells.append(cell)
        grade_id = meta.get("grade_id", "").removesuffix("-answer")
        if meta.get("solution") and grade_id in tests:
            cells.append(tests[grade_id])
            placed.add(grade_id)
    cells += [tests[g] for g in tests if g not in placed]
    submitted.cells = cells
    return submitted


def grade_notebook(path: Path, lesson: Path, timeout: int = 600) -> dict[str, Result]:
    """Run one submitted notebook with the teacher's tests; each exercise's result by grade id."""
    nb = graded_notebook(nbformat.read(path, as_version=4), lesson)
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # the kernel inherits it
    NotebookClient(nb, timeout=timeout, allow_errors=True, kernel_name="python3",
                   resources={"metadata": {"path": str(lesson.parent)}}).execute()
    return {c.metadata["nbgrader"]["grade_id"]: _result_of(c) for c in nb.cells
            if c.metadata.get("nbgrader", {}).get("grade")}


def grade(submissions: Path, log=print) -> dict[str, dict[str, Result]]:
    """Every student's result on every exercise: ``{student: {grade_id: Result}}``."""
    if not submissions.is_dir():
        raise ValueError(f"submissions must be a folder with one sub-folder per student, got {submissions}")
    students = sorted(p for p in submissions.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not students:
        raise ValueError(f"submissions must hold one sub-folder per student; {submissions} has none")
    found = exercises()
    table: dict[str, dict[str, Result]] = {}
    for student in students:
        row = {}
        for notebook in dict.fromkeys(ex.notebook for ex in found):
            handed_in = sorted(student.rglob(notebook))
            ids = [ex.grade_id for ex in found if ex.notebook == notebook]
            if not handed_in:
                row.update({g: Result(NOT_HANDED_IN) for g in ids})
                continue
            results = grade_notebook(handed_in[0], NOTEBOOKS / notebook)
            row.update({g: results[g] for g in ids})
            log(f"  {student.name}/{notebook}: {sum(results[g].status == PASSED for g in ids)} of {len(ids)} passed")
        table[student.name] = row
    return table


def write_tables(table: dict[str, dict[str, Result]], out: Path) -> tuple[Path, Path]:
    """``grades.csv`` and ``grades.md``: one row per student, one column per exercise."""
    out.mkdir(parents=True, exist_ok=True)
    ids = list(next(iter(table.values())))
    total = {s: sum(r.status == PASSED for r in row.values()) for s, row in table.items()}
    with (out / "grades.csv").open("w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(["student", *ids, "passed"])
        for student, row in table.items():
            writer.writerow([student, *(row[g].label for g in ids), total[student]])
    lines = ["# Grades", "", f"{len(table)} student{'s' * (len(table) != 1)}, {len(ids)} exercises, one point each.", "",
             "| student | " + " | ".join(ids) + " | passed |", "|---" * (len(ids) + 2) + "|"]
    lines += [f"| {s} | " + " | ".join(row[g].label for g in ids) + f" | {total[s]} of {len(ids)} |"
              for s, row in table.items()]
    lines += ["", "## Feedback", ""]
    for student, row in table.items():
        lines += [f"### {student}", ""]
        lines += [f"- **{g}**: {r.label}" + (f". {' '.join(r.message.split())}" if r.message else "")
                  for g, r in row.items() if r.status != PASSED] or ["- every exercise passed"]
        lines.append("")
    (out / "grades.md").write_text("\n".join(lines), encoding="utf-8")
    return out / "grades.csv", out / "grades.md"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    rel = sub.add_parser("release", help="the students' copy of the course, in nbgrader's format")
    rel.add_argument("--out", type=Path, default=ROOT / "build" / "release")
    rel.add_argument("--source-out", type=Path, default=ROOT / "build" / "release-source",
                     help="where the teacher's nbgrader source notebooks (with the hidden tests) go")
    gr = sub.add_parser("grade", help="grade a folder of submissions: one sub-folder per student")
    gr.add_argument("submissions", type=Path)
    gr.add_argument("--out", type=Path, default=ROOT / "build" / "grades")
    args = parser.parse_args(argv)
    if args.command == "release":
        release(args.out, args.source_out)
    else:
        csv_path, md_path = write_tables(grade(args.submissions), args.out)
        print(f"wrote {csv_path} and {md_path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
