"""The autograded assignments: built with otter assign, graded locally with otter run.

For every assignment: the reference solution scores full marks, the blank student notebook
scores zero, hidden tests exist in the autograder and nowhere in the student notebook, and no
solution line reaches the student.  One deliberately wrong solution shows that the hidden tests
catch what the public ones miss.  Each zip installs what its notebook imports, torch only where
it is imported; one autograder zip is graded in a fresh virtual environment outside the
repository that holds only what the zip itself installs.  A site holding the student notebooks
passes the publishing check, and fails it as soon as one autograder or solution is in it.
Select with ``pytest -m assignments`` (about three minutes on two cores: each grading run
executes a notebook in a fresh kernel, and the clean environment installs torch).
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import venv
import zipfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from moe_book import assignments as build
from moe_book import grading as grade
from moe_book.classroom import assignment_secrets
from moe_book.environment import lock_constraints, lock_pins
from moe_routing import __version__

pytestmark = pytest.mark.assignments

ROOT = Path(__file__).resolve().parents[1]

NAMES = build.available()


def test_the_assignments_are_there():
    assert len(NAMES) >= 4, NAMES
    assert {"load_balancing", "boundary_mass", "two_task_router", "two_hop"} <= set(NAMES)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    """The library's wheel that every autograder bundles (``make wheel``, incremental), copied
    aside: dist/ is rebuilt whenever the library's source changes, so the module's builds and
    their checks all use this one snapshot."""
    import shutil

    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    res = subprocess.run(["make", "--no-print-directory", "wheel"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    assert build.default_wheel().is_file()
    copy = tmp_path_factory.mktemp("wheel") / build.default_wheel().name
    shutil.copyfile(build.default_wheel(), copy)
    return copy


@pytest.fixture(scope="module")
def built(tmp_path_factory, wheel):
    out = tmp_path_factory.mktemp("assignments")
    with ThreadPoolExecutor(max_workers=2) as pool:
        products = list(pool.map(lambda n: build.build(n, out, wheel=wheel), NAMES))
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


@pytest.mark.parametrize("name", NAMES)
def test_no_solution_line_reaches_the_student(built, name):
    # the one parser of solution lines, the publish check's (moe_book.classroom)
    _, solution = assignment_secrets((ROOT / "assignments" / f"{name}.md").read_text())
    assert len(solution) >= 5, "the source has no solution lines: the parser is broken"
    cells = json.loads(built[name].student.read_text())["cells"]
    student = "\n".join("".join(c["source"]) for c in cells)
    assert [ln for ln in solution if ln in student] == []
    # ...while they are in the autograder's solution notebook (the parser finds real lines)
    sol_cells = json.loads(built[name].solution.read_text())["cells"]
    sol_text = "\n".join("".join(c["source"]) for c in sol_cells)
    assert all(ln in sol_text for ln in solution)


def _wrong_solution(b, right, wrong_line, tmp_path):
    """The reference solution with the one line ``right`` replaced by ``wrong_line``."""
    nb = json.loads(b.solution.read_text())
    hits = 0
    for cell in nb["cells"]:
        src = "".join(cell["source"])
        if right in src:
            cell["source"] = src.replace(right, wrong_line)
            hits += 1
    assert hits == 1
    wrong = tmp_path / "wrong.ipynb"
    wrong.write_text(json.dumps(nb))
    return wrong


def test_hidden_tests_catch_a_wrong_normalisation(built, tmp_path):
    """f_bi = count_bi / T instead of count_bi / (T k): right for top-1, wrong for top-2.

    The public test (top-1, uniform routing) passes; the hidden tests (top-2 and top-3, against
    a loop over the definition) must take points of question 1 away, and only those.  Graded
    through the class grading script, with a submission of another assignment in the batch,
    which must be reported, not graded and not stop the others.
    """
    b = built["load_balancing"]
    wrong = _wrong_solution(b, "f = counts / idx.shape[1]", "f = counts / n_tok", tmp_path)
    other = tmp_path / "other.ipynb"
    other.write_text(built["two_task_router"].student.read_text())
    sheet = tmp_path / "grades.csv"
    rows = grade.grade_all("load_balancing", [other, wrong], sheet, tmp_path / "results",
                           assignments_dir=b.zip.parents[2])
    assert rows[0]["error"] and "two_task_router" in rows[0]["error"]
    q1_score, q1_max = rows[1]["q1_sequence_lb"], 4.0
    assert 0 < q1_score < q1_max, rows[1]                      # public passed, hidden failed
    assert rows[1]["q2_lb_gradient"] == 3.0 and rows[1]["q3_task_router"] == 3.0, rows[1]
    assert rows[1]["total"] == q1_score + 6.0 and rows[1]["possible"] == 10.0
    with open(sheet, newline="") as f:
        table = list(csv.DictReader(f))
    assert [r["submission"] for r in table] == [str(other), str(wrong)]
    assert float(table[1]["total"]) == rows[1]["total"]
    assert (tmp_path / "results" / "wrong" / "results.json").is_file()


def test_hidden_tests_catch_a_second_hop_counted_per_chain(built, tmp_path):
    """Layer-2 experts counted once per two-hop task instead of once per second hop: the same
    count on the assignment's data, whose chains all have their own second hop, so the public
    test passes; the hidden test, with two chains sharing a second hop, must take the points of
    question 3 away, and only those."""
    b = built["two_hop"]
    wrong = _wrong_solution(b, "second_hops = {r2 for _, r2 in chains.values()}",
                            "second_hops = [r2 for _, r2 in chains.values()]", tmp_path)
    rows = grade.grade_all("two_hop", [wrong], tmp_path / "grades.csv", tmp_path / "results",
                           assignments_dir=b.zip.parents[2])
    q3 = rows[0]["q3_sizes"]
    assert 0 < q3 < 3.0, rows[0]                               # public passed, hidden failed
    assert rows[0]["total"] == q3 + 9.0 and rows[0]["possible"] == 12.0, rows[0]


def test_the_publishing_check_passes_student_notebooks_and_catches_autograders(built, tmp_path):
    """The check on the real products: the student notebooks are publishable; a control site
    with one autograder zip left in (by its name, or renamed), or with a solution notebook,
    is not."""
    import shutil

    from moe_book.classroom import leaks

    site = tmp_path / "html"
    offered = site / "_static" / "downloads" / "assignments"
    offered.mkdir(parents=True)
    (site / "index.html").write_text("<html><body>the book</body></html>")
    for b in built.values():
        shutil.copyfile(b.student, offered / f"{b.name}.ipynb")
    sources = ROOT / "assignments"
    assert leaks(site, sources) == []
    zip_ = built["boundary_mass"].zip
    shutil.copyfile(zip_, offered / zip_.name)
    found = leaks(site, sources)
    assert found == [f"_static/downloads/assignments/{zip_.name}: an autograder (holds every "
                     "hidden test and the solution)"], found
    (offered / zip_.name).rename(offered / "extras.zip")     # renamed: its content gives it away
    found = leaks(site, sources)
    assert found and all(f.startswith("_static/downloads/assignments/extras.zip!") for f in found)
    hidden, _ = build.test_names(zip_)
    assert any(h in " ".join(found) for h in hidden), found
    (offered / "extras.zip").unlink()
    shutil.copyfile(built["two_task_router"].solution, offered / "two_task_router.ipynb")
    found = leaks(site, sources)
    assert any("solution line(s)" in f for f in found), found
    assert all(f.startswith("_static/downloads/assignments/two_task_router.ipynb:") for f in found)


def test_unknown_assignment_is_rejected(tmp_path):
    with pytest.raises(ValueError, match="unknown assignment 'nope'; accepted: "):
        build.build("nope", tmp_path)


def test_a_missing_wheel_is_refused_before_any_work(tmp_path):
    with pytest.raises(ValueError, match=r"no library wheel at .*nope\.whl.*make wheel"):
        build.build("two_task_router", tmp_path, wheel=tmp_path / "nope.whl")
    assert list(tmp_path.iterdir()) == []


def _imports(name: str) -> set[str]:
    return build.imported_modules(build.source_code_cells(
        (ROOT / "assignments" / f"{name}.md").read_text()))


@pytest.mark.parametrize("name", NAMES)
def test_autograder_zip_installs_what_its_notebook_imports(built, wheel, name):
    """The zip installs the lock's series of what the notebook and its tests import, and no
    torch for an assignment that never imports it (PyPI's Linux torch pulls ~3 GB of CUDA)."""
    modules = _imports(name)
    expected = build.requirements_for(modules, wheel.name)
    assert build.self_contained_problems(built[name].zip, wheel.name, expected) == []
    with zipfile.ZipFile(built[name].zip) as zf:
        assert zf.read(f"files/wheels/{wheel.name}") == wheel.read_bytes()
    pip = build.zip_pip_list(built[name].zip)
    lock = {name: pin.split("==")[1] for name, pin in lock_pins().items()}
    torch_lines = [p for p in pip if p.startswith("torch")]
    if "torch" in modules and build.torch_index() == build.DEFAULT_TORCH_INDEX:
        # the exact CPU build of the lock's release, from the CPU index only it serves
        assert torch_lines == [f"torch=={lock['torch']}+cpu"], pip
        assert f"--extra-index-url {build.DEFAULT_TORCH_INDEX}" in pip, pip
    elif "torch" in modules:
        # TORCH_INDEX set by the user: empty means PyPI's torch of the lock's series, else
        # that index named before the pin
        assert len(torch_lines) == 1 and torch_lines[0].startswith("torch=="), pip
        assert (f"--extra-index-url {build.torch_index()}" in pip) == bool(build.torch_index())
    else:
        assert torch_lines == [] and not any(p.startswith("--") for p in pip), pip
    for dist in ("numpy", "scipy"):
        lines = [p for p in pip if p.startswith(f"{dist}==")]
        series = ".".join(lock[dist].split(".")[:2])
        assert lines == ([f"{dist}=={series}.*"] if dist in modules or (dist == "numpy" and
                         "scipy" in modules) else []), (dist, pip)


def test_the_assignments_need_what_they_teach():
    """What each zip will install, read from the sources (a change here changes the graders)."""
    assert _imports("load_balancing") == {"torch"}
    assert _imports("boundary_mass") == {"numpy", "scipy"}
    assert _imports("two_task_router") == {"numpy"}
    assert _imports("two_hop") == {"numpy"}
    # no hidden test imports the library: its functions would be the students' answers
    for name in NAMES:
        assert "moe_routing" not in _imports(name), name


def test_requirements_follow_the_imports_and_the_torch_index(monkeypatch):
    whl = f"moe_routing-{__version__}-py3-none-any.whl"
    assert build.requirements_for({"numpy"}, whl) == [build.pins()[1]]
    assert build.requirements_for(set(), whl) == []
    lib = build.requirements_for({"moe_routing"}, whl)        # the wheel depends on torch
    assert lib[0] == f"./files/wheels/{whl}" and any(p.startswith("torch==") for p in lib)
    monkeypatch.setenv("TORCH_INDEX", "https://download.pytorch.org/whl/cu128")
    assert "torch==2.13.0+cu128" in build.requirements_for({"torch"}, whl)
    monkeypatch.setenv("TORCH_INDEX", "")                     # PyPI's own torch: the series
    assert build.requirements_for({"torch"}, whl) == ["torch==2.13.*"]
    monkeypatch.setenv("TORCH_INDEX", "cpu")
    with pytest.raises(ValueError, match=r"TORCH_INDEX='cpu'; accepted: an index URL"):
        build.requirements_for({"torch"}, whl)
    with pytest.raises(ValueError, match=r"imports \['pandas'\].*accepted: the standard library"):
        build.requirements_for({"pandas", "numpy"}, whl)
    with pytest.raises(ValueError, match="code cell 1 does not parse"):
        build.imported_modules(["import numpy", "def broken(:"])
    assert build.imported_modules(["%matplotlib inline\nimport os, numpy.linalg\n"
                                   "from scipy import stats\nfrom . import x"]) == {"numpy", "scipy"}


def test_a_zip_that_installs_torch_needlessly_is_a_problem(tmp_path):
    """The check can fail: an environment.yml with torch for a numpy-only assignment."""
    whl = f"moe_routing-{__version__}-py3-none-any.whl"
    z = tmp_path / "x-autograder.zip"
    with zipfile.ZipFile(z, "w") as zf:
        zf.writestr(f"files/wheels/{whl}", b"")
        zf.writestr("environment.yml", yaml.safe_dump({"dependencies": [
            "python=3.11", {"pip": ["numpy==2.4.*", "torch==2.13.*"]}]}))
    expected = build.requirements_for({"numpy"}, whl)
    problems = build.self_contained_problems(z, whl, expected)
    assert len(problems) == 1 and "installs ['torch==2.13.*']" in problems[0], problems
    assert build.self_contained_problems(z, whl, expected + ["scipy==1.17.*"])[0].startswith(
        "environment.yml lacks ['scipy==1.17.*']")


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


def _reachable(url: str) -> bool:
    import urllib.request

    try:
        urllib.request.urlopen(url, timeout=5).close()
        return True
    except OSError:
        return False


def test_autograder_zip_grades_in_a_clean_environment(built, tmp_path_factory):
    """What a Gradescope-style grader does with the zip, without the repository: unpack it,
    install what its environment.yml lists (torch's CPU build, from the CPU index it names)
    into a fresh virtual environment, in the unpacked folder where otter's setup.sh runs pip,
    and grade there.  The lock is only a constraint.  Where PyTorch's index cannot be reached,
    its line is left out and pip finds the same CPU build among its configured sources."""
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
    torch_pin = ("torch==2.13.0+cpu" if build.torch_index() == build.DEFAULT_TORCH_INDEX
                 else next(p for p in reqs if p.startswith("torch==")))   # TORCH_INDEX set
    assert torch_pin in reqs and not any(p.startswith("./files/") for p in reqs), reqs
    index = next((p.split()[1] for p in reqs if p.startswith("--extra-index-url")), "")
    if index and not _reachable(index + "/torch/"):
        reqs = [p for p in reqs if not p.startswith("--extra-index-url")]
    (tmp / "requirements.txt").write_text("\n".join(reqs) + "\n")
    env_dir = tmp / "env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = str(env_dir / "bin" / "python")
    clean = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    # the lock's pins without their hashes (a hashed constraints file would make pip require a
    # hash of every requirement)
    (tmp / "constraints.txt").write_text(lock_constraints())
    res = subprocess.run([py, "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "-c", str(tmp / "constraints.txt"), "-r", str(tmp / "requirements.txt")],
                         capture_output=True, text=True, cwd=source, env=clean)
    assert res.returncode == 0, res.stderr[-3000:]

    probe = tmp / "torch-location.txt"
    nb = json.loads(b.solution.read_text())
    nb["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None,
                        "source": f"import torch, pathlib\npathlib.Path({str(probe)!r})"
                                  ".write_text(torch.__file__ + ' ' + torch.__version__)"})
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
    lib, version = probe.read_text().split()
    assert lib.startswith(str(env_dir)) and str(ROOT) not in lib, lib
    assert version == "2.13.0+cpu", version                   # not PyPI's CUDA build
    # the library is not installed: the hidden tests need only torch
    assert subprocess.run([py, "-c", "import moe_routing"], cwd=tmp, env=clean,
                          capture_output=True).returncode != 0
    blank = otter_run("blank")
    assert set(blank) == set(solution) and sum(s for s, _ in blank.values()) == 0, blank
