"""The library reference (book/api/, book/_ext/api_docstrings.py): which packages it documents,
that the book's table of contents holds it and the PDF leaves it out, and how the extension
reads the library's plain-text docstrings (bars, roles, values, text that is not
reStructuredText). The rendered pages are checked by the smoke book (tests/test_book.py)."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
API = ROOT / "book" / "api"
#: the science library's public packages the reference documents (the issue's list)
DOCUMENTED = ("boundary", "landscape", "knowledge", "construction", "model", "routing_metrics",
              "hf")
#: the modules that serve the chapters, left out
PLUMBING = ("chapter", "display", "ledger", "verdicts", "plots", "runtime", "atomic",
            "fingerprint", "validation", "progress", "experiments")


@pytest.fixture(scope="module")
def ext():
    spec = importlib.util.spec_from_file_location("api_docstrings",
                                                  ROOT / "book" / "_ext" / "api_docstrings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_toc_holds_the_reference_and_each_page_documents_its_package():
    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text(encoding="utf-8"))
    part = next(p for p in toc["parts"] if p["caption"] == "Library reference")
    # flat: a toc entry with sections gets a toggle without text (an axe-core violation)
    assert part["chapters"] == [{"file": "api/index"}] + [{"file": f"api/{n}"} for n in DOCUMENTED]
    for name in DOCUMENTED:
        text = (API / f"{name}.md").read_text(encoding="utf-8")
        assert f".. automodule:: moe_routing.{name}\n" in text, name
        module = importlib.import_module(f"moe_routing.{name}")
        if hasattr(module, "__path__"):        # a package: every submodule, by the directive
            assert f".. moe-submodules:: moe_routing.{name}\n" in text, name
    index_text = (API / "index.md").read_text(encoding="utf-8")
    assert re.findall(r"^   (moe_routing\.\w+)$", index_text, re.M) == [
        f"moe_routing.{n}" for n in DOCUMENTED]
    documented = " ".join(p.read_text(encoding="utf-8") for p in API.glob("*.md"))
    for name in PLUMBING:
        assert f"moe_routing.{name}" not in documented.replace(f"`{name}`", ""), name


def test_the_plumbing_is_internal():
    """``help(moe_routing)`` and the reference show the science: the book's plumbing is in
    ``moe_routing._internal``, none of it a public name of the package."""
    import moe_routing
    from moe_routing import _internal

    assert not (set(PLUMBING) - {"experiments"}) & set(moe_routing.__all__)
    assert set(moe_routing.__all__) == {"__version__", *DOCUMENTED, "experiments"}
    for name in PLUMBING:
        if name != "experiments":
            assert importlib.util.find_spec(f"moe_routing._internal.{name}"), name
            assert not (Path(moe_routing.__file__).parent / f"{name}.py").exists(), name
    assert "plumbing" in _internal.__doc__


def test_the_pdf_leaves_the_reference_out():
    from moe_book.pdf import print_toc

    toc = yaml.safe_load((ROOT / "book" / "_toc.yml").read_text(encoding="utf-8"))
    printed = print_toc(toc)
    files = [c["file"] for p in printed["parts"] for c in p["chapters"]]
    assert files and not any(f.startswith("api/") for f in files)
    assert "Library reference" not in [p["caption"] for p in printed["parts"]]
    assert len(printed["parts"]) == len(toc["parts"]) - 1 and printed["root"] == toc["root"]


def test_the_book_loads_the_extensions_it_needs():
    cfg = yaml.safe_load((ROOT / "book" / "_config.yml").read_text(encoding="utf-8"))
    sphinx = cfg["sphinx"]
    assert sphinx["local_extensions"]["api_docstrings"] == "_ext"
    assert {"sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.viewcode"} <= set(
        sphinx["extra_extensions"])
    options = sphinx["config"]["autodoc_default_options"]
    assert options["members"] and options["ignore-module-all"] and options["no-value"]
    assert sphinx["config"]["autosummary_generate"] is False      # no stub pages in the source
    # a multi-line signature is a <dl> inside the <dt> (axe-core: definition-list)
    assert "python_maximum_signature_line_length" not in sphinx["config"]


def test_bars_are_escaped_outside_literals_roles_literal_blocks_and_tables(ext):
    lines = ["BM(w) = P(|Δ| ≤ w), ``a|b``, :math:`|x|` and |∇g|::", "",
             "    |kept| in the literal block", "", ">>> abs(x) | 1", "after |y|", "",
             "+-----+-----+", "| a   | b   |", "+-----+-----+", "", "then |z|"]
    out = ext.escape_bars(lines)
    assert out[0] == r"BM(w) = P(\|Δ\| ≤ w), ``a|b``, :math:`|x|` and \|∇g\|::"
    assert out[2] == lines[2] and out[4] == lines[4] and out[5] == lines[5]  # doctest runs on
    assert out[7:10] == lines[7:10]                                          # a grid table
    assert out[11] == r"then \|z\|"
    assert ext.escape_bars([r"already \|x\|"]) == [r"already \|x\|"]


def test_roles_point_where_the_object_is_defined(ext):
    # a name the package re-exports, read from the package
    assert ext.canonical_target("collect_router_logits", "moe_routing.hf") \
        == "moe_routing.hf.routers.collect_router_logits"
    # a relative module: the sibling in the module's own package (two packages have `routers`)
    assert ext.canonical_target(".routers", "moe_routing.hf.training") == "moe_routing.hf.routers"
    assert ext.canonical_target(".routers", "moe_routing.boundary.regression") \
        == "moe_routing.boundary.routers"
    assert ext.canonical_target(".laws", "moe_routing.boundary") == "moe_routing.boundary.laws"
    # a public path through a package, a method, and what does not resolve
    assert ext.canonical_target("~moe_routing.model.MoETransformer", "moe_routing.hf") \
        == "moe_routing.model.transformer.MoETransformer"
    assert ext.canonical_target("MoETransformer.forward", "moe_routing.model.transformer") \
        == "moe_routing.model.transformer.MoETransformer.forward"
    assert ext.canonical_target("no_such_thing", "moe_routing.model") is None
    assert ext.canonical_target("numpy.ndarray", "moe_routing.model") is None  # not the library
    assert ext.link_roles(["see :func:`~moe_routing.hf.collect_router_logits` and :mod:`.laws`"],
                          "moe_routing.boundary.mass") == [
        "see :py:func:`collect_router_logits <moe_routing.hf.routers.collect_router_logits>` "
        "and :py:mod:`laws <moe_routing.boundary.laws>`"]


def test_only_short_plain_values_are_shown(ext):
    assert ext.shown_value(-100) == "-100"
    assert ext.shown_value(("ce", "ce+lb")) == "('ce', 'ce+lb')"
    assert ext.shown_value(Path("/somewhere/data")) is None           # no path of a checkout
    assert ext.shown_value("/somewhere/data") is None
    assert ext.shown_value(tuple(range(100))) is None                 # too long
    assert ext.shown_value(frozenset({"a", "b"})) is None             # its repr's order varies
    assert ext.shown_value({"a": 1}) is None and ext.shown_value(print) is None


def test_text_that_is_not_restructuredtext_is_shown_as_written(ext):
    fields = ["Fields:", "", "a : one", "    two", "b : three"]      # hanging indents
    assert not ext.parses_cleanly(fields)
    assert ext.parses_cleanly(["Fields::", "", "    a : one", "        two", "    b : three"])
    assert ext.parses_cleanly(["see :func:`f` and `x` and ``y``", "", "* a", "  b", "* c"])
    shown = ext.verbatim(fields)
    assert shown[:2] == [".. code-block:: text", ""] and shown[2:-1] == [
        "   Fields:", "", "   a : one", "       two", "   b : three"]
    assert ext.parses_cleanly(shown)


def test_a_factory_default_is_shown_as_the_call_that_makes_it(ext):
    import dataclasses

    @dataclasses.dataclass
    class Record:
        a: int
        names: list = dataclasses.field(default_factory=list)
        table: dict = dataclasses.field(default_factory=lambda: {"x": 1})

    sig = "(a: int, names: list = <factory>, table: dict = <factory>)"
    assert ext.factory_defaults(Record, sig) == "(a: int, names: list = list(), table: dict = ...)"
    assert ext.factory_defaults(Record, "(a: int)") == "(a: int)"
    assert ext.factory_defaults(print, sig) == sig                    # not a dataclass


def test_every_public_submodule_is_documented_once(ext):
    modules = ext.public_submodules("moe_routing.knowledge")
    assert "moe_routing.knowledge.sources.wikidata5m" in modules
    assert "moe_routing.knowledge.trie" in modules and modules == sorted(modules)
    assert not any("._" in m for m in modules)
    assert ext.automodule_lines("moe_routing.hf.batches", ["moe_routing.hf.batches.X",
                                                           "moe_routing.hf.routers.Y"]) == [
        ".. automodule:: moe_routing.hf.batches", "   :exclude-members: X"]
    assert ext.automodule_lines("moe_routing.hf.extra", ["moe_routing.hf.batches.X"]) == [
        ".. automodule:: moe_routing.hf.extra"]
