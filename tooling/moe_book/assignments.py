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

Only ``otter run`` is used for grading here: ``otter grade`` needs docker, which classrooms and
CI machines often lack.  ``otter run`` executes the submitted notebook in the Python environment
that runs it.  The hidden tests carry their own reference computations (a loop over the
definition, a closed form with scipy) rather than importing ``moe_routing``: the students'
environment holds the library, so whatever it ships as a reference is an answer they can import
(book/teaching.md says, assignment by assignment, what it still gives away).

Every autograder zip is also **self-contained** for a grader that builds its own environment
from the zip (Gradescope, ``otter grade``): the library's wheel (``make wheel``) is bundled under
``files/wheels/`` (the config cell's ``autograder_files: [wheels]``), and the config's
``requirements: requirements.txt`` -- written here, next to the master notebook -- names what
the assignment's code imports (:func:`imported_modules`, read from every code cell of the
source, tests included): the wheel when it imports ``moe_routing``, and the lock's release series
of torch, numpy and scipy for those it needs (:func:`requirements_for`).  An assignment that
never imports torch (nor the library, which depends on it) installs no torch: on Linux PyPI's
torch is a CUDA build with about 3 GB of NVIDIA wheels.  One that does names
``--extra-index-url TORCH_INDEX`` (the environment variable the Makefile passes; by default
PyTorch's CPU index) and pins the CPU build with its local label, ``torch==2.13.0+cpu``, which
only that index serves, so the grader cannot fall back on PyPI's CUDA build.  otter 7 puts these
lines into the zip's ``environment.yml``; its ``setup.sh`` creates the environment with
``mamba env create -f <autograder>/source/environment.yml``, which runs pip in the folder of that
file, the folder the zip is unpacked into: hence the wheel's path relative to it,
``./files/wheels/<wheel>``.

A build is reused while its inputs are unchanged (:func:`ensure_built`, what the book's staging
calls): the source, the wheel, the pins, otter's version and this module.
"""

from __future__ import annotations

import argparse
import ast
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import tomllib
import zipfile
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from moe_routing._internal.atomic import atomic_write_json

from .environment import lock_pins

ROOT = Path(__file__).resolve().parents[2]   # the repository (the tooling is installed editable)
HERE = ROOT / "assignments"                   # the assignment sources
DEFAULT_OUT = ROOT / "build" / "assignments"
# The folder of the master notebook that the config cells' ``autograder_files`` name; otter puts
# it into the zip as files/wheels/.
WHEELS = "wheels"
# The libraries the notebooks and hidden tests may use, pinned to the lock's release series (a
# grader's environment then computes what the book's does; patch releases may differ).
PINNED = ("torch", "numpy", "scipy")
# What each importable top-level module costs the grader: its distributions among PINNED (the
# library's wheel depends on all three). otter is the grader's own; the standard library is there.
NEEDS = {"torch": ("torch",), "numpy": ("numpy",), "scipy": ("numpy", "scipy"),
         "moe_routing": PINNED, "otter": ()}
LIBRARY = "moe_routing"
# Where the autograder's torch comes from (the Makefile passes its TORCH_INDEX): graders are CPU
# machines, so PyTorch's CPU index by default; empty means PyPI's torch.
DEFAULT_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"


def torch_index() -> str:
    """The index of the autograders' torch: ``$TORCH_INDEX`` when set (empty: PyPI), else
    :data:`DEFAULT_TORCH_INDEX`."""
    index = os.environ.get("TORCH_INDEX", DEFAULT_TORCH_INDEX).strip()
    if index and not re.match(r"(https?|file)://\S+$", index):
        raise ValueError(f"TORCH_INDEX={index!r}; accepted: an index URL such as "
                         f"{DEFAULT_TORCH_INDEX}, or empty for PyPI's torch")
    return index.rstrip("/")


def source_code_cells(text: str) -> list[str]:
    """The code of every ``{code-cell}`` of a MyST assignment source (solutions and tests)."""
    return re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", text, re.S | re.M)


def imported_modules(cells: list[str]) -> set[str]:
    """Top-level names of the modules that ``cells`` (Python source, IPython magics ignored)
    import, the standard library left out; a cell that does not parse is an error."""
    found: set[str] = set()
    for i, cell in enumerate(cells):
        code = "\n".join("" if line.lstrip().startswith(("%", "!")) else line
                          for line in cell.splitlines())
        try:
            tree = ast.parse(code)
        except SyntaxError as exc:
            raise ValueError(f"code cell {i} does not parse ({exc.msg}, line {exc.lineno}): "
                             f"{cell.strip().splitlines()[0] if cell.strip() else ''!r}") from None
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names}


def requirements_for(modules: set[str], wheel_name: str, lock: Path = ROOT / "requirements",
                     index: str | None = None) -> list[str]:
    """The autograder's pip lines for an assignment importing ``modules``: the bundled wheel when
    it imports the library, then (when torch is needed) ``--extra-index-url`` and the exact torch
    build of that index, then the lock's series of numpy and scipy as needed.  A module the grader
    could not install is an error naming it."""
    unknown = sorted(m for m in modules if m not in NEEDS)
    if unknown:
        raise ValueError(f"the assignment imports {unknown}, which its autograder does not "
                         f"install; accepted: the standard library and {sorted(NEEDS)}")
    needed = {d for m in modules for d in NEEDS[m]}
    series = dict(zip(PINNED, pins(lock)))
    lines = [f"./files/{WHEELS}/{wheel_name}"] if LIBRARY in modules else []
    index = torch_index() if index is None else index.rstrip("/")
    for dist in PINNED:
        if dist not in needed:
            continue
        if dist == "torch" and index:
            lines.append(f"--extra-index-url {index}")
            label = re.search(r"download\.pytorch\.org/whl/([A-Za-z0-9.]+)$", index)
            exact = _lock_version("torch", lock)
            # the local label (+cpu, +cu128) is the build only that index serves: pip then
            # cannot pick PyPI's build of the same release (a requirement without a label
            # matches both, and resolves to the highest)
            lines.append(f"torch=={exact}+{label.group(1)}" if label else series[dist])
        else:
            lines.append(series[dist])
    return lines


def _lock_version(name: str, lock: Path) -> str:
    """The release the lock (the folder ``requirements/``: :func:`moe_book.environment.lock_pins`)
    pins ``name`` to, without a local label."""
    pin = lock_pins(lock).get(name.lower())
    if pin is None:
        raise ValueError(f"{lock} pins no version of {name!r}; accepted: a lock folder whose "
                         f"files pin '{name}==X.Y.Z'")
    return pin.split("==")[1].split("+")[0]


def available(sources: Path = HERE) -> list[str]:
    """Names of the assignment sources (``assignments/*.md`` except README)."""
    return sorted(p.stem for p in Path(sources).glob("*.md") if p.stem.lower() != "readme")


def default_wheel(root: Path = ROOT) -> Path:
    """The library's wheel that ``make wheel`` builds: dist/moe_routing-<version>-py3-none-any.whl,
    the version read from pyproject.toml (as the Makefile does)."""
    version = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]
    return root / "dist" / f"moe_routing-{version}-py3-none-any.whl"


def pins(lock: Path = ROOT / "requirements") -> list[str]:
    """``name==X.Y.*`` for each of :data:`PINNED`, from the exact versions in the lock (the
    folder ``requirements/``)."""
    found = {}
    for name, pin in lock_pins(lock).items():
        m = re.fullmatch(r"(\d+)\.(\d+)(?:\.[0-9A-Za-z.+]*)?", pin.split("==")[1])
        if m and name in PINNED:
            found[name] = f"{name}=={m.group(1)}.{m.group(2)}.*"
    missing = [p for p in PINNED if p not in found]
    if missing:
        raise ValueError(f"{lock} pins no version of {missing}; accepted: a lock folder whose "
                         f"files pin 'name==X.Y.Z' for {list(PINNED)}")
    return [found[p] for p in PINNED]


def requirements_text(lines: list[str]) -> str:
    """The autograder's requirements file (:func:`requirements_for`): the bundled wheel's path is
    relative to the folder the zip is unpacked into, where otter's setup.sh runs pip."""
    return ("# written by moe_book.assignments from what the assignment imports\n"
            + "\n".join(lines) + "\n")


def zip_pip_list(autograder_zip: Path) -> list[str]:
    """The pip entries of the zip's environment.yml (what a grader installs)."""
    with zipfile.ZipFile(autograder_zip) as zf:
        names = set(zf.namelist())
        env = yaml.safe_load(zf.read("environment.yml")) if "environment.yml" in names else {}
    return [str(x) for x in next((d["pip"] for d in (env or {}).get("dependencies", [])
                                  if isinstance(d, dict) and "pip" in d), [])]


def self_contained_problems(autograder_zip: Path, wheel_name: str,
                            expected: list[str]) -> list[str]:
    """What keeps the zip from installing exactly its own needs (empty list: self-contained):
    the wheel missing from files/wheels/, a line of ``expected`` (:func:`requirements_for`)
    missing from the environment.yml's pip list, or torch or the wheel installed though the
    assignment does not need them."""
    problems = []
    with zipfile.ZipFile(autograder_zip) as zf:
        if f"files/{WHEELS}/{wheel_name}" not in set(zf.namelist()):
            problems.append(f"the zip does not bundle files/{WHEELS}/{wheel_name}")
    pip = zip_pip_list(autograder_zip)
    missing = [x for x in expected if x not in pip]
    if missing:
        problems.append(f"environment.yml lacks {missing}: pip list {pip}")
    extra = [x for x in pip if x not in expected
             and (x.startswith(("torch", "--extra-index-url", f"./files/{WHEELS}/")))]
    if extra:
        problems.append(f"environment.yml installs {extra}, which the assignment does not "
                        f"import: pip list {pip}")
    return problems


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


@contextmanager
def _locked(out: Path, name: str):
    """One builder of an assignment at a time (the full and student stagings may run at once)."""
    out.mkdir(parents=True, exist_ok=True)
    with open(out / f".{name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _inputs(name: str, sources: Path, wheel: Path, lock: Path) -> tuple[str, str]:
    """(key, requirements text): the key is the SHA-256 of everything a build depends on."""
    src = Path(sources) / f"{name}.md"
    if not src.is_file():
        raise ValueError(f"unknown assignment {name!r}; accepted: {', '.join(available(sources))}")
    if not Path(wheel).is_file():
        raise ValueError(f"no library wheel at {wheel}: the autograder bundles it; "
                         "build it first: make wheel")
    modules = imported_modules(source_code_cells(src.read_text(encoding="utf-8")))
    reqs = requirements_text(requirements_for(modules, Path(wheel).name, lock))
    from otter import __version__ as otter_version  # noqa: PLC0415  (a slow import)

    h = hashlib.sha256()
    for part in (src.read_bytes(), Path(wheel).name.encode(), Path(wheel).read_bytes(),
                 reqs.encode(), otter_version.encode(), Path(__file__).read_bytes()):
        h.update(hashlib.sha256(part).digest())
    return h.hexdigest(), reqs


def _products(name: str, out: Path) -> Built:
    result = out / name
    ag = result / "autograder"
    return Built(name, result / "student" / f"{name}.ipynb", ag / f"{name}.ipynb",
                 ag / f"{name}-autograder.zip", 0.0)


def _stamp(out: Path, name: str) -> Path:
    return out / name / "built.json"


def is_fresh(name: str, out: Path = DEFAULT_OUT, *, sources: Path = HERE,
             wheel: Path | None = None, lock: Path = ROOT / "requirements") -> bool:
    """Whether ``out/<name>`` was built from the current inputs and its products exist."""
    key, _ = _inputs(name, sources, wheel or default_wheel(), lock)
    stamp = _stamp(Path(out), name)
    try:
        same = json.loads(stamp.read_text(encoding="utf-8")).get("key") == key
    except (OSError, ValueError):
        return False
    b = _products(name, Path(out))
    return same and all(p.is_file() for p in (b.student, b.solution, b.zip))


def build(name: str, out: Path = DEFAULT_OUT, *, sources: Path = HERE, wheel: Path | None = None,
          lock: Path = ROOT / "requirements") -> Built:
    """jupytext MyST → ipynb, then ``otter assign`` with the wheel and the requirements beside
    the master notebook; returns the paths of the products."""
    import jupytext  # noqa: PLC0415  (only the build needs it)

    out, wheel = Path(out), Path(wheel or default_wheel())
    key, reqs = _inputs(name, sources, wheel, lock)   # refuses bad input before any work
    t0 = time.perf_counter()
    with _locked(out, name):
        # one master folder per assignment: the builds run in parallel threads
        master_dir = out / "_src" / name
        if master_dir.exists():
            shutil.rmtree(master_dir)
        (master_dir / WHEELS).mkdir(parents=True)
        master = master_dir / f"{name}.ipynb"
        jupytext.write(jupytext.read(Path(sources) / f"{name}.md"), master, fmt="ipynb")
        shutil.copyfile(wheel, master_dir / WHEELS / wheel.name)
        (master_dir / "requirements.txt").write_text(reqs, encoding="utf-8")
        result = out / name
        if result.exists():
            shutil.rmtree(result)
        # the reference solution is graded by --check with `otter run`; otter assign's own test
        # run would execute the notebook a second time
        proc = _otter("assign", "--no-run-tests", "--no-pdfs", str(master), str(result), cwd=ROOT)
        if proc.returncode != 0:
            raise RuntimeError(f"otter assign failed for {name}:\n{proc.stdout}\n{proc.stderr}")
        ag = result / "autograder"
        zips = sorted(ag.glob(f"{name}-autograder_*.zip"))
        if len(zips) != 1:
            raise RuntimeError(f"expected one autograder zip in {ag}, found {[z.name for z in zips]}")
        built = _products(name, out)
        zips[0].replace(built.zip)
        expected = requirements_for(imported_modules(source_code_cells(
            (Path(sources) / f"{name}.md").read_text(encoding="utf-8"))), wheel.name, lock)
        problems = self_contained_problems(built.zip, wheel.name, expected)
        if problems:
            raise RuntimeError(f"the autograder of {name} is not self-contained (its config cell "
                               f"needs requirements: requirements.txt and autograder_files: "
                               f"[{WHEELS}]): {'; '.join(problems)}")
        atomic_write_json(_stamp(out, name), {"key": key, "wheel": wheel.name})
    built.seconds = time.perf_counter() - t0
    return built


def ensure_built(names: list[str] | None = None, out: Path = DEFAULT_OUT, *, sources: Path = HERE,
                 wheel: Path | None = None, lock: Path = ROOT / "requirements",
                 jobs: int = 2) -> list[Built]:
    """The products of ``names`` (default: all), built only where missing or stale."""
    names = available(sources) if names is None else names

    def one(name: str) -> Built:
        with _locked(Path(out), name):
            fresh = is_fresh(name, out, sources=sources, wheel=wheel, lock=lock)
        return (_products(name, Path(out)) if fresh else
                build(name, out, sources=sources, wheel=wheel, lock=lock))

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        return list(pool.map(one, names))


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
    with zipfile.ZipFile(built.zip) as zf:
        wheels = [m.rsplit("/", 1)[1] for m in zf.namelist()
                  if m.startswith(f"files/{WHEELS}/") and m.endswith(".whl")]
    # what the built material imports (the solution notebook and the zip's tests) must be what
    # the zip installs: a second reading, from the products instead of the source
    with zipfile.ZipFile(built.zip) as zf:
        tests = [zf.read(m).decode() for m in zf.namelist()
                 if m.startswith("tests/") and m.endswith(".py")]
    cells = ["".join(cell["source"]) for cell in json.loads(built.solution.read_text())["cells"]
             if cell["cell_type"] == "code"]
    if len(wheels) == 1:
        expected = requirements_for(imported_modules(cells + tests), wheels[0])
        c.problems += self_contained_problems(built.zip, wheels[0], expected)
    else:
        c.problems.append(f"expected one wheel under files/{WHEELS}/ in the zip, found {wheels}")
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
    if not default_wheel().is_file():
        ap.error(f"no library wheel at {default_wheel()}: every autograder bundles it; "
                 "build it first: make wheel")

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
