"""End to end: every chapter executes (smoke profile), the book builds with warnings as errors,
and the rendered pages work offline in a real headless browser."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

import bookcheck
import pytest
from conftest import make

from moe_book.environment import lock_constraints
from moe_book.project import Project
from moe_routing._internal.ledger import registry

pytestmark = pytest.mark.book
ROOT = Path(__file__).resolve().parents[1]
PROJECT = Project(ROOT)
HTML = ROOT / "build" / "smoke" / "_build" / "html"
# make, and the session fixtures smoke_book and student_book: tests/conftest.py (shared with
# tests/test_dist.py)


@pytest.fixture(scope="session")
def browser() -> str:
    """A Chromium (skipped, and said so, without one; a failure under MOE_REQUIRE_BROWSER=1)."""
    return bookcheck.chromium()


@pytest.fixture(scope="session")
def page_reports(browser, smoke_book):
    reports = bookcheck.check_pages(smoke_book)
    _write_accessibility_report(reports, "full")
    return reports


def _write_accessibility_report(reports, edition: str) -> None:
    out = ROOT / "build" / "smoke" / f"accessibility-{edition}.txt"
    out.write_text(bookcheck.accessibility_report(reports, edition), encoding="utf-8")


def test_every_chapter_executed_and_rendered(smoke_book):
    for name in PROJECT.notebook_names():
        assert (smoke_book / "chapters" / f"{name}.html").exists(), name
        nb = (ROOT / "build" / "smoke" / "executed" / f"{name}.ipynb")
        assert nb.exists(), f"{name} has no executed notebook"
    res = make("execute", "PROFILE=smoke", "DEVICE=cpu")      # nothing changed: nothing runs
    assert res.returncode == 0
    assert "executing" not in res.stdout, res.stdout
    assert res.stdout.count("up to date") == len(PROJECT.notebook_names())


def test_a_rebuild_with_nothing_changed_reads_no_page(smoke_book):
    """Staging twice leaves every staged file untouched (content and mtime), and Sphinx then
    re-reads no page: an incremental ``make html`` has nothing to do.  (It re-read the
    bibliography on every build while staging wrote that page twice.)"""
    import sys

    def stage() -> Path:
        res = subprocess.run([sys.executable, "-m", "moe_book.pipeline", "stage", "--profile",
                              "smoke"], cwd=ROOT, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        return Path(res.stdout.strip().splitlines()[-1])

    src = stage()
    before = {f: f.stat().st_mtime_ns for f in src.rglob("*")
              if f.is_file() and "_build" not in f.parts}
    assert stage() == src
    after = {f: f.stat().st_mtime_ns for f in src.rglob("*")
             if f.is_file() and "_build" not in f.parts}
    touched = sorted(str(f.relative_to(src)) for f in before if after.get(f) != before[f])
    assert after.keys() == before.keys() and not touched, touched
    res = subprocess.run([sys.executable, "-m", "moe_book.jupyter_book", "build", str(src),
                          "--path-output", str(ROOT / "build" / "smoke"), "-W", "--keep-going"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 0, res.stdout[-3000:]
    out = re.sub(r"\x1b\[[0-9;]*m", "", res.stdout)
    assert "targets for 0 source files that are out of date" in out, out[-3000:]
    assert "0 added, 0 changed, 0 removed" in out, out[-3000:]


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


def test_tex_leak_check_sees_broken_math(browser, smoke_book, tmp_path):
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
    (rep,) = bookcheck.check_pages(tmp_path, views=bookcheck.VIEWS[:1], axe=False)
    kinds = sorted(leak.split(":", 1)[0] for leak in rep.tex_leaks)
    assert kinds == ["math-clipped", "math-dollar", "math-error", "math-prose", "text", "text"], \
        rep.tex_leaks
    assert any("$ in" in leak and "Broken" in leak for leak in rep.tex_leaks)
    assert any("\\Gamma in" in leak for leak in rep.tex_leaks)


# The student edition is opened in one view, the first (desktop width, light mode): the two
# editions share the theme, its CSS and the book's own stylesheet, so the phone width and the
# dark mode, which test how that theme renders, would repeat the full edition's verdicts page
# for page. What the student edition alone can get wrong is its content (solutions cut out,
# its own exercise pages and links), and every check of content runs in the first view:
# network requests, missing local files, math typeset, TeX leaks, images, code width, contrast
# in that view and axe-core.
STUDENT_VIEWS = bookcheck.VIEWS[:1]
EDITION_VIEWS = {"full": bookcheck.VIEWS, "student": STUDENT_VIEWS}


@pytest.fixture(scope="session")
def student_page_reports(browser, student_book):
    reports = bookcheck.check_pages(student_book, views=STUDENT_VIEWS)
    _write_accessibility_report(reports, "student")
    return reports


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


def test_every_served_html_file_is_a_page_with_a_title_and_a_language(smoke_book, student_book,
                                                                     tmp_path):
    """Every .html file of both editions' sites, _static and the index redirect included, has
    <html lang> and a <title>: the themes' Jinja fragments that Sphinx copies into _static
    (webpack-macros.html, sbt-webpack-macros.html) are not served, and the redirect is a page
    (book/_ext/offline_book.py). Control: a fragment and a bare redirect are found."""
    for site in (smoke_book, student_book):
        assert bookcheck.pages_without_title_or_language(site) == [], site
        assert not list((site / "_static").glob("*webpack-macros.html")), site
        index = (site / "index.html").read_text(encoding="utf-8")
        assert 'http-equiv="Refresh" content="0; url=chapters/intro.html"' in index
    (tmp_path / "_static").mkdir()
    (tmp_path / "_static" / "macros.html").write_text("{% macro body_post() %}{% endmacro %}")
    (tmp_path / "index.html").write_text('<meta http-equiv="Refresh" content="0; url=a.html" />')
    (tmp_path / "a.html").write_text('<html lang="en"><head><title>A</title></head></html>')
    assert bookcheck.pages_without_title_or_language(tmp_path) == [
        "_static/macros.html: no lang and no title", "index.html: no lang and no title"]


def test_the_vendored_axe_core_is_the_release_it_names():
    """tests/vendor/axe-core/axe.min.js is axe-core AXE_VERSION, byte for byte: the SHA-256
    that axe-core publishes for it (sri-history.json)."""
    import base64
    import hashlib

    data = bookcheck.AXE_JS.read_bytes()
    assert f"sha256-{base64.b64encode(hashlib.sha256(data).digest()).decode()}" == bookcheck.AXE_SRI
    assert data.startswith(f"/*! axe v{bookcheck.AXE_VERSION}\n".encode())
    readme = (bookcheck.AXE_JS.parent / "README.md").read_text(encoding="utf-8")
    assert bookcheck.AXE_VERSION in readme and bookcheck.AXE_SRI in readme


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
    (tmp_path / "constraints.txt").write_text(lock_constraints())    # the pins, no hashes
    res = subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                          "-c", str(tmp_path / "constraints.txt"), f"{wheels[0]}[notebooks]"],
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


def test_wide_code_check_sees_a_long_line_and_skips_collapsed_cells(browser, tmp_path):
    long = "x = " + "1 + " * 60 + "1"
    short = "y = 1"
    cell = '<div class="cell_input"><pre style="font-size: 12px">{}</pre></div>'
    (tmp_path / "page.html").write_text(
        '<html><body><main style="width: 600px">'
        + cell.format(short) + cell.format(long)
        + "<details><summary>hidden</summary>" + cell.format(long.replace("x", "z"))
        + "</details></main></body></html>", encoding="utf-8")
    (rep,) = bookcheck.check_pages(tmp_path, views=bookcheck.VIEWS[:1], axe=False)
    assert rep.wide_code == [long[:60]]
    assert rep.problems and "code wider than the column" in rep.problems[0]


# --- every screen: phone width, dark mode, contrast, accessibility --------------------------------

@pytest.mark.parametrize("edition", ["full", "student"])
def test_every_view_is_readable_and_accessible(edition, request):
    """The full edition at desktop width, at 400 px and in dark mode, the student edition at
    desktop width in light mode (:data:`STUDENT_VIEWS`): no text under WCAG AA contrast, no
    formula cut off, no page wider than the screen; axe-core finds no serious or critical
    violation (the moderate and minor ones are in build/smoke/accessibility-EDITION.txt)."""
    reports = request.getfixturevalue(
        "page_reports" if edition == "full" else "student_page_reports")
    assert {"desktop", "phone", "dark"} <= {v.name for v in EDITION_VIEWS["full"]}
    assert [(v.name, v.width, v.theme) for v in STUDENT_VIEWS] == [
        ("desktop", bookcheck.DESKTOP_WIDTH, "light")]
    views = {v.name for v in EDITION_VIEWS[edition]}
    for r in reports:
        assert set(r.low_contrast) == views, r.page        # every view ran on every page
        assert r.axe_version == bookcheck.AXE_VERSION, r.page   # the vendored axe-core
    bad = {r.page: [p for p in r.problems if p.startswith(
        ("text below", "math cut off", "horizontal page", "colour mode", "axe-core"))]
        for r in reports}
    bad = {page: found for page, found in bad.items() if found}
    assert not bad, bad
    assert (ROOT / "build" / "smoke" / f"accessibility-{edition}.txt").is_file()


def test_view_checks_see_invisible_text_clipped_math_and_overflow(browser, smoke_book, tmp_path):
    """Control: a page with text the colour of its box, grey text just under 4.5:1, a formula
    cut off by a box that hides its overflow, and a block wider than a phone fails each check
    in the views where it shows; the same page's good parts (dark on white, a formula that
    scrolls in its own box, text fading into a translucent box) pass; axe-core reports the
    serious violation (an image without alt text)."""
    import re

    head = (smoke_book / "chapters" / "intro.html").read_text(encoding="utf-8")
    config = re.search(r"<script>window\.MathJax = .*?</script>", head).group(0)
    mathjax = (smoke_book / "_static" / "mathjax" / "tex-chtml.js").resolve().as_uri()
    formula = "\\(" + "+".join(f"a_{{{i}}}" for i in range(40)) + "\\)"
    (tmp_path / "page.html").write_text(
        f'<html lang="en"><head><title>control</title>{config}'
        f'<script defer src="{mathjax}"></script></head><body><main>'
        '<p style="color: #222">Good dark text on white.</p>'
        '<div style="background: rgb(34, 40, 50)"><p style="color: rgb(34, 40, 50)">'
        'Invisible verdict text</p></div>'
        '<p style="color: #777">Grey text at 4.48 to 1</p>'
        '<div style="background: rgba(0, 0, 0, .05)"><p style="color: #111">Tinted box</p></div>'
        '<div style="width: 300px; overflow: hidden"><span class="math">' + formula
        + '</span></div>'
        '<div style="width: 300px"><span class="math" style="display: inline-block; '
        'max-width: 100%; overflow-x: auto">' + formula + '</span></div>'
        '<div style="width: 700px">a block wider than a phone</div>'
        '<img src="data:image/gif;base64,R0lGODlhAQABAAAAACw=">'
        '</main></body></html>', encoding="utf-8")
    (rep,) = bookcheck.check_pages(tmp_path)
    for view in ("desktop", "phone", "dark"):
        contrast = rep.low_contrast[view]
        assert len(contrast) == 2, (view, contrast)
        assert any("1.00:1" in c and "Invisible verdict text" in c for c in contrast)
        assert any("4.48:1" in c and "Grey text" in c for c in contrast)
        assert not any("Good dark" in c or "Tinted" in c for c in contrast)
        clipped = rep.clipped_math[view]
        assert len(clipped) == 1 and "cut off by main > div" in clipped[0], (view, clipped)
    assert rep.page_overflow["desktop"] == [] and rep.page_overflow["dark"] == []
    assert len(rep.page_overflow["phone"]) == 1 and "400 px viewport" in \
        rep.page_overflow["phone"][0], rep.page_overflow
    assert any("image-alt" in line for line in rep.axe_failing), rep.axe_failing
    assert any(p.startswith("axe-core serious/critical") for p in rep.problems)


def test_source_tags_carry_their_meaning_without_a_mouse(smoke_book):
    """Every {source} tag holds its meaning as text (not only a tooltip), and every page with
    tags opens with a legend of those it uses."""
    from bs4 import BeautifulSoup

    sys_path = ROOT / "book" / "_ext"
    import sys
    sys.path.insert(0, str(sys_path))
    try:
        from offline_book import SOURCES
    finally:
        sys.path.remove(str(sys_path))
    pages = 0
    for page in bookcheck.html_pages(smoke_book):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        main = soup.find("main") or soup
        tags = [t for t in main.select("span.paper-source")
                if not t.find_parent("aside", class_="source-legend")]
        if not tags:
            continue
        pages += 1
        for tag in tags:
            key = next(c.removeprefix("source-") for c in tag["class"] if c.startswith("source-"))
            hidden = tag.select_one(".visually-hidden")
            assert hidden is not None and SOURCES[key] in hidden.get_text(), (page.name, tag)
        legend = main.select_one("aside.source-legend")
        assert legend is not None, f"{page.name}: tags but no legend"
        used = {c.removeprefix("source-") for t in tags for c in t["class"]
                if c.startswith("source-")}
        listed = {c.removeprefix("source-") for t in legend.select("span.paper-source")
                  for c in t["class"] if c.startswith("source-")}
        assert listed == used, (page.name, listed, used)
    assert pages >= 3, "the chapters should use {source} tags"
