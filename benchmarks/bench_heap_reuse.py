"""glibc's allocator settings of ``make book`` (``HEAP_REUSE`` in the Makefile): CPU time and
page faults of the same computation with and without them, in one run.

Why: the theory chapters allocate and free arrays of a few to a few tens of MB thousands of
times (a critical-point search evaluates its objective over 262,144 sample points per step).
Above glibc's mmap threshold each such array is a fresh ``mmap`` that is unmapped on ``free``,
so every allocation faults its pages in again and the kernel zeroes them: system time that
does no arithmetic.  Raising the threshold to its 32 MiB ceiling and not trimming the heap lets
freed blocks be reused.  Only where memory comes from changes: torch aligns its CPU tensors
itself, and the check below asserts that the results are bit for bit the same.

Each variant runs in its own process (the variables are read when the process starts), the two
alternating ``--repeat`` times; the table gives min user, system and wall seconds, minor page
faults, peak memory, and the ratios.  The workload is one teacher of the multi-region
landscape chapter's critical-point search (K = 3 in the plane) at the chapter's sample size and
``--starts`` random routers (the chapter's 32), three temperatures.

Measured on 2 cores, one process at a time (2026-12-06): glibc's defaults 33.5 s user, 3.8 s
system, 1.56 million minor faults; HEAP_REUSE 31.9 s user, 0.8 s system, 0.10 million faults,
the same peak memory (654 MB); CPU ratio 1.14, the 18 critical points identical.  With 8
starts the gain was 2 % in one run and 11 % in another (a quarter of the faults either way).
Over the nine theory chapters of ``make book`` (two at a time) system time fell from 74 s to
48 s, the claims byte for byte the same.
Usage: python benchmarks/bench_heap_reuse.py [--starts 32] [--repeat 1]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

MAKEFILE = Path(__file__).resolve().parents[1] / "Makefile"


def heap_reuse(makefile: Path = MAKEFILE) -> dict[str, str]:
    """The settings of the Makefile's ``HEAP_REUSE := NAME=value ...`` line, read from it (the
    benchmark measures what ``make`` exports, never a copy of it)."""
    m = re.search(r"^HEAP_REUSE\s*:=\s*(.*)$", makefile.read_text(encoding="utf-8"), re.M)
    if m is None:
        raise ValueError(f"{makefile}: no line 'HEAP_REUSE := NAME=value ...'")
    return dict(item.split("=", 1) for item in m.group(1).split())


WORKLOAD = """
import hashlib, json, sys
import numpy as np
from moe_routing.landscape import multi_critical as mc
from moe_routing.landscape import multi_region as mr
r = mc.search_teacher("K = 3, d = 2", mr.three_region_plane(), 262144, 0, [0.3, 0.1, 0.03],
                      eval_n=1048576, n_starts=int(sys.argv[1]), saddles=True,
                      descent_steps=60, grad_norm_steps=20, newton_steps=25, n_guide=16384, progress=False)
h = hashlib.sha256()
for c in r.points:
    h.update(np.asarray(c.phi, dtype=np.float64).tobytes())
    h.update(np.float64(c.value).tobytes())
print(json.dumps({"points": len(r.points), "digest": h.hexdigest()}))
"""


def run_once(settings: dict[str, str], starts: int) -> dict:
    """One run of the workload in a fresh process with ``settings`` (none: glibc's defaults)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_")}
    env.update(OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1", **settings)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", WORKLOAD, str(starts)], env=env, check=True,
                         capture_output=True, text=True).stdout
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return {"user": after.ru_utime - before.ru_utime, "sys": after.ru_stime - before.ru_stime,
            "wall": wall, "minflt": after.ru_minflt - before.ru_minflt,
            "maxrss_mb": after.ru_maxrss / 1024, **json.loads(out.strip().splitlines()[-1])}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--starts", type=int, default=32)
    ap.add_argument("--repeat", type=int, default=1)
    a = ap.parse_args()
    settings = heap_reuse()
    rows = {False: [], True: []}
    for _ in range(a.repeat):
        for reuse in (False, True):
            rows[reuse].append(run_once(settings if reuse else {}, a.starts))
    best = {k: {m: min(r[m] for r in v) for m in ("user", "sys", "wall", "minflt")}
            | {"maxrss_mb": max(r["maxrss_mb"] for r in v)} for k, v in rows.items()}
    digests = {r["digest"] for v in rows.values() for r in v}
    print(f"{'':>14} {'user s':>8} {'sys s':>8} {'wall s':>8} {'minor faults':>13} {'peak MB':>8}")
    for k, label in ((False, "glibc default"), (True, "HEAP_REUSE")):
        b = best[k]
        print(f"{label:>14} {b['user']:8.1f} {b['sys']:8.1f} {b['wall']:8.1f} "
              f"{b['minflt']:13.0f} {b['maxrss_mb']:8.0f}")
    cpu = {k: best[k]["user"] + best[k]["sys"] for k in best}
    print(f"ratios default / HEAP_REUSE: CPU {cpu[False] / cpu[True]:.2f}, "
          f"wall {best[False]['wall'] / best[True]['wall']:.2f}, "
          f"system time {best[False]['sys'] / max(best[True]['sys'], 1e-9):.1f}")
    print(f"critical points: {rows[True][0]['points']}; results identical across all "
          f"{2 * a.repeat} runs: {len(digests) == 1}")
    if len(digests) != 1:
        sys.exit("the allocator settings changed the results")


if __name__ == "__main__":
    main()
