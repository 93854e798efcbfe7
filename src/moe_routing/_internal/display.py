"""Numbers of an executed cell inside the book's sentences, without the book tooling.

:func:`glue` records a value in the cell's output in the format MyST-NB reads
(``{glue:text}`name:.3f``` in the prose, ``{glue:figure}`` for figures), so the numbers a reader
sees in a sentence come from the executed cell and change with the profile. It needs only
IPython (present in every kernel); outside a kernel it does nothing, so a chapter's code also
runs as a plain script.
"""

from __future__ import annotations

from typing import Any

# MyST-NB's prefix for glued values that are recorded but not shown where they are computed
HIDDEN_PREFIX = "application/papermill.record/"


def glue(name: str, value: Any, display: bool = False) -> None:
    """Record ``value`` under ``name`` for the book's prose (and show it here if ``display``)."""
    try:
        from IPython import get_ipython
        from IPython.core.formatters import format_display_data
        from IPython.display import display as ipy_display
    except ImportError:
        return
    if get_ipython() is None:
        return
    if getattr(value, "ndim", None) == 0 and hasattr(value, "item"):
        value = value.item()      # NumPy 2 / torch scalars: "1.25", not "np.float64(1.25)"
    bundle, metadata = format_display_data(value)
    prefix = "" if display else HIDDEN_PREFIX
    metadata["scrapbook"] = {"name": name, "mime_prefix": prefix}
    ipy_display({prefix + k: v for k, v in bundle.items()}, raw=True, metadata=metadata)


def share_interval(mean: float, half_width: float, digits: int = 0) -> str:
    """A share in [0, 1] with its 95 % half-width, in percent: ``"78 ± 9"``, or, where the
    symmetric interval runs past 0 % or 100 % (few seeds, a wide Student quantile), the
    interval cut at the bounds the share cannot leave, ``"78 [0–100]"`` -- never the
    impossible "78 ± 100".  NaN reads "–"."""
    if mean != mean:                                     # NaN: no such layer
        return "–"
    lo, hi = mean - half_width, mean + half_width
    if lo >= 0 and hi <= 1:
        return f"{100 * mean:.{digits}f} ± {100 * half_width:.{digits}f}"
    return (f"{100 * mean:.{digits}f} [{100 * max(lo, 0.0):.{digits}f}–"
            f"{100 * min(hi, 1.0):.{digits}f}]")
