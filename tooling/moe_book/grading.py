"""Grade a class's submissions of one assignment locally and write a grade sheet.

    python -m moe_book.grading NAME SUBMISSION.ipynb [...] [--csv grades.csv] [--out DIR]

Every submission is graded by ``otter run`` against the autograder built by
``python -m moe_book.assignments`` (``build/assignments/NAME/autograder/NAME-autograder.zip``): the
notebook is executed from the top in a fresh kernel of this Python environment, then every test
(public and hidden) is run.  The CSV has one row per submission: file, total, possible, and the
score of each question; otter's full ``results.json`` of each submission (test output included,
useful for feedback) is kept under ``--out``.

The same zip grades elsewhere: it bundles the library's wheel and names its requirements (see
:mod:`moe_book.assignments`), so an environment made from it alone, or a Gradescope-style grader,
runs the hidden tests too.

Grading runs the students' code with your permissions: do it in an account or container that
holds nothing you would not hand to a student.
"""

from __future__ import annotations

import argparse
import csv
import shutil
import sys
import tempfile
from pathlib import Path

from . import assignments as build


def grade_all(name: str, submissions: list[Path], csv_path: Path, out: Path | None = None,
              assignments_dir: Path = build.DEFAULT_OUT) -> list[dict]:
    """Grade ``submissions`` of assignment ``name``; write ``csv_path``; return its rows."""
    if name not in build.available():
        raise ValueError(f"unknown assignment {name!r}; accepted: {', '.join(build.available())}")
    zip_path = assignments_dir / name / "autograder" / f"{name}-autograder.zip"
    if not zip_path.is_file():
        raise ValueError(f"no autograder at {zip_path}; build it first: "
                         f"python -m moe_book.assignments {name}")
    missing = [str(s) for s in submissions if not Path(s).is_file()]
    if missing or not submissions:
        raise ValueError(f"submissions not found: {missing}" if missing else "no submissions given")
    rows, questions = [], []
    for sub in submissions:
        sub = Path(sub)
        # graded from a copy, so that the student's file is never touched
        with tempfile.TemporaryDirectory(prefix="grade-") as tmp:
            work = Path(tmp) / f"{name}.ipynb"
            shutil.copyfile(sub, work)
            try:
                g = build.grade(work, zip_path, keep=(out / sub.stem) if out else None)
            except RuntimeError as e:
                # one unreadable submission (not a notebook, another assignment's notebook)
                # must not stop the class's grading: it is reported in the sheet instead
                rows.append({"submission": str(sub), "total": "", "possible": "",
                             "error": str(e).strip().splitlines()[-1][:300]})
                print(f"{sub}: NOT GRADED ({rows[-1]['error']})", flush=True)
                continue
        row = {"submission": str(sub), "total": g.score, "possible": g.possible, "error": ""}
        for q, (score, _) in g.per_question.items():
            row[q] = score
            if q not in questions:
                questions.append(q)
        rows.append(row)
        print(f"{sub}: {g.score:g}/{g.possible:g} ({g.seconds:.1f} s)", flush=True)
    csv_path.parent.mkdir(parents=True, exist_ok=True)
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=["submission", "total", "possible", *questions, "error"])
        w.writeheader()
        w.writerows(rows)
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("name", help=f"the assignment, one of {build.available()}")
    ap.add_argument("submissions", nargs="+", type=Path, help="submitted notebooks (.ipynb)")
    ap.add_argument("--csv", type=Path, default=Path("grades.csv"), help="grade sheet to write")
    ap.add_argument("--out", type=Path, default=None,
                    help="keep each submission's results.json under OUT/<submission name>/")
    ap.add_argument("--assignments", type=Path, default=build.DEFAULT_OUT,
                    help="where moe_book.assignments wrote them")
    args = ap.parse_args(argv)
    try:
        rows = grade_all(args.name, args.submissions, args.csv, args.out, args.assignments)
    except ValueError as e:
        ap.error(str(e))
    bad = sum(1 for r in rows if r["error"])
    print(f"{len(rows) - bad} of {len(rows)} submission(s) graded"
          + (f", {bad} not graded (see the error column)" if bad else "") + f" -> {args.csv}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
