"""The book pipeline: MyST notebook --jupytext--> papermill (+ profile parameters) --> executed
notebook + artifacts --> staged Jupyter Book source --> static HTML.

Usage (the Makefile calls these; every command validates its arguments before any work)::

    python -m moe_book.pipeline validate --profile P --device D
    python -m moe_book.pipeline run NAME [NAME ...] --profile P --device D
    python -m moe_book.pipeline stage --profile P        # book source + generated pages
    python -m moe_book.pipeline report --profile P       # exit 1 if any notebook failed

Why not jupyter-cache (what Jupyter Book uses by itself)?  It hashes code cells only, so an edit
in ``src/`` would not re-execute the notebooks that import it.  Here a notebook's *key* is the
SHA-256 of everything its output depends on (:mod:`moe_book.keys`): its MyST source, its
resolved parameters, the profile and device, the lock file and the science library's source.
A notebook re-executes only when its key changed (or its last run failed).

Layout: :mod:`moe_book.project`.

This module is the command line only.  What every command shares (the layout, the profiles'
parameters, the keys, the records of verified outputs) is :mod:`moe_book.project`; executing a
chapter is :mod:`moe_book.execution`, staging the book :mod:`moe_book.staging`.
"""

from __future__ import annotations

import argparse
import sys
import traceback

from moe_routing._internal.runtime import PROFILES

from . import project as _project
from .project import PipelineError, Project, failed, find_root, validate

# --------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moe_book.pipeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("validate", "run", "stage", "report"):
        p = sub.add_parser(cmd)
        p.add_argument("--profile", default="default")
        p.add_argument("--device", default="auto")
        p.add_argument("notebooks", nargs="*")
        if cmd == "validate":
            p.add_argument("--print-device", action="store_true",
                           help="print the resolved device (auto -> cuda or cpu)")
        if cmd == "run":
            p.add_argument("--force", action="store_true", help="execute even if up to date")
            p.add_argument("--timeout", type=float, default=None,
                           help="cell timeout in seconds (default: the profile's)")
        if cmd == "stage":
            p.add_argument("--edition", default="full", help="full | student")
    args = ap.parse_args(argv)
    try:
        project = Project(find_root())
        _project.CELL_CACHE = project.root / "build" / ".parameters-cells.json"
        if args.cmd == "validate":
            _, device = validate(project, args.profile, args.device, args.notebooks)
            if args.print_device:
                print(device)
            return 0
        if args.cmd == "run":
            from .execution import run_notebook

            params, device = validate(project, args.profile, args.device, args.notebooks)
            names = args.notebooks or project.notebook_names()
            status = 0
            for name in names:
                rec = run_notebook(project, name, args.profile, device, params[name],
                                   force=args.force, timeout_s=args.timeout)
                status |= rec["status"] != "ok"
            return status
        if args.cmd == "stage":
            if args.profile not in PROFILES:
                raise PipelineError(f"unknown PROFILE {args.profile!r}; accepted: "
                                    f"{', '.join(PROFILES)}")
            from .staging import stage

            print(stage(project, args.profile, args.edition))
            return 0
        if args.cmd == "report":
            bad = [st for st in failed(project, args.profile)
                   if not args.notebooks or st["notebook"] in args.notebooks]
            for st in bad:
                print(f"[{args.profile}] {st['notebook']}: {st['status']}"
                      + (f": {st['error']}" if st.get("error") else ""), file=sys.stderr)
            return 1 if bad else 0
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        _project.CELL_CACHE = None                # only this command's processes share it
    return 0


if __name__ == "__main__":  # pragma: no cover
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
