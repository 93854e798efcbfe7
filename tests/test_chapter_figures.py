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


def test_the_check_sees_pseudo_tex():
    assert pseudo_tex('ax.set_title("structure, α_j ∝ ρ^j")') == ["structure, α_j ∝ ρ^j"]
    assert pseudo_tex('ax.set_xlabel("task bound L_k·|T(k)| + |Δ_k| (neurons)")')
    assert pseudo_tex('ax.set_xlabel("task bound $L_k\\\\cdot|T(k)|$")') == []
    assert pseudo_tex('ax.contourf(Z, cmap="RdBu_r")') == []
    assert pseudo_tex('ax.plot(x, y, "k--", label=f"$K = {K}$ at {c.phi[0]:.2f}")') == []
    assert pseudo_tex('zip(points, "osD^v<>")') == []


@pytest.mark.parametrize("path", CHAPTERS, ids=lambda p: p.stem)
def test_generated_sentences_agree_in_number(path):
    text = path.read_text(encoding="utf-8")
    bad = [s for s in STRING.findall(text) if PSEUDO_PLURAL.search(s)]
    assert bad == []
