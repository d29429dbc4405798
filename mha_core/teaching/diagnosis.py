"""What went wrong in the reader's code, in plain words: for the exercise checkers.

Two tools, used by ``mha_core.teaching.exercises`` while it runs the reader's function:

* ``LibraryWatch``: records a call into ``mha_core.core`` made by the reader's code, whatever name
  the function was imported under, so that a checker can answer "this calls mha_core's softmax;
  write it yourself" instead of passing the library's own answer;
* ``explain_error``: turns an exception from the reader's code into the shapes involved and the
  likely cause, quoting the failing line (``k.T`` on a 3-D array, ``transpose(1, 0, 2)`` on a
  batch, a ``reshape`` with fixed sizes, a shape unpacked into two names, a reduction without
  ``keepdims``, a bool mask used as an index, a function that lacks a parameter).

Nothing of the reader's code is run again: the shapes come from the arrays its frame holds.
"""

from __future__ import annotations

import ast
import functools
import importlib
import inspect
import io
import linecache
import os
import pkgutil
import re
import sys
import tokenize
import traceback

import numpy as np

from .. import core
from . import pitfalls

__all__ = ["LibraryWatch", "core_functions", "explain_error"]


# --------------------------------------------------------------------------- mha_core is off limits

_CORE_DIR = os.path.dirname(os.path.abspath(core.__file__)) + os.sep
_PITFALLS_FILE = os.path.abspath(pitfalls.__file__)
_PACKAGE_DIR = os.path.dirname(_CORE_DIR.rstrip(os.sep)) + os.sep  # mha_core/
_NUMPY_DIR = os.path.dirname(os.path.abspath(np.__file__)) + os.sep
# every public core function is wrapped by validate.checked; its wrapper's frame is not the caller
_CHECKED_WRAPPER = core.validate.checked(lambda *a, **k: None)(lambda: None).__code__


@functools.cache
def core_functions() -> dict:
    """Code object -> name, for every function defined in a module of ``mha_core.core`` (but the
    checks at its door, ``validate.py``: they are not an answer)."""
    found = {}
    for info in pkgutil.iter_modules(core.__path__, core.__name__ + "."):
        if info.name.endswith(".validate"):
            continue
        module = importlib.import_module(info.name)
        for obj in vars(module).values():
            if inspect.isfunction(obj) and obj.__module__ == module.__name__:
                found[inspect.unwrap(obj).__code__] = obj.__name__
    return found


def _library_caller(filename: str) -> bool:
    """True for code that may call the core freely: the core itself and the pitfalls built on it."""
    path = os.path.abspath(filename)
    return path.startswith(_CORE_DIR) or path == _PITFALLS_FILE


class LibraryWatch:
    """While active, records the first call into ``mha_core.core`` made by the reader's code.

    ``sys.setprofile`` sees every Python call, so the function is caught whatever name it was
    imported under (``mha_core.softmax``, ``from mha_core.core.attention import softmax``,
    ``from mha_core import softmax as s``, or passed to the checker itself). Calls made by the
    core itself, or by the pitfalls, do not count: ``softmax`` may call its own helpers, and a
    pitfall passed in whole is named as a pitfall.
    """

    def __init__(self, allowed: tuple[str, ...]):
        self.allowed = allowed
        self.called: str | None = None
        self._previous = None

    def _profile(self, frame, event, arg):
        if event == "call" and self.called is None:
            name = core_functions().get(frame.f_code)
            if name is not None and name not in self.allowed:
                caller = frame.f_back
                while caller is not None and caller.f_code is _CHECKED_WRAPPER:  # the door, not the caller
                    caller = caller.f_back
                if caller is None or not _library_caller(caller.f_code.co_filename):
                    self.called = name
        if self._previous is not None:  # keep any profiler that was already running
            self._previous(frame, event, arg)

    def __enter__(self):
        self._previous = sys.getprofile()
        sys.setprofile(self._profile)
        return self

    def __exit__(self, *exc):
        sys.setprofile(self._previous)
        return False


# --------------------------------------------------------------------------- the reader's errors


def _in(filename: str, directory: str) -> bool:
    return os.path.abspath(filename).startswith(directory)


def _reader_frame(error: BaseException):
    """The innermost traceback frame in the reader's code (not numpy's, not mha_core's), or None."""
    for frame, lineno in reversed(list(traceback.walk_tb(error.__traceback__))):
        name = frame.f_code.co_filename
        if not (_in(name, _NUMPY_DIR) or _in(name, _PACKAGE_DIR)):
            return frame, lineno
    return None


def _zeros(shape: tuple[int, ...]) -> np.ndarray:
    return np.broadcast_to(np.float64(0.0), shape)  # a shape to play with, no memory


def _int_args(args: list) -> list[int] | None:
    """The integer literals of a call (``transpose(1, 0, 2)`` or ``transpose((1, 0, 2))``), else None."""
    if len(args) == 1 and isinstance(args[0], ast.Tuple | ast.List):
        args = args[0].elts
    values = []
    for a in args:
        if isinstance(a, ast.UnaryOp) and isinstance(a.op, ast.USub) and isinstance(a.operand, ast.Constant):
            values.append(-a.operand.value)
        elif isinstance(a, ast.Constant):
            values.append(a.value)
        else:
            return None
    return values if all(isinstance(v, int) and not isinstance(v, bool) for v in values) else None


def _shape_of(node: ast.AST, names: dict) -> tuple[int, ...] | None:
    """The shape of a simple expression of the failing line (a name, ``.T``, a transpose), else None.

    Nothing of the reader's code is run again: the shapes come from the arrays the frame holds.
    """
    try:
        if isinstance(node, ast.Name):
            value = names.get(node.id)
            return value.shape if isinstance(value, np.ndarray) else None
        if isinstance(node, ast.Attribute) and node.attr == "T":
            base = _shape_of(node.value, names)
            return None if base is None else base[::-1]
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if func.attr not in ("swapaxes", "transpose"):
                return None
            if isinstance(func.value, ast.Name) and func.value.id in ("np", "numpy"):  # np.swapaxes(x, i, j)
                if not node.args:
                    return None
                base, args = _shape_of(node.args[0], names), _int_args(node.args[1:])
            else:  # x.swapaxes(i, j)
                base, args = _shape_of(func.value, names), _int_args(node.args)
            if base is None or args is None:
                return None
            if func.attr == "transpose":
                return np.transpose(_zeros(base), args or None).shape
            return np.swapaxes(_zeros(base), *args).shape
    except Exception:  # an invalid transpose is the error being explained, not a new one
        return None
    return None


def _text(node: ast.AST, line: str) -> str:
    return ast.get_source_segment(line, node) or "?"


def _matmul_hint(tree: ast.AST, line: str, names: dict) -> str | None:
    for node in ast.walk(tree):
        if not (isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult)):
            continue
        a, b = _shape_of(node.left, names), _shape_of(node.right, names)
        if a is None or b is None:
            continue
        try:
            np.matmul(_zeros(a), _zeros(b))
            continue  # this product is fine; look for another
        except ValueError:
            pass
        left, right = _text(node.left, line), _text(node.right, line)
        said = f"`{left} @ {right}` multiplies shapes {a} and {b}"
        for side, shape in ((node.right, b), (node.left, a)):
            if isinstance(side, ast.Attribute) and side.attr == "T" and len(shape) >= 3:
                base = _text(side.value, line)
                fixed = np.swapaxes(_zeros(shape[::-1]), -1, -2).shape
                return (f"{said}: `{base}.T` reverses all {len(shape)} axes. Swap only the last two, "
                        f"np.swapaxes({base}, -1, -2), which gives {fixed}.")
        if len(a) >= 2 and len(b) >= 2 and a[-1] != b[-2]:
            return (f"{said}: the last axis on the left ({a[-1]}) must equal the second-to-last on "
                    f"the right ({b[-2]}).")
        return f"{said}, which do not fit together."
    return None


def _name(node: ast.AST | None, line: str) -> str:
    """How to call the array in a suggestion: its name if it has a short one, else x."""
    text = _text(node, line) if node is not None else "?"
    return text if text.isidentifier() else "x"


def _transpose_hint(tree: ast.AST, line: str, names: dict) -> str:
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "transpose":
            target = node.func.value
            if isinstance(target, ast.Name) and target.id in ("np", "numpy"):
                target, args = (node.args[0], _int_args(node.args[1:])) if node.args else (None, None)
            else:
                args = _int_args(node.args)
            shape = None if target is None else _shape_of(target, names)
            if shape is not None and args and len(args) != len(shape):
                x = _name(target, line)
                return (f"`{_text(node, line)}` lists {len(args)} axes, but `{_text(target, line)}` has "
                        f"{len(shape)}: its shape is {shape}. Count axes from the end, so that leading "
                        f"(batch) axes pass through: np.swapaxes({x}, -3, -2) swaps the third- and "
                        f"second-to-last axes whatever comes in front; keep those leading axes in any "
                        f"reshape too.")
    return ("transpose was given a list of axes that does not match the array's number of axes (a batch "
            "adds one). Count axes from the end instead: np.swapaxes(x, -3, -2).")


def _reshape_hint(tree: ast.AST, line: str, names: dict, message: str) -> str:
    asked = re.search(r"into shape (\(.*?\))", message)
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "reshape":
            shape = _shape_of(node.func.value, names)
            if shape is not None:
                x = _name(node.func.value, line)
                return (f"`{_text(node, line)}` asks for shape {asked.group(1) if asked else '?'}, but "
                        f"`{_text(node.func.value, line)}` is {shape} ({int(np.prod(shape))} numbers). "
                        f"Build the new shape from {x}.shape and keep its leading axes: "
                        f"{x}.reshape(*{x}.shape[:-1], h, d_k) splits the last axis, "
                        f"{x}.reshape(*{x}.shape[:-2], -1) merges the last two.")
    return ("reshape was asked for a shape with a different number of entries than the array holds. Build "
            "the new shape from x.shape and keep its leading axes: x.reshape(*x.shape[:-1], h, d_k) splits "
            "the last axis, x.reshape(*x.shape[:-2], -1) merges the last two.")


def _unpack_hint(tree: ast.AST, line: str, names: dict) -> str:
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Tuple)
                and isinstance(node.value, ast.Attribute) and node.value.attr == "shape"):
            shape = _shape_of(node.value.value, names)
            if shape is not None:
                count, x = len(node.targets[0].elts), _name(node.value.value, line)
                last = ", ".join(_text(t, line) for t in node.targets[0].elts)
                return (f"this unpacks {count} axes, but `{_text(node.value.value, line)}` is {shape}: a batch "
                        f"adds one in front. Read the sizes from the end, {last} = {x}.shape[-{count}:], and "
                        f"keep the leading axes {x}.shape[:-{count}] in front in every reshape.")
    return ("a shape was unpacked into a fixed number of names; a batch adds one axis in front. Read the "
            "sizes from the end, n, d = x.shape[-2:], and keep x.shape[:-2] in front in every reshape.")


def _without_comment(line: str) -> str:
    """The line stripped, without a trailing # comment (a # inside a string is kept)."""
    try:
        for tok in tokenize.generate_tokens(io.StringIO(line).readline):
            if tok.type == tokenize.COMMENT:
                return line[: tok.start[1]].strip()
    except (tokenize.TokenError, SyntaxError):  # an unfinished multi-line statement
        pass
    return line.strip()


def explain_error(error: Exception, case_label: str, signature: str,
                  expected_shape: tuple[int, ...] | None = None) -> str:
    """A plain-words diagnosis of an exception raised by the reader's code on one test case.

    Parameters
    ----------
    error : Exception
        What the reader's function raised (its traceback still attached).
    case_label : str
        The test case, as the reader should read it: "q, k, v of shape (4, 5, 3), causal mask".
    signature : str
        How the function must be defined: "attention(q, k, v, mask=None)".
    expected_shape : tuple of int, optional
        The right output's shape on this case, said at the end of a shape error.

    Returns
    -------
    str: which line failed, the shapes involved, the likely cause and the fix.
    """
    message, kind = str(error), type(error).__name__
    if isinstance(error, TypeError) and len(list(traceback.walk_tb(error.__traceback__))) == 1:
        # raised by the call itself, before any line of the reader's code ran: the signature does not fit
        call = re.sub(r"=[^,)]*", "", signature)
        return (f"The checker calls your function as {call} ({case_label}), and it does not accept that "
                f"({message}). Define it as def {signature}:")
    found = _reader_frame(error)
    if found is None:
        return f"Your function raised {kind}: {message} ({case_label})."
    frame, lineno = found
    line = _without_comment(linecache.getline(frame.f_code.co_filename, lineno, frame.f_globals))
    names = {**frame.f_globals, **frame.f_locals}
    try:
        tree = ast.parse(line)
    except SyntaxError:  # part of a statement written over several lines
        tree = ast.parse("")
    where = f"Your function raised {kind} at `{line}` ({case_label}): " if line else (
        f"Your function raised {kind} ({case_label}): ")
    hint = None
    if isinstance(error, ValueError) and ("matmul" in message or "not aligned" in message):
        hint = _matmul_hint(tree, line, names) or (
            "a matrix product got shapes that do not fit. With a leading heads or batch axis, `k.T` "
            "reverses every axis; swap only the last two: np.swapaxes(k, -1, -2).")
    elif isinstance(error, ValueError) and "axes don't match array" in message:
        hint = _transpose_hint(tree, line, names)
    elif isinstance(error, ValueError) and "cannot reshape" in message:
        hint = _reshape_hint(tree, line, names, message)
    elif isinstance(error, ValueError) and "values to unpack" in message:
        hint = _unpack_hint(tree, line, names)
    elif isinstance(error, ValueError) and "could not be broadcast" in message:
        shapes = re.findall(r"\([\d,]*\)", message)
        hint = f"NumPy cannot line up shapes {' and '.join(shapes)} entry by entry (broadcast them)."
        reductions = sorted(set(re.findall(r"\b(max|sum|mean)\(", line)))
        if reductions and "keepdims" not in line:
            hint += (f" A {' or '.join(reductions)} over an axis drops that axis; keepdims=True keeps it "
                     f"(with size 1), so the result lines up with the array it came from.")
    elif isinstance(error, np.exceptions.AxisError):
        hint = (f"{message}. Count axes from the end (-1 is the last) so the same code works with and "
                f"without a batch axis.")
    elif isinstance(error, IndexError) and "boolean index did not match" in message:
        hint = ("a bool mask used as an index must match the array's leading axes; np.where(mask, scores, "
                "-np.inf) broadcasts the (N_q, N_k) mask over every head instead.")
    elif isinstance(error, IndexError) and "too many indices" in message:
        hint = f"{message}. Index from the end with ... (x[..., i]) so leading axes pass through."
    if hint is None:
        return f"{where}{message}."
    shape = f" The right output here has shape {expected_shape}." if expected_shape is not None else ""
    return where + hint + shape
