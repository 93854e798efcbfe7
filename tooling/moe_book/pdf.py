"""The book as one PDF (``make pdf``): the full edition and the student edition, built offline.

Route: Sphinx's ``singlehtml`` builder renders the staged book as one HTML page in which every
cross-reference (theorem, figure, equation, exercise, citation) is an ``#anchor``; headless
Chromium (the browser the tests already drive) loads that page, lets MathJax typeset every
formula, and prints it; pypdf then adds the bookmarks and the metadata. Chromium turns each
``#anchor`` link into an internal PDF link, so references stay clickable in the PDF.

Why not LaTeX (``jupyter-book build --builder pdflatex``)? It would need a TeX distribution of
several hundred megabytes that the project does not otherwise use, SVG figures converted for
it, and every MathJax macro and MyST/sphinx-proof/sphinx-exercise construct to survive a second
renderer -- a book that typesets in the browser can still fail in LaTeX. Printing the page that
the readers see reuses the one renderer the book is already checked with (tests/bookcheck.py).

Steps, for one edition of profile P (work files under ``build/P/pdf/<edition>/``):

1. stage the edition's sources (:func:`moe_book.staging.stage`) and build them with the
   ``singlehtml`` builder. The build reads a copy of the staged ``_config.yml`` that adds this
   module as a Sphinx extension (:func:`setup`): ``sphinx-proof`` and ``sphinx-exercise``
   register node handlers for ``singlehtml``, which hides every handler registered for
   ``html`` alone (myst-nb's hidden code cells), and the build would stop on them;
2. rewrite the page for print (:func:`print_page`): links between pages become ``#anchor``
   links, links to downloads are dropped (a file link is dead in a PDF), a cover is added;
3. print with Chromium (:func:`print_pdf`): light mode, print stylesheet
   (``book/_static/print.css``: no navigation, full width, code wraps, figures kept whole,
   chapters on new pages, collapsed outputs open, collapsed code left out), display formulas
   and tables too wide for the paper shrunk to fit.
   The printed contents (parts, chapters, sections) link to each heading, so Chromium writes a
   named destination for each; their pages are read back and printed into the contents, and
   the page printed again until the numbers agree;
4. bookmarks from the same contents, metadata (title, author from ``_config.yml``, profile,
   edition, commit), written atomically to ``build/P/pdf/moe-routing-companion[-student].pdf``.

Usage (the Makefile's ``pdf`` target, after ``execute``)::

    python -m moe_book.pdf --profile smoke [--edition full|student|both]
"""

from __future__ import annotations

import argparse
import html
import io
import logging
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from moe_routing._internal.atomic import atomic_write_bytes, atomic_write_text

from .project import PipelineError, Project, find_root, pdf_path
from .staging import EDITIONS, stage

# Where a Chromium is looked for (:func:`find_chromium`), in this order.
CHROMIUM_ENV = "CHROMIUM"
CHROMIUM_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable")
MARGIN_MM = {"top": 17, "bottom": 17, "left": 15, "right": 15}
PAPER = {"format": "A4", "margin": {side: f"{mm}mm" for side, mm in MARGIN_MM.items()}}
SCALE = 0.8          # CSS px -> paper: 16 px body text prints at 9.6 pt, lines of ~95 characters
# the width of the print layout in CSS px (A4 is 210 mm wide; 96 px to the inch)
TEXT_WIDTH_PX = round((210 - MARGIN_MM["left"] - MARGIN_MM["right"]) / 25.4 * 96 / SCALE)
# Chromium's print options. ``tagged``: a tagged PDF (a structure tree of headings,
# paragraphs, lists, tables, figures with their alt text, and /MarkInfo /Marked true), which a
# screen reader follows and from which a reader's PDF viewer reflows the text on a small screen;
# untagged, the PDF would be glyphs placed on a page.
PRINT_OPTIONS = {**PAPER, "scale": SCALE, "print_background": True, "tagged": True,
                 "prefer_css_page_size": False}
MAX_PASSES = 3       # prints until the page numbers in the contents agree with the PDF
LOCAL_SCHEMES = ("file", "data", "blob", "about")
# Skia's PDFs declare a trailer /Size pypdf finds short; it reads them right and says so each time
logging.getLogger("pypdf").setLevel(logging.ERROR)


class NoBrowser(PipelineError):
    """No Chromium on this host; the message says what to install (tests skip on it, unless a
    browser is required)."""


def _is_executable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def _playwright_chromium() -> str | None:
    """The Chromium that ``python -m playwright install chromium`` downloaded for the installed
    Playwright, if it did (asked of Playwright itself: the folder names change by version)."""
    try:
        from playwright.sync_api import sync_playwright

        with sync_playwright() as p:
            path = p.chromium.executable_path
    except Exception:  # noqa: BLE001 -- no driver, or inside an event loop: not available
        return None
    return path if path and _is_executable(Path(path)) else None


def find_chromium(environ: Mapping[str, str] | None = None) -> str:
    """The Chromium that the browser checks (tests/bookcheck.py) and the PDF print drive.

    Any Chromium will do (Debian's, Ubuntu's, Google Chrome, Playwright's download): the book is
    checked and printed through the DevTools protocol that all of them speak. In this order:

    1. ``$CHROMIUM``, an executable's path: when it is set it is the one used, and a path that is
       not an executable file is an error naming it (a mistyped path must not silently fall
       back to another browser that the reader did not choose);
    2. the usual names on ``$PATH``: :data:`CHROMIUM_NAMES`;
    3. Playwright's own downloaded Chromium.

    Raises :class:`NoBrowser` (saying what to install) when there is none, and
    :class:`PipelineError` for a bad ``$CHROMIUM``.
    """
    env = os.environ if environ is None else environ
    chosen = env.get(CHROMIUM_ENV, "")
    if chosen:
        path = Path(chosen).expanduser()
        if not path.exists():
            raise PipelineError(f"{CHROMIUM_ENV}={chosen}: no such file; {CHROMIUM_ENV} must be "
                                "the path of a Chromium or Chrome executable (unset it to "
                                f"search PATH for {', '.join(CHROMIUM_NAMES)})")
        if not _is_executable(path):
            raise PipelineError(f"{CHROMIUM_ENV}={chosen}: not an executable file; "
                                f"{CHROMIUM_ENV} must be the path of a Chromium or Chrome "
                                "executable")
        return str(path)
    for name in CHROMIUM_NAMES:
        found = shutil.which(name, path=env.get("PATH", os.defpath))
        if found:
            return found
    found = _playwright_chromium()
    if found:
        return found
    raise NoBrowser("no Chromium found (looked for $CHROMIUM, then "
                    f"{', '.join(CHROMIUM_NAMES)} on PATH, then Playwright's download): install "
                    "Debian's package 'chromium' (apt-get install chromium), or run "
                    "'python -m playwright install chromium', or set CHROMIUM=/path/to/chrome")



# --------------------------------------------------------------------------------------------
# 1. Sphinx: the single-page build


def _share_html_handlers(app) -> None:
    """Give ``singlehtml`` the ``html`` node handlers it lacks (see the module docstring)."""
    handlers = app.registry.translation_handlers
    if app.builder.name == "singlehtml" and "singlehtml" in handlers:
        for node, pair in handlers.get("html", {}).items():
            handlers["singlehtml"].setdefault(node, pair)


def setup(app):
    """Sphinx extension, loaded by the PDF's single-page build only."""
    app.connect("builder-inited", _share_html_handlers)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


#: where the web edition's table of contents has pages that the PDF leaves out: the library
#: reference (``api/``), one page of signatures per package, to look things up on screen, with
#: links to the source pages that only the web edition has
WEB_ONLY = ("api/",)


def print_toc(toc: dict) -> dict:
    """The table of contents ``toc`` of the printed book: without the :data:`WEB_ONLY` pages
    (and without a part left empty by them).  A new dict."""
    def printed(entry: dict) -> bool:
        return not str(entry.get("file", "")).startswith(WEB_ONLY)

    parts = []
    for part in toc.get("parts", []):
        chapters = [c for c in part.get("chapters", []) if printed(c)]
        if chapters:
            parts.append({**part, "chapters": chapters})
    return {**toc, "parts": parts}


def singlehtml(src: Path, work: Path) -> Path:
    """Build the staged book ``src`` as one page (its table of contents less the
    :data:`WEB_ONLY` pages, :func:`print_toc`); return the page Sphinx wrote."""
    cfg = yaml.safe_load((src / "_config.yml").read_text(encoding="utf-8"))
    sphinx = cfg.setdefault("sphinx", {})
    # the config is read from ``work``: paths that it names relative to itself become absolute
    sphinx["local_extensions"] = {name: str((src / path).resolve())
                                  for name, path in (sphinx.get("local_extensions") or {}).items()}
    sphinx["extra_extensions"] = [*(sphinx.get("extra_extensions") or []), "moe_book.pdf"]
    config = work / "_config.yml"
    atomic_write_text(config, yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
    toc = work / "_toc.yml"
    atomic_write_text(toc, yaml.safe_dump(print_toc(yaml.safe_load(
        (src / "_toc.yml").read_text(encoding="utf-8"))), sort_keys=False, allow_unicode=True))
    res = subprocess.run([sys.executable, "-m", "moe_book.jupyter_book", "build", str(src),
                          "--builder", "singlehtml", "--config", str(config), "--toc", str(toc),
                          "--path-output", str(work), "-W", "--keep-going", "-q"],
                         capture_output=True, text=True)
    if res.returncode != 0:
        raise PipelineError(f"the single-page build of {src} failed:\n{res.stdout[-3000:]}"
                            f"\n{res.stderr[-3000:]}")
    root = yaml.safe_load((src / "_toc.yml").read_text(encoding="utf-8"))["root"]
    return work / "_build" / "singlehtml" / f"{root}.html"


# --------------------------------------------------------------------------------------------
# 2. The page to print

_A_TAG = re.compile(r"<a\s[^>]*>", re.S)
_HREF = re.compile(r"""\shref=(["'])([^"']*)\1""")
_ID = re.compile(r"""\sid=(["'])([^"']+)\1""")
_DOC = re.compile(r"""<span id="document-([^"]+)"></span>""")


def relink(text: str, root: str) -> str:
    """Links to other pages of the book become links inside the one page.

    Sphinx writes the single page's links as ``ROOT.html#anchor``, and executed cells' HTML
    outputs keep their own page-relative links (``../generated/ledger.html#row``): a link to
    a page of the book goes to the anchor (or to the page's start); links to downloads and
    other local files are dropped, since a file link is dead once the PDF is elsewhere."""
    ids = {m.group(2) for m in _ID.finditer(text)}
    docs = set(_DOC.findall(text)) | {root}

    def target(href: str) -> str | None:
        if href.startswith("#") or re.match(r"^[a-z][a-z0-9+.-]*:", href, re.I):
            return href
        path, _, frag = href.partition("#")
        while path.startswith(("../", "./")):
            path = path.split("/", 1)[1]
        doc = path.removesuffix(".html") if path.endswith(".html") else None
        if doc is None or doc not in docs:
            return None
        if frag and frag in ids:
            return "#" + frag
        return "#" if doc == root else f"#document-{doc}"

    def fix_tag(m: re.Match) -> str:
        tag = m.group(0)
        h = _HREF.search(tag)
        if not h:
            return tag
        new = target(html.unescape(h.group(2)))
        if new is None:
            return tag[:h.start()] + tag[h.end():]
        return tag[:h.start()] + f' href="{html.escape(new)}"' + tag[h.end():]

    return _A_TAG.sub(fix_tag, text)


@dataclass(frozen=True)
class Meta:
    title: str
    author: str
    profile: str
    edition: str
    commit: str

    @property
    def subject(self) -> str:
        what = "student edition (exercises without solutions)" if self.edition == "student" \
            else "full edition"
        return f"{what}; executed with the {self.profile!r} profile; commit {self.commit}"


def cover(meta: Meta) -> str:
    e = html.escape
    return (f'<section class="pdf-cover"><h1>{e(meta.title)}</h1>'
            f'<p class="pdf-author">{e(meta.author)}</p>'
            f'<p class="pdf-provenance">{e(meta.subject)}<br>built {time.strftime("%Y-%m-%d")}'
            f"</p></section>")


def print_page(page: Path, root: str, meta: Meta) -> Path:
    """Write ``print.html`` beside the single page (so that ``_static/`` and ``_images/``
    resolve as they do for it): links made internal, a cover before the contents."""
    text = relink(page.read_text(encoding="utf-8"), root)
    marker = '<div id="jb-print-docs-body" class="onlyprint">'
    if marker not in text:
        raise PipelineError(f"{page}: no {marker!r} (has the theme changed?)")
    text = text.replace(marker, marker + cover(meta), 1)
    out = page.parents[root.count("/")] / "print.html"
    atomic_write_text(out, text)
    return out


# --------------------------------------------------------------------------------------------
# 3. Printing

# Runs in the page once it is loaded: waits for MathJax and the images, switches to light mode,
# marks parts and chapters for the print stylesheet, and writes the printed contents. Returns
# the contents as [level, title, anchor] (0 part, 1 chapter, 2 section).
PREPARE_JS = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  for (const img of document.images) img.loading = 'eager';
  await Promise.all(Array.from(document.images).map(i => i.decode().catch(() => null)));
  const root = document.documentElement;
  root.dataset.theme = 'light'; root.dataset.mode = 'light';
  root.classList.add('pdf-book');
  // collapsed outputs (tables the text refers to) are printed, collapsed code is not
  for (const d of document.querySelectorAll('details')) {
    d.open = !d.matches('details.hide.above-input');
  }

  // a heading's text (math as the text of its MathML), and a unique anchor for it: section
  // ids repeat across the one page ("exercises" in every chapter), so the contents link to
  // an id given to the heading itself
  const title = h => {
    const c = h.cloneNode(true);
    c.querySelectorAll('.headerlink').forEach(e => e.remove());
    for (const m of c.querySelectorAll('mjx-container')) {
      const mml = m.querySelector('mjx-assistive-mml');
      m.replaceWith(mml ? mml.textContent : '');
    }
    return c.textContent.replace(/\s+/g, ' ').trim();
  };
  let serial = 0;
  const entry = (level, sec) => {
    const h = sec.querySelector(':scope > h1, :scope > h2, :scope > h3, :scope > h4');
    if (!h) return null;
    h.id = h.id || 'pdf-' + (++serial);
    return [level, title(h), h.id];
  };
  const sections = sec => Array.from(sec.querySelectorAll(':scope > section'))
    .map(s => entry(2, s)).filter(e => e && e[1]);

  const article = document.querySelector('article.bd-article');
  const first = article.querySelector('section');
  const entries = [entry(1, first), ...sections(first)];
  // the parts' captions, from the navigation sidebar (the theme's own print contents lists
  // them too, but not when the first part holds only a generated page)
  const navCaptions = document.querySelectorAll('.bd-sidebar-primary nav.bd-docs-nav p.caption');
  const captions = Array.from(navCaptions.length ? navCaptions
                              : document.querySelectorAll('#jb-print-toc p.caption'))
    .map(p => p.textContent.trim());
  const wrappers = Array.from(article.querySelectorAll('div.toctree-wrapper'));
  const parts = wrappers.length === captions.length;
  wrappers.forEach((w, i) => {
    if (parts) {
      const div = document.createElement('div');
      div.className = 'pdf-part'; div.id = 'pdf-part-' + (i + 1);
      const h = document.createElement('h1'); h.textContent = captions[i];
      div.appendChild(h); w.before(div);
      entries.push([0, captions[i], div.id]);
    }
    for (const span of w.querySelectorAll(':scope > span[id^="document-"]')) {
      const sec = span.nextElementSibling;
      if (!sec || sec.tagName !== 'SECTION') continue;
      sec.classList.add('pdf-chapter-start');
      sec.prepend(span);       // links to the page's start land on the chapter's first page
      entries.push(entry(1, sec), ...sections(sec));
    }
  });

  const found = entries.filter(e => e && e[1]);
  const toc = document.querySelector('#jb-print-toc');
  if (!toc) throw new Error('no #jb-print-toc in the page (has the theme changed?)');
  const nav = document.createElement('nav');
  nav.className = 'pdf-toc';
  const ol = document.createElement('ol');
  for (const [level, text, id] of found) {
    const li = document.createElement('li');
    li.className = ['pdf-toc-part', 'pdf-toc-chapter', 'pdf-toc-section'][level];
    const a = document.createElement('a');
    a.href = '#' + id;
    const t = document.createElement('span'); t.className = 'pdf-toc-title'; t.textContent = text;
    const n = document.createElement('span'); n.className = 'pdf-toc-page';
    n.dataset.target = id; n.textContent = '000';
    a.append(t, n); li.appendChild(a); ol.appendChild(li);
  }
  nav.appendChild(ol);
  toc.querySelectorAll(':scope > nav').forEach(e => e.remove());
  toc.appendChild(nav);
  return found;
}
"""

# Under the print layout: display formulas and tables wider than the text are shrunk to fit
# (MathJax 3 does not break lines; a clipped formula is worse than a smaller one). Returns what
# still does not fit, and broken images, as problems.
FIT_JS = r"""
() => {
  const article = document.querySelector('article.bd-article');
  const right = article.getBoundingClientRect().right;
  const shrunk = new Set();
  const fit = (el, need, have) => {
    if (have > 0 && need > have + 1) {
      const px = parseFloat(getComputedStyle(el).fontSize);
      el.style.fontSize = (px * Math.max(0.5, (have - 2) / need)).toFixed(2) + 'px';
      shrunk.add(el);
    }
  };
  for (let pass = 0; pass < 3; pass++) {      // widths do not scale exactly with the font size
    for (const c of document.querySelectorAll('mjx-container[display="true"]')) {
      fit(c, c.scrollWidth, c.clientWidth);
    }
    for (const t of article.querySelectorAll('table')) {
      const r = t.getBoundingClientRect();
      fit(t, r.width, right - r.left);
    }
  }
  const problems = [];
  for (const el of article.querySelectorAll('pre, mjx-container, table, img, figure')) {
    const r = el.getBoundingClientRect();
    if (r.width > 0 && r.right > right + 2) {
      problems.push('too wide by ' + Math.round(r.right - right) + ' px: ' + el.tagName.toLowerCase()
        + ' "' + (el.alt || el.textContent || '').replace(/\s+/g, ' ').slice(0, 70) + '"');
    }
  }
  for (const img of document.images) {
    if (img.offsetParent && (!img.complete || img.naturalWidth === 0)) {
      problems.push('broken image: ' + img.src);
    }
  }
  for (const e of document.querySelectorAll('mjx-merror')) {
    problems.push('formula MathJax cannot parse: ' + (e.getAttribute('data-mjx-error') || ''));
  }
  return {shrunk: shrunk.size, problems};
}
"""


@dataclass
class Printed:
    pdf: bytes
    entries: list[tuple[int, str, str]]
    pages: dict[str, int]                    # anchor -> 0-based page of its destination
    tops: dict[str, float] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)
    passes: int = 0
    shrunk: int = 0                          # formulas and tables shrunk to the text width


def destinations(pdf: bytes) -> tuple[dict[str, int], dict[str, float]]:
    """Named destinations (one for every target of an internal link) -> page and top."""
    from pypdf import PdfReader

    reader = PdfReader(io.BytesIO(pdf))
    pages, tops = {}, {}
    for name, dest in reader.named_destinations.items():
        key = str(name).lstrip("/")
        pages[key] = reader.get_destination_page_number(dest)
        top = dest.get("/Top")
        if top is not None:
            tops[key] = float(top)
    return pages, tops


def _template(text: str, align: str) -> str:
    return (f'<div style="font-size:7.5pt;font-family:sans-serif;color:#555;width:100%;'
            f'padding:0 15mm;text-align:{align}">{text}</div>')


def print_pdf(page: Path, meta: Meta) -> Printed:
    from playwright.sync_api import sync_playwright

    chromium = find_chromium()
    external: list[str] = []
    errors: list[str] = []
    header = _template(html.escape(meta.title), "left")
    footer = _template('<span class="pageNumber"></span> / <span class="totalPages"></span>',
                       "center")
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=[
            "--no-sandbox", "--disable-gpu", "--disable-background-networking",
            "--disable-component-update", "--disable-sync", "--no-first-run",
            "--allow-file-access-from-files"])
        try:
            ctx = browser.new_context(color_scheme="light", viewport={"width": 1000, "height": 1400})
            tab = ctx.new_page()

            def route(r):
                if r.request.url.split(":", 1)[0] in LOCAL_SCHEMES:
                    r.continue_()
                else:                        # the book is offline: nothing may be fetched
                    external.append(r.request.url)
                    r.abort()

            tab.route("**/*", route)
            tab.on("pageerror", lambda e: errors.append(str(e)))
            tab.goto(page.resolve().as_uri(), wait_until="load", timeout=120_000)
            entries = [tuple(e) for e in tab.evaluate(PREPARE_JS)]
            tab.emulate_media(media="print", color_scheme="light")
            tab.set_viewport_size({"width": TEXT_WIDTH_PX, "height": 1400})
            fitted = tab.evaluate(FIT_JS)
            opts = dict(**PRINT_OPTIONS, display_header_footer=True, header_template=header,
                        footer_template=footer)
            numbers: dict[str, int] = {}
            passes = 0
            while True:
                passes += 1
                pdf = tab.pdf(**opts)
                pages, tops = destinations(pdf)
                found = {a: pages[a] for _, _, a in entries if a in pages}
                if found == numbers:
                    break
                if passes == MAX_PASSES:
                    raise PipelineError(f"{page}: the contents' page numbers did not settle in "
                                        f"{MAX_PASSES} prints")
                numbers = found
                tab.evaluate("""nums => { for (const s of document.querySelectorAll(
                    '.pdf-toc-page')) s.textContent = nums[s.dataset.target] ?? ''; }""",
                             {a: str(i + 1) for a, i in numbers.items()})
        finally:
            browser.close()
    problems = list(fitted["problems"])
    problems += [f"network request (aborted): {u}" for u in external]
    problems += [f"JavaScript error: {e}" for e in errors]
    missing = [a for _, _, a in entries if a not in pages]
    problems += [f"no destination for the contents entry #{a}" for a in missing]
    return Printed(pdf, entries, pages, tops, problems, passes, fitted["shrunk"])


# --------------------------------------------------------------------------------------------
# 4. Bookmarks, metadata, the file


def finish(printed: Printed, meta: Meta) -> bytes:
    from pypdf import PdfReader, PdfWriter
    from pypdf.generic import Fit

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(printed.pdf)))
    parents: dict[int, object] = {}
    for level, title, anchor in printed.entries:
        if anchor not in printed.pages:
            continue
        top = printed.tops.get(anchor)
        fit = Fit.xyz(left=0, top=top) if top is not None else Fit.fit()
        parent = next((parents[k] for k in range(level - 1, -1, -1) if k in parents), None)
        item = writer.add_outline_item(title=title, page_number=printed.pages[anchor],
                                       parent=parent, fit=fit)
        parents[level] = item
        for deeper in [k for k in parents if k > level]:
            del parents[deeper]
    writer.page_mode = "/UseOutlines"
    writer.add_metadata({"/Title": meta.title, "/Author": meta.author, "/Subject": meta.subject,
                         "/Keywords": f"mixture of experts; routing; profile {meta.profile}; "
                                      f"{meta.edition} edition; commit {meta.commit}",
                         "/Creator": "moe_book.pdf (Sphinx singlehtml printed by Chromium)"})
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def build(project: Project, profile: str, edition: str) -> tuple[Path, Printed]:
    """Build one edition's PDF; returns its path and what the print reported."""
    from moe_routing._internal.runtime import git_commit

    src = stage(project, profile, edition)
    work = project.build_dir(profile) / "pdf" / edition
    work.mkdir(parents=True, exist_ok=True)
    single = singlehtml(src, work)
    cfg = yaml.safe_load((src / "_config.yml").read_text(encoding="utf-8"))
    root = yaml.safe_load((src / "_toc.yml").read_text(encoding="utf-8"))["root"]
    meta = Meta(cfg["title"], cfg.get("author", ""), profile, edition, git_commit(project.root))
    printed = print_pdf(print_page(single, root, meta), meta)
    out = pdf_path(project, profile, edition)
    atomic_write_bytes(out, finish(printed, meta))
    return out, printed


def main(argv: list[str] | None = None) -> int:
    from pypdf import PdfReader

    from moe_routing._internal.runtime import PROFILES

    ap = argparse.ArgumentParser(prog="python -m moe_book.pdf", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--profile", default="default")
    ap.add_argument("--edition", default="both", help="full | student | both")
    ap.add_argument("--which-chromium", action="store_true",
                    help="print the Chromium that would be used and exit (3: none found, "
                         "2: a bad $CHROMIUM); the Makefile's `chromium` rule")
    args = ap.parse_args(argv)
    if args.which_chromium:
        try:
            print(find_chromium())
            return 0
        except NoBrowser as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 3
        except PipelineError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    try:
        if args.profile not in PROFILES:
            raise PipelineError(f"unknown PROFILE {args.profile!r}; accepted: {', '.join(PROFILES)}")
        if args.edition not in (*EDITIONS, "both"):
            raise PipelineError(f"unknown edition {args.edition!r}; accepted: "
                                f"{', '.join(EDITIONS)}, both")
        project = Project(find_root())
        status = 0
        for edition in EDITIONS if args.edition == "both" else (args.edition,):
            t0 = time.perf_counter()
            out, printed = build(project, args.profile, edition)
            for problem in printed.problems:
                print(f"warning: {edition} PDF: {problem}", file=sys.stderr)
            status |= bool(printed.problems)
            print(f"PDF ({edition} edition): {out.relative_to(project.root)} "
                  f"({out.stat().st_size // 1024} KiB, "
                  f"{len(PdfReader(out).pages)} pages, {printed.shrunk} formulas or tables "
                  f"shrunk to fit, {printed.passes} prints, {time.perf_counter() - t0:.0f} s)")
        return status
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
