"""Publishing: the CI workflow and the citation file validate against their schemas (offline),
and `make publish` pushes a built book to the gh-pages branch of a remote (a local bare
repository here) with .nojekyll, without touching the working repository's branches."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CHECK = Path(os.sys.executable).parent / "check-jsonschema"


@pytest.mark.parametrize("path,schema", [(".github/workflows/book.yml", "vendor.github-workflows"),
                                         ("CITATION.cff", "vendor.citation-file-format")])
def test_files_validate_against_their_schemas(path, schema, tmp_path):
    ok = subprocess.run([str(CHECK), "--builtin-schema", schema, str(ROOT / path)],
                        capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout + ok.stderr
    # the validator is not a rubber stamp: a misspelt key fails
    bad = tmp_path / Path(path).name
    text = (ROOT / path).read_text()
    bad.write_text(text.replace("steps:", "stepz:", 1) if schema.endswith("workflows")
                   else text.replace("cff-version:", "cff-versoin:", 1))
    assert subprocess.run([str(CHECK), "--builtin-schema", schema, str(bad)],
                          capture_output=True).returncode != 0


def git(*args, cwd=None) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True,
                          check=True).stdout


def test_make_publish_pushes_the_html_to_gh_pages(tmp_path):
    site = tmp_path / "html"
    (site / "_static").mkdir(parents=True)
    (site / "index.html").write_text("<html><body>the book</body></html>")
    (site / "_static" / "style.css").write_text("body {}")
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote))
    branches_before = git("branch", "--list", cwd=ROOT)
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    env.update(GIT_COMMITTER_NAME="test", GIT_COMMITTER_EMAIL="test@example.org")
    for _ in range(2):                       # publishing twice replaces the branch's content
        res = subprocess.run(["make", "--no-print-directory", "publish", f"REMOTE={remote}",
                              f"PUBLISH_DIR={site}"], cwd=ROOT, env=env, capture_output=True,
                             text=True)
        assert res.returncode == 0, res.stdout + res.stderr
    tree = set(git("ls-tree", "-r", "--name-only", "gh-pages", cwd=remote).split())
    assert tree == {".nojekyll", "index.html", "_static/style.css"}
    assert "the book" in git("show", "gh-pages:index.html", cwd=remote)
    assert git("branch", "--list", cwd=ROOT) == branches_before     # no gh-pages here
    # bad input: one line naming what is missing, nothing pushed
    res = subprocess.run(["make", "--no-print-directory", "publish", f"PUBLISH_DIR={site}"],
                         cwd=ROOT, env=env, capture_output=True, text=True)
    assert res.returncode != 0 and "REMOTE" in res.stderr
    empty = tmp_path / "empty"
    empty.mkdir()
    res = subprocess.run(["make", "--no-print-directory", "publish", f"REMOTE={remote}",
                          f"PUBLISH_DIR={empty}"], cwd=ROOT, env=env, capture_output=True,
                         text=True)
    assert res.returncode != 0 and "no built book" in res.stderr
    shutil.rmtree(empty)


def test_make_publish_leaves_autograders_out_and_refuses_a_leaking_site(tmp_path):
    """The full edition built locally offers the autograder zips; the pushed site must not hold
    them, and a site in which a hidden test or a solution shows is refused, nothing pushed."""
    from moe_book.classroom import all_secrets

    site = tmp_path / "html"
    offered = site / "_static" / "downloads" / "assignments"
    offered.mkdir(parents=True)
    (site / "index.html").write_text("<html><body>the book</body></html>")
    (offered / "load_balancing.ipynb").write_text('{"cells": []}')
    (offered / "load_balancing-autograder.zip").write_bytes(b"PK\x05\x06" + b"\0" * 18)
    remote = tmp_path / "remote.git"
    git("init", "-q", "--bare", str(remote))
    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE")}
    env.update(GIT_COMMITTER_NAME="test", GIT_COMMITTER_EMAIL="test@example.org")

    def publish():
        return subprocess.run(["make", "--no-print-directory", "publish", f"REMOTE={remote}",
                               f"PUBLISH_DIR={site}"], cwd=ROOT, env=env, capture_output=True,
                              text=True)

    res = publish()
    assert res.returncode == 0, res.stdout + res.stderr
    tree = set(git("ls-tree", "-r", "--name-only", "gh-pages", cwd=remote).split())
    assert tree == {".nojekyll", "index.html", "_static/downloads/assignments/load_balancing.ipynb"}
    assert (offered / "load_balancing-autograder.zip").is_file()     # the build is not touched
    head = git("rev-parse", "gh-pages", cwd=remote)
    hidden, _ = all_secrets(ROOT / "assignments")
    (site / "teaching.html").write_text(f"<html><body><pre><span>def</span> "
                                        f"<span>{hidden[0]}</span>()</pre></body></html>")
    res = publish()
    assert res.returncode != 0, res.stdout
    assert f"teaching.html: hidden test(s) {hidden[0]}" in res.stderr, res.stderr
    assert git("rev-parse", "gh-pages", cwd=remote) == head          # nothing pushed


def test_the_pages_workflow_configures_pages_and_never_cancels_a_deployment():
    import yaml

    text = (ROOT / ".github" / "workflows" / "book.yml").read_text(encoding="utf-8")
    wf = yaml.safe_load(text)
    # a newer push cancels the running tests of a pull request, never a run on main
    assert wf["concurrency"]["cancel-in-progress"] == "${{ github.event_name == 'pull_request' }}"
    book, deploy = wf["jobs"]["book"], wf["jobs"]["deploy"]
    uses = [s.get("uses", "") for s in book["steps"]]
    configure = next(i for i, u in enumerate(uses) if u.startswith("actions/configure-pages@"))
    upload = next(i for i, u in enumerate(uses) if u.startswith("actions/upload-pages-artifact@"))
    assert configure < upload and book["permissions"]["pages"] == "read"
    assert deploy["concurrency"] == {"group": "pages", "cancel-in-progress": False}
    release = yaml.safe_load((ROOT / ".github" / "workflows" / "release.yml").read_text())
    assert release["jobs"]["deploy"]["concurrency"] == deploy["concurrency"]   # one Pages queue
    # the tests on GitHub require what .ci/run requires
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for var in ("MOE_REQUIRE_BROWSER", "MOE_REQUIRE_POPPLER"):
        assert wf["jobs"]["test"]["env"][var] == "1" and f"{var}=1" in ci
    assert "/usr/bin/chromium" not in text          # any Chromium on PATH does
