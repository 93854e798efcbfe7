"""One figure style for the whole book (readable in the HTML theme, colour-blind safe)."""

from __future__ import annotations

PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]


def style() -> None:
    """Apply the book's matplotlib style; call once at the top of a chapter."""
    import matplotlib as mpl

    mpl.rcParams.update({
        "figure.figsize": (6.4, 4.0),
        "figure.dpi": 110,
        "savefig.dpi": 110,
        "savefig.bbox": "tight",
        "axes.grid": True,
        "grid.alpha": 0.3,
        "axes.spines.top": False,
        "axes.spines.right": False,
        "axes.prop_cycle": mpl.cycler(color=PALETTE),
        "font.size": 10,
        "axes.titlesize": 11,
        "legend.frameon": False,
    })
