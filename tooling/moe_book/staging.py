"""Staging: executed chapters + ``book/`` --> the Jupyter Book source that Sphinx reads
(``build/P/book``, or ``build/P/book-student`` for the student edition).

Why a module of its own: staging is a sequence of independent jobs -- copy the hand-written
book, record the cited keys, make each executed chapter the reader's notebook, offer the
downloads (chapter sources, wheel, assignments, PDFs), write the generated pages and the toc,
prune what is no longer offered -- that read the pipeline's records (:mod:`moe_book.pipeline`:
layout, states, verified outputs) and never execute anything.  :func:`stage` calls them in
order.

Staging writes a file only when its content changed, keeping the mtime of every unchanged
file: Sphinx re-reads each page whose mtime moved, so a no-op staging re-reads nothing.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

import yaml

from moe_routing._internal.atomic import atomic_write_bytes, atomic_write_text

from .home import Home
from .project import (INJECTED, INJECTED_IF_DECLARED, NAME, PipelineError, Project, pdf_path,
                       read_state, verify_outputs)

# --------------------------------------------------------------------------------------------
# The reader's notebook


def _install_note(name: str, profile: str, book_home=None) -> str:
    from moe_routing import __version__

    wheel = f"moe_routing-{__version__}-py3-none-any.whl"
    online = (" On Colab, the cell above installs it by itself." if book_home is not None else
              f" On Colab, upload `{wheel}` beside the notebook: the cell above installs it.")
    return (
        f"**Run this chapter yourself.** This notebook was executed by the book with the "
        f"`{profile}` profile; its parameters cell holds exactly the values used. It needs the "
        f"library `moe_routing` {__version__} with its notebook extras:\n\n"
        f"    pip install \"{wheel}[notebooks]\"\n\n"
        f"(the wheel is offered for download on the book's *Execution status* page), or, in a "
        f"clone of the book's repository, `pip install -e \".[notebooks]\"`. Then run all cells "
        f"from any folder: results are written to `artifacts/{name}/` beside the notebook. "
        f"A GPU is used when present (`device = \"auto\"`)." + online)



#: the tags of the first cell of a reader's notebook, which installs the library on Colab
COLAB_CELL_TAGS = ["remove-cell", "colab-install"]


def colab_requirement(root: Path, book_home=None) -> str:
    """What the Colab cell of a reader's notebook installs: this book's own library.

    With a home, the repository at the full commit the book is built from
    (``moe_routing[notebooks] @ git+https://github.com/<owner>/<repo>@<sha>``) -- the exact
    library whatever the site later publishes; when the library's files (``src/``,
    ``pyproject.toml``) have uncommitted changes that commit is not this library, and the wheel
    the published site offers (built from the working tree) is installed instead.  The commit
    is read with git, or from ``GITHUB_SHA`` where git refuses the checkout (a CI container).
    Without a home, the wheel by its file name, uploaded beside the notebook."""
    import subprocess

    from moe_routing import __version__

    wheel = f"moe_routing-{__version__}-py3-none-any.whl"
    if book_home is None:
        return f"{wheel}[notebooks]"

    def git(*args: str) -> str | None:
        try:
            return subprocess.run(["git", *args], cwd=root, capture_output=True, text=True,
                                  check=True).stdout.strip()
        except (OSError, subprocess.CalledProcessError):
            return None

    sha = git("rev-parse", "HEAD")
    dirty = sha is not None and git("status", "--porcelain", "--untracked-files=no", "--",
                                    "src", "pyproject.toml") != ""
    sha = sha or os.environ.get("GITHUB_SHA", "").strip() or None
    if sha and re.fullmatch(r"[0-9a-f]{40}", sha) and not dirty:
        return f"moe_routing[notebooks] @ git+{book_home.url}@{sha}"
    return f"moe_routing[notebooks] @ {book_home.site}/_static/downloads/{wheel}"


def colab_cell_source(requirement: str) -> str:
    """The first cell of a reader's notebook: on Google Colab (``"google.colab"`` imported,
    which Colab's kernel does before any cell) it installs ``requirement`` with pip and checks
    the installed version; anywhere else it does nothing, so the notebook runs unchanged in any
    Jupyter that has the library.  A requirement that is a wheel's file name must lie beside
    the notebook (Colab's Files pane); its absence is one clear error."""
    from moe_routing import __version__

    wheel = f"moe_routing-{__version__}-py3-none-any.whl"
    local = requirement.startswith(wheel)
    q = json.dumps                                      # a double-quoted Python string literal
    lines = [
        "# On Google Colab this cell installs the library this chapter was executed with,",
        f"# moe_routing {__version__}; anywhere else it does nothing. Elsewhere install it with",
        f"#     pip install \"{wheel}[notebooks]\"",
        "# (see the note below).",
        "import sys",
        "",
        "if \"google.colab\" in sys.modules:",
        "    import importlib",
        *(["    import os"] if local else []),
        "    import subprocess",
        "    from importlib.metadata import version",
        "",
    ]
    if local:
        lines += [
            f"    if not os.path.isfile({q(wheel)}):",
            f"        raise RuntimeError({q(wheel + ' is not beside this notebook: upload it ')}",
            "                           \"(Files pane; the book's Execution status page offers \"",
            "                           \"it), then run this cell again\")",
        ]
    lines += [
        "    subprocess.run([sys.executable, \"-m\", \"pip\", \"install\", \"--quiet\",",
        f"                    {q(requirement)}], check=True)",
        "    importlib.invalidate_caches()",
        f"    if version(\"moe_routing\") != {q(__version__)}:",
        "        raise RuntimeError(\"moe_routing \" + version(\"moe_routing\") + \" is installed, \"",
        f"                           {q('not ' + __version__ + ', the version of this notebook')})",
    ]
    return "\n".join(lines)


def reader_notebook(nb, name: str, profile: str, book_home=None,
                    colab: str | None = None) -> None:
    """Make an executed notebook the reader's, in place: runnable outside the repository with
    the values it was executed with, and free of the pipeline's plumbing.

    * The defaults cell (tagged ``parameters``) is removed from the page; the injected cell
      below it holds every parameter of the run, ``profile`` included, with ``device = "auto"``
      and a local ``artifacts_dir``, so a downloaded notebook re-run by hand reproduces this
      execution, not the ``smoke`` defaults of the cell above it.
    * A first code cell installs the library on Colab, and only there (``colab``: the pip
      requirement, :func:`colab_requirement`; default: the wheel by its name), and a markdown
      cell after it says how to install it elsewhere.  Both are removed from the HTML page
      (``remove-cell``) and kept in the download and in the notebook Colab opens.
    """
    import nbformat

    prov = nb.metadata.get("moe_routing", {})
    executed = nb.metadata.get("papermill", {}).get("parameters", {})
    params = {k: v for k, v in executed.items()
              if k not in INJECTED and k not in INJECTED_IF_DECLARED}
    for cell in nb.cells:
        tags = cell.setdefault("metadata", {}).setdefault("tags", [])
        if "parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
        if "injected-parameters" in tags:
            lines = [f"# Parameters of this execution: the `{profile}` profile "
                     f"(notebooks/params/{profile}.yaml of the book's repository)",
                     f"profile = {profile!r}",
                     f"device = \"auto\"  # executed on {prov.get('device', '?')}: "
                     f"{prov.get('device_name', '?')}",
                     f"artifacts_dir = \"artifacts/{name}\"  # results, beside this notebook"]
            if "runs_from" in executed:
                lines.append("runs_from = []  # other executions' runs: none beside this notebook")
            lines += [f"{k} = {v!r}" for k, v in params.items()]
            cell.source = "\n".join(lines)
            if "remove-input" not in tags and "hide-input" not in tags:
                tags.append("hide-input")
    if not any("install-note" in c.get("metadata", {}).get("tags", []) for c in nb.cells[:2]):
        note = nbformat.v4.new_markdown_cell(_install_note(name, profile, book_home))
        note.id = "install-note"            # a fixed id: staging twice writes the same file
        note.metadata["tags"] = ["remove-cell", "install-note"]
        from moe_routing import __version__

        cell = nbformat.v4.new_code_cell(colab_cell_source(
            colab or f"moe_routing-{__version__}-py3-none-any.whl[notebooks]"))
        cell.id = "colab-install"
        cell.metadata["tags"] = list(COLAB_CELL_TAGS)
        nb.cells[:0] = [cell, note]


# --------------------------------------------------------------------------------------------
# Writing only what changed; editions


def _copy_if_changed(src: Path, dst: Path) -> None:
    """Copy keeping the target's mtime when content is unchanged, so Sphinx rebuilds only the
    pages that really changed."""
    data = src.read_bytes()
    if dst.exists() and dst.read_bytes() == data:
        return
    atomic_write_bytes(dst, data)


def _write_if_changed(dst: Path, text: str) -> None:
    """Write ``text`` unless ``dst`` already holds it (its mtime kept: see
    :func:`_copy_if_changed`)."""
    if dst.exists() and dst.read_text(encoding="utf-8") == text:
        return
    atomic_write_text(dst, text)


EDITIONS = ("full", "student")
# A hand-written page's lines between these MyST comments are left out of the student edition
# (the teacher's guide links the autograders, whose hidden tests students must not see).
TEACHER_ONLY = ("% teacher-only", "% end teacher-only")


def _without_teacher_only(text: str) -> str:
    lines, keep, out = text.splitlines(keepends=True), True, []
    for line in lines:
        mark = line.strip()
        if mark == TEACHER_ONLY[0 if keep else 1]:
            keep = not keep
        elif mark in TEACHER_ONLY:
            raise PipelineError(f"unbalanced {mark!r} in a book page; accepted: "
                                f"{TEACHER_ONLY[0]!r} … {TEACHER_ONLY[1]!r} pairs")
        elif keep:
            out.append(line)
    if not keep:
        raise PipelineError(f"{TEACHER_ONLY[0]!r} without {TEACHER_ONLY[1]!r} in a book page")
    return "".join(out)


def _stage_assignments(project: Project, dest: Path, wheel: Path, student: bool) -> set[Path]:
    """Offer the assignments for download under ``_static/downloads/assignments``: each
    student notebook, in both editions.  No autograder zip (hidden tests) is ever staged into
    a site: a built site is what gets copied, served or published, so it must be safe to hand
    out whatever its edition.  Teachers take the zips from ``build/assignments/<name>/
    autograder/`` (and the teacher's bundle, :mod:`moe_book.dist`, from there).  The
    assignments are built by :mod:`moe_book.assignments` when missing or when an input
    (source, wheel, pins) changed, so ``make html`` works from a fresh clone."""
    from . import assignments

    sources = project.root / "assignments"
    if not assignments.available(sources):
        return set()
    try:
        built = assignments.ensure_built(None, project.root / "build" / "assignments",
                                         sources=sources, wheel=wheel,
                                         lock=project.root / "requirements")
    except (ValueError, RuntimeError) as exc:
        raise PipelineError(f"the assignments could not be built: {exc}") from exc
    dest.mkdir(parents=True, exist_ok=True)
    staged = set()
    del student                     # both editions offer the same: the student notebooks
    for b in built:
        _copy_if_changed(b.student, dest / f"{b.name}.ipynb")
        staged.add(dest / f"{b.name}.ipynb")
    return staged


def pdf_editions(project: Project, profile: str, edition: str) -> list[Path]:
    """The PDFs (``make pdf``) an HTML edition offers, those that exist: the full edition both
    (full, student), the student edition its own only -- never the one with the solutions."""

    offered = ("full", "student") if edition == "full" else ("student",)
    return [p for p in (pdf_path(project, profile, e) for e in offered) if p.is_file()]


def pdf_editions_text(pdfs: list[Path], book_home=None, student: bool = False) -> str:
    """The introduction's sentence on the PDF editions (substitution ``pdf_editions``).

    Built PDFs are offered beside the HTML (``_static/downloads``); a book with a home and no
    PDF of its own (the site that ``main`` publishes) links the PDFs attached to the
    repository's latest release (``.github/workflows/release.yml``); otherwise the sentence
    says how to build them."""

    names = [(f"{NAME}.pdf", "full edition"), (f"{NAME}-student.pdf", "student edition")]
    if student:
        names = names[1:]
    if pdfs:
        have = {p.name for p in pdfs}
        links = [f"{{download}}`{label} </_static/downloads/{n}>`" for n, label in names
                 if n in have]
        return "The book is also a PDF: " + ", ".join(links) + "."
    if book_home is not None:
        links = [f"[{label}]({book_home.url}/releases/latest/download/{n})" for n, label in names]
        return ("The book is also a PDF, attached to each release of its repository: the latest "
                "release's " + ", ".join(links) + ".")
    return "The book is also a PDF (full and student editions), built by `make pdf`."


def versioned_config(cfg: dict, pdf_text: str) -> dict:
    """``cfg`` with the library's version in the footer (``{version}`` of ``html.extra_footer``
    replaced: one source, pyproject.toml, for the book, the wheel, the release tag and
    CITATION.cff) and the ``pdf_editions`` substitution set.  A new dict."""
    from moe_routing import __version__

    html = dict(cfg.get("html", {}))
    html["extra_footer"] = str(html.get("extra_footer", "")).replace("{version}", __version__)
    parse = dict(cfg.get("parse", {}))
    parse["myst_substitutions"] = {**parse.get("myst_substitutions", {}), "pdf_editions": pdf_text}
    return {**cfg, "html": html, "parse": parse}


# --------------------------------------------------------------------------------------------
# The staging jobs

#: book/ files that stage() rewrites (the cited keys; the chapters in the toc) instead of copying
STAGED_LATER = (Path("bibliography.md"), Path("_toc.yml"))


@dataclass(frozen=True)
class Staging:
    """What every job of one staging reads: which book, which edition, where it goes.

    Each job returns the set of files it staged; :func:`stage` keeps their union, and removes
    every other file of ``out`` at the end."""

    project: Project
    profile: str
    edition: str
    book_home: Home | None         # the book's repository, or None: a book without a home
    out: Path                      # build/P/book or build/P/book-student

    @property
    def student(self) -> bool:
        return self.edition == "student"

    @property
    def bdir(self) -> Path:
        return self.project.build_dir(self.profile)

    @property
    def downloads(self) -> Path:
        """What the book offers for download; Sphinx copies it into the site's _static."""
        return self.out / "_static" / "downloads"


def stage(project: Project, profile: str, edition: str = "full") -> Path:
    """Assemble the Jupyter Book source for ``profile`` under ``build/P/book`` (or, for the
    student edition, ``build/P/book-student``, with every exercise solution cut from the
    sources so that none can reach the HTML, the page sources or the search index).

    Every file is written only when its content changed (:func:`_write_if_changed`): Sphinx
    re-reads a page whose mtime moved, so a no-op staging must touch nothing."""
    from . import home

    if edition not in EDITIONS:
        raise PipelineError(f"unknown edition {edition!r}; accepted: {', '.join(EDITIONS)}")
    try:
        book_home = home.from_environment()      # repository and launch buttons, or none
    except ValueError as exc:
        raise PipelineError(str(exc)) from None
    out = project.build_dir(profile) / ("book-student" if edition == "student" else "book")
    out.mkdir(parents=True, exist_ok=True)
    st = Staging(project, profile, edition, book_home, out)
    names = project.notebook_names()
    wanted = _stage_book_files(st)
    wanted |= _stage_bibliography(st, names)
    states, chapters = _stage_chapters(st, names)
    wanted |= chapters
    (out / "generated").mkdir(exist_ok=True)
    st.downloads.mkdir(parents=True, exist_ok=True)
    wanted |= _stage_chapter_sources(st, names)
    wheel = _library_wheel(project)
    wanted |= _stage_wheel_and_assignments(st, wheel)
    wanted |= _stage_pdfs(st)
    wanted |= _stage_generated_pages(st, states, [wheel.name] if wheel else [])
    wanted |= _stage_toc(st, names)
    _prune_site_downloads(st, {f.relative_to(st.downloads) for f in wanted
                               if st.downloads in f.parents})
    _remove_stale(out, wanted)
    return out


def _stage_book_files(st: Staging) -> set[Path]:
    """Copy the hand-written book (``book/``: pages, configuration, static files), without
    Sphinx's ``_build`` and caches.  The student edition's pages lose their solutions and
    teacher-only blocks; ``_config.yml`` gets the book's home, version and PDF sentence
    (:func:`_staged_config`).  :data:`STAGED_LATER` files are only claimed here: a raw copy
    first, rewritten later, would change their mtime on every build and Sphinx would re-read
    them every time."""
    from .classroom import strip_solutions

    book_dir, staged = st.project.book_dir, set()
    for src in book_dir.rglob("*"):
        rel = src.relative_to(book_dir)
        if rel.parts[0].startswith("_build") or src.is_dir() or "__pycache__" in rel.parts:
            continue
        dst = st.out / rel
        if rel in STAGED_LATER:
            staged.add(dst)          # written once, by its own job
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if st.student and src.suffix == ".md":
            _write_if_changed(dst, strip_solutions(_without_teacher_only(
                src.read_text(encoding="utf-8"))))
        elif rel == Path("_config.yml"):
            _write_if_changed(dst, _staged_config(st, src))
        else:
            _copy_if_changed(src, dst)
        staged.add(dst)
    return staged


def _staged_config(st: Staging, src: Path) -> str:
    """The book's ``_config.yml`` as this build needs it: the home's repository and launch
    buttons (:func:`moe_book.home.configure`), the edition in the title, the library's version
    in the footer and the sentence on the PDFs this edition offers."""
    from . import home

    cfg = home.configure(yaml.safe_load(src.read_text(encoding="utf-8")), st.book_home)
    if st.student:
        cfg["title"] = f"{cfg['title']} (student edition)"
    cfg = versioned_config(cfg, pdf_editions_text(
        pdf_editions(st.project, st.profile, st.edition), st.book_home, st.student))
    return yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True)


def _stage_bibliography(st: Staging, names: list[str]) -> set[Path]:
    """The bibliography page with the cited keys recorded in it (a MyST comment).

    Sphinx rebuilds only changed pages, and sphinxcontrib-bibtex's list of cited works lives
    on the bibliography page: a new citation anywhere then changes that page, and its entries
    and anchors are rebuilt."""
    book_dir = st.project.book_dir
    if not (book_dir / "bibliography.md").exists():
        return set()
    keys = sorted(cited_keys([st.project.notebook_path(n) for n in names]
                             + sorted(book_dir.glob("*.md"))))
    text = (book_dir / "bibliography.md").read_text(encoding="utf-8")
    bib = st.out / "bibliography.md"
    _write_if_changed(bib, text.rstrip("\n") + "\n\n% cited: " + " ".join(keys) + "\n")
    return {bib}


def _stage_chapters(st: Staging, names: list[str]) -> tuple[dict[str, dict | None], set[Path]]:
    """Each chapter's page: its executed notebook made the reader's (:func:`reader_notebook`,
    solutions cut in the student edition), or a page saying it was not executed.

    Sphinx is never handed a notebook whose outputs do not verify against the checksums its
    state records: such a chapter is shown as ``corrupt``.  Returns the chapters' states (what
    the generated pages report) and the pages staged."""
    import nbformat

    from . import pages as bookpages
    from .classroom import strip_notebook

    chapters = st.out / "chapters"
    chapters.mkdir(exist_ok=True)
    states, staged = {}, set()
    colab = colab_requirement(st.project.root, st.book_home)    # what each installs on Colab
    for name in names:
        states[name] = read_state(st.bdir / "state" / f"{name}.json")
        exe = st.bdir / "executed" / f"{name}.ipynb"
        dst = chapters / f"{name}.ipynb"
        broken = exe.exists() and verify_outputs(st.bdir, name, states[name])
        if broken:  # never hand Sphinx a truncated or altered notebook
            states[name] = {**(states[name] or {}), "status": "corrupt",
                            "error": f"outputs do not verify ({broken}); run make execute"}
            _write_if_changed(dst, bookpages.not_executed_notebook(name, states[name]))
        elif exe.exists():
            nb = nbformat.read(exe, as_version=4)
            if st.student:
                strip_notebook(nb)
            reader_notebook(nb, name, st.profile, st.book_home, colab)
            _write_if_changed(dst, nbformat.writes(nb))
        else:
            _write_if_changed(dst, bookpages.not_executed_notebook(name, states[name]))
        staged.add(dst)
    return states, staged


def _stage_chapter_sources(st: Staging, names: list[str]) -> set[Path]:
    """Offer each chapter's MyST source for download (without solutions in the student
    edition), so that a chapter can be run where only the book is at hand."""
    from .classroom import strip_solutions

    staged = set()
    for name in names:
        text = st.project.notebook_path(name).read_text(encoding="utf-8")
        dst = st.downloads / f"{name}.md"
        _write_if_changed(dst, strip_solutions(text) if st.student else text)
        staged.add(dst)
    return staged


def _library_wheel(project: Project) -> Path | None:
    """The library's wheel of this version (``dist/``, built by ``make wheel``), or None."""
    from moe_routing import __version__

    wheel = project.root / "dist" / f"moe_routing-{__version__}-py3-none-any.whl"
    return wheel if wheel.is_file() else None


def _stage_wheel_and_assignments(st: Staging, wheel: Path | None) -> set[Path]:
    """Offer the library's wheel -- what a downloaded chapter needs to run -- and the
    assignments built against it (:func:`_stage_assignments`).  Without a wheel, neither."""
    if wheel is None:
        return set()
    _copy_if_changed(wheel, st.downloads / wheel.name)
    return ({st.downloads / wheel.name}
            | _stage_assignments(st.project, st.downloads / "assignments", wheel, st.student))


def _stage_pdfs(st: Staging) -> set[Path]:
    """Offer the PDFs this edition may link (:func:`pdf_editions`), as the introduction's
    sentence (:func:`pdf_editions_text`) says."""
    staged = set()
    for pdf in pdf_editions(st.project, st.profile, st.edition):
        _copy_if_changed(pdf, st.downloads / pdf.name)
        staged.add(st.downloads / pdf.name)
    return staged


def _stage_generated_pages(st: Staging, states: dict[str, dict | None],
                           downloads: list[str]) -> set[Path]:
    """The pages the book computes (:func:`moe_book.pages.generated_pages`: reproduction
    ledger, execution status, exercises) under ``generated/``, from the chapters' states at
    this moment and the downloads offered."""
    from . import pages as bookpages

    gen, staged = st.out / "generated", set()
    for page, text in bookpages.generated_pages(st.project, st.profile, states,
                                                downloads).items():
        _write_if_changed(gen / page, text)
        staged.add(gen / page)
    return staged


def _stage_toc(st: Staging, names: list[str]) -> set[Path]:
    """The table of contents with the chapters that exist (:func:`moe_book.pages.staged_toc`)."""
    from . import pages as bookpages

    toc = st.out / "_toc.yml"
    _write_if_changed(toc, bookpages.staged_toc(st.project.book_dir / "_toc.yml", names))
    return {toc}


def _prune_site_downloads(st: Staging, offered: set[Path]) -> None:
    """Remove from the built site every download no longer offered (``offered``: paths
    relative to the downloads folder).  Sphinx copies ``_static`` into the site but never
    deletes there: an autograder zip of an older build, or a removed chapter's source, would
    stay in the site.  Sphinx's ``_downloads`` of older builds lose their autograder zips
    too."""
    site = st.project.html_dir(st.profile, st.edition)
    site_dl = site / "_static" / "downloads"
    if site_dl.is_dir():
        for f in site_dl.rglob("*"):
            if f.is_file() and f.relative_to(site_dl) not in offered:
                f.unlink()
    for f in (site.rglob("*-autograder.zip") if site.is_dir() else ()):
        f.unlink()


def _remove_stale(out: Path, wanted: set[Path]) -> None:
    """Delete every staged file no job claimed (a removed chapter, an old page): a stale file
    would break Jupyter Book's toc check or reach the site."""
    for f in out.rglob("*"):
        if (f.is_file() and f not in wanted and "_build" not in f.parts
                and "__pycache__" not in f.parts):
            f.unlink()


_CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def cited_keys(paths: list[Path]) -> set[str]:
    """Every bibliography key cited with a ``{cite}`` role in the MyST files ``paths``."""
    keys: set[str] = set()
    for p in paths:
        for group in _CITE.findall(p.read_text(encoding="utf-8")):
            keys.update(k.strip() for k in group.split(",") if k.strip())
    return keys
