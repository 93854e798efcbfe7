"""The PDF editions (``make pdf``, smoke profile): what a reader of the printed book relies on --
every chapter and theorem printed, math typeset (no TeX left as text), figures drawn, working
internal links, bookmarks and contents that point at the right pages, and no solutions in the
student edition. Read back with poppler's pdftotext and with pypdf."""

from __future__ import annotations

import html
import os
import re
import shutil
import subprocess
from functools import cache
from pathlib import Path

import bookcheck
import pytest
import yaml

from moe_book.pdf import PRINT_OPTIONS, NoBrowser, find_chromium
from moe_book.project import PipelineError, pdf_path
from moe_book.project import Project

pytestmark = pytest.mark.book
ROOT = Path(__file__).resolve().parents[1]
PROJECT = Project(ROOT)
# Sphinx's single page as it was printed (figures and their captions are read from it)
PRINTED_HTML = ROOT / "build" / "smoke" / "pdf" / "full" / "_build" / "singlehtml" / "print.html"


def make(*args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    return subprocess.run(["make", "--no-print-directory", *args], cwd=ROOT, env=env,
                          capture_output=True, text=True)


def words(text: str) -> str:
    return " ".join(text.split())


@pytest.fixture(scope="session")
def browser() -> str:
    """A Chromium (skipped, and said so, without one; a failure under MOE_REQUIRE_BROWSER=1)."""
    return bookcheck.chromium()


@pytest.fixture(scope="session")
def pdfs(browser) -> dict[str, Path]:
    """Both editions of the smoke profile, built by ``make pdf`` (which executes what is not
    executed yet); the build exits non-zero on a broken image, a network request, a formula
    MathJax cannot parse or content wider than the paper."""
    res = make("pdf", "PROFILE=smoke", "DEVICE=cpu")
    assert res.returncode == 0, f"make pdf failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    return {e: pdf_path(PROJECT, "smoke", e) for e in ("full", "student")}


def pdftotext() -> str:
    """poppler's pdftotext, which the tests reading a PDF's text need (the others read it with
    pypdf): without it those tests are skipped, and say so, unless ``MOE_REQUIRE_POPPLER=1``
    (CI), where that is a failure (``make poppler`` says how to install it)."""
    found = shutil.which("pdftotext")
    if found is None:
        why = ("no pdftotext (poppler) on PATH: Debian/Ubuntu apt-get install poppler-utils, "
               "Fedora dnf install poppler-utils, macOS brew install poppler, conda install -c "
               "conda-forge poppler")
        if os.environ.get("MOE_REQUIRE_POPPLER") == "1":
            pytest.fail(f"MOE_REQUIRE_POPPLER=1: {why}")
        pytest.skip(f"PDF text check skipped: {why}")
    return found


@cache
def page_texts(pdf: Path) -> list[str]:
    out = subprocess.run([pdftotext(), "-layout", str(pdf), "-"], capture_output=True,
                         text=True, check=True).stdout
    return out.split("\f")[:-1]


def reader(pdf: Path):
    from pypdf import PdfReader

    return PdfReader(pdf)


def outline(pdf: Path) -> list[tuple[int, str, int]]:
    """Bookmarks as (depth, title, 0-based page)."""
    r = reader(pdf)
    out = []

    def walk(items, depth):
        for it in items:
            if isinstance(it, list):
                walk(it, depth + 1)
            else:
                out.append((depth, it.title, r.get_destination_page_number(it)))

    walk(r.outline, 0)
    return out


def chapter_titles() -> dict[str, str]:
    titles = {}
    for name in PROJECT.notebook_names():
        text = PROJECT.notebook_path(name).read_text(encoding="utf-8")
        titles[name] = re.search(r"(?m)^# (.+)$", text).group(1).strip()
    return titles


def test_both_editions_are_books_with_metadata(pdfs):
    cfg = yaml.safe_load((ROOT / "book" / "_config.yml").read_text(encoding="utf-8"))
    n = {e: len(reader(p).pages) for e, p in pdfs.items()}
    assert 40 <= n["full"] <= 600, n
    assert 30 <= n["student"] < n["full"], n        # the same book less the solutions
    for edition, pdf in pdfs.items():
        meta = reader(pdf).metadata
        assert meta.title.startswith(cfg["title"]), meta.title
        assert meta.author == cfg["author"]
        assert "'smoke' profile" in meta.subject and "commit " in meta.subject, meta.subject
        assert (edition == "student") == ("student edition" in meta.title), meta.title
        text = words(" ".join(page_texts(pdf)[:1]))
        assert cfg["title"] in text, "the cover names the book"


def test_every_chapter_and_theorem_is_printed(pdfs):
    text = words(" ".join(page_texts(pdfs["full"])))
    for name, title in chapter_titles().items():
        assert title in text, f"chapter {name}: title {title!r} not in the PDF"
    checked = 0
    for name in PROJECT.notebook_names():
        src = PROJECT.notebook_path(name).read_text(encoding="utf-8")
        for m in re.finditer(r"(?m)^`{3,}\{prf:theorem\}[ \t]*(.*)\n((?::.*\n)*)\n?(.*)", src):
            title, first_line = m.group(1).strip(), m.group(3)
            if title and "$" not in title and "{" not in title:
                assert re.search(r"Theorem \d+(\.\d+)* \(" + re.escape(title) + r"\)", text), title
            lead = re.split(r"[${`]", first_line)[0].strip()   # the words before any math
            if len(lead) >= 15:
                assert words(lead) in text, f"{name}: theorem text {lead!r} not in the PDF"
                checked += 1
    assert checked >= 1, "no theorem's text was checked"


# TeX that reached the page as text: a `$` or a TeX command in any text not set in a monospace
# font (code keeps its backslashes: `"\n"`, a shell's `$VAR`). MathJax's output is glyphs.
TEX = re.compile(r"\$|\\[A-Za-z]+|\\[()\[\]]")


def prose_tex(pdf: Path) -> list[str]:
    leaks = []
    for i, page in enumerate(reader(pdf).pages):
        def visit(text, cm, tm, font, size, i=i):
            name = str(font.get("/BaseFont", "")) if font else ""
            if "Mono" not in name and TEX.search(text):
                leaks.append(f"page {i + 1} ({name}): {text.strip()[:80]!r}")
        page.extract_text(visitor_text=visit)
    return leaks


def test_no_tex_reaches_the_page(pdfs):
    assert prose_tex(pdfs["full"]) == []


def test_tex_check_sees_tex_in_prose_and_not_in_code(browser, tmp_path):
    """The check above can fail: a page with TeX left in a paragraph is caught, code is not."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=browser, args=["--no-sandbox", "--disable-gpu"])
        tab = chromium.new_page()
        tab.set_content(r"<p>The gap is $\frac{1}{\tau}$ wide.</p>"
                        r"<pre>print(f'{x}\n', '$HOME')</pre>")
        (tmp_path / "t.pdf").write_bytes(tab.pdf(format="A4"))
        chromium.close()
    leaks = prose_tex(tmp_path / "t.pdf")
    assert leaks and all("Mono" not in leak for leak in leaks), leaks
    assert any("frac" in leak for leak in leaks), leaks


PATH_OPS = re.compile(rb"(?:^|\s)(BT|ET|Do|[mlcvyh]|re)(?=\s|$)")


def longest_drawing(page) -> int:
    """The longest run of path operators with no text between them: a plotted figure is
    hundreds to thousands (Chromium draws SVG figures as vector paths), text and boxes a few
    dozen."""
    best = run = 0
    for m in PATH_OPS.finditer(page.get_contents().get_data()):
        if m.group(1) in (b"BT", b"ET", b"Do"):
            best, run = max(best, run), 0
        else:
            run += 1
    return max(best, run)


def figures_by_chapter() -> dict[str, list[str]]:
    """Each chapter's figure captions ("Fig. 4.2 Monte Carlo boundary mass …"), as printed."""
    page = PRINTED_HTML.read_text(encoding="utf-8")
    parts = re.split(r'<span id="document-chapters/([a-z_]+)"></span>', page)
    pieces = {"intro": parts[0], **dict(zip(parts[1::2], parts[2::2], strict=True))}
    out = {}
    for name, piece in pieces.items():
        piece = re.split(r'<span id="document-(?!chapters/)', piece)[0]
        caps = re.findall(r'<span class="caption-number">(Fig\. [\d.]+) </span>'
                          r'<span class="caption-text">([^<$\\]{12,}?)[<$\\]', piece)
        if caps:
            out[name] = [words(f"{n} {html.unescape(t)}")[:60] for n, t in caps]
    return out


def test_every_figure_is_printed_and_drawn(pdfs):
    pdf = pdfs["full"]
    texts = [words(t) for t in page_texts(pdf)]
    pages = reader(pdf).pages
    figures = figures_by_chapter()
    assert set(figures) >= {"intro", "boundary_mass", "soft_to_hard"}, set(figures)
    for name, captions in figures.items():
        for caption in captions:
            where = [i for i, t in enumerate(texts) if caption in t]
            assert where, f"{name}: caption {caption!r} not in the PDF"
            drawn = max(longest_drawing(pages[i]) for i in where)
            assert drawn >= 400, f"{name}: nothing drawn on the page of {caption!r} ({drawn})"


def test_cross_references_are_internal_links(pdfs):
    for edition, pdf in pdfs.items():
        r = reader(pdf)
        dests = {str(k) for k in r.named_destinations}
        internal, files = [], []
        for page in r.pages:
            for annot in page.get("/Annots") or []:
                a = annot.get_object()
                if "/Dest" in a:
                    internal.append(str(a["/Dest"]))
                elif "/A" in a and a["/A"].get("/S") == "/URI" and \
                        str(a["/A"]["/URI"]).startswith("file:"):
                    files.append(str(a["/A"]["/URI"]))
        assert len(internal) >= 100, f"{edition}: {len(internal)} internal links"
        assert set(internal) <= dests, f"{edition}: links to no destination: " \
                                       f"{sorted(set(internal) - dests)[:5]}"
        assert not files, f"{edition}: links to local files: {files[:5]}"
        # a cross-reference to a theorem, a figure and an exercise land on them
        assert any(d.startswith("/fig-") for d in internal), edition
        assert any(d.startswith(("/thm-", "/ex-")) for d in internal), edition


def test_student_edition_has_exercises_but_no_solutions(pdfs):
    full = words(" ".join(page_texts(pdfs["full"])))
    student = words(" ".join(page_texts(pdfs["student"])))
    assert full.count("Solution to") >= 5
    assert "Solution to" not in student
    assert student.count("Exercise ") >= full.count("Exercise ") // 2


def test_bookmarks_and_contents_point_at_the_chapters(pdfs):
    for edition, pdf in pdfs.items():
        marks = outline(pdf)
        texts = [words(t) for t in page_texts(pdf)]
        contents = [line for t in page_texts(pdf)[1:6] for line in t.splitlines()]
        for title in chapter_titles().values():
            hits = [(depth, t, page) for depth, t, page in marks if t.endswith(title)]
            assert hits, f"{edition}: no bookmark for chapter {title!r}"
            depth, full_title, page = hits[0]
            assert full_title in texts[page], f"{edition}: bookmark {title!r} -> page {page + 1}"
            # the printed contents give the same page
            line = next((ln for ln in contents if words(ln).startswith(full_title)), None)
            assert line is not None, f"{edition}: {full_title!r} not in the printed contents"
            assert line.split()[-1] == str(page + 1), f"{edition}: contents line {line.strip()!r}"
        parts = [t for depth, t, _ in marks if depth == 0]
        assert any(t.startswith("Paper A") for t in parts), parts


# --- tagged PDF, the browser ------------------------------------------------------------------

def is_tagged(pdf) -> bool:
    """A tagged PDF: a structure tree under the catalog and /MarkInfo /Marked true."""
    root = reader(pdf).trailer["/Root"]
    mark = root.get("/MarkInfo")
    return "/StructTreeRoot" in root and mark is not None and bool(mark.get_object().get("/Marked"))


def test_pdfs_are_tagged(pdfs):
    for edition, pdf in pdfs.items():
        assert is_tagged(pdf), f"{edition}: not a tagged PDF"


def test_print_options_tag_the_pdf_and_finish_keeps_the_tags(browser, tmp_path):
    """The print options tag the PDF, and the bookmarks and metadata written afterwards keep the
    structure tree; the same page printed without ``tagged`` is not tagged (the check can fail)."""
    from playwright.sync_api import sync_playwright

    from moe_book.pdf import Meta, Printed, finish

    with sync_playwright() as p:
        chromium = p.chromium.launch(executable_path=browser, args=["--no-sandbox", "--disable-gpu"])
        tab = chromium.new_page()
        tab.set_content('<h1 id="a">Boundary mass</h1><p>The soft gate.</p>'
                        '<figure><img alt="a red square" src="data:image/gif;base64,'
                        'R0lGODlhAQABAIAAAP8AAP///ywAAAAAAQABAAACAkQBADs="></figure>')
        tagged = tab.pdf(**PRINT_OPTIONS)
        untagged = tab.pdf(**{**PRINT_OPTIONS, "tagged": False})
        chromium.close()
    meta = Meta("A title", "An author", "smoke", "full", "0" * 12)
    (tmp_path / "tagged.pdf").write_bytes(
        finish(Printed(tagged, [(1, "Boundary mass", "a")], {"a": 0}), meta))
    (tmp_path / "untagged.pdf").write_bytes(untagged)
    assert is_tagged(tmp_path / "tagged.pdf")
    assert not is_tagged(tmp_path / "untagged.pdf")


def test_chromium_env_is_honoured_and_a_bad_one_is_an_error_naming_it(tmp_path):
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if Path(chromium).exists():
        assert find_chromium({"CHROMIUM": chromium, "PATH": ""}) == chromium
    with pytest.raises(PipelineError, match="CHROMIUM=/path/to/nonexistent: no such file"):
        find_chromium({"CHROMIUM": "/path/to/nonexistent", "PATH": os.environ["PATH"]})
    plain = tmp_path / "chrome"
    plain.write_text("not a program")
    plain.chmod(0o644)
    if os.access(plain, os.X_OK):           # root may execute anything: nothing to check
        return
    with pytest.raises(PipelineError, match="not an executable file"):
        find_chromium({"CHROMIUM": str(plain)})


def test_chromium_is_found_on_path_under_any_usual_name(tmp_path, monkeypatch):
    import moe_book.pdf as pdf

    monkeypatch.setattr(pdf, "_playwright_chromium", lambda: None)
    for name in ("chromium-browser", "google-chrome-stable"):
        folder = tmp_path / name
        folder.mkdir()
        exe = folder / name
        exe.write_text("#!/bin/sh\n")
        exe.chmod(0o755)
        assert find_chromium({"PATH": str(folder)}) == str(exe)
    with pytest.raises(NoBrowser, match="install Debian's package 'chromium'.*CHROMIUM=/path"):
        find_chromium({"PATH": str(tmp_path / "empty")})


def test_make_chromium_names_a_bad_chromium_in_one_line():
    res = make("chromium", "CHROMIUM=/path/to/nonexistent")
    assert res.returncode != 0
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert errors == [errors[0]] and "CHROMIUM=/path/to/nonexistent: no such file" in errors[0], \
        res.stderr
