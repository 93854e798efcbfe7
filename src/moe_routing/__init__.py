"""moe_routing: the library behind the companion book to two papers on routing in MoE models.

Paper A (arXiv 2606.14398) -- task routing in one-layer MoE transformers over knowledge
templates and key-value dictionaries.  Paper B (arXiv 2605.02124) -- boundary mass and the
soft-to-hard limit of softmax routing.

Sub-modules are named after the papers' concepts; every number printed in the book is computed
by code in this package (or by a notebook cell calling it).
"""

import pkgutil as _pkgutil

__version__ = "0.1.0"

# Sub-packages and modules are imported by name (``from moe_routing.boundary import ...``).
# ``__all__`` lists them by one rule, so that a new module needs no second edit: every module
# and sub-package of this folder whose name does not start with an underscore
# (tests/test_exports.py checks it against the files).
__all__ = ["__version__", *sorted(m.name for m in _pkgutil.iter_modules(__path__)
                                  if not m.name.startswith("_"))]
