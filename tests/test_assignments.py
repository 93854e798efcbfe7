"""The autograded assignments: built with otter assign, graded locally with otter run.

For every assignment: the reference solution scores full marks, the blank student notebook
scores zero, hidden tests exist in the autograder and nowhere in the student notebook, and no
solution line reaches the student.  One deliberately wrong solution shows that the hidden tests
catch what the public ones miss.  One autograder zip is graded in a fresh virtual environment
outside the repository that holds only what the zip itself installs (its bundled wheel).
Select with ``pytest -m assignments`` (about three minutes on two cores: each grading run
executes a notebook in a fresh kernel, and the clean environment installs torch).
"""

from __future__ import annotations

import csv
import json
import os
import re
import subprocess
import venv
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from moe_book import assignments as build
from moe_book import grading as grade

pytestmark = pytest.mark.assignments

ROOT = Path(__file__).resolve().parents[1]

NAMES = build.available()


def test_at_least_three_assignments():
    assert len(NAMES) >= 3, NAMES
    assert {"load_balancing", "boundary_mass", "two_task_router"} <= set(NAMES)


@pytest.fixture(scope="module")
def wheel() -> Path:
    """The library's wheel that every autograder bundles (``make wheel``, incremental)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    res = subprocess.run(["make", "--no-print-directory", "wheel"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert build.default_wheel().is_file()
    return build.default_wheel()


@pytest.fixture(scope="module")
def built(tmp_path_factory, wheel):
    out = tmp_path_factory.mktemp("assignments")
    with ThreadPoolExecutor(max_workers=2) as pool:
        products = list(pool.map(lambda n: build.build(n, out), NAMES))
    return {b.name: b for b in products}


@pytest.fixture(scope="module")
def checked(built):
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(build.check, built.values()))
    return {c.name: c for c in results}


@pytest.mark.parametrize("name", NAMES)
def test_reference_solution_scores_full_marks(checked, name):
    sol = checked[name].solution
    assert sol.possible > 0
    assert sol.score == pytest.approx(sol.possible), sol.per_question


@pytest.mark.parametrize("name", NAMES)
def test_blank_student_notebook_scores_zero(checked, name):
    blank = checked[name].blank
    assert blank.possible == checked[name].solution.possible > 0
    assert blank.score == 0, blank.per_question
    assert set(blank.per_question) == set(checked[name].solution.per_question)


@pytest.mark.parametrize("name", NAMES)
def test_hidden_tests_exist_and_stay_out_of_the_student_notebook(built, checked, name):
    b = built[name]
    hidden, public = build.test_names(b.zip)
    assert hidden and public, (hidden, public)
    # every question of the autograder is graded with at least one hidden test
    with zipfile.ZipFile(b.zip) as zf:
        files = [m for m in zf.namelist() if m.startswith("tests/") and m.endswith(".py")]
        assert len(files) == len(checked[name].solution.per_question)
        for m in files:
            assert "hidden=True" in zf.read(m).decode(), f"{m} has no hidden test"
    student = json.loads(b.student.read_text())
    meta_tests = student["metadata"]["otter"]["tests"]        # what grader.check can run
    assert meta_tests, "the student notebook carries no public tests"
    text = b.student.read_text()
    assert not [h for h in hidden if h in text]
    assert all(p in json.dumps(meta_tests) for p in public)
    assert "hidden=True" not in json.dumps(meta_tests)
    assert checked[name].problems == []


def _solution_lines(source: str) -> list[str]:
    """Non-trivial code lines inside # BEGIN SOLUTION … # END SOLUTION or ending in # SOLUTION."""
    lines, inside, raw = [], False, False
    for line in source.splitlines():
        s = line.strip()
        # raw cells delimit otter's blocks (question, solution cells, tests): not code lines
        if s.startswith("```{raw-cell}"):
            raw = True
        if raw:
            raw = s != "```"
            continue
        if re.match(r"#\s*BEGIN SOLUTION", s):
            inside = True
        elif re.match(r"#\s*END SOLUTION", s):
            inside = False
        elif inside or s.endswith("# SOLUTION"):
            code = s.removesuffix("# SOLUTION").strip()
            if len(code) > 15 and not code.startswith(("#", '"""', "```")):
                lines.append(code)
    return lines


@pytest.mark.parametrize("name", NAMES)
def test_no_solution_line_reaches_the_student(built, name):
    solution = _solution_lines((ROOT / "assignments" / f"{name}.md").read_text())
    assert len(solution) >= 5, "the source has no solution lines: the parser is broken"
    cells = json.loads(built[name].student.read_text())["cells"]
    student = "\n".join("".join(c["source"]) for c in cells)
    assert [ln for ln in solution if ln in student] == []
    # ...while they are in the autograder's solution notebook (the parser finds real lines)
    sol_cells = json.loads(built[name].solution.read_text())["cells"]
    sol_text = "\n".join("".join(c["source"]) for c in sol_cells)
    assert all(ln in sol_text for ln in solution)


def test_hidden_tests_catch_a_wrong_normalisation(built, tmp_path):
    """f_i = count_i / n instead of count_i / (n k): right for top-1, wrong for top-2.

    The public test (top-1, uniform routing) passes; a hidden test (top-2, against
    moe_routing.model.losses) must take the points of question 1 away, and only those.  Graded
    through the class grading script, with a submission of another assignment in the batch,
    which must be reported, not graded and not stop the others.
    """
    b = built["load_balancing"]
    nb = json.loads(b.solution.read_text())
    right = "f = counts.to(router_probs.dtype) / idx.numel()"
    hits = 0
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if right in src:
            cell["source"] = src.replace(right, "f = counts.to(router_probs.dtype) / n")
            hits += 1
    assert hits == 1
    wrong = tmp_path / "wrong.ipynb"
    wrong.write_text(json.dumps(nb))
    other = tmp_path / "other.ipynb"
    other.write_text(built["two_task_router"].student.read_text())
    sheet = tmp_path / "grades.csv"
    rows = grade.grade_all("load_balancing", [other, wrong], sheet, tmp_path / "results",
                           assignments_dir=b.zip.parents[2])
    assert rows[0]["error"] and "two_task_router" in rows[0]["error"]
    q1_score, q1_max = rows[1]["q1_switch_lb"], 4.0
    assert 0 < q1_score < q1_max, rows[1]                      # public passed, hidden failed
    assert rows[1]["q2_lb_gradient"] == 3.0 and rows[1]["q3_task_router"] == 3.0, rows[1]
    assert rows[1]["total"] == q1_score + 6.0 and rows[1]["possible"] == 10.0
    with open(sheet, newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["submission"] for r in table] == [str(other), str(wrong)]
    assert float(table[1]["total"]) == rows[1]["total"]
    assert (tmp_path / "results" / "wrong" / "results.json").is_file()


def test_unknown_assignment_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown assignment 'nope'; accepted: "):
        build.build("nope", tmp_path)


def test_a_missing_wheel_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"no library wheel at .*nope\.whl.*make wheel"):
        build.build("two_task_router", tmp_path, wheel=tmp_path / "nope.whl")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("name", NAMES)
def test_autograder_zip_bundles_the_wheel_and_pins_the_lock(built, wheel, name):
    assert build.self_contained_problems(built[name].zip, wheel.name) == []
    with zipfile.ZipFile(built[name].zip) as zf:
        assert zf.read(f"files/wheels/{wheel.name}") == wheel.read_bytes()
    lock = dict(line.split("==") for line in (ROOT / "requirements.lock").read_text().split()
                if "==" in line)
    torch_pin = next(p for p in build.pins() if p.startswith("torch=="))
    assert lock["torch"].startswith(torch_pin.removeprefix("torch==").removesuffix("*")), torch_pin


def test_rebuilt_only_when_an_input_changed(tmp_path, wheel):
    src = tmp_path / "sources"
    src.mkdir()
    text = (ROOT / "assignments" / "two_task_router.md").read_text()
    (src / "two_task_router.md").write_text(text)
    out = tmp_path / "out"
    first = build.ensure_built(None, out, sources=src, wheel=wheel)[0]
    assert first.seconds > 0 and build.is_fresh("two_task_router", out, sources=src, wheel=wheel)
    again = build.ensure_built(None, out, sources=src, wheel=wheel)[0]
    assert again.seconds == 0 and again.zip == first.zip                # reused, not rebuilt
    (src / "two_task_router.md").write_text(text.replace("# Assignment:", "# Assignment (v2):"))
    assert not build.is_fresh("two_task_router", out, sources=src, wheel=wheel)
    rebuilt = build.ensure_built(None, out, sources=src, wheel=wheel)[0]
    assert rebuilt.seconds > 0 and "(v2)" in rebuilt.student.read_text()


def test_autograder_zip_grades_in_a_clean_environment(built, tmp_path_factory):
    """What a Gradescope-style grader does with the zip, without the repository: unpack it,
    install what its environment.yml lists (the bundled wheel, by its path relative to the
    unpacked folder, where otter's setup.sh runs pip) into a fresh virtual environment, and
    grade there.  The lock is only a constraint, so that the same CPU torch build is chosen."""
    b = built["load_balancing"]
    tmp = tmp_path_factory.mktemp("clean-grader")
    assert ROOT not in tmp.parents
    source = tmp / "source"                              # /autograder/source on Gradescope
    with zipfile.ZipFile(b.zip) as zf:
        zf.extractall(source)
        env_yml = zf.read("environment.yml").decode()
    pip = next(d["pip"] for d in yaml.safe_load(env_yml)["dependencies"] if isinstance(d, dict))
    assert "otter-grader[grading,plugins]==7.0.0" in pip
    # otter's plugins extra (Google Sheets clients) plays no part in `otter run`
    reqs = ["otter-grader[grading]==7.0.0" if p.startswith("otter-grader") else p for p in pip]
    assert any(p.startswith("./files/wheels/moe_routing-") for p in reqs), reqs
    (tmp / "requirements.txt").write_text("\n".join(reqs) + "\n")
    env_dir = tmp / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    res = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "-c", str(ROOT / "requirements.lock"), "-r", str(tmp / "requirements.txt")],
                         capture_output=True, text=True, cwd=source, env=clean)
    assert res.returncode == 0, res.stderr[-3000:]

    probe = tmp / "moe_routing-location.txt"
    nb = json.loads(b.solution.read_text())
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                        "source": f"import moe_routing, pathlib\npathlib.Path({str(probe)!r})"
                                  ".write_text(moe_routing.__file__)"})
    work = tmp / "work"
    work.mkdir()
    (work / "solution.ipynb").write_text(json.dumps(nb))
    (work / "blank.ipynb").write_text(b.student.read_text())

    def otter_run(notebook: str) -> dict[str, tuple[float, float]]:
        out = tmp / f"results-{notebook}"
        out.mkdir()
        res = subprocess.run([py, "-m", "otter", "run", "--no-logo", "-a", str(b.zip), "-o", str(out),
                              str(work / f"{notebook}.ipynb")],
                             capture_output=True, text=True, cwd=work, env=clean)
        assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
        tests = json.loads((out / "results.json").read_text())["tests"]
        return {t["name"]: (t["score"], t["max_score"]) for t in tests
                if t.get("max_score") is not None}

    solution = otter_run("solution")
    assert solution and all(s == m > 0 for s, m in solution.values()), solution
    lib = probe.read_text()
    assert lib.startswith(str(env_dir)) and str(ROOT) not in lib, lib
    blank = otter_run("blank")
    assert set(blank) == set(solution) and sum(s for s, _ in blank.values()) == 0, blank
