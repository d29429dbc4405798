"""The solutions notebook is the proof that every exercise can be solved: each solution cell shows
the checker's verdict, and this test reads those stored verdicts (strict nbval proves that a fresh
run prints the same). The cells themselves show the verdict and do not assert, so a student
reads a solution, not a test."""

from __future__ import annotations

import json
import re

from lesson_claims import NOTEBOOKS, code_sources, output_text

NB = "solutions/solutions.ipynb"

# In the notebook's order: "correct" for a solution, the pitfall's name for a common wrong answer,
# or a phrase the message must hold for a wrong answer the checker explains without a name.
EXPECTED = [
    "correct", "softmax_unstable", "correct", "correct", "scale_sqrt_d_model", "correct",
    "mask_after_softmax", "mask_inverted", "np.swapaxes(k, -1, -2)", "correct",
    "split_without_transpose", "correct", "causal_mask_upper", "correct", "correct",
    "no_output_projection", "weights_transposed", "correct", "correct", "correct", "FLOPs",
    "correct", "plain MHA",
]


def _verdicts() -> list[str]:
    nb = json.loads((NOTEBOOKS / NB).read_text())
    return [output_text(c, "\n") for c in nb["cells"]
            if c["cell_type"] == "code" and re.search(r"^verdict = ", "".join(c["source"]), re.M)]


def test_every_solution_passes_and_every_wrong_answer_is_named():
    verdicts = _verdicts()
    assert len(verdicts) == len(EXPECTED)
    for verdict, expected in zip(verdicts, EXPECTED, strict=True):
        if expected == "correct":
            assert verdict.startswith("Feedback (correct)"), verdict
        elif re.fullmatch(r"[a-z_]+", expected):
            assert verdict.startswith(f"Feedback (not yet, pitfall {expected})"), verdict
        else:
            assert verdict.startswith("Feedback (not yet") and expected in verdict, verdict


def test_the_solutions_do_not_assert():
    assert not [c for c in code_sources(NB) if re.search(r"^\s*assert\b", c, re.M)]
