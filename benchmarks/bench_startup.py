"""Start-up time of the build's processes: importing nbformat with and without the IRI grammar.

Every step of ``make html`` / ``make book`` is a fresh Python process that imports nbformat or
jupytext (``moe_book.pipeline validate``, ``stage``, ``jupyter-book build``); nbformat imports
jsonschema, which imports ``rfc3987_syntax`` when installed, and that module compiles 39 Lark
grammars at import.  ``moe_book`` marks the module absent (``moe_book/__init__.py``); the book
runs ``jupyter-book`` as ``python -m moe_book.jupyter_book``.  This benchmark times, in one run
and interleaved (so that a busy machine slows both alike), fresh processes that

* ``plain``: ``import nbformat`` (what every build process paid before),
* ``moe_book``: ``import moe_book, nbformat`` (what they pay now),

and prints the median wall and CPU time of each and their ratio.

Run: ``python benchmarks/bench_startup.py [--repeats 7]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

CODE = {
    "plain": "import nbformat",
    "moe_book": "import moe_book, nbformat",
}

CHILD = """
import resource, time
t0 = time.perf_counter()
{code}
wall = time.perf_counter() - t0
ru = resource.getrusage(resource.RUSAGE_SELF)
import json, sys
print(json.dumps(dict(wall=wall, cpu=ru.ru_utime + ru.ru_stime,
                      grammar='rfc3987_syntax' in sys.modules
                              and sys.modules['rfc3987_syntax'] is not None)))
"""


def one(label: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD.format(code=CODE[label])], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    if args.repeats < 1:
        ap.error(f"--repeats {args.repeats}: accepted: an integer ≥ 1")
    runs = {label: [] for label in CODE}
    for _ in range(args.repeats):                 # interleaved: the load hits both alike
        for label in CODE:
            runs[label].append(one(label))
    print(f"{'process':<10} {'wall s (median)':>16} {'CPU s (median)':>15} {'IRI grammar':>12}")
    med = {}
    for label, rs in runs.items():
        med[label] = (statistics.median(r["wall"] for r in rs),
                      statistics.median(r["cpu"] for r in rs))
        print(f"{label:<10} {med[label][0]:>16.2f} {med[label][1]:>15.2f} "
              f"{'compiled' if rs[0]['grammar'] else 'skipped':>12}")
    print(f"ratio moe_book / plain: wall {med['moe_book'][0] / med['plain'][0]:.2f}, "
          f"CPU {med['moe_book'][1] / med['plain'][1]:.2f} ({args.repeats} processes each)")


if __name__ == "__main__":
    main()
