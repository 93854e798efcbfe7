"""`begin`: the first thing every chapter does, in one call.

A chapter's first code cell after its parameters checks the injected ``profile``, seeds every
random generator, sets the book's plot style and opens the chapter's reproduction ledger.  Nine
chapters wrote the same four lines; a reader who copies a chapter's code into their own notebook
now copies one line, and a change to the prologue (a new generator to seed, a style) is made
once.
"""

from __future__ import annotations

from pathlib import Path

from .ledger import Ledger
from .plots import style
from .runtime import check_profile, seed_everything
from .validation import integer


def begin(notebook: str, *, profile: str, artifacts_dir: str | Path | None,
          seed: int | None = None, threads: int | None = None) -> Ledger:
    """Check ``profile`` (smoke | default | paper), seed Python, NumPy and torch with ``seed``
    (skipped when None), set the plot style, set torch's intra-op threads to ``threads`` (when
    given: small tensors run fastest on one thread of a shared machine) and return the ledger of
    ``notebook`` writing to ``artifacts_dir`` (None: in memory, a chapter opened by hand)."""
    check_profile(profile)
    if seed is not None:
        seed_everything(integer("seed", seed, low=0))
    if threads is not None:
        import torch

        torch.set_num_threads(integer("threads", threads, low=1))
    style()
    return Ledger(artifacts_dir, notebook=notebook, profile=profile)
