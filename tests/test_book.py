"""End to end: every chapter executes (smoke profile), the book builds with warnings as errors,
and the rendered pages work offline in a real headless browser."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import bookcheck
import pytest
from conftest import make

from moe_book.pipeline import Project
from moe_routing.ledger import registry

pytestmark = pytest.mark.book
ROOT = Path(__file__).resolve().parents[1]
PROJECT = Project(ROOT)
HTML = ROOT / "build" / "smoke" / "_build" / "html"
# make, and the session fixtures smoke_book and student_book: tests/conftest.py (shared with
# tests/test_dist.py)


@pytest.fixture(scope="session")
def page_reports(smoke_book):
    if not Path(bookcheck.CHROMIUM).exists():
        pytest.fail(f"{bookcheck.CHROMIUM} is missing: `make test` installs Debian's chromium")
    return bookcheck.check_pages(smoke_book)


def test_every_chapter_executed_and_rendered(smoke_book):
    for name in PROJECT.notebook_names():
        assert (smoke_book / "chapters" / f"{name}.html").exists(), name
        nb = (ROOT / "build" / "smoke" / "executed" / f"{name}.ipynb")
        assert nb.exists(), f"{name} has no executed notebook"
    res = make("execute", "PROFILE=smoke", "DEVICE=cpu")      # nothing changed: nothing runs
    assert res.returncode == 0
    assert "executing" not in res.stdout, res.stdout
    assert res.stdout.count("up to date") == len(PROJECT.notebook_names())


def test_pages_work_offline_with_math_and_images(page_reports):
    assert page_reports, "no pages checked"
    problems = {r.page: r.problems for r in page_reports if r.problems}
    assert not problems, problems
    intro = next(r for r in page_reports if r.page == "chapters/intro.html")
    assert intro.math_typeset > 10 and intro.n_images >= 1


# Every chapter's figures follow the book's convention (numbered, captioned, described).
FIGURE_CHAPTERS = tuple(PROJECT.notebook_names())


@pytest.mark.parametrize("name", FIGURE_CHAPTERS)
def test_every_image_is_a_numbered_captioned_figure(smoke_book, name):
    page = smoke_book / "chapters" / f"{name}.html"
    assert bookcheck.figure_problems(page) == []


def test_figure_check_sees_bare_images(tmp_path):
    page = tmp_path / "p.html"
    page.write_text(
        "<main><figure><img src='a.svg' alt='Three curves of the soft gate at three "
        "temperatures'><figcaption><span class='caption-number'>Fig. 1 </span>"
        "<span class='caption-text'>The soft gate at three temperatures.</span></figcaption>"
        "</figure><img src='b.png' alt='../_images/b.png'>"
        "<figure><img src='c.png' alt='A heatmap of routing by task and expert'></figure></main>")
    assert bookcheck.figure_problems(page) == [
        "b.png: not a numbered figure", "b.png: alt text '../_images/b.png' does not describe "
        "the content", "c.png: not a numbered figure"]


def _leak_list(reports) -> list[str]:
    return [f"{r.page}: {leak}" for r in reports for leak in r.tex_leaks]


def test_tex_leak_check_sees_broken_math(smoke_book, tmp_path):
    """Control: the TeX-leak check reports a stray ``$``, a raw command, a formula that swallowed
    prose, a MathJax error and a clipped formula, and nothing in good math or in code."""
    import re

    head = (smoke_book / "chapters" / "intro.html").read_text(encoding="utf-8")
    config = re.search(r"<script>window\.MathJax = .*?</script>", head).group(0)
    mathjax = (smoke_book / "_static" / "mathjax" / "tex-chtml.js").resolve().as_uri()
    m = '<span class="math notranslate nohighlight">'
    (tmp_path / "page.html").write_text(
        f'<html><head>{config}<script defer src="{mathjax}"></script></head><body>'
        '<section class="tex2jax_ignore mathjax_ignore">'
        f'<p>Good: {m}\\(\\Gamma_{{jk}}\\)</span>, <code>$HOME \\n</code>.</p>'
        '<pre>cost: $5 \\alpha</pre>'
        f'<p>Broken: ${m}\\(x\\)</span> and \\Gamma_{{jk}} here.</p>'
        f'<p>{m}\\(a+b $ for the mixture of predictions, and more\\)</span></p>'
        f'<p>{m}\\(x^1^2\\)</span></p>'
        '<p><span class="math" style="display: inline-block; max-width: 60px; overflow: hidden">'
        '\\(a_1+a_2+a_3+a_4+a_5+a_6+a_7+a_8\\)</span></p>'
        '</section></body></html>', encoding="utf-8")
    (rep,) = bookcheck.check_pages(tmp_path)
    kinds = sorted(leak.split(":", 1)[0] for leak in rep.tex_leaks)
    assert kinds == ["math-clipped", "math-dollar", "math-error", "math-prose", "text", "text"], \
        rep.tex_leaks
    assert any("$ in" in leak and "Broken" in leak for leak in rep.tex_leaks)
    assert any("\\Gamma in" in leak for leak in rep.tex_leaks)


@pytest.fixture(scope="session")
def student_page_reports(student_book):
    return bookcheck.check_pages(student_book)


@pytest.mark.parametrize("edition", ["full", "student"])
def test_no_tex_leaks_outside_math(edition, request):
    """No ``$`` or TeX command reaches a reader as text, on any page of either edition (a
    display ``$$`` glued to a line of text inside a directive breaks this way while the page
    still has typeset math), and no formula swallowed prose or fails to parse."""
    reports = request.getfixturevalue(
        "page_reports" if edition == "full" else "student_page_reports")
    assert len(reports) >= 10, [r.page for r in reports]
    leaks = _leak_list(reports)
    assert not leaks, f"{len(leaks)} TeX leaks in the {edition} edition:\n" + "\n".join(leaks)


def test_no_broken_internal_links(smoke_book):
    assert bookcheck.broken_internal_links(smoke_book) == []


def test_no_remote_urls_in_assets(smoke_book):
    """Offline by construction: no page or script asks a CDN for anything."""
    for page in bookcheck.html_pages(smoke_book):
        text = page.read_text(encoding="utf-8")
        for cdn in ("cdn.jsdelivr.net", "unpkg.com", "cdnjs.cloudflare.com",
                    "fonts.googleapis.com"):
            assert cdn not in text, f"{page.name} refers to {cdn}"
    assert (smoke_book / "_static" / "mathjax" / "tex-chtml.js").exists()


def test_ledger_and_status_pages(smoke_book):
    ledger = (smoke_book / "generated" / "ledger.html").read_text(encoding="utf-8")
    for cid in registry():
        assert cid in ledger, f"claim {cid} missing from the ledger page"
    status = (smoke_book / "generated" / "status.html").read_text(encoding="utf-8")
    for name in PROJECT.notebook_names():
        assert f"{name}.html" in status
    assert "smoke" in status and "torch" in status


@pytest.mark.parametrize("args,message", [
    (["PROFILE=bogus"], "error: unknown PROFILE 'bogus'; accepted: smoke, default, paper"),
    (["PROFILE=smoke", "DEVICE=tpu"], "error: unknown DEVICE 'tpu'; accepted: auto, cpu, cuda"),
    (["PROFILE=smoke", "NOTEBOOKS=intr"], "error: unknown notebook 'intr'"),
])
def test_make_rejects_bad_arguments_before_running(smoke_book, args, message):
    build = ROOT / "build" / "smoke"
    before = {p: p.stat().st_mtime_ns for p in build.rglob("*") if p.is_file()}
    res = make("execute", *args)
    assert res.returncode != 0
    assert message in res.stderr
    assert "executing" not in res.stdout
    after = {p: p.stat().st_mtime_ns for p in build.rglob("*") if p.is_file()}
    assert after == before


# --- student edition ---------------------------------------------------------------------------

def _solution_needles() -> list[str]:
    """Runs of ≥ 5 plain words from every solution in the book's sources: text that must not
    reach a student."""
    import re

    from moe_book.classroom import solution_texts, strip_solutions

    needles = set()
    sources = list((ROOT / "notebooks").glob("*.md")) + list((ROOT / "book").rglob("*.md"))
    # Phrases that also occur outside solutions are legitimately in the student edition.
    public = "\n".join(strip_solutions(p.read_text(encoding="utf-8")) for p in sources)
    for src in sources:
        for body in solution_texts(src.read_text(encoding="utf-8")):
            for line in body.splitlines():
                run: list[str] = []
                for tok in line.split() + [""]:
                    if re.fullmatch(r"[A-Za-z]+[,.;]?", tok):
                        run.append(tok)
                        continue
                    if len(run) >= 5:
                        needles.add(" ".join(run))
                    run = []
    return sorted(n for n in needles if n not in public)


def _all_text(root: Path) -> str:
    return "\n".join(p.read_text(encoding="utf-8", errors="replace") for p in root.rglob("*")
                     if p.is_file() and p.suffix in (".html", ".js", ".md", ".ipynb", ".txt")
                     and "mathjax" not in p.parts and "vendor" not in p.parts)


def test_student_edition_has_exercises_but_no_solution_text(smoke_book, student_book):
    needles = _solution_needles()
    assert len(needles) >= 2, "the book's sources should contain solutions to check"
    full, student = _all_text(smoke_book), _all_text(student_book)
    present_in_full = [n for n in needles if n in full]
    assert present_in_full, "control failed: no solution text found in the full edition"
    leaked = [n for n in needles if n in student]
    assert not leaked, f"solution text in the student edition: {leaked[:5]}"
    intro = (student_book / "chapters" / "intro.html").read_text(encoding="utf-8")
    assert "ex-intro-gate-gap" in intro and "Exercise" in intro
    assert "Solution to" not in intro
    assert "student edition" in intro


def test_downloaded_chapter_runs_outside_the_repository(smoke_book, tmp_path):
    """A reader's path: take a chapter's notebook from the built HTML (what its download button
    serves) and the wheel the book offers, install the wheel with its notebook extras into a
    fresh virtual environment outside the repository (no lock, no repository on the path), and
    execute the notebook there from another folder."""
    import json
    import sys
    import venv

    import nbformat
    from nbclient import NotebookClient

    name = "gamma_convergence"
    page = (smoke_book / "chapters" / f"{name}.html").read_text(encoding="utf-8")
    assert f"_sources/chapters/{name}.ipynb" in page          # the download button's target
    nb = nbformat.read(smoke_book / "_sources" / "chapters" / f"{name}.ipynb", as_version=4)
    wheels = list((smoke_book / "_static" / "downloads").glob("moe_routing-*.whl"))
    assert len(wheels) == 1, "the book offers no wheel"
    assert "pip install" in nb.cells[0].source and wheels[0].name in nb.cells[0].source

    env_dir = tmp_path / "clean-env"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    py = env_dir / "bin" / "python"
    # constraints only pick the same torch build as the lock (a CPU wheel); nothing else of the
    # repository reaches the environment
    res = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "-c", str(ROOT / "requirements.lock"), f"{wheels[0]}[notebooks]"],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    kernels = tmp_path / "jupyter" / "kernels" / "clean"
    kernels.mkdir(parents=True)
    (kernels / "kernel.json").write_text(json.dumps({
        "argv": [str(py), "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "clean", "language": "python"}))
    work = tmp_path / "reader"
    work.mkdir()
    nb.cells.append(nbformat.v4.new_code_cell(
        "import moe_routing; print('LIB', moe_routing.__file__); print('RUN', profile, artifacts_dir)"))
    env = {**os.environ, "JUPYTER_PATH": str(tmp_path / "jupyter")}
    env.pop("PYTHONPATH", None)
    old = dict(os.environ)
    os.environ.clear()
    os.environ.update(env)
    try:
        NotebookClient(nb, kernel_name="clean", timeout=600,
                       resources={"metadata": {"path": str(work)}}).execute()
    finally:
        os.environ.clear()
        os.environ.update(old)
    out = "".join(o.get("text", "") for o in nb.cells[-1].outputs)
    lib = out.split("LIB ")[1].split()[0]
    assert str(env_dir) in lib and str(ROOT) not in lib, out
    assert f"RUN smoke artifacts/{name}" in out, out           # the executed values, not defaults
    assert (work / "artifacts" / name / "claims.json").is_file()
    assert sys.executable != str(py)


def test_a_book_without_a_home_shows_no_repository_or_launch_buttons(smoke_book):
    # built without BOOK_REPOSITORY_URL (moe_book.home): no button points anywhere off the book
    for name in PROJECT.notebook_names():
        page = (smoke_book / "chapters" / f"{name}.html").read_text(encoding="utf-8")
        for where in ("mybinder.org", "colab.research.google.com", "launch-buttons",
                      "repository-button"):
            assert where not in page, (name, where)


def test_wide_code_check_sees_a_long_line_and_skips_collapsed_cells(tmp_path):
    long = "x = " + "1 + " * 60 + "1"
    short = "y = 1"
    cell = '<div class="cell_input"><pre style="font-size: 12px">{}</pre></div>'
    (tmp_path / "page.html").write_text(
        '<html><body><main style="width: 600px">'
        + cell.format(short) + cell.format(long)
        + "<details><summary>hidden</summary>" + cell.format(long.replace("x", "z"))
        + "</details></main></body></html>", encoding="utf-8")
    (rep,) = bookcheck.check_pages(tmp_path)
    assert rep.wide_code == [long[:60]]
    assert rep.problems and "code wider than the column" in rep.problems[0]
