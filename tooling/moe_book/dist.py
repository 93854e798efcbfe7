"""The release bundle (``make dist``): everything a course or a reader needs, in one folder.

    python -m moe_book.dist [--profile P] [--out dist] [--pdf-optional]
    python -m moe_book.dist --check-tag vX.Y.Z     (the release workflow: builds nothing)

writes ``<out>/moe-routing-companion-<version>/`` and ``<out>/moe-routing-companion-<version>.tar.gz``
(the same folder, packed), from the products of a finished build of profile P::

    html/                 the book, full edition (the teacher's: solutions; no autograder)
    html-student/         the student edition (no solution, no autograder)
    pdf/                  moe-routing-companion.pdf and moe-routing-companion-student.pdf
    moe_routing-<version>-py3-none-any.whl     the library
    assignments/<name>/   <name>.ipynb (to hand out) and <name>-autograder.zip (hidden tests)
    ledger.json           every claim: id, paper, verdict, measured value, the deciding rule
    figures/<chapter>/fig-<n>-<slug>.svg       each numbered figure, named by its number in
                          the book (Fig. 4.2 -> fig-4.2-...), listed in figures/index.json and
                          figures/index.md with its caption and description
    README.md             this layout; CITATION.cff, how to cite the book
    MANIFEST.json         every other file with its size and SHA-256; version, profile, commit,
                          build date
    MANIFEST.sha256       the same checksums for ``sha256sum -c MANIFEST.sha256``

Nothing is built here: every part comes from the build (``make dist`` runs ``pdf``, ``html`` and
``student`` first), and a missing part is refused, naming it and the command that makes it,
before anything is written. The student notebooks and the wheel are taken from the full
edition's downloads, so the bundle holds exactly what the book offers (and the wheel of
``dist/`` must be the one the book offers); the autograder zips, which no site carries, from
``build/assignments`` where they were built. The bundle is assembled in a temporary folder
beside the target and
renamed into place, the archive written to a temporary file and renamed: an interrupted or
refused run leaves the previous bundle, or none, never half of one.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import html as _html
import json
import os
import re
import shutil
import sys
import tarfile
import tempfile
import tomllib
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from moe_routing._internal.atomic import atomic_write_json
from moe_routing._internal.runtime import PROFILES, git_commit
from moe_routing._internal.validation import choice

from .keys import file_sha256
from .project import NAME, PipelineError, Project, find_root

PDFS = (f"{NAME}.pdf", f"{NAME}-student.pdf")       # what `make pdf` writes (full, student)
MANIFESTS = ("MANIFEST.json", "MANIFEST.sha256")


class DistError(Exception):
    """A part of the bundle is missing or inconsistent: reported on one line, nothing written."""


def version(root: Path) -> str:
    """The library's version, from pyproject.toml (as the Makefile reads it)."""
    return tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"]


_RELEASE_TAG = re.compile(r"v(\d+\.\d+\.\d+)")
_INIT_VERSION = re.compile(r'^__version__\s*=\s*"([^"]+)"', re.M)
_CFF_VERSION = re.compile(r"^version:\s*[\"']?([^\"'\s]+)[\"']?\s*$", re.M)


def stated_versions(root: Path) -> dict[str, str | None]:
    """Every place that states the version, with what it says (None: it states none):
    pyproject.toml (the one source: the Makefile, the wheel and the book's footer read it), the
    library's ``__version__``, CITATION.cff and the book tooling's ``tooling/pyproject.toml``
    (released with the book, at the same version; when the checkout has it)."""
    init = (root / "src" / "moe_routing" / "__init__.py").read_text(encoding="utf-8")
    cff = root / "CITATION.cff"
    cff_match = _CFF_VERSION.search(cff.read_text(encoding="utf-8")) if cff.is_file() else None
    init_match = _INIT_VERSION.search(init)
    stated = {"pyproject.toml": version(root),
              "src/moe_routing/__init__.py": init_match.group(1) if init_match else None,
              "CITATION.cff": cff_match.group(1) if cff_match else None}
    tooling = root / "tooling" / "pyproject.toml"
    if tooling.is_file():
        stated["tooling/pyproject.toml"] = tomllib.loads(
            tooling.read_text(encoding="utf-8"))["project"].get("version")
    return stated


def check_release_tag(root: Path, tag: str) -> str:
    """The version a release tag ``vX.Y.Z`` publishes, once checked to be the one that every
    file states (:func:`stated_versions`); DistError naming the tag or each disagreeing file.

    The release workflow checks rather than sets: a tag then always names a commit whose
    sources, wheel, book footer and citation already say that version, so building the same
    commit again (or citing it) gives the same release."""
    m = _RELEASE_TAG.fullmatch(tag.strip())
    if not m:
        raise DistError(f"release tag {tag!r} is not accepted; accepted: vX.Y.Z (three numbers, "
                        "e.g. v0.1.0), the version of pyproject.toml with a leading v")
    wrong = [f"{where} says {found!r}" for where, found in stated_versions(root).items()
             if found != m.group(1)]
    if wrong:
        raise DistError(f"release tag {tag!r} names version {m.group(1)}, but " + "; ".join(wrong)
                        + ": set the version there, commit, and tag that commit")
    return m.group(1)


def bundle_name(root: Path) -> str:
    return f"{NAME}-{version(root)}"


@dataclass(frozen=True)
class Parts:
    """Where the bundle's parts come from (all checked to exist by :func:`parts`)."""

    html: Path
    student_html: Path
    pdfs: list[Path]
    wheel: Path
    assignments: dict[str, tuple[Path, Path]]     # name -> (student notebook, autograder zip)
    artifacts: Path


def parts(project: Project, profile: str, *, pdf_optional: bool = False) -> Parts:
    """Locate every part of the bundle of ``profile``; refuse, naming each missing one."""
    choice("profile", profile, PROFILES)
    root, missing = project.root, []

    def rel(p: Path) -> str:
        return str(p.relative_to(root)) if p.is_relative_to(root) else str(p)

    html = project.html_dir(profile)
    student = project.html_dir(profile, "student")
    make_html = "make book" if profile == "default" else f"make html PROFILE={profile}"
    for d, how in ((html, make_html), (student, f"make student PROFILE={profile}")):
        if not (d / "index.html").is_file():
            missing.append(f"{rel(d)}/index.html ({how})")
    pdf_dir = project.build_dir(profile) / "pdf"
    pdfs = [pdf_dir / n for n in PDFS if (pdf_dir / n).is_file()]
    if not pdf_optional:
        missing += [f"{rel(pdf_dir / n)} (make pdf PROFILE={profile})"
                    for n in PDFS if not (pdf_dir / n).is_file()]
    wheel = root / "dist" / f"moe_routing-{version(root)}-py3-none-any.whl"
    if not wheel.is_file():
        missing.append(f"{rel(wheel)} (make wheel)")
    artifacts = project.build_dir(profile) / "artifacts"
    if not list(artifacts.glob("*/claims.json")):
        missing.append(f"{rel(artifacts)}/*/claims.json "
                       f"(make execute PROFILE={profile})")
    from .assignments import available

    offered = html / "_static" / "downloads" / "assignments"
    graders = root / "build" / "assignments"        # autograders never enter a site
    assignments = {}
    for name in available(root / "assignments"):
        nb = offered / f"{name}.ipynb"
        zf = graders / name / "autograder" / f"{name}-autograder.zip"
        if (html / "index.html").is_file():            # else the HTML is reported missing
            missing += [f"{rel(p)} ({make_html})" for p in (nb, zf) if not p.is_file()]
        assignments[name] = (nb, zf)
    if missing:
        raise DistError(f"the bundle of profile {profile!r} lacks: " + "; ".join(missing))
    offered_wheel = html / "_static" / "downloads" / wheel.name
    if not offered_wheel.is_file() or file_sha256(offered_wheel) != file_sha256(wheel):
        raise DistError(f"{rel(wheel)} is not the wheel the book offers "
                        f"({rel(offered_wheel)}): rebuild the HTML ({make_html})")
    return Parts(html, student, pdfs, wheel, assignments, artifacts)


# --------------------------------------------------------------------------------------------
# The parts that are extracted, not copied: figures and the ledger

_FIGURE = re.compile(r'<figure\b[^>]*\bid="([^"]+)"[^>]*>(.*?)</figure>', re.S)
_IMG = re.compile(r'<img\b[^>]*>', re.S)
_ATTR = re.compile(r'\b(src|alt)="([^"]*)"')
_NUMBER = re.compile(r'<span class="caption-number">\s*Fig\.\s*([0-9][0-9.]*)\s*</span>')
_CAPTION = re.compile(r'<span class="caption-text">(.*?)</span>\s*<a class="headerlink"', re.S)
_TAG = re.compile(r"<[^>]+>")


def _text(fragment: str) -> str:
    return " ".join(_html.unescape(_TAG.sub("", fragment)).split())


def figures(html_dir: Path, chapters: list[str]) -> list[dict]:
    """The numbered figures of the built HTML, chapter by chapter: label, number, caption, alt
    text and the image file Sphinx wrote (``_images/<hash>.svg``)."""
    found = []
    for chapter in chapters:
        page = html_dir / "chapters" / f"{chapter}.html"
        if not page.is_file():
            continue
        for label, body in _FIGURE.findall(page.read_text(encoding="utf-8")):
            number, img = _NUMBER.search(body), _IMG.search(body)
            if not number or not img:
                continue                        # an unnumbered figure has no name to give it
            attrs = dict(_ATTR.findall(img.group(0)))
            src = (page.parent / _html.unescape(attrs.get("src", ""))).resolve()
            if not src.is_file():
                raise DistError(f"figure {label} of {page.relative_to(html_dir)} shows "
                                f"{attrs.get('src')!r}, which is not in the HTML")
            caption = _CAPTION.search(body)
            slug = re.sub(r"[^a-z0-9]+", "-", label.lower().removeprefix("fig-")).strip("-")
            n = number.group(1).rstrip(".")
            found.append({"chapter": chapter, "number": n, "label": label,
                          "file": f"{chapter}/fig-{n}-{slug}{src.suffix}",
                          "caption": _text(caption.group(1)) if caption else "",
                          "alt": _html.unescape(attrs.get("alt", "")), "source": src})
    return found


def figures_index_md(rows: list[dict]) -> str:
    """The figures' index as Markdown: a table of number, file and caption.  The captions' math
    (MathJax's ``\\(...\\)`` in the HTML) is written ``$...$``, which Markdown viewers with
    math (GitHub's, Jupyter's) typeset; table pipes are escaped."""
    lines = ["# Figures", "", "Every numbered figure of the book, as an image file named by its "
             "number in the book. Reuse them citing the book (CITATION.cff).", "",
             "| Figure | File | Caption |", "|---|---|---|"]
    for r in rows:
        caption = re.sub(r"\\\((.+?)\\\)", r"$\1$", r["caption"]).replace("|", "\\|")
        lines.append(f"| Fig. {r['number']} | [{r['file']}]({r['file']}) | {caption} |")
    return "\n".join(lines) + "\n"


def ledger(project: Project, profile: str, meta: dict) -> dict:
    """Every claim of the papers (and the book's own) with its verdict and measured value:
    the rows of the ledger page, from the chapters' ``artifacts/*/claims.json``."""
    from .pages import ledger_rows

    rows = ledger_rows(project, profile)
    fields = ("id", "paper", "where", "claim", "short", "source", "verdict", "measured", "key",
              "rule", "reason", "note", "notebook")
    return {**meta, "summary": dict(Counter(r["verdict"] for r in rows)),
            "claims": [{k: r.get(k, "") for k in fields} for r in rows]}


PUBLIC_NOTE = """
This is the **public** bundle: the autograders (hidden tests) are left out of `html/` and
`assignments/`, and both HTML editions were checked for hidden tests and solution lines of the
assignments. A teacher builds the full bundle with `make dist` in a clone of the repository.
"""

README = """# {bundle}

The executable companion to two papers on routing in Mixture-of-Experts models, profile
`{profile}`, commit `{commit}`, built {built}.

* `html/index.html` — the book (full edition: exercise solutions, the teacher's guide with
  the autograders); `html-student/index.html` — the student edition (no solutions).
  Both work offline: open them in a browser.
* `pdf/` — the same two editions as PDF{pdf_note}.
* `{wheel}` — the library: `pip install "{wheel}[notebooks]"` runs any chapter's notebook.
* `assignments/<name>/` — `<name>.ipynb` to hand out; `<name>-autograder.zip` (hidden tests:
  never hand it out) to grade with `otter run -a <name>-autograder.zip submission.ipynb`, or to
  upload to a Gradescope-style grader (it bundles the wheel and lists its requirements).
* `ledger.json` — every claim of the papers with its verdict and what was measured.
* `figures/` — every numbered figure as a file, named by its number (`index.md`, `index.json`);
  reuse them citing the book (`CITATION.cff`).
* `MANIFEST.json`, `MANIFEST.sha256` — the size and SHA-256 of every file
  (`sha256sum -c MANIFEST.sha256`).
"""


# --------------------------------------------------------------------------------------------
# Assembly


def _copy_tree(src: Path, dst: Path) -> None:
    # the HTML folders hold Sphinx's build cache (.doctrees lives beside html/, .buildinfo in it)
    shutil.copytree(src, dst, ignore=shutil.ignore_patterns(".buildinfo", "__pycache__"))
    drop_unreferenced_images(dst)


def drop_unreferenced_images(html: Path) -> list[str]:
    """Remove the files of ``html/_images`` that no page refers to, and return their names.

    Sphinx builds incrementally and never deletes an image it wrote: a figure that changed or
    left a chapter keeps its old file there.  A bundle ships what the pages show, nothing
    else."""
    images = html / "_images"
    if not images.is_dir():
        return []
    pages = "\n".join(p.read_text(encoding="utf-8", errors="replace")
                      for p in html.rglob("*.html"))
    dropped = sorted(f.name for f in images.iterdir() if f.is_file() and f.name not in pages)
    for name in dropped:
        (images / name).unlink()
    return dropped


def manifest_files(folder: Path) -> list[dict]:
    """Every file under ``folder`` but the manifests, sorted, with size and SHA-256."""
    files = sorted(p for p in folder.rglob("*") if p.is_file() and p.relative_to(folder).as_posix()
                   not in MANIFESTS)
    return [{"path": p.relative_to(folder).as_posix(), "size": p.stat().st_size,
             "sha256": file_sha256(p)} for p in files]


def verify(folder: Path) -> list[str]:
    """Problems with a bundle folder against its MANIFEST.json (empty list: it verifies):
    files missing, changed, or not listed."""
    m = json.loads((Path(folder) / "MANIFEST.json").read_text(encoding="utf-8"))
    listed = {f["path"]: f for f in m["files"]}
    actual = {f["path"]: f for f in manifest_files(Path(folder))}
    problems = [f"missing: {p}" for p in sorted(set(listed) - set(actual))]
    problems += [f"not in the manifest: {p}" for p in sorted(set(actual) - set(listed))]
    problems += [f"changed: {p}" for p in sorted(set(listed) & set(actual))
                 if listed[p] != actual[p]]
    return problems


def build(project: Project, profile: str, out: Path | None = None, *,
          pdf_optional: bool = False, commit: str | None = None,
          public: bool = False) -> tuple[Path, Path]:
    """Assemble the bundle of ``profile`` into ``out`` (default ``<root>/dist``); returns the
    bundle folder and its ``.tar.gz``.

    ``public``: the bundle anyone may download (a release's attachment), named ``…-public``:
    the HTML editions are their public copies (:func:`.classroom.public_site`: no autograder,
    checked for hidden tests and solution lines, refused if one is left), the assignments hold
    the student notebooks only. The teacher's bundle (``public=False``) keeps the autograders
    and must not be published."""
    src = parts(project, profile, pdf_optional=pdf_optional)     # refuses before any write
    root = project.root
    out = Path(out) if out is not None else root / "dist"
    name = bundle_name(root) + ("-public" if public else "")
    meta = {"name": NAME, "version": version(root), "profile": profile,
            "commit": commit or git_commit(root),
            "built": _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()}
    out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{name}.", suffix=".tmp", dir=out))
    tmp_tar = out / f".{name}.tar.gz.tmp"
    try:
        tree = work / name
        tree.mkdir()
        if public:
            from .classroom import public_site

            for site, dest in ((src.html, "html"), (src.student_html, "html-student")):
                public_site(site, tree / dest, root / "assignments")   # refuses a leak
        else:
            _copy_tree(src.html, tree / "html")
            _copy_tree(src.student_html, tree / "html-student")
        if src.pdfs:
            (tree / "pdf").mkdir()
            for p in src.pdfs:
                shutil.copyfile(p, tree / "pdf" / p.name)
        shutil.copyfile(src.wheel, tree / src.wheel.name)
        if (root / "CITATION.cff").is_file():     # with the published address, if known
            from .findings import cff_with_home
            from .home import from_environment

            (tree / "CITATION.cff").write_text(cff_with_home(
                (root / "CITATION.cff").read_text(encoding="utf-8"), from_environment()),
                encoding="utf-8")
        for a, (nb, zf) in src.assignments.items():
            (tree / "assignments" / a).mkdir(parents=True)
            shutil.copyfile(nb, tree / "assignments" / a / nb.name)
            if not public:
                shutil.copyfile(zf, tree / "assignments" / a / zf.name)
        atomic_write_json(tree / "ledger.json", ledger(project, profile, meta))
        from .pages import chapter_order

        figs = figures(src.html, chapter_order(project))
        for f in figs:
            (tree / "figures" / f["file"]).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(f["source"], tree / "figures" / f["file"])
        index = [{k: v for k, v in f.items() if k != "source"} for f in figs]
        atomic_write_json(tree / "figures" / "index.json", index)
        (tree / "figures" / "index.md").write_text(figures_index_md(index), encoding="utf-8")
        pdf_note = "" if len(src.pdfs) == len(PDFS) else \
            f" (this bundle has {', '.join(p.name for p in src.pdfs) or 'none of them'})"
        readme = README.format(bundle=name, wheel=src.wheel.name, pdf_note=pdf_note, **meta)
        if public:
            readme += PUBLIC_NOTE
        (tree / "README.md").write_text(readme, encoding="utf-8")
        files = manifest_files(tree)
        atomic_write_json(tree / "MANIFEST.json", {**meta, "files": files})
        (tree / "MANIFEST.sha256").write_text(
            "".join(f"{f['sha256']}  {f['path']}\n" for f in files), encoding="utf-8")
        with tarfile.open(tmp_tar, "w:gz") as tar:
            tar.add(tree, arcname=name)
        # into place: the folder by rename (an older bundle of the same name moved aside first
        # and removed after), then the archive
        final, old = out / name, work / "previous"
        if final.exists():
            final.rename(old)
        tree.rename(final)
        os.replace(tmp_tar, out / f"{name}.tar.gz")
    except BaseException:
        if (work / "previous").exists() and not (out / name).exists():
            (work / "previous").rename(out / name)
        tmp_tar.unlink(missing_ok=True)
        raise
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return out / name, out / f"{name}.tar.gz"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moe_book.dist", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default="default", help=f"one of {', '.join(PROFILES)}")
    ap.add_argument("--out", type=Path, default=None, help="output folder (default: dist/)")
    ap.add_argument("--pdf-optional", action="store_true",
                    help="bundle the PDFs only if they exist (make dist requires them)")
    ap.add_argument("--public", action="store_true",
                    help="the public bundle (…-public): no autograder, HTML checked for hidden "
                         "tests and solutions; what a release attaches")
    ap.add_argument("--check-tag", metavar="vX.Y.Z", default=None,
                    help="only check that a release tag names the version every file states "
                         "(pyproject.toml, __version__, CITATION.cff); print it; build nothing")
    args = ap.parse_args(argv)
    if args.check_tag is not None:
        try:
            print(check_release_tag(find_root(), args.check_tag))
        except DistError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0
    try:
        folder, archive = build(Project(find_root()), args.profile, args.out,
                                pdf_optional=args.pdf_optional, public=args.public)
    except (DistError, PipelineError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    n = len(json.loads((folder / "MANIFEST.json").read_text(encoding="utf-8"))["files"])
    print(f"{folder} ({n} files)\n{archive} ({archive.stat().st_size / 1e6:.1f} MB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
