"""The claims of a lesson notebook, checked outside the student's cells.

A lesson cell computes and prints; it does not assert. Each claim its prose makes is checked
here instead, by a plain function of a ``test_lesson_claims_NN`` module, registered next to the
sentence it defends::

    CLAIMS = Claims("03_worked_example.ipynb")

    @CLAIMS(r"$d_{model}=512$, $h=8$: $d_k=64$", after="cfg = MHAConfig(d_model=512, n_heads=8)")
    def d_k_is_64(d_k):
        assert d_k == 64

    test_quotes, test_claim = CLAIMS.tests()

The quote must still be in the notebook's markdown; ``after`` is a snippet of the one code cell
the claim belongs to. The function's **parameters are the notebook's variables** of those names,
as they are right after that cell ran; its body asserts, one condition per ``assert``. It is real
code (ruff and an editor see it), but it runs in the notebook's own kernel, on the notebook's own
objects (a view stays a view, a function defined in the notebook is that function). The globals
the body uses besides its parameters must be modules, names imported from a library, or
constants of its module: they are imported again in the kernel (``import numpy as np``); a
helper defined in the claims module is refused, with a message. The asserts are rewritten there
the way pytest rewrites a test's, so a failure reads ``assert 63 == 64`` and names its line.

:func:`run_claims` executes the notebook once in a fresh kernel (``nbclient``, as nbval does),
cell by cell, and runs each claim right after its cell, so a later cell that reuses a name
cannot change what a claim sees. Strict nbval separately proves that the stored outputs are what
a fresh run prints; a claim about a printed number may therefore read the stored output instead
(:func:`outputs`), which needs no kernel.
"""

from __future__ import annotations

import builtins
import dis
import importlib
import inspect
import json
import re
import textwrap
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


@dataclass(frozen=True)
class Claim:
    """One checked sentence: ``prose`` (quoted from the notebook), ``after`` (a snippet of the
    code cell it belongs to) and ``check`` (a function whose parameters are notebook variables
    and whose asserts hold right after that cell)."""

    prose: str
    after: str
    check: Callable[..., None]

    @property
    def name(self) -> str:
        return self.check.__name__

    @property
    def where(self) -> str:
        code = self.check.__code__
        return f"{Path(code.co_filename).name}:{code.co_firstlineno}"


class Claims:
    """The claims of one notebook, in the order they are written; ``@claims(prose, after=...)``
    registers a function (and returns it unchanged)."""

    def __init__(self, notebook: str):
        self.notebook = notebook
        self._claims: list[Claim] = []

    def __call__(self, prose: str, *, after: str) -> Callable[[Callable], Callable]:
        def register(check: Callable) -> Callable:
            if any(c.name == check.__name__ for c in self._claims):
                raise ValueError(f"two claims of {self.notebook} are called {check.__name__}")
            _parameters(check)  # refuse a malformed claim when its module is imported
            self._claims.append(Claim(prose, after, check))
            return check

        return register

    def __iter__(self) -> Iterator[Claim]:
        return iter(self._claims)

    def __len__(self) -> int:
        return len(self._claims)

    def tests(self, *, marks=()):
        """``test_quotes, test_claim = CLAIMS.tests()``: see :func:`claim_tests`."""
        return claim_tests(self.notebook, list(self._claims), marks=marks)


def _parameters(check: Callable) -> list[str]:
    """The notebook variables a claim reads: its parameters, all plain and without defaults."""
    params = inspect.signature(check).parameters.values()
    odd = [p.name for p in params if p.kind is not p.POSITIONAL_OR_KEYWORD or p.default is not p.empty]
    if odd:
        raise TypeError(f"claim {check.__name__}: parameters {odd} are not plain names of notebook "
                        "variables (no defaults, no *args, no keyword-only)")
    return [p.name for p in params]


def _global_names(code: types.CodeType) -> set[str]:
    """The global names a function's code reads, its nested comprehensions and lambdas included."""
    names = {i.argval for i in dis.get_instructions(code) if i.opname in ("LOAD_GLOBAL", "LOAD_NAME")}
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _global_names(const)
    return names


def _is_constant(value) -> bool:
    if isinstance(value, tuple | frozenset):
        return all(_is_constant(v) for v in value)
    return value is None or isinstance(value, bool | int | float | complex | str | bytes)


def _imports(check: Callable) -> str:
    """Python that recreates, in the kernel, the module globals the claim reads."""
    if check.__code__.co_freevars:
        raise TypeError(f"claim {check.__name__} reads {', '.join(check.__code__.co_freevars)} from the "
                        "function around it: a claim runs in the notebook's kernel, so it may read only "
                        "its parameters, modules, names imported from a library and constants")
    lines = []
    for name in sorted(_global_names(check.__code__)):
        if not name.isidentifier():  # pytest's own rewriting of the asserts (@py_builtins), redone in the kernel
            continue
        if name not in check.__globals__:
            if hasattr(builtins, name):
                continue
            raise NameError(f"claim {check.__name__} reads {name!r}, which is neither a parameter "
                            "nor defined in its module")
        value = check.__globals__[name]
        module, qualname = getattr(value, "__module__", None), getattr(value, "__qualname__", None)
        if isinstance(value, types.ModuleType):
            lines.append(f"import {value.__name__} as {name}")
        elif _is_constant(value):
            lines.append(f"{name} = {value!r}")
        elif (isinstance(module, str) and module != check.__module__ and isinstance(qualname, str)
              and "." not in qualname and getattr(importlib.import_module(module), qualname, None) is value):
            lines.append(f"from {module} import {qualname} as {name}")
        else:
            raise TypeError(f"claim {check.__name__} reads {name!r} from its module: a claim runs in the "
                            "notebook's kernel, so it may read only its parameters, modules, names "
                            "imported from a library and constants")
    return "\n".join(lines)


def _payload(claim: Claim) -> dict:
    lines, first = inspect.getsourcelines(claim.check)
    return {"source": textwrap.dedent("".join(lines)), "line": first, "function": claim.name,
            "filename": claim.check.__code__.co_filename, "imports": _imports(claim.check),
            "params": _parameters(claim.check)}


# Runs in the kernel, in a namespace of its own: defines the claim (its decorators dropped, its
# asserts rewritten as pytest does, its line numbers those of the claims file), calls it on the
# notebook's variables and prints the outcome as one JSON line.
_PROBE = r'''
import ast, json, traceback

def _outcome(payload, user_ns):
    tree = ast.parse(payload["source"])
    tree.body[0].decorator_list = []
    ast.increment_lineno(tree, payload["line"] - 1)
    try:
        from _pytest.assertion.rewrite import rewrite_asserts
    except ImportError:  # no pytest in the kernel: a failure still names its line
        pass
    else:
        rewrite_asserts(tree, payload["source"].encode())
    env = {}
    exec(payload["imports"], env)
    exec(compile(tree, payload["filename"], "exec"), env)
    missing = [p for p in payload["params"] if p not in user_ns]
    if missing:
        return "NameError: the notebook has no " + ", ".join(missing) + " after this cell"
    try:
        result = env[payload["function"]](**{p: user_ns[p] for p in payload["params"]})
    except Exception as err:
        frames = traceback.extract_tb(err.__traceback__)
        ours = [f for f in frames if f.filename == payload["filename"]]
        shown = frames[frames.index(ours[0]):] if ours else frames
        return "".join(traceback.format_list(shown) + traceback.format_exception_only(type(err), err)).rstrip()
    if result is not None:
        return f"a claim asserts; this one returned {result!r} (write `assert ...` instead)"
    return "ok"

print(MARKER + json.dumps(_outcome(PAYLOAD, USER_NS)))
'''
_MARKER = "@@lesson-claim@@ "


def _probe_cell(claim: Claim):
    payload = json.dumps(_payload(claim))
    source = (f"exec({_PROBE!r}, {{'PAYLOAD': __import__('json').loads({payload!r}), "
              f"'USER_NS': globals(), 'MARKER': {_MARKER!r}}})")
    return nbformat.v4.new_code_cell(source)


def _flat(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def markdown_text(name: str) -> str:
    """The notebook's markdown cells, whitespace collapsed (prose quotes are searched in it)."""
    nb = json.loads((NOTEBOOKS / name).read_text())
    return _flat(" ".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "markdown"))


def code_sources(name: str) -> list[str]:
    nb = json.loads((NOTEBOOKS / name).read_text())
    return ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]


def output_text(cell: dict, sep: str = "") -> str:
    """A code cell's stored text output: each stream's text, else each output's text/plain, joined by ``sep``."""
    parts = []
    for out in cell.get("outputs", []):
        if out.get("output_type") == "stream":
            parts.append("".join(out["text"]))
        elif "text/plain" in out.get("data", {}):
            parts.append("".join(out["data"]["text/plain"]))
    return sep.join(parts)


def outputs(name: str, after: str) -> str:
    """The stored text output (streams and text/plain) of the one code cell containing ``after``."""
    nb = json.loads((NOTEBOOKS / name).read_text())
    cells = [c for c in nb["cells"] if c["cell_type"] == "code" and after in "".join(c["source"])]
    if len(cells) != 1:
        raise ValueError(f"after={after!r} matches {len(cells)} code cells of {name}, expected 1")
    return output_text(cells[0])


def problems(name: str, claims: list[Claim]) -> list[str]:
    """Claims whose quote is no longer in the notebook's prose, or whose cell is not found once."""
    prose, sources = markdown_text(name), code_sources(name)
    found = []
    for c in claims:
        if _flat(c.prose) not in prose:
            found.append(f"prose no longer in {name}: {c.prose!r}")
        hits = sum(c.after in s for s in sources)
        if hits != 1:
            found.append(f"after={c.after!r} matches {hits} code cells of {name}, expected 1")
    return found


def run_claims(name: str, claims: list[Claim], timeout: int = 900) -> dict[Claim, str]:
    """Execute notebook ``name`` and run every claim right after its cell.

    Returns claim -> "ok", or the failure (the failing line and pytest's explanation of the
    assert, or the error the claim raised).
    """
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    probes = {claim: _probe_cell(claim) for claim in claims}  # a malformed claim fails before the kernel starts
    client = NotebookClient(nb, timeout=timeout, kernel_name="python3",
                            resources={"metadata": {"path": str(NOTEBOOKS)}})
    results: dict[Claim, str] = {}
    with client.setup_kernel():
        for index, cell in enumerate(nb.cells):
            if cell.cell_type != "code":
                continue
            client.execute_cell(cell, index)
            for claim in (c for c in claims if c.after in cell.source):
                probe = probes[claim]
                try:
                    client.execute_cell(probe, index)  # (nbclient stores it at that index; nb is not saved)
                    text = "".join(o.get("text", "") for o in probe.outputs)
                    found = [line for line in text.splitlines() if line.startswith(_MARKER)]
                    results[claim] = json.loads(found[-1][len(_MARKER):]) if found else f"no outcome: {text[-300:]}"
                except Exception as err:  # the probe itself failed: report it, keep checking
                    results[claim] = f"{type(err).__name__}: {str(err)[-300:]}"
    return results


def claim_tests(name: str, claims: list[Claim], *, marks=()):
    """The two tests of a claims module: every quote and cell is found; every claim holds.

    Use as ``test_quotes, test_claim = CLAIMS.tests()`` in a ``test_lesson_claims_*`` module;
    the notebook runs once per module, only if a claim test is selected. The claim tests are
    named after the claim functions: ``pytest tests/test_lesson_claims_03.py -k d_k_is_64``.
    """
    import pytest

    cache: dict[str, dict[Claim, str]] = {}

    def test_quotes():
        found = problems(name, claims)
        assert not found, "\n".join(found)

    @pytest.mark.parametrize("claim", claims, ids=[c.name for c in claims])
    def test_claim(claim):
        if name not in cache:
            cache[name] = run_claims(name, claims)
        outcome = cache[name].get(claim, "no result: the cell was not found")
        if outcome != "ok":
            pytest.fail(f"{name}: {claim.prose!r}\n  claim {claim.name} ({claim.where}), run after the cell "
                        f"with {claim.after!r}:\n{textwrap.indent(outcome, '    ')}", pytrace=False)

    for mark in marks:
        test_claim = mark(test_claim)
    return test_quotes, test_claim
