"""On-disk size of the library's ``hf`` extra: transformers and every package it pulls in that
the base install does not already have (:func:`moe_routing.hf.extra_install_size`).

Each side's requirement closure is read from the installed distributions' metadata (the
library's own ``Requires-Dist``: its base requirements, and those of ``extra == "hf"``;
environment markers evaluated, extras followed); a package's size is the sum of the files its
``RECORD`` lists (what ``pip uninstall`` would remove), so packages sharing a folder are not
counted twice.

Usage: ``python benchmarks/hf_install_size.py [--extra hf] [--json out.json]`` in the
environment where the extra is installed.  Prints one line per added package and the total.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from pathlib import Path

from moe_routing.hf import EXTRA, extra_install_size


def main(argv=None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--extra", default=EXTRA)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    size = extra_install_size(args.extra)
    for name, version, n in size.packages:
        print(f"{name:24s} {version:18s} {n / 2**20:8.1f} MiB")
    print(f"the {size.extra!r} extra adds {len(size.packages)} packages to the base install's "
          f"{size.base_packages}: {size.total_mib:.1f} MiB on disk")
    out = asdict(size)
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1), encoding="utf-8")
    return out


if __name__ == "__main__":
    sys.exit(0 if main() else 1)
