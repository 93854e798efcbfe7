"""The release bundle (``make dist``, moe_book.dist) and the assignment downloads it gathers.

On the smoke build: every file of the bundle is in its manifest with a checksum that verifies,
the archive holds the same files, every part is there (both HTML editions, wheel, assignments,
ledger, figures named by their numbers), autograders only in the teacher's assignments folder
and in no HTML edition; a missing part is
refused by name before anything is written, and a failure during assembly leaves the previous
bundle, never half of one.  The PDFs are optional here (``make dist`` requires them).
"""

from __future__ import annotations

import hashlib
import json
import re
import tarfile
from dataclasses import dataclass
from pathlib import Path

import pytest

from moe_book import dist
from moe_book.assignments import available
from moe_book.project import PipelineError, Project
from moe_book.staging import _without_teacher_only
from moe_routing._internal.ledger import registry

ROOT = Path(__file__).resolve().parents[1]
PROJECT = Project(ROOT)
NAMES = available()


def test_teacher_only_lines_are_cut_from_the_student_edition():
    text = "a\n% teacher-only\nsecret\n% end teacher-only\nb\n"
    assert _without_teacher_only(text) == "a\nb\n"
    for bad in ("a\n% teacher-only\nsecret\n", "a\n% end teacher-only\n",
                "% teacher-only\n% teacher-only\n% end teacher-only\n"):
        with pytest.raises(PipelineError, match="teacher-only"):
            _without_teacher_only(bad)


def test_the_teachers_guide_links_every_notebook_and_no_autograder():
    """Both editions are published: the guide links every student notebook and no autograder
    (those are built locally with `make assignments`), and says what the library gives away."""
    from moe_book.classroom import all_secrets

    page = (ROOT / "book" / "teaching.md").read_text(encoding="utf-8")
    student = _without_teacher_only(page)
    for name in NAMES:
        nb = f"<_static/downloads/assignments/{name}.ipynb>"
        assert nb in student, name
        assert f"{name}-autograder.zip>" not in page, name
        assert f"\n`{name}`\n: " in page.split("### What the library gives away")[1], name
    assert "make assignments" in student and "otter run" in page and "Gradescope" in page
    hidden, solution = all_secrets(ROOT / "assignments")
    assert [s for s in hidden + solution if s in page] == []


@pytest.fixture(scope="module")
def bundle(smoke_book, student_book, tmp_path_factory):
    out = tmp_path_factory.mktemp("dist")
    folder, archive = dist.build(PROJECT, "smoke", out, pdf_optional=True)
    return folder, archive


@pytest.mark.book
def test_manifest_lists_every_file_and_its_checksums_verify(bundle):
    folder, archive = bundle
    manifest = json.loads((folder / "MANIFEST.json").read_text())
    assert {"version", "profile", "commit", "built"} <= set(manifest)
    assert manifest["profile"] == "smoke" and manifest["version"] == dist.version(ROOT)
    assert re.fullmatch(r"[0-9a-f]{12}(\+dirty)?", manifest["commit"]), manifest["commit"]
    on_disk = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    listed = [f["path"] for f in manifest["files"]]
    assert sorted([*listed, *dist.MANIFESTS]) == on_disk
    for f in manifest["files"]:
        data = (folder / f["path"]).read_bytes()
        assert len(data) == f["size"] and hashlib.sha256(data).hexdigest() == f["sha256"], f
    sums = (folder / "MANIFEST.sha256").read_text().splitlines()
    assert sums == [f"{f['sha256']}  {f['path']}" for f in manifest["files"]]
    assert dist.verify(folder) == []
    with tarfile.open(archive) as tar:
        packed = sorted(m.name for m in tar.getmembers() if m.isfile())
    assert packed == [f"{folder.name}/{p}" for p in on_disk]
    assert folder.name == f"moe-routing-companion-{dist.version(ROOT)}"
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")]   # no leftovers


@pytest.mark.book
def test_the_public_bundle_holds_no_autograder_and_no_hidden_test(bundle, tmp_path):
    from moe_book.classroom import leaks

    teacher, _ = bundle
    assert list(teacher.rglob("*-autograder.zip"))        # the teacher's bundle has them
    folder, archive = dist.build(PROJECT, "smoke", tmp_path, pdf_optional=True, public=True)
    assert folder.name.endswith("-public") and archive.name.endswith("-public.tar.gz")
    assert not list(folder.rglob("*-autograder.zip"))
    for site in ("html", "html-student"):
        assert leaks(folder / site, ROOT / "assignments") == []
    assert sorted(p.name for p in (folder / "assignments").rglob("*.ipynb")) == \
        sorted(p.name for p in (teacher / "assignments").rglob("*.ipynb"))
    assert dist.verify(folder) == [] and "public" in (folder / "README.md").read_text()


@pytest.mark.book
def test_verify_sees_a_changed_file(bundle, tmp_path):
    import shutil

    copy = tmp_path / "copy"
    shutil.copytree(bundle[0], copy)
    (copy / "ledger.json").write_text((copy / "ledger.json").read_text() + " ")
    (copy / "extra.txt").write_text("x")
    assert dist.verify(copy) == ["not in the manifest: extra.txt", "changed: ledger.json"]


@pytest.mark.book
def test_required_parts_are_present(bundle, smoke_book, student_book):
    folder, _ = bundle
    assert (folder / "html" / "index.html").is_file()
    assert (folder / "html-student" / "index.html").is_file()
    wheel = folder / f"moe_routing-{dist.version(ROOT)}-py3-none-any.whl"
    assert wheel.read_bytes() == (ROOT / "dist" / wheel.name).read_bytes()
    for name in NAMES:
        nb = json.loads((folder / "assignments" / name / f"{name}.ipynb").read_text())
        assert nb["metadata"]["otter"]["assignment_name"] == name
        assert (folder / "assignments" / name / f"{name}-autograder.zip").is_file()
        # both editions offer the notebook to hand out, neither an autograder
        for site in ("html", "html-student"):
            assert (folder / site / "_static" / "downloads" / "assignments"
                    / f"{name}.ipynb").is_file()
    assert not [p for p in (folder / "html").rglob("*autograder*")]
    assert not [p for p in (folder / "html-student").rglob("*autograder*")]
    assert not [p for p in student_book.rglob("*autograder*")]
    teaching = (smoke_book / "teaching.html").read_text(encoding="utf-8")
    # the teacher's guide offers the notebooks to hand out, never an autograder (those are built
    # with make assignments where the teacher grades: the public site has none)
    assert all(f"{n}.ipynb" in teaching for n in NAMES)
    assert not re.search(r'href="[^"]*-autograder\.zip"', teaching)


@pytest.mark.book
def test_ledger_json_has_every_claim_with_verdict_and_measurement(bundle):
    ledger = json.loads((bundle[0] / "ledger.json").read_text())
    assert ledger["profile"] == "smoke"
    claims = {c["id"]: c for c in ledger["claims"]}
    assert set(registry()) <= set(claims)
    measured = [c for c in claims.values() if c["verdict"] != "pending"]
    assert measured and all(c["measured"] and c["notebook"] for c in measured)
    recorded = {c["id"]: c for f in (ROOT / "build" / "smoke" / "artifacts").glob("*/claims.json")
                for c in json.loads(f.read_text())}
    assert recorded and all(claims[i]["verdict"] == c["verdict"] and
                            claims[i]["measured"] == c["measured"] for i, c in recorded.items())
    assert sum(ledger["summary"].values()) == len(claims)


@pytest.mark.book
def test_figures_are_files_named_by_their_numbers(bundle, smoke_book):
    folder, _ = bundle
    index = json.loads((folder / "figures" / "index.json").read_text())
    assert len(index) >= 10
    for f in index:
        path = folder / "figures" / f["file"]
        assert path.is_file() and f["file"].startswith(f"{f['chapter']}/fig-{f['number']}-"), f
        assert f["caption"] and f["alt"], f
        page = (smoke_book / "chapters" / f"{f['chapter']}.html").read_text(encoding="utf-8")
        figure = page[page.index(f'id="{f["label"]}"'):]
        figure = figure[:figure.index("</figure>")]
        assert f'<span class="caption-number">Fig. {f["number"]} </span>' in figure
        src = re.search(r'src="\.\./(_images/[^"]+)"', figure).group(1)
        assert path.read_bytes() == (smoke_book / src).read_bytes()
    svg = [f for f in index if f["file"].endswith(".svg")]
    assert svg and (folder / "figures" / svg[0]["file"]).read_text().lstrip().startswith("<")
    assert len({f["file"] for f in index}) == len(index)
    assert "| Fig. " in (folder / "figures" / "index.md").read_text()


@dataclass(frozen=True)
class _Mirror(Project):
    """The smoke build seen through another build folder (symlinks), less some of its parts."""

    mirror: Path = Path()

    def build_dir(self, profile: str) -> Path:
        return self.mirror


def _mirror(tmp_path: Path, without: tuple[str, ...]) -> _Mirror:
    real = ROOT / "build" / "smoke"
    mirror = tmp_path / "build-smoke"
    mirror.mkdir()
    for part in ("_build", "student", "artifacts", "pdf"):
        if part not in without and (real / part).exists():
            (mirror / part).symlink_to(real / part)
    return _Mirror(ROOT, mirror=mirror)


@pytest.mark.book
def test_a_missing_part_is_refused_by_name_before_anything_is_written(smoke_book, student_book,
                                                                      tmp_path):
    out = tmp_path / "out"
    project = _mirror(tmp_path, without=("pdf", "student"))
    with pytest.raises(dist.DistError) as err:
        dist.build(project, "smoke", out)
    msg = str(err.value)
    assert "student/_build/html/index.html (make student PROFILE=smoke)" in msg
    assert "pdf/moe-routing-companion.pdf (make pdf PROFILE=smoke)" in msg
    assert "moe-routing-companion-student.pdf" in msg
    assert not out.exists()
    with pytest.raises(dist.DistError, match="student/_build/html/index.html"):
        dist.build(project, "smoke", out, pdf_optional=True)      # the PDFs alone are optional
    with pytest.raises(ValueError, match="profile"):
        dist.parts(PROJECT, "nope")


@pytest.mark.book
def test_a_failure_during_assembly_leaves_no_half_bundle(bundle, monkeypatch, tmp_path):
    import shutil

    out = tmp_path / "out"
    out.mkdir()
    previous = out / bundle[0].name
    shutil.copytree(bundle[0], previous)
    shutil.copyfile(bundle[1], out / bundle[1].name)
    before = sorted(p.relative_to(out) for p in out.rglob("*"))

    def broken(*args, **kw):
        raise OSError("disk full")

    monkeypatch.setattr(dist, "figures", broken)
    with pytest.raises(OSError, match="disk full"):
        dist.build(PROJECT, "smoke", out, pdf_optional=True)
    assert sorted(p.relative_to(out) for p in out.rglob("*")) == before
    assert dist.verify(previous) == []


def test_images_no_page_shows_are_left_out(tmp_path):
    from moe_book.dist import drop_unreferenced_images

    html = tmp_path / "html"
    (html / "_images").mkdir(parents=True)
    (html / "chapters").mkdir()
    for name in ("fig-a.svg", "old-b.svg", "shown-c.png"):
        (html / "_images" / name).write_text("x")
    (html / "chapters" / "a.html").write_text('<img src="../_images/fig-a.svg">')
    (html / "index.html").write_text('<a href="_images/shown-c.png">c</a>')
    assert drop_unreferenced_images(html) == ["old-b.svg"]
    assert sorted(p.name for p in (html / "_images").iterdir()) == ["fig-a.svg", "shown-c.png"]


def test_figures_index_writes_math_for_markdown_viewers():
    from moe_book.dist import figures_index_md

    md = figures_index_md([{"number": "4.2", "file": "boundary_mass/fig-4.2-bm-binary.svg",
                            "caption": r"Mass over \(2wS\), sizes \(|\Delta_k|\) | ratio."}])
    row = md.splitlines()[-1]
    assert row == (r"| Fig. 4.2 | [boundary_mass/fig-4.2-bm-binary.svg]"
                   r"(boundary_mass/fig-4.2-bm-binary.svg) | Mass over $2wS$, sizes "
                   r"$\|\Delta_k\|$ \| ratio. |")


def test_the_wheel_declares_the_licences_of_what_it_ships():
    """The wheel ships data under CC BY 4.0, LGPL-2.1 and the Unicode licence besides MIT code:
    its metadata says so (PEP 639) and carries the licence texts; it advertises no extra for
    tooling it does not contain."""
    import email
    import os
    import subprocess
    import tomllib
    import zipfile

    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    res = subprocess.run(["make", "--no-print-directory", "wheel"], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    wheel = ROOT / "dist" / f"moe_routing-{dist.version(ROOT)}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as zf:
        info = f"moe_routing-{dist.version(ROOT)}.dist-info"
        meta = email.message_from_bytes(zf.read(f"{info}/METADATA"))
        names = set(zf.namelist())
    assert meta["License-Expression"] == "MIT AND CC-BY-4.0 AND LGPL-2.1-only AND Unicode-3.0"
    assert meta["License"] is None                       # the old free-text field, MIT alone
    files = meta.get_all("License-File")
    assert {Path(f).name for f in files} == {"LICENSE", "NOTICE.md", "LICENSE-LGPL-2.1.txt",
                                             "LICENSE-Unicode-3.0.txt"}
    assert all(f"{info}/licenses/{f}" in names for f in files), files
    extras = set(meta.get_all("Provides-Extra"))
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras == set(declared) and not extras & {"book", "test"}, extras
    # every shipped data file's licence text is in the wheel itself as well
    data = "moe_routing/knowledge/sources/data/"
    assert {f"{data}NOTICE.md", f"{data}LICENSE-LGPL-2.1.txt", f"{data}LICENSE-Unicode-3.0.txt"} <= names


@pytest.mark.book
def test_no_built_site_carries_an_autograder(bundle):
    """A site is what gets copied, served or published: neither edition stages a hidden test,
    the teacher's bundle keeps the autograders under assignments/ only."""
    from moe_book.classroom import leaks

    teacher, _ = bundle
    for site in (ROOT / "build" / "smoke" / "_build" / "html", teacher / "html",
                 teacher / "html-student"):
        assert not list(site.rglob("*-autograder.zip")), site
        assert leaks(site, ROOT / "assignments") == [], site
    assert all(p.parent.parent.name == "assignments"
               for p in teacher.rglob("*-autograder.zip"))
