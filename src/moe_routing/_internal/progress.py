"""Progress lines for the long loops of the theory chapters: "what: i of n, elapsed, ETA".

The training grid reports one line per finished run (``moe_routing.experiments.grid.executor``); a theory loop
(an integrator's steps, a grid of dimensions × offsets) has no runs, only iterations, often
many and fast.  :class:`Progress` writes a line when an iteration finishes and at least
``every`` seconds have passed since the last line (and always for the last one), so a chapter
that runs for minutes says what it is doing without flooding its log.  Lines go to ``stderr``:
the pipeline keeps a cell's stderr in the chapter log, and a cell tagged ``remove-stderr``
keeps them out of the book's page.
"""

from __future__ import annotations

import sys
import time

from . import validation as check


def duration(seconds: float) -> str:
    """``4.1 s``, ``36 s``, ``3 min 20 s``, ``1 h 05 min``."""
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    m, s = divmod(int(round(seconds)), 60)
    if m < 60:
        return f"{m} min {s:02d} s"
    h, m = divmod(m, 60)
    return f"{h} h {m:02d} min"


class Progress:
    """Reports ``what: i of n (note); elapsed …, ETA …`` at most every ``every`` seconds.

    The ETA is the rate so far times what is left.  ``update(i, n=None, note="")`` takes the
    count of finished iterations (``n`` may be given again, e.g. by an integrator that knows
    its step count), so it can be passed as a callback ``progress(i, n)``.
    """

    def __init__(self, what: str, n: int, *, every: float = 10.0, stream=None):
        check.require(isinstance(what, str) and what != "", "what", what,
                      "a non-empty description of the loop")
        self.what = what
        self.n = check.integer("n", n, low=1)
        self.every = check.number("every", every, low=0)
        self.stream = sys.stderr if stream is None else stream
        self.t0 = time.perf_counter()
        self.t_last = self.t0
        self.lines = 0

    def update(self, i: int, n: int | None = None, note: str = "") -> None:
        if n is not None:
            self.n = check.integer("n", n, low=1)
        i = check.integer("i", i, low=0, high=self.n)
        now = time.perf_counter()
        if i < self.n and now - self.t_last < self.every:
            return
        elapsed = now - self.t0
        eta = elapsed / i * (self.n - i) if i > 0 else float("nan")
        left = "ETA " + (duration(eta) if i > 0 else "unknown") if i < self.n else "done"
        extra = f" ({note})" if note else ""
        print(f"{self.what}: {i} of {self.n}{extra}; elapsed {duration(elapsed)}, {left}",
              file=self.stream, flush=True)
        self.t_last, self.lines = now, self.lines + 1

    __call__ = update
