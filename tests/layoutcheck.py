"""Two checks of rendered pages that :mod:`bookcheck` does not make (used by
tests/test_book_layout.py, and from the command line)::

    python tests/layoutcheck.py book/_build/html [--page generated/ledger.html]

* **Tables that fit** (in a headless Chromium, :func:`table_problems`): at a given viewport, no
  table of the text column is wider than the column (its box, or what it holds when it scrolls
  inside the theme's ``pst-scrollable-table-container``), and no table cell is clipped (shown
  narrower than it is by a box that hides or scrolls its overflow, or with content wider than
  itself): a column cut to 35 px is unreadable even when the page does not scroll sideways.
  The report also gives the page's height and the heights of its tables, for a page whose
  height is bounded (the reproduction ledger's).
* **No raw TeX or pseudo-TeX as text** (static, :func:`pseudo_tex`): TeX that reached a reader
  as text outside math and code -- ``_{``, ``^{``, ``^(``, a ``\\command`` -- on any page; and in a
  claim (``.ledger-claim``: the ledger's, the Findings page's, a chapter's verdict box), a
  heading, a table header or a box's title also the plain-text notation ``λ_min``, ``C_m``,
  ``L_τ``, ``t^α`` that only TeX would typeset (Unicode has ``λₘᵢₙ``, ``Cₘ``, ``tᵅ``, or the
  words say it). :mod:`bookcheck`'s TeX-leak check sees ``$`` and commands in the browser; this
  one sees the notation that looks like TeX but was never meant for MathJax.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from bs4 import BeautifulSoup

# --- raw TeX as text ----------------------------------------------------------------------------

#: where text is not prose: rendered and source math, code, scripts
NOT_PROSE = ("span.math, div.math, mjx-container, math, code, pre, kbd, samp, script, style, "
             "template, noscript, svg, .highlight, div.cell_input, textarea")
#: TeX syntax, wrong anywhere in prose
TEX = re.compile(r"_\{|\^\{|\^\(|\\(?:frac|sum|int|mathrm|mathbb|mathcal|operatorname|tau|alpha|"
                 r"lambda|Gamma|Sigma|sigma|nabla|partial|le|ge|leq|geq|cdot|min|max|sup|inf)\b")
#: plain-text TeX notation (a subscript or superscript spelt with _ or ^): wrong in a claim, a
#: heading, a table header or a box's title, where a reader meets it first
NOTATION = re.compile(r"(?<![\w.\-/])[A-Za-zΑ-Ωα-ω]{1,3}_[A-Za-z0-9Α-Ωα-ω]{1,3}(?![\w(])"
                      r"|[\w)|]\^[\w\-−]")
#: the elements where the notation counts as a leak
PROMINENT = "h1, h2, h3, h4, h5, h6, th, caption, p.admonition-title, .ledger-claim"


def pseudo_tex(page: Path) -> list[str]:
    """Raw TeX and TeX notation that a reader of ``page`` meets as text; one line per find:
    ``"tex: _{ in '…context…'"`` (anywhere in prose) or ``"notation: λ_min in th '…'"`` (in a
    claim, heading, table header or box title)."""
    soup = BeautifulSoup(page.read_text(encoding="utf-8"), "html.parser")
    main = soup.find("main") or soup.body or soup
    for el in main.select(NOT_PROSE):
        el.decompose()
    for el in main.select(".headerlink, .visually-hidden"):
        el.decompose()
    out = []
    text = " ".join(main.get_text(" ").split())
    for m in TEX.finditer(text):
        out.append(f"tex: {m.group(0)} in {_context(text, m)!r}")
    seen = set()
    for el in main.select(PROMINENT):
        t = " ".join(el.get_text(" ").split())
        for m in NOTATION.finditer(t):
            key = (el.name, m.group(0), t)
            if key not in seen:
                seen.add(key)
                out.append(f"notation: {m.group(0)} in {el.name} {_context(t, m)!r}")
    return out


def _context(text: str, m: re.Match, width: int = 50) -> str:
    return text[max(0, m.start() - width):m.end() + width]


# --- tables that fit -----------------------------------------------------------------------------

# Run at the current viewport, once MathJax is done. The text column is the theme's article
# (``.bd-article``; the page's ``main`` or ``body`` on a bare page), less its padding.
TABLES_JS = r"""
async () => {
  if (window.MathJax && MathJax.startup && MathJax.startup.promise) {
    await MathJax.startup.promise;
  }
  const col = document.querySelector('.bd-article') || document.querySelector('main')
              || document.body;
  const cs = getComputedStyle(col);
  const colBox = col.getBoundingClientRect();
  const left = colBox.left + parseFloat(cs.paddingLeft);
  const width = col.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
  const right = left + width;
  const label = (t, i) => {
    const id = t.closest('[id]');
    return 'table ' + (i + 1) + (t.className ? '.' + String(t.className).trim()
      .split(/\s+/).join('.') : '') + (id && id !== t ? ' in #' + id.id : '');
  };
  const out = {column: Math.round(width), height: document.documentElement.scrollHeight,
               tables: [], wide: [], clipped: []};
  Array.from(col.querySelectorAll('table')).forEach((t, i) => {
    if (t.closest('details:not([open])') || t.offsetParent === null) return;  // not shown
    const r = t.getBoundingClientRect();
    const rows = t.tBodies.length ? Array.from(t.tBodies).reduce((n, b) => n + b.rows.length, 0)
                                  : t.rows.length;
    out.tables.push({name: label(t, i), width: Math.round(r.width), height: Math.round(r.height),
                     rows});
    const w = Math.max(r.width, t.scrollWidth);
    if (w > width + 1 || r.right > right + 1 || r.left < left - 1) {
      out.wide.push(label(t, i) + ': ' + Math.round(w) + ' px in a ' + Math.round(width)
                    + ' px column');
    }
    // every cell must be shown whole: not cut by a box that hides or scrolls its overflow
    // (the theme's scrolling container, a table that scrolls), nor with content wider than it
    const cells = Array.from(t.querySelectorAll('th, td'));
    const seenCols = new Set();
    for (const c of cells) {
      const cr = c.getBoundingClientRect();
      if (cr.width === 0 || cr.height === 0) continue;
      let visible = {left: cr.left, right: cr.right};
      for (let e = c.parentElement; e && e !== document.body; e = e.parentElement) {
        if (getComputedStyle(e).overflowX === 'visible') continue;
        const b = e.getBoundingClientRect();
        visible = {left: Math.max(visible.left, b.left), right: Math.min(visible.right, b.right)};
      }
      const shown = Math.max(0, visible.right - visible.left);
      const head = (c.closest('table').querySelector('th') ? (Array.from(
        c.closest('table').querySelectorAll('thead th'))[c.cellIndex] || {}).textContent : '')
        || '';
      const name = '"' + (head.trim() || c.textContent.trim()).replace(/\s+/g, ' ').slice(0, 30)
                   + '"';
      const key = c.cellIndex + ':' + name;
      if (shown < cr.width - 1 && !seenCols.has(key)) {
        seenCols.add(key);
        out.clipped.push(label(t, i) + ', column ' + name + ': ' + Math.round(shown) + ' of '
                         + Math.round(cr.width) + ' px shown');
      } else if (c.scrollWidth > c.clientWidth + 1 && !seenCols.has(key)) {
        seenCols.add(key);
        out.clipped.push(label(t, i) + ', column ' + name + ': content ' + c.scrollWidth
                         + ' px in a ' + c.clientWidth + ' px cell');
      }
    }
  });
  return out;
}
"""


def table_problems(root: Path, pages: list[Path], widths: tuple[int, ...] = (1280, 400),
                   theme: str = "light", screenshots: Path | None = None) -> dict:
    """Open each page at each viewport width; returns ``{(page, width): report}`` where a report
    is ``{"column", "height", "tables": [{name, width, height, rows}], "wide": [...],
    "clipped": [...]}`` (``wide`` and ``clipped`` empty on a page whose tables fit)."""
    from playwright.sync_api import sync_playwright

    import bookcheck

    executable = bookcheck.chromium()
    out = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=executable,
                                    args=["--no-sandbox", "--disable-gpu",
                                          "--allow-file-access-from-files"])
        for width in widths:
            context = browser.new_context(viewport={"width": width, "height": 900},
                                          color_scheme=theme)
            context.add_init_script(f"({bookcheck.THEME_JS})({theme!r})")
            context.route("**/*", lambda route: route.continue_()
                          if route.request.url.split(":", 1)[0] in bookcheck.LOCAL_SCHEMES
                          else route.abort())
            for page_path in pages:
                page = context.new_page()
                page.goto(page_path.resolve().as_uri(), wait_until="load")
                rel = str(page_path.relative_to(root))
                out[(rel, width)] = page.evaluate(TABLES_JS)
                if screenshots is not None:
                    screenshots.mkdir(parents=True, exist_ok=True)
                    stem = rel.replace("/", "__").removesuffix(".html")
                    page.screenshot(path=str(screenshots / f"{stem}-{width}.png"), full_page=True)
                page.close()
            context.close()
        browser.close()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("html_root", type=Path)
    ap.add_argument("--page", action="append", default=[], help="pages for the table check")
    ap.add_argument("--screenshots", type=Path)
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).parent))
    import bookcheck

    bad = 0
    for page in bookcheck.html_pages(args.html_root):
        for line in pseudo_tex(page):
            print(f"{page.relative_to(args.html_root)}: {line}")
            bad += 1
    pages = [args.html_root / p for p in args.page]
    for (page, width), rep in table_problems(args.html_root, pages,
                                             screenshots=args.screenshots).items():
        print(f"{page} at {width} px: height {rep['height']} px, column {rep['column']} px, "
              f"tables {[(t['width'], t['height'], t['rows']) for t in rep['tables']]}")
        for line in rep["wide"] + rep["clipped"]:
            print("   ", line)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
