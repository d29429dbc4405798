"""The code of a function of mha_core, as it runs, for a lesson to print.

``print(source(multi_head_attention))`` shows the function a lesson has just built by hand, read
from the package itself, so the text can never drift from the code: strict nbval compares the
printed output with a fresh run.
"""

from __future__ import annotations

import ast
import inspect
import textwrap


def source(fn) -> str:
    """``fn``'s code (its decorator and ``def`` line included) without its docstring."""
    fn = inspect.unwrap(fn)
    code = textwrap.dedent(inspect.getsource(fn))
    body = ast.parse(code).body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
        lines = code.splitlines()
        del lines[body[0].lineno - 1:body[0].end_lineno]
        code = "\n".join(lines)
    return code.rstrip("\n")
