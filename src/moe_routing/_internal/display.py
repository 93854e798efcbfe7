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
