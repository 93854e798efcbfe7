"""Checks of the rendered book as a reader's browser sees it (Debian's chromium, headless).

Used by tests/test_book.py, and from the command line to take screenshots::

    python tests/bookcheck.py build/smoke/_build/html --screenshots /tmp/shots

Every page is opened from ``file://`` while every request that is not ``file:``/``data:``/
``blob:``/``about:`` is recorded *and aborted* (the network is off as far as the page knows).

Each page's report also lists the TeX that reached the reader as text (see
:data:`TEX_LEAKS_JS`): the check that a page *has* typeset math cannot see a theorem whose
display broke into stray ``$`` and raw ``\\Gamma``.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import unquote, urlparse

from bs4 import BeautifulSoup

CHROMIUM = "/usr/bin/chromium"
LOCAL_SCHEMES = ("file", "data", "blob", "about")
SKIP_PAGES = {"genindex.html", "search.html"}

# TeX that reached the reader as text, collected in the browser once MathJax has finished
# (``MathJax.startup.promise``). Returns one ``[kind, snippet]`` per leak:
#
# * ``text``: a ``$`` or a TeX command (``\Gamma``, ``\mathrm``, ``\(``) in the page's text
#   outside rendered math. Excluded: ``mjx-container`` (the rendered math, with its hidden
#   assistive MathML), ``script``/``style``/``template``/``noscript``, and code (``pre``,
#   ``code``, highlighted blocks, code-cell inputs; text cell outputs are ``pre``). Prose has no
#   literal ``$`` and no backslash: every one left is TeX that MathJax never saw.
# * ``math-dollar``: a math element whose TeX source holds an unescaped ``$`` (a display that
#   swallowed the text around it: ``$$`` glued to a line inside a directive).
# * ``math-prose``: a math element whose TeX, once ``\text{..}``-like groups and commands are
#   removed, still holds four words in a row (prose typeset as math).
# * ``math-error``: an ``mjx-merror`` (MathJax shows the TeX source of a formula it cannot parse).
# * ``math-clipped``: a formula wider than the box that holds it, at the check's viewport
#   (1280 px): inline math is cut off (``span.math`` hides its overflow), a display scrolls.
TEX_LEAKS_JS = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const EXCLUDE = 'mjx-container, mjx-assistive-mml, script, style, template, noscript, '
    + 'pre, code, kbd, samp, textarea, svg, math, .highlight, div.cell_input';
  const LEAK = /\$|\\[A-Za-z]+|\\[()\[\]]/g;
  const clip = (s, i, j) => (i > 0 ? '…' : '') + s.slice(Math.max(0, i), j).replace(/\s+/g, ' ')
    + (j < s.length ? '…' : '');
  const out = [];
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT, {
    acceptNode: n => (n.parentElement && n.parentElement.closest(EXCLUDE))
      ? NodeFilter.FILTER_REJECT : NodeFilter.FILTER_ACCEPT});
  const BLOCK = 'p, li, dt, dd, td, th, h1, h2, h3, h4, h5, h6, caption, figcaption, div';
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const t = n.textContent;
    for (const m of t.matchAll(LEAK)) {
      // the context is the text of the paragraph around the leak, rendered math included
      const block = n.parentElement.closest(BLOCK) || n.parentElement;
      const range = document.createRange();
      range.setStart(block, 0);
      range.setEnd(n, m.index);
      const at = range.toString().length, bt = block.textContent;
      out.push(['text', m[0] + ' in "' + clip(bt, at - 50, at + m[0].length + 50) + '"']);
    }
  }
  const items = (window.MathJax && MathJax.startup && MathJax.startup.document
                 && MathJax.startup.document.math) ? Array.from(MathJax.startup.document.math)
                : [];
  for (const item of items) {
    const tex = String(item.math || '');
    const dollar = tex.search(/(^|[^\\])\$/);
    if (dollar >= 0) {
      out.push(['math-dollar', '"' + clip(tex, dollar - 40, dollar + 40) + '"']);
    }
    const bare = tex
      .replace(/\\(?:text\w*|mathrm|operatorname|mbox|hbox|label|tag)\s*\{[^{}]*\}/g, ' ')
      .replace(/\\[A-Za-z]+/g, ' ');
    const words = bare.match(/\b[A-Za-z]{2,}(?:[,.;]?\s+[A-Za-z]{2,}){3}\b/);
    if (words) {
      out.push(['math-prose', '"' + clip(tex, words.index - 20, words.index + 60) + '"']);
    }
  }
  for (const c of document.querySelectorAll('mjx-container')) {
    // the first box around the formula that does not let it overflow (span.math is
    // `overflow: hidden`, a display's mjx-container `overflow: auto`) must hold all of it
    const m = c.querySelector('mjx-math');
    const r = m ? m.getBoundingClientRect() : null;
    if (!r || r.width === 0) continue;                      // not laid out (collapsed)
    for (let e = c; e && e !== document.body; e = e.parentElement) {
      const how = getComputedStyle(e).overflowX;
      if (how === 'visible') continue;
      const box = e.getBoundingClientRect();
      const over = Math.round(Math.max(r.right - box.right, box.left - r.left));
      if (over > 2) {
        const tex = String((items.find(i => i.typesetRoot === c) || {}).math || c.textContent);
        out.push(['math-clipped', over + ' px ' + (how === 'hidden' ? 'cut off' : 'scrolled')
                  + ': "' + clip(tex.trim(), 0, 90) + '"']);
      }
      break;
    }
  }
  for (const err of document.querySelectorAll('mjx-merror')) {
    const tex = err.getAttribute('data-mjx-error') || err.textContent;
    out.push(['math-error', '"' + tex.slice(0, 120) + '"']);
  }
  return out;
}
"""


@dataclass
class PageReport:
    page: str
    external_requests: list[str] = field(default_factory=list)
    failed_requests: list[str] = field(default_factory=list)
    js_errors: list[str] = field(default_factory=list)
    math_expected: int = 0
    math_typeset: int = 0
    broken_images: list[str] = field(default_factory=list)
    n_images: int = 0
    tex_leaks: list[str] = field(default_factory=list)
    wide_code: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        out = []
        if self.external_requests:
            out.append(f"network requests: {self.external_requests[:5]}")
        if self.failed_requests:
            out.append(f"failed local requests: {self.failed_requests[:5]}")
        if self.js_errors:
            out.append(f"JavaScript errors: {self.js_errors[:3]}")
        if self.math_expected and not self.math_typeset:
            out.append(f"{self.math_expected} math elements but no mjx-container (MathJax did not run)")
        if self.broken_images:
            out.append(f"broken images: {self.broken_images[:5]}")
        if self.wide_code:
            out.append(f"code wider than the column at {DESKTOP_WIDTH} px: {self.wide_code[:3]}")
        return out


IMAGE_SUFFIXES = (".png", ".svg", ".jpg", ".jpeg", ".gif", ".webp", ".pdf")


def figure_problems(page: Path) -> list[str]:
    """Every image of a chapter's content must be a numbered figure: inside a ``<figure>`` whose
    ``<figcaption>`` has a caption number ("Fig. 3") and caption text, with an alt text that
    describes the content (not empty, not a file path). Returns one line per offending image."""
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    main = soup.find("main") or soup
    out = []
    for img in main.find_all("img"):
        src = img.get("src", "")
        alt = (img.get("alt") or "").strip()
        fig = img.find_parent("figure")
        cap = fig.find("figcaption") if fig else None
        number = cap.find(class_="caption-number") if cap else None
        text = cap.find(class_="caption-text") if cap else None
        if fig is None or number is None:
            out.append(f"{src}: not a numbered figure")
        elif text is None or len(text.get_text(strip=True)) < 20:
            out.append(f"{src}: caption missing or too short")
        if (not alt or "/" in alt or alt.lower().endswith(IMAGE_SUFFIXES) or len(alt) < 20):
            out.append(f"{src}: alt text {alt[:60]!r} does not describe the content")
    return out


def _is_redirect(path: Path) -> bool:
    head = path.read_text(encoding="utf-8")[:400].lower()
    return 'http-equiv="refresh"' in head


def html_pages(root: Path, redirects: bool = False) -> list[Path]:
    """The book's content pages (and, with ``redirects``, the meta-refresh stubs too)."""
    return sorted(p for p in root.rglob("*.html")
                  if p.name not in SKIP_PAGES and "_static" not in p.parts
                  and "_sources" not in p.parts and (redirects or not _is_redirect(p)))


def broken_internal_links(root: Path) -> list[str]:
    """Every relative link (and its #anchor) must resolve to a file (and an id) of the build."""
    ids: dict[Path, set[str]] = {}

    def ids_of(path: Path) -> set[str]:
        if path not in ids:
            soup = BeautifulSoup(path.read_text(encoding="utf-8"), "html.parser")
            ids[path] = {t["id"] for t in soup.find_all(id=True)}
        return ids[path]

    bad = []
    for page in html_pages(root, redirects=True):
        soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
        for meta in soup.find_all("meta", attrs={"http-equiv": True}):
            if meta["http-equiv"].lower() == "refresh" and "url=" in meta.get("content", ""):
                ref = meta["content"].split("url=", 1)[1].strip()
                if not (page.parent / urlparse(ref).path).exists():
                    bad.append(f"{page.relative_to(root)}: redirect -> {ref} (missing file)")
        for tag, attr in (("a", "href"), ("img", "src"), ("link", "href"), ("script", "src")):
            for el in soup.find_all(tag):
                ref = el.get(attr)
                if not ref or ref.startswith(("http://", "https://", "mailto:", "javascript:")):
                    continue
                url = urlparse(ref)
                if url.scheme in ("data",):
                    continue
                target = page if not url.path else (page.parent / unquote(url.path)).resolve()
                if not target.exists():
                    bad.append(f"{page.relative_to(root)}: {tag} -> {ref} (missing file)")
                    continue
                if tag == "a" and url.fragment and target.suffix == ".html":
                    if url.fragment not in ids_of(target):
                        bad.append(f"{page.relative_to(root)}: {ref} (missing anchor)")
    return bad


# Code shown on a page (cell inputs) whose longest line does not fit the text column at desktop
# width: measured with the lines unwrapped (the book's CSS wraps code and printed output, so at
# phone width they wrap instead of being cut; at desktop width no code line should need to;
# printed measurement lines may wrap).
DESKTOP_WIDTH = 1280
WIDE_CODE_JS = """() => {
  const out = [];
  for (const e of document.querySelectorAll('div.cell_input pre')) {
    const closed = e.closest('details:not([open])');       // a collapsed (hidden) cell
    if (closed || e.offsetParent === null || e.clientWidth === 0) continue;
    const old = e.style.whiteSpace;
    e.style.whiteSpace = 'pre';
    if (e.scrollWidth > e.clientWidth + 1) {
      const line = e.innerText.split('\\n').reduce((a, b) => (b.length > a.length ? b : a), '');
      out.push(line.trim().slice(0, 60));
    }
    e.style.whiteSpace = old;
  }
  return out;
}"""


def check_pages(root: Path, screenshots: Path | None = None,
                pages: list[Path] | None = None) -> list[PageReport]:
    from playwright.sync_api import sync_playwright

    reports = []
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-quic", "--allow-file-access-from-files"])
        context = browser.new_context(viewport={"width": DESKTOP_WIDTH, "height": 900})
        for page_path in pages or html_pages(root):
            rep = PageReport(str(page_path.relative_to(root)))
            page = context.new_page()

            def on_route(route, rep=rep):
                url = route.request.url
                if urlparse(url).scheme in LOCAL_SCHEMES:
                    route.continue_()
                else:
                    rep.external_requests.append(url)
                    route.abort()

            page.route("**/*", on_route)
            page.on("requestfailed", lambda r, rep=rep: rep.failed_requests.append(r.url)
                    if urlparse(r.url).scheme == "file" else None)
            page.on("pageerror", lambda e, rep=rep: rep.js_errors.append(str(e)))
            page.goto(page_path.resolve().as_uri(), wait_until="load")
            rep.math_expected = page.evaluate(
                "document.querySelectorAll('.math, span.math, div.math').length")
            if rep.math_expected:
                try:
                    page.wait_for_function(
                        "window.MathJax && window.MathJax.startup && "
                        "window.MathJax.startup.promise && "
                        "document.querySelectorAll('mjx-container').length > 0", timeout=20000)
                except Exception:  # noqa: BLE001 -- reported below as 'not typeset'
                    pass
            rep.math_typeset = page.evaluate("document.querySelectorAll('mjx-container').length")
            rep.tex_leaks = [f"{kind}: {what}" for kind, what in page.evaluate(TEX_LEAKS_JS)]
            rep.wide_code = page.evaluate(WIDE_CODE_JS)
            imgs = page.evaluate(
                "Array.from(document.images).map(i => [i.currentSrc || i.src, i.complete, "
                "i.naturalWidth])")
            rep.n_images = len(imgs)
            rep.broken_images = [src for src, complete, w in imgs if not complete or w == 0]
            if screenshots is not None:
                out = screenshots / (rep.page.replace("/", "__").removesuffix(".html") + ".png")
                out.parent.mkdir(parents=True, exist_ok=True)
                page.screenshot(path=str(out), full_page=True)
            page.close()
            reports.append(rep)
        browser.close()
    return reports


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html_root", type=Path)
    ap.add_argument("--screenshots", type=Path)
    ap.add_argument("--page", action="append", default=[],
                    help="only these pages (relative to html_root)")
    args = ap.parse_args()
    pages = [args.html_root / p for p in args.page] or None
    reports = check_pages(args.html_root, args.screenshots, pages)
    bad = 0
    for r in reports:
        status = "OK " if not (r.problems or r.tex_leaks) else "BAD"
        print(f"{status} {r.page}: math {r.math_typeset}/{r.math_expected}, images {r.n_images}"
              + ("".join(f"\n    {p}" for p in r.problems))
              + ("".join(f"\n    TeX leak {leak}" for leak in r.tex_leaks)))
        bad += bool(r.problems or r.tex_leaks)
    print(f"TeX leaks: {sum(len(r.tex_leaks) for r in reports)} on "
          f"{sum(bool(r.tex_leaks) for r in reports)} of {len(reports)} pages")
    links = broken_internal_links(args.html_root)
    for link in links:
        print("BROKEN LINK", link)
    return 1 if bad or links else 0


if __name__ == "__main__":
    sys.exit(main())
