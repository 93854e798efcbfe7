"""End to end: every chapter executes (smoke profile), the book builds with warnings as errors,
and the rendered pages work offline in a real headless browser."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from moe_routing.ledger import registry
from moe_book.pipeline import Project

import bookcheck

pytestmark = pytest.mark.book
ROOT = Path(__file__).resolve().parents[1]
PROJECT = Project(ROOT)
HTML = ROOT / "build" / "smoke" / "_build" / "html"


def make(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)


@pytest.fixture(scope="session")
def smoke_book() -> Path:
    """Execute every chapter with the smoke profile (incremental) and build its HTML."""
    res = make("execute", "PROFILE=smoke", "DEVICE=cpu")
    assert res.returncode == 0, f"smoke execution failed:\n{res.stdout}\n{res.stderr}"
    res = make("html", "PROFILE=smoke")
    assert res.returncode == 0, f"book build failed (warnings are errors):\n{res.stdout}\n{res.stderr}"
    return HTML


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


@pytest.fixture(scope="session")
def student_book(smoke_book) -> Path:
    res = make("student", "PROFILE=smoke")
    assert res.returncode == 0, f"student build failed:\n{res.stdout}\n{res.stderr}"
    return ROOT / "build" / "smoke" / "student" / "_build" / "html"


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
