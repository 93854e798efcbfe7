"""Checks of the rendered book as a reader's browser sees it (any Chromium, headless: see
:func:`chromium`), at desktop width, at phone width and in dark mode, with an axe-core scan.

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


# How a page must look in every view it is checked in (:data:`VIEWS`), run once MathJax is done.
# Returns {contrast: [...], clipped: [...], overflow: [...]}:
#
# * ``contrast``: visible text whose contrast with what is behind it is below WCAG 2 AA (4.5:1;
#   3:1 for large text, 24 px or 18.66 px bold). The text colour is composited with its alpha and
#   the opacity of every ancestor; the background is the stack of ancestors' background colours
#   down to the first opaque one (the canvas is white in light mode, the theme's colour in dark),
#   each translucent layer composited over the one below. Text over a background image (a
#   gradient) is measured against the colour under it. One line per distinct colour pair, with
#   the first text and where it sits.
# * ``clipped``: a formula (``mjx-container``) that does not fit the first box around it that
#   does not let content overflow (``overflow`` hidden or clip: cut off; auto or scroll: it
#   scrolls, and then that scrolling box must itself fit the boxes around it).
# * ``overflow``: the page is wider than the viewport (a reader scrolls the whole page sideways),
#   with the deepest elements that stick out.
VIEW_JS = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const W = document.documentElement.clientWidth;
  const parse = c => {
    const m = c.match(/rgba?\(([^)]+)\)/);
    if (!m) return [0, 0, 0, 0];
    const v = m[1].split(/[ ,\/]+/).filter(Boolean).map(Number);
    return [v[0], v[1], v[2], v.length > 3 ? v[3] : 1];
  };
  const over = (top, bottom) => {           // source-over compositing of two colours
    const a = top[3] + bottom[3] * (1 - top[3]);
    if (a === 0) return [0, 0, 0, 0];
    const ch = i => (top[i] * top[3] + bottom[i] * bottom[3] * (1 - top[3])) / a;
    return [ch(0), ch(1), ch(2), a];
  };
  const lum = c => {
    const f = v => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  };
  const ratio = (a, b) => {
    const [x, y] = [lum(a), lum(b)].sort((p, q) => q - p);
    return (x + 0.05) / (y + 0.05);
  };
  const canvas = () => {
    for (const e of [document.body, document.documentElement]) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) return over(c, [255, 255, 255, 1]);
    }
    return [255, 255, 255, 1];
  };
  const background = el => {
    const layers = [];
    for (let e = el; e; e = e.parentElement) {
      const c = parse(getComputedStyle(e).backgroundColor);
      if (c[3] > 0) layers.push(c);
      if (c[3] >= 1) break;
    }
    let bg = (layers.length && layers[layers.length - 1][3] >= 1) ? layers.pop() : canvas();
    while (layers.length) bg = over(layers.pop(), bg);
    return bg;
  };
  const opacity = el => {
    let o = 1;
    for (let e = el; e; e = e.parentElement) o *= parseFloat(getComputedStyle(e).opacity);
    return o;
  };
  const describe = el => {
    const parts = [];
    for (let e = el; e && parts.length < 3 && e !== document.body; e = e.parentElement) {
      parts.push(e.tagName.toLowerCase() + (e.classList.length ? '.' + Array.from(e.classList)
        .slice(0, 2).join('.') : ''));
    }
    return parts.reverse().join(' > ');
  };
  const SKIP = 'script, style, template, noscript, mjx-assistive-mml, svg, .visually-hidden, '
    + '.sr-only';
  const pairs = new Map();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  for (let n = walker.nextNode(); n; n = walker.nextNode()) {
    const text = n.textContent.trim();
    const el = n.parentElement;
    if (!text || !el || el.closest(SKIP)) continue;
    const st = getComputedStyle(el);
    if (st.visibility !== 'visible') continue;
    const range = document.createRange();
    range.selectNodeContents(n);
    const r = range.getBoundingClientRect();
    if (r.width < 2 || r.height < 2 || r.right <= 0 || r.left >= W) continue;   // not shown
    const o = opacity(el);
    if (o < 0.05) continue;                                                   // faded out
    const bg = background(el);
    const c = parse(st.color);
    const fg = over([c[0], c[1], c[2], c[3] * o], bg);
    const px = parseFloat(st.fontSize), bold = parseInt(st.fontWeight, 10) >= 700;
    const need = (px >= 24 || (bold && px >= 18.66)) ? 3 : 4.5;
    const got = ratio(fg, bg);
    if (got + 1e-9 < need) {
      const key = fg.map(Math.round).join(',') + '/' + bg.map(Math.round).join(',');
      if (!pairs.has(key)) {
        pairs.set(key, got.toFixed(2) + ':1 (needs ' + need + ':1), text rgb(' + fg.slice(0, 3)
          .map(Math.round).join(', ') + ') on rgb(' + bg.slice(0, 3).map(Math.round).join(', ')
          + '): "' + text.replace(/\s+/g, ' ').slice(0, 50) + '" in ' + describe(el));
      }
    }
  }
  const clipped = [];
  for (const c of document.querySelectorAll('mjx-container')) {
    const m = c.querySelector('mjx-math');
    let r = m ? m.getBoundingClientRect() : null;
    if (!r || r.width === 0) continue;                      // not laid out (collapsed)
    const tex = () => {
      const items = (window.MathJax && MathJax.startup && MathJax.startup.document)
        ? Array.from(MathJax.startup.document.math) : [];
      return String((items.find(i => i.typesetRoot === c) || {}).math || c.textContent)
        .trim().replace(/\s+/g, ' ').slice(0, 80);
    };
    for (let e = c; e && e !== document.body; e = e.parentElement) {
      const how = getComputedStyle(e).overflowX;
      if (how === 'visible') continue;
      const box = e.getBoundingClientRect();
      const out = Math.round(Math.max(r.right - box.right, box.left - r.left));
      if (out > 2 && (how === 'hidden' || how === 'clip')) {
        clipped.push(out + ' px cut off by ' + describe(e) + ': "' + tex() + '"');
        break;
      }
      r = box;                         // scrolls (or fits): the box must fit the boxes around it
    }
  }
  const overflow = [];
  const sw = document.documentElement.scrollWidth;
  if (sw > W + 1) {
    const free = e => {            // no box between it and the page clips or scrolls it
      for (let a = e.parentElement; a && a !== document.body; a = a.parentElement) {
        if (getComputedStyle(a).overflowX !== 'visible') return false;
      }
      return true;
    };
    const wide = Array.from(document.body.querySelectorAll('*')).filter(e => {
      const r = e.getBoundingClientRect();
      return r.width > 0 && r.right > W + 1 && free(e) && !Array.from(e.children).some(k =>
        k.getBoundingClientRect().right > W + 1 && free(k));
    });
    overflow.push('page is ' + sw + ' px wide in a ' + W + ' px viewport; sticking out: '
      + wide.slice(0, 3).map(e => describe(e) + ' "' + (e.textContent || '').trim()
        .replace(/\s+/g, ' ').slice(0, 40) + '"').join('; '));
  }
  return {contrast: Array.from(pairs.values()), clipped, overflow};
}
"""


@dataclass(frozen=True)
class View:
    """A way a reader sees the book: viewport width and colour mode."""
    name: str
    width: int
    theme: str                 # the theme's mode: "light" or "dark"


DESKTOP_WIDTH = 1280
PHONE_WIDTH = 400
VIEWS = (View("desktop", DESKTOP_WIDTH, "light"), View("phone", PHONE_WIDTH, "light"),
         View("dark", DESKTOP_WIDTH, "dark"))
# the theme (pydata-sphinx-theme) reads the reader's choice from localStorage before it paints
THEME_JS = "mode => { localStorage.setItem('mode', mode); localStorage.setItem('theme', mode); }"

# axe-core: the release vendored in tests/vendor/axe-core (its README: where from, how to update),
# run by axe-playwright-python, whose own bundled copy (4.12.1) lacks the later releases' rules
# (label-content-name-mismatch, WCAG 2.5.3, among them); AXE_SRI is the SHA-256 axe-core
# publishes for the file (sri-history.json), checked by tests/test_book.py
AXE_VERSION = "4.14.1"
AXE_JS = Path(__file__).resolve().parent / "vendor" / "axe-core" / "axe.min.js"
AXE_SRI = "sha256-KTSJmUUM3yhJqOcLeRL8LahahJ2jnA0NU5T1HUqe2Vw="
# axe-core impacts that fail the check; the others are listed in the report
AXE_FAILING = ("serious", "critical")
# Violations that come from the theme's own markup, which the book's CSS and configuration
# cannot change, with the reason: (rule id, CSS selector of the offending node) -> why.
AXE_EXCEPTIONS: dict[tuple[str, str], str] = {}


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
    # per view (:data:`VIEWS`): text below WCAG AA contrast, formulas cut off, page overflow
    low_contrast: dict[str, list[str]] = field(default_factory=dict)
    clipped_math: dict[str, list[str]] = field(default_factory=dict)
    page_overflow: dict[str, list[str]] = field(default_factory=dict)
    theme_not_applied: list[str] = field(default_factory=list)
    # axe-core: serious/critical violations (fail), moderate/minor (listed), and the
    # serious/critical ones matched by an explicit exception (listed with the reason)
    axe_failing: list[str] = field(default_factory=list)
    axe_other: list[str] = field(default_factory=list)
    axe_excepted: list[str] = field(default_factory=list)
    axe_version: str = ""       # the axe-core release that scanned the page (AXE_VERSION)

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
        for what, per_view in (("text below WCAG AA contrast", self.low_contrast),
                               ("math cut off", self.clipped_math),
                               ("horizontal page overflow", self.page_overflow)):
            for view, found in per_view.items():
                if found:
                    out.append(f"{what} ({view}): {found[:4]}")
        if self.theme_not_applied:
            out.append(f"colour mode not applied: {self.theme_not_applied}")
        if self.axe_failing:
            out.append(f"axe-core serious/critical violations: {self.axe_failing[:6]}")
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


def pages_without_title_or_language(root: Path) -> list[str]:
    """Every ``.html`` file under ``root`` -- what a web server hands out, ``_static`` and the
    redirects included -- that lacks ``<html lang>`` or a non-empty ``<title>`` (WCAG 3.1.1
    and 2.4.2): a theme's template fragment copied in as a static file is one."""
    bad = []
    for page in sorted(root.rglob("*.html")):
        text = page.read_text(encoding="utf-8", errors="replace")
        end = text.lower().find("</head>")
        head = BeautifulSoup(text if end < 0 else text[:end + len("</head>")], "html.parser")
        html, title = head.find("html"), head.find("title")
        missing = [what for what, ok in (("lang", html is not None and html.get("lang")),
                                         ("title", title is not None and title.get_text(strip=True)))
                   if not ok]
        if missing:
            bad.append(f"{page.relative_to(root)}: no {' and no '.join(missing)}")
    return bad


def viewed_pages(root: Path) -> list[Path]:
    """The pages the browser checks open: the content pages less the library's highlighted
    source listings (``_modules/``, written by sphinx.ext.viewcode, one per module: the same
    highlighted code blocks and theme as the chapters' cells, which are viewed, and about a
    hundred pages that would add minutes to every view). They are still checked for broken
    links and remote URLs (:func:`html_pages`)."""
    return [p for p in html_pages(root) if "_modules" not in p.relative_to(root).parts]


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


def chromium() -> str:
    """The browser the checks drive (``moe_book.pdf.find_chromium``: ``$CHROMIUM``, the usual
    names on PATH, Playwright's download). For tests: without one they are skipped, and say so,
    unless ``MOE_REQUIRE_BROWSER=1`` (CI), where that is a failure; a bad ``$CHROMIUM`` always
    fails, naming it."""
    import os

    import pytest

    from moe_book.pdf import NoBrowser, find_chromium

    try:
        return find_chromium()
    except NoBrowser as exc:
        if os.environ.get("MOE_REQUIRE_BROWSER") == "1":
            pytest.fail(f"MOE_REQUIRE_BROWSER=1: {exc}")
        pytest.skip(f"browser check skipped: {exc}")


def _axe_lines(violations: list[dict]) -> tuple[list[str], list[str], list[str]]:
    failing, other, excepted = [], [], []
    for v in violations:
        for node in v.get("nodes", []):
            target = " ".join(str(t) for t in node.get("target", []))
            line = f"{v.get('impact')}: {v['id']} ({v.get('help', '')}) at {target}"
            if v.get("impact") in AXE_FAILING:
                why = AXE_EXCEPTIONS.get((v["id"], target))
                (excepted if why else failing).append(line + (f" -- excepted: {why}" if why
                                                              else ""))
            else:
                other.append(line)
    return failing, other, excepted


def check_pages(root: Path, screenshots: Path | None = None,
                pages: list[Path] | None = None, views: tuple[View, ...] = VIEWS,
                axe: bool = True) -> list[PageReport]:
    """Open every page in every view; the first view also gets the network, math, image, code
    and (with ``axe``) axe-core checks, which do not depend on the width or the colour mode."""
    from playwright.sync_api import sync_playwright

    executable = chromium()
    runner = None
    if axe:
        from axe_playwright_python.sync_playwright import Axe

        runner = Axe(axe_script=AXE_JS.read_text(encoding="utf-8"))
    pages = pages or viewed_pages(root)
    reports = {page_path: PageReport(str(page_path.relative_to(root))) for page_path in pages}
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=executable,
            args=["--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run",
                  "--disable-quic", "--allow-file-access-from-files"])
        for n_view, view in enumerate(views):
            context = browser.new_context(viewport={"width": view.width, "height": 900},
                                          color_scheme=view.theme)
            context.add_init_script(f"({THEME_JS})({view.theme!r})")
            first = n_view == 0
            for page_path in pages:
                rep = reports[page_path]
                page = context.new_page()

                def on_route(route, rep=rep):
                    url = route.request.url
                    if urlparse(url).scheme in LOCAL_SCHEMES:
                        route.continue_()
                    else:
                        if url not in rep.external_requests:
                            rep.external_requests.append(url)
                        route.abort()

                page.route("**/*", on_route)
                page.on("requestfailed", lambda r, rep=rep: rep.failed_requests.append(r.url)
                        if urlparse(r.url).scheme == "file" else None)
                page.on("pageerror", lambda e, rep=rep, v=view.name:
                        rep.js_errors.append(f"{v}: {e}"))
                page.goto(page_path.resolve().as_uri(), wait_until="load")
                expected = page.evaluate(
                    "document.querySelectorAll('.math, span.math, div.math').length")
                if expected:
                    try:
                        page.wait_for_function(
                            "window.MathJax && window.MathJax.startup && "
                            "window.MathJax.startup.promise && "
                            "document.querySelectorAll('mjx-container').length > 0",
                            timeout=20000)
                    except Exception:  # noqa: BLE001 -- reported below as 'not typeset'
                        pass
                theme = page.evaluate("document.documentElement.dataset.theme || ''")
                if theme and theme != view.theme:   # a bare page (a control) has no theme
                    rep.theme_not_applied.append(f"{view.name}: data-theme={theme!r}")
                found = page.evaluate(VIEW_JS)
                rep.low_contrast[view.name] = found["contrast"]
                rep.clipped_math[view.name] = found["clipped"]
                rep.page_overflow[view.name] = found["overflow"]
                if first:
                    rep.math_expected = expected
                    rep.math_typeset = page.evaluate(
                        "document.querySelectorAll('mjx-container').length")
                    rep.tex_leaks = [f"{kind}: {what}"
                                     for kind, what in page.evaluate(TEX_LEAKS_JS)]
                    rep.wide_code = page.evaluate(WIDE_CODE_JS)
                    imgs = page.evaluate(
                        "Array.from(document.images).map(i => [i.currentSrc || i.src, "
                        "i.complete, i.naturalWidth])")
                    rep.n_images = len(imgs)
                    rep.broken_images = [src for src, complete, w in imgs
                                         if not complete or w == 0]
                    if runner is not None:
                        # preload off: axe would fetch every stylesheet's @import again,
                        # resolved against the page rather than the sheet (a request for a
                        # file that does not exist, which the check above would report)
                        result = runner.run(page, options={"resultTypes": ["violations"],
                                                           "preload": False})
                        rep.axe_failing, rep.axe_other, rep.axe_excepted = _axe_lines(
                            result.response.get("violations", []))
                        rep.axe_version = result.response.get("testEngine", {}).get("version", "")
                if screenshots is not None:
                    stem = rep.page.replace("/", "__").removesuffix(".html")
                    out = screenshots / f"{stem}{'' if first else '-' + view.name}.png"
                    out.parent.mkdir(parents=True, exist_ok=True)
                    page.screenshot(path=str(out), full_page=True)
                page.close()
            context.close()
        browser.close()
    return list(reports.values())


def accessibility_report(reports: list[PageReport], edition: str) -> str:
    """The axe-core findings that do not fail the check (moderate, minor) and the excepted
    ones, page by page: what a maintainer reads to improve the book further."""
    versions = sorted({r.axe_version for r in reports if r.axe_version})
    lines = [f"# axe-core {', '.join(versions) or '(not run)'} findings, {edition} edition "
             f"({len(reports)} pages)",
             f"# failing impacts: {', '.join(AXE_FAILING)}; listed below: the others, and "
             "the explicit exceptions"]
    for r in reports:
        for line in r.axe_other + r.axe_excepted:
            lines.append(f"{r.page}: {line}")
    lines.append(f"# {sum(len(r.axe_other) for r in reports)} moderate/minor, "
                 f"{sum(len(r.axe_excepted) for r in reports)} excepted, "
                 f"{sum(len(r.axe_failing) for r in reports)} failing")
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html_root", type=Path)
    ap.add_argument("--screenshots", type=Path)
    ap.add_argument("--page", action="append", default=[],
                    help="only these pages (relative to html_root)")
    ap.add_argument("--no-axe", action="store_true", help="skip the axe-core scan")
    args = ap.parse_args()
    pages = [args.html_root / p for p in args.page] or None
    reports = check_pages(args.html_root, args.screenshots, pages, axe=not args.no_axe)
    bad = 0
    for r in reports:
        status = "OK " if not (r.problems or r.tex_leaks) else "BAD"
        print(f"{status} {r.page}: math {r.math_typeset}/{r.math_expected}, images {r.n_images}"
              + ("".join(f"\n    {p}" for p in r.problems))
              + ("".join(f"\n    TeX leak {leak}" for leak in r.tex_leaks))
              + ("".join(f"\n    axe {line}" for line in r.axe_other + r.axe_excepted)))
        bad += bool(r.problems or r.tex_leaks)
    print(f"TeX leaks: {sum(len(r.tex_leaks) for r in reports)} on "
          f"{sum(bool(r.tex_leaks) for r in reports)} of {len(reports)} pages")
    links = broken_internal_links(args.html_root)
    for link in links:
        print("BROKEN LINK", link)
    return 1 if bad or links else 0


if __name__ == "__main__":
    sys.exit(main())
