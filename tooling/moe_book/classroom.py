"""The student edition: the book with every exercise solution removed at build time.

Hiding solutions with CSS (or sphinx-exercise's ``hide_solutions``, which also crashes on gated
``solution-start``/``solution-end`` solutions) leaves them in the HTML, in the page sources and
in the search index. Here they are cut from the *sources* before Sphinx sees them, so no
solution text can reach any file of the student build.

Recognised forms (MyST):

* backtick fences  ```` ```{solution} label ```` … ```` ``` ```` (any fence length ≥ 3; the
  closing fence must be at least as long, as in CommonMark);
* colon fences ``:::{solution} label`` … ``:::``;
* gated solutions ``{solution-start} label`` … ``{solution-end}`` (either fence style).
"""

from __future__ import annotations

from .myst import directive_blocks


def strip_solutions(text: str) -> str:
    """Remove every solution block from MyST markdown ``text``; everything else is kept."""
    lines = text.splitlines(keepends=True)
    drop: set[int] = set()
    for block in directive_blocks(text, ("solution",)):
        end = block.end
        # Drop one blank line after the removed block so paragraphs do not pile up.
        if (end < len(lines) and not lines[end].strip() and block.start > 0
                and not lines[block.start - 1].strip()):
            end += 1
        drop.update(range(block.start, end))
    return "".join(line for i, line in enumerate(lines) if i not in drop)


def strip_notebook(nb) -> int:
    """Strip solutions from every markdown cell of an nbformat notebook, in place.

    Returns the number of cells changed (so callers can report what was removed).
    """
    changed = 0
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            new = strip_solutions(cell.source)
            if new != cell.source:
                cell.source = new
                changed += 1
    return changed


def solution_texts(text: str) -> list[str]:
    """The bodies of the solution blocks of ``text`` (what must never appear in a student
    build); used by the tests."""
    bodies = []
    lines = text.splitlines(keepends=True)
    stripped = strip_solutions(text).splitlines(keepends=True)
    # Lines present in the original but not in the stripped text are solution lines.
    from difflib import SequenceMatcher

    sm = SequenceMatcher(a=lines, b=stripped, autojunk=False)
    for tag, a0, a1, _, _ in sm.get_opcodes():
        if tag in ("delete", "replace"):
            bodies.append("".join(lines[a0:a1]))
    return bodies


# --------------------------------------------------------------------------------------------
# The public site: the built HTML that the Pages workflow and `make publish` deploy.
#
# No built site stages an autograder zip (moe_book.staging._stage_assignments offers the student
# notebooks only); a zip holds every hidden test and, as the autograder's master notebook, the
# reference solution. Whatever is published can be fetched by anyone who guesses its URL, linked
# or not, so the public site is still a copy of the build with any autograder left out, and it is
# refused unless a scan of every file in it finds no hidden test and no solution line of any
# assignment (`leaks`). Teachers build the autograders locally (`make assignments`);
# book/teaching.md says how.

AUTOGRADER_GLOB = "*-autograder*.zip"
# A solution line is looked for only when long enough to be specific to its assignment: short
# lines (``return out``, ``n = len(x)``) occur in any Python text.
_MIN_SOLUTION_LINE = 16


def assignment_secrets(source: str) -> tuple[list[str], list[str]]:
    """(hidden test names, solution lines) of one otter assignment in MyST (``assignments/*.md``).

    Hidden tests are the ``def test_…`` functions of code cells whose test config says
    ``hidden: true``; solution lines are the non-trivial code lines between ``# BEGIN SOLUTION``
    and ``# END SOLUTION`` comments, or ending in ``# SOLUTION`` (what otter replaces by
    ``...`` in the student notebook). Both are read from the source, so a site can be checked
    without building the autograders."""
    import re

    hidden: list[str] = []
    solution: list[str] = []
    for block in re.findall(r"^```\{code-cell\}[^\n]*\n(.*?)^```\s*$", source, re.S | re.M):
        if re.search(r"#\s*BEGIN TEST CONFIG.*?hidden:\s*true.*?#\s*END TEST CONFIG", block, re.S):
            hidden += re.findall(r"^def (test_\w+)", block, re.M)
        inside = False
        for line in block.splitlines():
            s = line.strip()
            if re.match(r"#\s*BEGIN SOLUTION", s):
                inside = True
            elif re.match(r"#\s*END SOLUTION", s):
                inside = False
            elif inside or s.endswith("# SOLUTION"):
                code = s.removesuffix("# SOLUTION").strip()
                if len(code) >= _MIN_SOLUTION_LINE and not code.startswith(("#", '"""')):
                    solution.append(code)
    return hidden, solution


def all_secrets(sources) -> tuple[list[str], list[str]]:
    """:func:`assignment_secrets` of every ``*.md`` in the folder ``sources`` (README excepted);
    a folder without assignments is an error (a check that looks for nothing proves nothing)."""
    from pathlib import Path

    files = sorted(p for p in Path(sources).glob("*.md") if p.stem.lower() != "readme")
    if not files:
        raise ValueError(f"no assignment sources (*.md) in {sources}; accepted: the repository's "
                         "assignments/ folder")
    hidden, solution = [], []
    for f in files:
        h, s = assignment_secrets(f.read_text(encoding="utf-8"))
        if not h:
            raise ValueError(f"{f} declares no hidden test: not an otter assignment source")
        hidden += h
        solution += s
    return hidden, solution


def _texts(name: str, data: bytes) -> list[str]:
    """The readings of one file in which a secret would show: the raw text; for HTML, the text
    with tags removed and entities decoded (Pygments splits a code line into spans); for JSON
    (notebooks, the search index), every string value joined (JSON escapes quotes)."""
    import html
    import json
    import re

    text = data.decode("utf-8", errors="replace")
    out = [text]
    if name.endswith((".html", ".htm", ".xml", ".svg")):
        out.append(html.unescape(re.sub(r"<[^>]+>", "", text)))
    if name.endswith((".ipynb", ".json", ".js")):
        try:
            obj = json.loads(text)
        except ValueError:
            obj = None
        strings: list[str] = []
        stack = [obj]
        while stack:
            x = stack.pop()
            if isinstance(x, str):
                strings.append(x)
            elif isinstance(x, dict):
                stack += list(x.values())
            elif isinstance(x, list):
                stack += x
        out.append("\n".join(strings))
    return out


#: where the library reference renders the library's source (Sphinx viewcode)
LIBRARY_SOURCE_PAGES = "_modules/"


def leaks(site, sources) -> list[str]:
    """Everything in the built HTML tree ``site`` that gives away an assignment: an autograder
    zip (by name), any other zip whose members do, and any file in which a hidden test's name or
    a solution line of ``sources`` (the ``assignments/`` folder) occurs. Empty: safe to publish.

    Each finding is one line naming the file (relative to ``site``) and what was found.  The
    library reference's source pages (``_modules/``, Sphinx viewcode) are the library's own
    published code -- the wheel and the repository ship the same lines -- so a solution line
    that equals library code (an exercise that re-derives a library function) is not a leak
    there; every other page is scanned."""
    import zipfile
    from fnmatch import fnmatch
    from pathlib import Path

    site = Path(site)
    if not (site / "index.html").is_file():
        raise ValueError(f"{site} is not a built HTML tree (no index.html); accepted: the folder "
                         "of a Jupyter Book build, e.g. book/_build/html")
    hidden, solution = all_secrets(sources)
    found: list[str] = []

    def scan(label: str, name: str, data: bytes) -> None:
        texts = _texts(name, data)
        hits = sorted({h for h in hidden if any(h in t for t in texts)})
        lines = [s for s in solution if any(s in t for t in texts)]
        if hits:
            found.append(f"{label}: hidden test(s) {', '.join(hits)}")
        if lines:
            found.append(f"{label}: {len(lines)} solution line(s), e.g. {lines[0]!r}")

    for path in sorted(p for p in site.rglob("*") if p.is_file()):
        rel = path.relative_to(site).as_posix()
        if rel.startswith(LIBRARY_SOURCE_PAGES) and path.suffix == ".html":
            continue
        if fnmatch(path.name, AUTOGRADER_GLOB):
            found.append(f"{rel}: an autograder (holds every hidden test and the solution)")
            continue
        if path.suffix == ".zip":
            try:
                with zipfile.ZipFile(path) as zf:
                    for member in zf.namelist():
                        if not member.endswith("/"):
                            scan(f"{rel}!{member}", member, zf.read(member))
            except zipfile.BadZipFile:
                found.append(f"{rel}: a .zip that is not a readable zip archive")
            continue
        scan(rel, path.name, path.read_bytes())
    return found


def public_site(site, dest, sources) -> list[str]:
    """Copy the built HTML tree ``site`` to ``dest`` (replaced) without the autograder zips, then
    check the copy with :func:`leaks`; raises ``ValueError`` listing every finding (and removes
    the copy) when something would still give an assignment away. Returns the paths left out."""
    import shutil
    from fnmatch import fnmatch
    from pathlib import Path

    site, dest = Path(site).resolve(), Path(dest).resolve()
    if not (site / "index.html").is_file():
        raise ValueError(f"{site} is not a built HTML tree (no index.html); accepted: the folder "
                         "of a Jupyter Book build, e.g. book/_build/html")
    if dest == site or site in dest.parents:
        raise ValueError(f"the public copy {dest} must lie outside the site {site}")
    left_out: list[str] = []

    def ignore(folder: str, names: list[str]) -> list[str]:
        skip = [n for n in names if fnmatch(n, AUTOGRADER_GLOB)]
        left_out.extend(Path(folder, n).relative_to(site).as_posix() for n in skip)
        return skip

    if dest.exists():
        shutil.rmtree(dest)
    shutil.copytree(site, dest, ignore=ignore)
    found = leaks(dest, sources)
    if found:
        shutil.rmtree(dest)
        raise ValueError(f"{site} gives assignments away, not published:\n  " + "\n  ".join(found))
    return sorted(left_out)


def main(argv: list[str] | None = None) -> int:
    """``python -m moe_book.classroom check SITE`` / ``public SITE DEST`` (the publish path)."""
    import argparse
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    ap = argparse.ArgumentParser(description="Check a built HTML tree for assignment secrets, or "
                                 "make its public copy (autograders left out, then checked).")
    ap.add_argument("command", choices=("check", "public"))
    ap.add_argument("site", type=Path, help="a built HTML tree (book/_build/html)")
    ap.add_argument("dest", type=Path, nargs="?", help="public: where the copy goes")
    ap.add_argument("--assignments", type=Path, default=root / "assignments",
                    help="the assignment sources whose secrets are looked for")
    args = ap.parse_args(argv)
    try:
        if args.command == "check":
            found = leaks(args.site, args.assignments)
            for f in found:
                print(f"leak: {f}", file=sys.stderr)
            if found:
                print(f"error: {args.site} gives assignments away ({len(found)} finding(s))",
                      file=sys.stderr)
                return 1
            print(f"{args.site}: no hidden test, no solution, no autograder")
            return 0
        if args.dest is None:
            ap.error("public needs DEST: python -m moe_book.classroom public SITE DEST")
        left = public_site(args.site, args.dest, args.assignments)
        print(f"{args.dest}: public copy of {args.site}, checked; left out: "
              f"{', '.join(left) if left else 'nothing'}")
        return 0
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    raise SystemExit(main())
