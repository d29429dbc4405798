"""The checkers' diagnosis tools: the watch on mha_core's functions and the plain-words errors."""

from __future__ import annotations

import linecache
import sys

import numpy as np
import pytest

import mha_core as m
from mha_core.teaching import pitfalls as pf
from mha_core.teaching.diagnosis import LibraryWatch, core_functions, explain_error


def test_every_public_core_function_is_watched():
    watched = set(core_functions().values())
    assert {name for name in m.__all__ if callable(getattr(m, name)) and not isinstance(getattr(m, name), type)} <= watched
    assert {"linear", "query_block", "tile_mask"} <= watched  # helpers too
    assert "check_float_array" not in watched  # the checks at the door are no answer


def test_the_watch_records_the_first_call_from_outside_the_core():
    x = np.ones((2, 3))
    with LibraryWatch(()) as watch:
        fn = m.multi_head_attention  # naming a function is no call
        assert callable(fn)
    assert watch.called is None
    with LibraryWatch(()) as watch:
        m.softmax(x)  # softmax runs check_softmax at the door first: only softmax counts
        m.causal_mask(3)
    assert watch.called == "softmax"


def test_allowed_functions_are_not_recorded():
    with LibraryWatch(("softmax",)) as watch:
        m.softmax(np.ones((2, 3)))
    assert watch.called is None
    with LibraryWatch(("softmax",)) as watch:
        m.softmax(np.ones((2, 3)))
        m.split_heads(np.ones((2, 4)), 2)
    assert watch.called == "split_heads"


def test_the_pitfalls_may_call_the_core():
    with LibraryWatch(()) as watch:
        pf.softmax_over_queries(np.ones((2, 3)))
    assert watch.called is None


def test_the_watch_restores_the_previous_profiler():
    assert sys.getprofile() is None
    with LibraryWatch(()):
        assert sys.getprofile() is not None
    assert sys.getprofile() is None


def _raise(fn, *args):
    try:
        fn(*args)
    except Exception as e:  # noqa: BLE001
        return e
    raise AssertionError("no exception")


def test_a_call_that_does_not_fit_the_signature():
    e = _raise(lambda a: a, 1, 2)
    text = explain_error(e, "case A", "f(x, y=None)")
    assert text.startswith("The checker calls your function as f(x, y) (case A)") and "Define it as def f(x, y=None):" in text


def test_the_failing_line_is_quoted_without_its_comment():
    def bad(q, k):
        return q @ k.T  # a comment with @ in it

    e = _raise(bad, np.ones((4, 5, 3)), np.ones((4, 5, 3)))
    text = explain_error(e, "case B", "bad(q, k)")
    assert "`return q @ k.T`" in text and "comment" not in text
    assert "(4, 5, 3) and (3, 5, 4)" in text and "np.swapaxes(k, -1, -2)" in text


def test_a_matmul_of_plain_names_says_which_axes_disagree():
    def bad(a, b):
        return a @ b

    text = explain_error(_raise(bad, np.ones((2, 3)), np.ones((4, 5))), "case C", "bad(a, b)")
    assert "`a @ b` multiplies shapes (2, 3) and (4, 5)" in text
    assert "last axis on the left (3)" in text and "second-to-last on the right (4)" in text


def test_np_transpose_with_too_many_axes():
    def bad(x):
        return np.transpose(x, (1, 0, 2))

    text = explain_error(_raise(bad, np.ones((2, 3))), "case D", "bad(x)")
    assert "lists 3 axes" in text and "has 2" in text and "(2, 3)" in text


def test_an_unknown_error_keeps_its_own_message():
    def bad(x):
        raise KeyError("W_Z")

    text = explain_error(_raise(bad, 1), "case E", "bad(x)")
    assert "raised KeyError at `raise KeyError(\"W_Z\")` (case E): 'W_Z'." in text


def test_a_statement_over_several_lines_still_gets_an_answer():
    def bad(x):
        return (x
                @ x)  # the failing line alone does not parse

    text = explain_error(_raise(bad, np.ones((2, 3))), "case F", "bad(x)")
    assert "case F" in text and "k.T" in text  # the generic matmul hint


@pytest.mark.parametrize("expr, shape", [
    ("np.swapaxes(k, 0, 1)", (5, 4, 3)),
    ("k.swapaxes(0, 1)", (5, 4, 3)),
    ("k.transpose(2, 0, 1)", (3, 4, 5)),
    ("np.transpose(k, (2, 0, 1))", (3, 4, 5)),
    ("k.transpose()", (3, 5, 4)),
    ("k.T", (3, 5, 4)),
])
def test_operand_shapes_are_read_from_the_frame(expr, shape):
    # compiled as IPython compiles a cell: the source kept in linecache under a made-up file name
    source, filename = f"def bad(q, k):\n    return q @ {expr}\n", f"<cell {expr}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    namespace = {"np": np}
    exec(compile(source, filename, "exec"), namespace)
    text = explain_error(_raise(namespace["bad"], np.ones((4, 5, 3)), np.ones((4, 5, 3))), "case G", "bad(q, k)")
    assert f"(4, 5, 3) and {shape}" in text, text
