"""One figure style for the whole book (readable in the HTML theme, colour-blind safe).

Figures are vector graphics (SVG) sized for the book's text column (about 690 px, 7.2 in at the
96 px/in the browser uses): a figure whose natural width is the column keeps its labels at the
font size set here. A multi-panel figure wider than the column would be shrunk -- stack or split
it instead (:func:`column_figsize`). Backgrounds are transparent-free white so that a figure stays
readable on the dark theme.
"""

from __future__ import annotations

import numpy as np

PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000"]


COLUMN_WIDTH_IN = 7.0   # the book's text column (≈ 690 px) in inches


def column_figsize(aspect: float = 0.55, rows: int = 1) -> tuple[float, float]:
    """``(width, height)`` of a figure that fills the column: ``aspect`` = height / width of one
    row of panels, ``rows`` stacked rows."""
    return (COLUMN_WIDTH_IN, COLUMN_WIDTH_IN * aspect * rows)


def heatmap(ax, values, **imshow_kw):
    """``ax.imshow(values, **imshow_kw)`` without the style's grid lines, which would cross
    the cells of a heatmap or a region map; returns the image (for a colour bar)."""
    ax.grid(False)
    return ax.imshow(values, **imshow_kw)


def style() -> None:
    """Apply the book's matplotlib style; call once at the top of a chapter. In a notebook it
    also switches inline figures to SVG (sharp at any zoom, on HiDPI screens and in print)."""
    import matplotlib as mpl

    mpl.rcParams.update({
        "figure.figsize": column_figsize(),
        "figure.dpi": 96,
        "savefig.dpi": 200,
        "figure.facecolor": "white",
        "savefig.facecolor": "white",
        "svg.fonttype": "path",
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
    try:
        from IPython import get_ipython
        from matplotlib_inline.backend_inline import set_matplotlib_formats
    except ImportError:       # plain Python: nothing to configure
        return
    if get_ipython() is not None:
        set_matplotlib_formats("svg")


def interfaces(ax, grid, A, **contour_kw) -> None:
    """Draw every interface ``{a_j = a_k = top score}`` of the scores ``A`` (m², K) given on
    the square grid ``grid`` × ``grid`` (m points each way): the zero contour of ``a_j − a_k``
    where j and k are the two largest scores, so only the part of each interface that is a
    boundary between cells is drawn."""
    A = np.asarray(A)
    srt = np.sort(A, 1)
    m = len(grid)
    for j in range(A.shape[1]):
        for k in range(j + 1, A.shape[1]):
            top = np.maximum(A[:, j], A[:, k]) >= srt[:, -1] - 1e-12
            top2 = np.minimum(A[:, j], A[:, k]) >= srt[:, -2] - 1e-12
            F = np.where(top & top2, A[:, j] - A[:, k], np.nan)
            ax.contour(grid, grid, F.reshape(m, m), levels=[0.0], **contour_kw)
