"""Figure labels and generated sentences of the construction, landscape and boundary-mass
chapters, as a reader sees them.

Matplotlib renders ``$...$`` with mathtext; anything else is printed verbatim, so a label
written in pseudo-TeX ("α_j ∝ ρ^j", "L_k·|T(k)|") reaches the reader with literal
underscores and carets. Sentences assembled from counts must agree with the count instead of
hedging with "(s)" or "(a)".
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = [ROOT / "notebooks" / f"{name}.md"
            for name in ("construction", "landscape", "boundary_mass")]

STRING = re.compile(r'(?<![\w])[rf]{0,2}"((?:[^"\\]|\\.)*)"')
PSEUDO_TEX = re.compile(r"[^\W\d]\s*[_^]\s*[\w{(\\]", re.U)     # "α_j", "ρ^j", "L_k", "Σ_τ"
PSEUDO_PLURAL = re.compile(r"[a-z]\((?:s|es|a)\)")              # "point(s)", "minimum(a)"


def figure_cells(text: str):
    """(first line number, code) of every code cell whose metadata declares a figure."""
    for m in re.finditer(r"^```\{code-cell\}[^\n]*\n(.*?)^```", text, re.M | re.S):
        body = m.group(1)
        if body.startswith("---\n"):
            meta, _, code = body[4:].partition("\n---\n")
            if "figure:" in meta:
                yield text[:m.start()].count("\n") + 1, code


def outside_math(s: str) -> str:
    """The parts of a label that matplotlib prints verbatim: no ``$...$``, no f-fields."""
    s = re.sub(r"\$[^$]*\$", "", s)
    return re.sub(r"\{[^{}]*\}", "", s)


MARKERS = re.compile(r"[.,ov^<>1-48spP*hH+xXDd|_:-]+")           # format strings: "osD^v<>"


def pseudo_tex(code: str) -> list[str]:
    from matplotlib import colormaps      # "RdBu_r" is a colour map's name, not a label

    return [s for s in STRING.findall(code)
            if not MARKERS.fullmatch(s) and s not in colormaps
            and PSEUDO_TEX.search(outside_math(s))]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_figure_strings_use_mathtext(path):
    bad = [(line, s) for line, code in figure_cells(path.read_text(encoding="utf-8"))
           for s in pseudo_tex(code)]
    assert bad == []


LABELLING = {"set_xlabel", "set_ylabel", "set_title", "suptitle", "supxlabel", "supylabel",
             "text", "annotate", "legend", "set_xticklabels", "set_yticklabels"}
LABEL_KEYWORDS = {"label", "xlabel", "ylabel", "title"}


def label_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string a module hands matplotlib as a label: the arguments of
    the labelling calls (``set_xlabel``, ``set_title``, ``text``, ``legend``, ...) and the
    ``label=``, ``xlabel=``, ``ylabel=``, ``title=`` keywords of any call -- where the
    chapters' figures are labelled since the chapters call their module in
    ``moe_routing._internal.chapters``.  An f-string counts by its literal parts."""
    import ast

    def texts(node) -> list[str]:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return [node.value]
        if isinstance(node, ast.JoinedStr):
            return ["".join(v.value if isinstance(v, ast.Constant) else "{}"
                            for v in node.values)]
        if isinstance(node, (ast.List, ast.Tuple)):
            return [s for e in node.elts for s in texts(e)]
        return []

    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else ""
        values = list(node.args) if name in LABELLING else []
        values += [k.value for k in node.keywords if k.arg in LABEL_KEYWORDS]
        found += [(node.lineno, s) for v in values for s in texts(v)]
    return found


def pseudo_tex_labels(source: str) -> list[tuple[int, str]]:
    return [(line, s) for line, s in label_strings(source)
            if PSEUDO_TEX.search(outside_math(s))]


@pytest.mark.parametrize("path", sorted((ROOT / "src" / "moe_routing" / "_internal" / "chapters")
                                        .glob("[!_]*.py")), ids=lambda p: p.stem)
def test_figure_functions_use_mathtext(path):
    assert pseudo_tex_labels(path.read_text(encoding="utf-8")) == []


def test_the_check_sees_pseudo_tex():
    assert pseudo_tex('ax.set_title("structure, α_j ∝ ρ^j")') == ["structure, α_j ∝ ρ^j"]
    assert pseudo_tex('ax.set_xlabel("task bound L_k·|T(k)| + |Δ_k| (neurons)")')
    assert pseudo_tex('ax.set_xlabel("task bound $L_k\\\\cdot|T(k)|$")') == []
    assert pseudo_tex('ax.contourf(Z, cmap="RdBu_r")') == []
    assert pseudo_tex('ax.plot(x, y, "k--", label=f"$K = {K}$ at {c.phi[0]:.2f}")') == []
    assert pseudo_tex('zip(points, "osD^v<>")') == []
    module = ('def f(ax, k):\n    """A doc_string."""\n    ax.set_xlabel("L_k·|T(k)|")\n'
              '    ax.plot([1], label=f"$K = {k}$ of α_j")\n    return {"n_layers": 2}\n')
    assert pseudo_tex_labels(module) == [(3, "L_k·|T(k)|"), (4, "$K = {}$ of α_j")]


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_generated_sentences_agree_in_number(path):
    text = path.read_text(encoding="utf-8")
    bad = [s for s in STRING.findall(text) if PSEUDO_PLURAL.search(s)]
    assert bad == []
