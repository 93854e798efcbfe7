"""The build's processes skip jsonschema's IRI grammar, and ``moe_book.jupyter_book`` is the
``jupyter-book`` command (same output, same exit status)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                          text=True, cwd=ROOT).stdout


def test_moe_book_skips_the_iri_grammar_and_notebooks_still_validate():
    out = _python(
        "import sys, json, moe_book, nbformat, jsonschema\n"
        "nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell('1 + 1')])\n"
        "nbformat.validate(nb)\n"
        "bad = nbformat.from_dict(dict(nb)); bad.cells[0]['cell_type'] = 'bogus'\n"
        "try:\n    nbformat.validate(bad); caught = False\n"
        "except nbformat.ValidationError:\n    caught = True\n"
        "checker = jsonschema.Draft202012Validator.FORMAT_CHECKER\n"
        "print(json.dumps(dict(grammar=sys.modules.get('rfc3987_syntax') is not None,\n"
        "                      caught=caught, iri='iri' in checker.checkers)))\n")
    res = json.loads(out.strip().splitlines()[-1])
    assert res == {"grammar": False, "caught": True, "iri": False}


def test_without_moe_book_the_grammar_is_compiled():
    """The reason for the skip is real in this environment: a plain import compiles it (fails
    if the package leaves the lock, and then the skip in moe_book/__init__.py can go too)."""
    out = _python("import sys, nbformat\nprint(sys.modules.get('rfc3987_syntax') is not None)")
    assert out.strip() == "True"


def test_wrapper_is_the_jupyter_book_command():
    exe = Path(sys.executable).with_name("jupyter-book")
    plain = subprocess.run([str(exe), "--version"], capture_output=True, text=True)
    ours = subprocess.run([sys.executable, "-m", "moe_book.jupyter_book", "--version"],
                          capture_output=True, text=True, cwd=ROOT)
    assert plain.returncode == ours.returncode == 0
    assert ours.stdout == plain.stdout and "Jupyter Book" in ours.stdout


@pytest.mark.parametrize("args", [["build", "/nonexistent/book/source"], ["no-such-command"]])
def test_wrapper_passes_failures_on(args):
    exe = Path(sys.executable).with_name("jupyter-book")
    plain = subprocess.run([str(exe), *args], capture_output=True, text=True)
    ours = subprocess.run([sys.executable, "-m", "moe_book.jupyter_book", *args],
                          capture_output=True, text=True, cwd=ROOT)
    assert plain.returncode != 0
    assert ours.returncode == plain.returncode
