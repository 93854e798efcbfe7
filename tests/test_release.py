"""Releases (.github/workflows/release.yml, moe_book.dist.check_release_tag): the workflow is
checked offline -- its schema, its trigger (tags vX.Y.Z only), the order of its steps, and that
every `make` target it runs exists -- and the version a tag publishes is the one that
pyproject.toml, the library, CITATION.cff and the book's footer state."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from moe_book import dist
from moe_book import staging
from moe_book.home import parse
from moe_book.project import NAME as PDF_NAME

ROOT = Path(__file__).resolve().parents[1]
WORKFLOW = ROOT / ".github" / "workflows" / "release.yml"
CHECK = Path(os.sys.executable).parent / "check-jsonschema"


@pytest.fixture(scope="module")
def workflow() -> dict:
    wf = yaml.safe_load(WORKFLOW.read_text(encoding="utf-8"))
    wf["on"] = wf.pop(True, wf.get("on"))               # YAML 1.1 reads the key `on` as True
    return wf


def runs(job: dict) -> list[str]:
    return [s.get("run", "") for s in job["steps"]]


def make_targets() -> set[str]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    return set(re.findall(r"^([A-Za-z][A-Za-z0-9_-]*)\s*:(?!=)", text, re.M))


def test_the_workflow_validates_against_its_schema(tmp_path):
    ok = subprocess.run([str(CHECK), "--builtin-schema", "vendor.github-workflows", str(WORKFLOW)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    bad = tmp_path / "release.yml"                     # the validator is not a rubber stamp
    bad.write_text(WORKFLOW.read_text().replace("runs-on:", "runs_on:", 1))
    assert subprocess.run([str(CHECK), "--builtin-schema", "vendor.github-workflows", str(bad)],
                          capture_output=True).returncode != 0


def test_only_a_version_tag_triggers_a_release(workflow):
    assert workflow["on"] == {"push": {"tags": ["v*"]}}
    assert workflow["permissions"] == {"contents": "read"}           # write only where needed
    assert workflow["concurrency"]["cancel-in-progress"] is False    # never half a release


def test_the_build_checks_the_tag_then_runs_make_dist_and_gathers_both_pdfs(workflow):
    build = workflow["jobs"]["build"]
    steps = runs(build)
    check = next(i for i, r in enumerate(steps) if "--check-tag" in r)
    dist_step = next(i for i, r in enumerate(steps) if re.search(r"^make dist$", r, re.M))
    assert check < dist_step, "the version is checked before anything is built"
    assert '--check-tag "$TAG"' in steps[check] and build["env"]["TAG"] == "${{ github.ref_name }}"
    gather = "\n".join(steps[dist_step + 1:])
    # only the public bundle leaves the runner: the teacher's holds every hidden test
    assert "moe_book.dist --public" in steps[dist_step]
    assert 'dist/moe-routing-companion-$version-public.tar.gz' in gather
    assert 'dist/moe-routing-companion-$version.tar.gz' not in gather
    assert 'version="${TAG#v}"' in gather
    pages = next(s for s in build["steps"] if "upload-pages-artifact" in s.get("uses", ""))
    public = next(i for i, r in enumerate(steps) if "moe_book.classroom public" in r)
    assert pages["with"]["path"] == steps[public].split()[-1] == "build/public-html"
    for pdf in (f"{PDF_NAME}.pdf", f"{PDF_NAME}-student.pdf"):
        assert f"build/default/pdf/{pdf}" in gather
    assert build["env"]["BOOK_REPOSITORY_URL"].endswith("${{ github.repository }}")
    # every make target any job runs exists in the Makefile
    targets = make_targets()
    called = {t for job in workflow["jobs"].values() for r in runs(job)
              for t in re.findall(r"(?:^|&&|;)\s*make\s+([a-z][a-z0-9_-]*)", r, re.M)}
    assert {"env", "dist", "publish"} <= called and called <= targets, called - targets


def test_the_release_attaches_the_bundle_and_both_pdfs(workflow):
    job = workflow["jobs"]["release"]
    assert job["needs"] == "build" and job["permissions"] == {"contents": "write"}
    assert "container" not in job, "the gh CLI is on the runner, not in the build's container"
    create = next(r for r in runs(job) if "gh release create" in r)
    assert '"$TAG"' in create and "--verify-tag" in create
    for asset in ("release/moe-routing-companion-*-public.tar.gz", f"release/{PDF_NAME}.pdf",
                  f"release/{PDF_NAME}-student.pdf"):
        assert asset in create, asset
    token = next(s for s in job["steps"] if "gh release create" in s.get("run", ""))["env"]
    assert token == {"GH_TOKEN": "${{ github.token }}"}
    assert workflow["jobs"]["deploy"]["needs"] == "build"


def test_the_make_target_check_can_fail():
    # the pattern finds the targets the Makefile defines, and a variable assignment is none
    targets = make_targets()
    assert {"dist", "pdf", "html", "publish", "env", "wheel"} <= targets
    assert "SHELL" not in targets and "VERSION" not in targets and "distt" not in targets


# ---- the version ------------------------------------------------------------------------------

def test_every_file_states_the_version_of_pyproject():
    stated = dist.stated_versions(ROOT)
    assert set(stated.values()) == {dist.version(ROOT)}, stated
    assert dist.check_release_tag(ROOT, f"v{dist.version(ROOT)}") == dist.version(ROOT)


@pytest.mark.parametrize("tag", ["0.1.0", "v0.1", "v0.1.0-rc1", "release-0.1.0", "v0.1.0.1", ""])
def test_a_tag_that_is_not_vXYZ_is_refused_by_name(tag):
    with pytest.raises(dist.DistError) as err:
        dist.check_release_tag(ROOT, tag)
    assert f"release tag {tag!r} is not accepted" in str(err.value) and "vX.Y.Z" in str(err.value)


def test_a_tag_or_a_file_that_disagrees_is_refused_naming_it(tmp_path):
    root = tmp_path / "repo"
    (root / "src" / "moe_routing").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", root)
    shutil.copy(ROOT / "CITATION.cff", root)
    shutil.copy(ROOT / "src" / "moe_routing" / "__init__.py", root / "src" / "moe_routing")
    v = dist.version(root)
    major, minor, patch = map(int, v.split("."))
    newer = f"{major}.{minor}.{patch + 1}"
    with pytest.raises(dist.DistError, match=rf"names version {re.escape(newer)}, but "
                                              rf"pyproject.toml says '{re.escape(v)}'"):
        dist.check_release_tag(root, f"v{newer}")
    cff = root / "CITATION.cff"
    cff.write_text(cff.read_text().replace(f"version: {v}", f"version: {newer}"))
    with pytest.raises(dist.DistError) as err:
        dist.check_release_tag(root, f"v{v}")
    assert f"CITATION.cff says '{newer}'" in str(err.value)
    assert "pyproject.toml" not in str(err.value)                  # only the file that differs
    res = subprocess.run([os.sys.executable, "-m", "moe_book.dist", "--check-tag", "v9.9.9"],
                         cwd=ROOT, capture_output=True, text=True)
    assert res.returncode == 2 and res.stderr.startswith("error: release tag 'v9.9.9'")
    assert res.stderr.count("\n") == 1


def test_the_footer_states_the_version_and_the_introduction_links_the_pdfs():
    cfg = yaml.safe_load((ROOT / "book" / "_config.yml").read_text(encoding="utf-8"))
    assert "{version}" in cfg["html"]["extra_footer"]
    staged = staging.versioned_config(cfg, "the PDFs")
    assert f"Version {dist.version(ROOT)} " in staged["html"]["extra_footer"]
    assert "{version}" not in staged["html"]["extra_footer"] and "{version}" in cfg["html"]["extra_footer"]
    assert staged["parse"]["myst_substitutions"]["pdf_editions"] == "the PDFs"
    assert staged["parse"]["myst_enable_extensions"] == cfg["parse"]["myst_enable_extensions"]
    assert "{{ pdf_editions }}" in (ROOT / "notebooks" / "intro.md").read_text(encoding="utf-8")


def test_the_pdf_sentence_never_offers_the_solutions_to_students():
    full, student = Path(f"{PDF_NAME}.pdf"), Path(f"{PDF_NAME}-student.pdf")
    text = staging.pdf_editions_text([full, student])
    assert f"</_static/downloads/{full.name}>" in text and f"/{student.name}>" in text
    assert full.name not in staging.pdf_editions_text([student], student=True)
    home = parse("https://github.com/owner/book")
    online = staging.pdf_editions_text([], home)
    assert f"https://github.com/owner/book/releases/latest/download/{full.name}" in online
    assert f"/{full.name})" not in staging.pdf_editions_text([], home, student=True)
    assert "make pdf" in staging.pdf_editions_text([])


def test_the_changelog_starts_with_what_is_unreleased_and_no_version_is_ahead():
    """CHANGELOG.md: its first section is *Unreleased*; a released section names a version no
    later than pyproject's (a release gives the Unreleased section its version)."""
    from packaging.version import Version

    text = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    sections = re.findall(r"^## \[([^\]]+)\]", text, re.M)
    assert sections and sections[0] == "Unreleased", sections
    current = Version(dist.version(ROOT))
    for name in sections[1:]:
        assert Version(name) <= current, f"CHANGELOG.md has a section for {name}, after {current}"
