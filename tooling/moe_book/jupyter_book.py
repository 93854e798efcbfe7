"""``python -m moe_book.jupyter_book build …``: the ``jupyter-book`` command, started faster.

Identical to the ``jupyter-book`` console script (``jupyter_book.cli.main:main``, same
arguments, same exit status) except that importing :mod:`moe_book` first spares the process the
2-3 s in which jsonschema's optional IRI grammar is compiled (see ``moe_book/__init__.py``).
The Makefile and :mod:`moe_book.pdf` build through it; a no-op ``make html`` runs three such
processes.
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from jupyter_book.cli.main import main as jupyter_book_main

    try:
        jupyter_book_main(args=argv, prog_name="jupyter-book", standalone_mode=True)
    except SystemExit as exc:           # click ends by SystemExit: pass its status on
        return int(exc.code or 0) if not isinstance(exc.code, str) else 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
