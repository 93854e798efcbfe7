"""Build the autograded assignments, and (with ``--check``) prove that the autograder works.

    python -m moe_book.assignments [--check] [--out build/assignments] [-j 2] [name ...]

Each assignment is one MyST markdown source ``assignments/<name>.md`` in otter-grader's
assignment format (a ``# ASSIGNMENT CONFIG`` raw cell, ``# BEGIN QUESTION`` / ``# BEGIN
SOLUTION`` / ``# BEGIN TESTS`` blocks, hidden tests marked ``hidden: true``).  For each one:

1. jupytext converts the source to ``<out>/_src/<name>.ipynb`` (otter reads only notebooks);
2. ``otter assign`` writes ``<out>/<name>/student/<name>.ipynb`` (solutions and hidden tests
   removed; public tests in the notebook's metadata for ``grader.check``) and
   ``<out>/<name>/autograder/`` (the solution notebook and ``<name>-autograder.zip``: every test,
   hidden ones included; the zip name is made stable, otter stamps it with the time);
3. with ``--check``: ``otter run`` (local grading, no container) grades the solution notebook,
   which must score full marks, and the blank student notebook, which must score zero; hidden
   tests must exist in the autograder zip and appear nowhere in the student notebook.

Only ``otter run`` is used for grading: ``otter grade`` needs docker, which classrooms and CI
machines often lack.  Grading executes the submitted notebook in this Python environment, so the
autograder's hidden tests may import ``moe_routing`` (the reference implementations).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
import zipfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # the repository (the tooling is installed editable)
HERE = ROOT / "assignments"                   # the assignment sources
DEFAULT_OUT = ROOT / "build" / "assignments"


def available() -> list[str]:
    """Names of the assignment sources (``assignments/*.md`` except README)."""
    return sorted(p.stem for p in HERE.glob("*.md") if p.stem.lower() != "readme")


def _otter(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    # run otter with this interpreter, so that grading kernels see the same environment
    return subprocess.run([sys.executable, "-m", "otter", *args], cwd=cwd, text=True,
                          capture_output=True)


@dataclass
class Built:
    name: str
    student: Path            # the student notebook
    solution: Path           # the autograder's copy of the notebook, with solutions
    zip: Path                # the autograder zip (all tests)
    seconds: float


@dataclass
class Grade:
    score: float
    possible: float
    per_question: dict[str, tuple[float, float]]
    seconds: float


@dataclass
class Check:
    name: str
    solution: Grade
    blank: Grade
    hidden_tests: int
    public_tests: int
    problems: list[str] = field(default_factory=list)


def build(name: str, out: Path = DEFAULT_OUT) -> Built:
    """jupytext MyST → ipynb, then ``otter assign``; returns the paths of the products."""
    import jupytext  # noqa: PLC0415  (only the build needs it)

    src = HERE / f"{name}.md"
    if not src.is_file():
        raise ValueError(f"unknown assignment {name!r}; accepted: {', '.join(available())}")
    t0 = time.perf_counter()
    master = out / "_src" / f"{name}.ipynb"
    master.parent.mkdir(parents=True, exist_ok=True)
    jupytext.write(jupytext.read(src), master, fmt="ipynb")
    result = out / name
    if result.exists():
        shutil.rmtree(result)
    # the reference solution is graded by --check with `otter run`; otter assign's own test run
    # would execute the notebook a second time
    proc = _otter("assign", "--no-run-tests", "--no-pdfs", str(master), str(result), cwd=ROOT)
    if proc.returncode != 0:
        raise RuntimeError(f"otter assign failed for {name}:\n{proc.stdout}\n{proc.stderr}")
    ag = result / "autograder"
    zips = sorted(ag.glob(f"{name}-autograder_*.zip"))
    if len(zips) != 1:
        raise RuntimeError(f"expected one autograder zip in {ag}, found {[z.name for z in zips]}")
    stable = ag / f"{name}-autograder.zip"
    zips[0].replace(stable)
    return Built(name, result / "student" / f"{name}.ipynb", ag / f"{name}.ipynb", stable,
                 time.perf_counter() - t0)


def grade(notebook: Path, autograder_zip: Path, keep: Path | None = None) -> Grade:
    """Grade one notebook locally with ``otter run``; returns the scores of results.json
    (copied into the folder ``keep`` when given)."""
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="otter-run-") as tmp:
        proc = _otter("run", "--no-logo", "-a", str(Path(autograder_zip).resolve()), "-o", tmp,
                      str(Path(notebook).resolve()), cwd=Path(tmp))
        results = Path(tmp) / "results.json"
        if proc.returncode != 0 or not results.is_file():
            raise RuntimeError(f"otter run failed on {notebook}:\n{proc.stdout}\n{proc.stderr}")
        data = json.loads(results.read_text())
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(results, keep / "results.json")
    per_q = {t["name"]: (float(t["score"]), float(t["max_score"]))
             for t in data["tests"] if t.get("max_score") is not None}
    return Grade(sum(s for s, _ in per_q.values()), sum(m for _, m in per_q.values()), per_q,
                 time.perf_counter() - t0)


_HIDDEN = re.compile(r"@test_case\([^)]*hidden=True[^)]*\)\s*\ndef (\w+)")
_PUBLIC = re.compile(r"@test_case\([^)]*hidden=False[^)]*\)\s*\ndef (\w+)")


def test_names(autograder_zip: Path) -> tuple[list[str], list[str]]:
    """(hidden, public) test-function names in the autograder zip's test files."""
    hidden, public = [], []
    with zipfile.ZipFile(autograder_zip) as zf:
        for member in zf.namelist():
            if member.startswith("tests/") and member.endswith(".py"):
                text = zf.read(member).decode()
                hidden += _HIDDEN.findall(text)
                public += _PUBLIC.findall(text)
    return hidden, public


def check(built: Built) -> Check:
    """Grade the solution and the blank notebook; verify hidden tests exist and are not leaked."""
    sol = grade(built.solution, built.zip)
    blank = grade(built.student, built.zip)
    hidden, public = test_names(built.zip)
    c = Check(built.name, sol, blank, len(hidden), len(public))
    if sol.possible <= 0 or abs(sol.score - sol.possible) > 1e-9:
        c.problems.append(f"solution scores {sol.score:g}/{sol.possible:g}, not full marks: "
                          f"{sol.per_question}")
    if blank.score != 0:
        c.problems.append(f"blank student notebook scores {blank.score:g}/{blank.possible:g}, "
                          f"not 0: {blank.per_question}")
    if not hidden:
        c.problems.append("the autograder has no hidden tests")
    student_text = built.student.read_text()
    leaked = [h for h in hidden if h in student_text]
    if leaked:
        c.problems.append(f"hidden tests appear in the student notebook: {leaked}")
    if "BEGIN SOLUTION" in student_text or "END SOLUTION" in student_text:
        c.problems.append("solution markers left in the student notebook")
    return c


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("names", nargs="*", help=f"assignments (default: all of {available()})")
    ap.add_argument("--check", action="store_true",
                    help="grade solutions (full marks) and blank notebooks (zero) with otter run")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="output folder")
    ap.add_argument("-j", "--jobs", type=int, default=2, help="assignments processed at once")
    args = ap.parse_args(argv)
    names = args.names or available()
    unknown = [n for n in names if n not in available()]
    if unknown:
        ap.error(f"unknown assignment(s) {unknown}; accepted: {available()}")
    if args.jobs < 1:
        ap.error(f"--jobs {args.jobs}; accepted: an integer ≥ 1")

    def one(name: str):
        b = build(name, args.out)
        return b, (check(b) if args.check else None)

    t0 = time.perf_counter()
    failed = False
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for b, c in pool.map(one, names):
            line = f"{b.name:>16}: built in {b.seconds:5.1f} s -> {b.student.parent.parent}"
            if c is not None:
                line += (f"; solution {c.solution.score:g}/{c.solution.possible:g} "
                         f"({c.solution.seconds:.1f} s), blank {c.blank.score:g}/"
                         f"{c.blank.possible:g} ({c.blank.seconds:.1f} s), "
                         f"{c.hidden_tests} hidden + {c.public_tests} public tests")
            print(line, flush=True)
            for p in (c.problems if c else []):
                failed = True
                print(f"{'':>18}FAIL: {p}", flush=True)
    print(f"{len(names)} assignment(s) in {time.perf_counter() - t0:.1f} s"
          + (" — check failed" if failed else (" — check passed" if args.check else "")))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
