"""The execution pipeline on a small throw-away project: validation, incremental keys,
failure isolation, atomic outputs, provenance."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

import mystnb

from moe_book import execution, staging
from moe_book import project as pl
from moe_book.pipeline import main

NB = mystnb.chapter("""\
    # {title}

    ```{{code-cell}} ipython3
    :tags: [parameters]

    profile = "smoke"
    device = "auto"
    artifacts_dir = None
    n = 3
    fail = False
    ```

    ```{{code-cell}} ipython3
    from moe_routing._internal.ledger import Ledger
    from moe_routing._internal.verdicts import Verdict
    assert not fail, "asked to fail"
    ledger = Ledger(artifacts_dir, notebook="{name}")
    ledger.record("X-{name}", measured=f"n = {{n}}",
                  verdict=Verdict("our extension", "a test record", "test"),
                  where="test", claim="a test claim")
    print("value", n * 2)
    ```
    """)


@pytest.fixture()
def project(tmp_path: Path) -> pl.Project:
    root = tmp_path / "proj"
    (root / "notebooks" / "params").mkdir(parents=True)
    (root / "book").mkdir()
    (root / "src" / "pkg").mkdir(parents=True)
    (root / "src" / "pkg" / "mod.py").write_text("X = 1\n")
    (root / "requirements").mkdir()
    (root / "requirements" / "runtime.in").write_text("torch==2.13.0\n")
    (root / "requirements" / "book.txt").write_text("numpy==2.4.6 \\\n    --hash=sha256:00\n")
    for name in ("alpha", "beta"):
        (root / "notebooks" / f"{name}.md").write_text(NB.format(title=name.title(), name=name))
    (root / "notebooks" / "params" / "smoke.yaml").write_text("alpha:\n  n: 5\nbeta: {}\n")
    for prof in ("default", "paper"):           # every knob set or inherited (the contract)
        (root / "notebooks" / "params" / f"{prof}.yaml").write_text(
            "alpha:\n  n: 5\n  inherit: [fail]\nbeta:\n  inherit: [n, fail]\n")
    return pl.Project(root, library=root / "src" / "pkg")


def run_all(project: pl.Project, profile="smoke", **kw) -> dict[str, dict]:
    params, device = pl.validate(project, profile, "cpu")
    return {n: execution.run_notebook(project, n, profile, device, params[n], log=lambda *_: None, **kw)
            for n in project.notebook_names()}


# --- validation (nothing runs) -----------------------------------------------------------------

@pytest.mark.parametrize("profile,device,match", [
    ("bogus", "cpu", "unknown PROFILE 'bogus'; accepted: smoke, default, paper"),
    ("smoke", "tpu", "unknown DEVICE 'tpu'; accepted: auto, cpu, cuda"),
])
def test_bad_profile_or_device(project, profile, device, match):
    with pytest.raises(pl.PipelineError, match=match):
        pl.validate(project, profile, device)


def test_cuda_without_cuda_is_an_error(project):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    with pytest.raises(pl.PipelineError, match="DEVICE=cuda requested but torch sees no CUDA"):
        pl.validate(project, "smoke", "cuda")


@pytest.mark.parametrize("text,match", [
    ("alpha:\n  nn: 5\nbeta: {}\n", r"unknown parameter alpha\.'nn'; accepted: fail, n"),
    ("alpha: {}\ngamma: {}\nbeta: {}\n", r"unknown notebook 'gamma'; accepted: alpha, beta"),
    ("alpha: {}\n", r"no block for notebook 'beta'"),
    ("alpha: [1, 2]\nbeta: {}\n", r"block 'alpha' must be a mapping"),
    ("alpha:\n  profile: paper\nbeta: {}\n", r"alpha\.profile is set by the pipeline"),
    ("alpha: {n: 1\nbeta: {}\n", r"smoke\.yaml line \d+: malformed YAML"),
    ("- just a list\n", r"expected a mapping of notebook name"),
])
def test_bad_params_file(project, text, match):
    (project.params_file("smoke")).write_text(text)
    with pytest.raises(pl.PipelineError, match=match):
        pl.validate(project, "smoke", "cpu")


def test_unknown_notebook_argument(project):
    with pytest.raises(pl.PipelineError, match="unknown notebook 'gama'; accepted: alpha, beta"):
        pl.validate(project, "smoke", "cpu", ["gama"])


def test_parameters_cell_must_define_injected_names(project):
    path = project.notebook_path("beta")
    path.write_text(path.read_text().replace('artifacts_dir = None\n', ''))
    with pytest.raises(pl.PipelineError, match="beta.md: the parameters cell must define "
                                               "artifacts_dir"):
        pl.validate(project, "smoke", "cpu")


# --- keys --------------------------------------------------------------------------------------

def test_key_depends_on_exactly_the_declared_inputs(project):
    params = {"n": 5}
    key = lambda: pl.notebook_key(project, "alpha", params, "smoke", "cpu")  # noqa: E731
    k0 = key()
    assert key() == k0
    assert pl.notebook_key(project, "alpha", {"n": 6}, "smoke", "cpu") != k0
    assert pl.notebook_key(project, "alpha", params, "default", "cpu") != k0
    assert pl.notebook_key(project, "alpha", params, "smoke", "cuda") != k0
    (project.root / "README.md").write_text("unrelated\n")           # not an input
    (project.root / "src" / "pkg" / "__pycache__").mkdir()
    (project.root / "src" / "pkg" / "__pycache__" / "mod.pyc").write_bytes(b"\0")
    # the lock's versions are an input, not its files' bytes: another hash, a comment
    (project.root / "requirements" / "book.txt").write_text(
        "# via pandas\nnumpy==2.4.6 \\\n    --hash=sha256:01\n")
    assert key() == k0
    for path, text in ((project.root / "src" / "pkg" / "mod.py", "X = 2\n"),
                       (project.root / "requirements" / "runtime.in", "torch==2.13.1\n"),
                       (project.root / "requirements" / "book.txt", "numpy==2.4.7\n"),
                       (project.notebook_path("alpha"), NB.format(title="A2", name="alpha"))):
        before = key()
        path.write_text(text)
        assert key() != before, path


# --- execution ---------------------------------------------------------------------------------

def test_execute_records_outputs_provenance_and_claims(project):
    recs = run_all(project)
    assert {r["status"] for r in recs.values()} == {"ok"}
    bdir = project.build_dir("smoke")
    nb = nbformat.read(bdir / "executed" / "alpha.ipynb", as_version=4)
    prov = nb["metadata"]["moe_routing"]
    assert prov["profile"] == "smoke" and prov["device"] == "cpu"
    assert prov["torch_version"].startswith("2.13.0")
    outputs = "".join(o.get("text", "") for c in nb["cells"] for o in c.get("outputs", []))
    assert "value 10" in outputs                      # n = 5 from the params file was injected
    claims = json.loads((bdir / "artifacts" / "alpha" / "claims.json").read_text())
    assert claims[0]["id"] == "X-alpha" and claims[0]["measured"] == "n = 5"
    state = json.loads((bdir / "state" / "alpha.json").read_text())
    assert state["status"] == "ok" and state["wall_s"] > 0
    assert not list((bdir / "artifacts").glob(".*")), "temporary folders left behind"
    assert not list((bdir / "executed").glob(".*")), "temporary notebooks left behind"


def test_incremental_reexecution(project):
    run_all(project)
    again = run_all(project)
    assert all(r.get("skipped") for r in again.values())
    path = project.notebook_path("beta")
    path.write_text(path.read_text().replace("# Beta", "# Beta, revised"))
    third = run_all(project)
    assert third["alpha"].get("skipped") and not third["beta"].get("skipped")
    (project.root / "src" / "pkg" / "mod.py").write_text("X = 3\n")
    fourth = run_all(project)
    assert not any(r.get("skipped") for r in fourth.values())


def test_failure_keeps_previous_outputs_and_other_notebooks(project):
    run_all(project)
    bdir = project.build_dir("smoke")
    good_nb = (bdir / "executed" / "alpha.ipynb").read_bytes()
    good_claims = (bdir / "artifacts" / "alpha" / "claims.json").read_bytes()
    project.params_file("smoke").write_text("alpha:\n  n: 7\n  fail: true\nbeta:\n  n: 1\n")
    recs = run_all(project)
    assert recs["alpha"]["status"] == "failed"
    assert "AssertionError: asked to fail" in recs["alpha"]["error"]
    assert recs["beta"]["status"] == "ok"
    assert (bdir / "executed" / "alpha.ipynb").read_bytes() == good_nb
    assert (bdir / "artifacts" / "alpha" / "claims.json").read_bytes() == good_claims
    assert (bdir / "failed" / "alpha.ipynb").exists()
    # what the failed attempt wrote is kept beside it for the next attempt, not for the book
    assert (bdir / "failed" / "alpha.artifacts").is_dir()
    assert [s["notebook"] for s in pl.failed(project, "smoke")] == ["alpha"]
    # A failed notebook is retried next time even though its key did not change.
    again = run_all(project)
    assert again["alpha"]["status"] == "failed" and not again["alpha"].get("skipped")
    assert again["beta"].get("skipped")


# --- the command line, as the Makefile calls it ----------------------------------------------

def cli(project: pl.Project, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "moe_book.pipeline", *args],
                          cwd=project.root, capture_output=True, text=True)


def test_cli_bad_input_is_one_line_and_touches_nothing(project):
    run_all(project)
    snapshot = {p: p.read_bytes() for p in project.build_dir("smoke").rglob("*") if p.is_file()}
    for args, msg in ((["run", "--profile", "smok"], "error: unknown PROFILE 'smok'"),
                      (["run", "--profile", "smoke", "--device", "gpu"],
                       "error: unknown DEVICE 'gpu'"),
                      (["stage", "--profile", "smoke", "--edition", "teacher"],   # raised by
                       "error: unknown edition 'teacher'")):                       # moe_book.staging
        res = cli(project, *args)
        assert res.returncode == 2
        assert res.stderr.strip().splitlines() == [res.stderr.strip()]
        assert res.stderr.startswith(msg)
    project.params_file("smoke").write_text("alpha:\n  nn: 5\nbeta: {}\n")
    res = cli(project, "run", "--profile", "smoke", "--device", "cpu")
    assert res.returncode == 2 and "unknown parameter alpha.'nn'" in res.stderr
    after = {p: p.read_bytes() for p in project.build_dir("smoke").rglob("*") if p.is_file()}
    assert after == snapshot


def test_stage_builds_toc_and_generated_pages(project):
    (project.book_dir / "_toc.yml").write_text(textwrap.dedent("""\
        format: jb-book
        root: chapters/alpha
        parts:
          - caption: Main
            chapters:
              - file: chapters/beta
              - file: chapters/not_written_yet
          - caption: Reproduction
            chapters:
              - file: generated/ledger
              - file: generated/status
        """))
    run_all(project)
    out = staging.stage(project, "smoke")
    toc = (out / "_toc.yml").read_text()
    assert "chapters/beta" in toc and "not_written_yet" not in toc
    ledger = (out / "generated" / "ledger.md").read_text()
    assert "X-alpha" in ledger and "n = 5" in ledger
    assert "A-thm42-accuracy" in ledger and "pending" in ledger   # unmeasured claims are listed
    assert "**We measured.** n = 5" in ledger                    # no profile recorded: none shown
    status = (out / "generated" / "status.md").read_text()
    assert status.count("✓ ok") == 2
    # the scale: this build's profile, and that the paper profile never ran here
    assert "those of the `smoke` profile" in status
    assert "has never been executed" in status and "PROFILE=paper" in status
    # the reader's notebook: the Colab cell and an install note first, and the injected cell
    # holding every parameter of the run (profile included) with a local artifacts folder
    staged = nbformat.read(out / "chapters" / "alpha.ipynb", as_version=4)
    assert "pip install" in staged.cells[0].source
    assert "remove-cell" in staged.cells[0].metadata["tags"]
    assert [c.cell_type for c in staged.cells[:2]] == ["code", "markdown"]
    assert staged.cells[0].metadata["tags"] == staging.COLAB_CELL_TAGS and not staged.cells[0].outputs
    assert staged.cells[1].metadata["tags"] == ["remove-cell", "install-note"]
    injected = next(c for c in staged.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert "profile = 'smoke'" in injected.source and "n = 5" in injected.source
    assert 'artifacts_dir = "artifacts/alpha"' in injected.source
    ns: dict = {}
    exec(injected.source, ns)                 # runs as plain Python, overriding the defaults
    assert (ns["profile"], ns["n"], ns["device"]) == ("smoke", 5, "auto")
    before = {f: f.stat().st_mtime_ns for f in out.rglob("*") if f.is_file()}
    assert out / "chapters" / "alpha.ipynb" in before and out / "_toc.yml" in before
    staging.stage(project, "smoke")              # unchanged: no file rewritten, Sphinx reads none
    assert {f: f.stat().st_mtime_ns for f in out.rglob("*") if f.is_file()} == before


def test_status_page_names_the_paper_runs_once_there_are_some(project):
    from moe_book.pages import paper_scale_note

    assert "never been executed" in paper_scale_note(project, "default")
    state = project.build_dir("paper") / "state"
    state.mkdir(parents=True)
    (state / "training.json").write_text("{}")
    note = paper_scale_note(project, "default")
    assert "has been executed here for `training`" in note
    assert "papers' scale" in paper_scale_note(project, "paper")
    assert "same_as" not in note


def test_status_page_names_the_chapters_whose_default_is_the_paper_profile(project):
    from moe_book.pages import paper_scale_note

    (project.params_file("paper")).write_text("alpha:\n  n: 7\n  inherit: [fail]\n"
                                              "beta:\n  inherit: [n, fail]\n")
    (project.params_file("default")).write_text("alpha:\n  same_as: paper\n"
                                                "beta:\n  n: 2\n  inherit: [fail]\n")
    note = paper_scale_note(project, "default")
    assert "For `alpha` the `default` profile is the `paper` profile" in note
    assert "`beta`" not in note


def test_real_params_files_validate():
    """The project's own three profiles are valid for every chapter."""
    root = Path(__file__).resolve().parents[1]
    project = pl.Project(root)
    for profile in ("smoke", "default", "paper"):
        params = pl.load_params(project, profile)
        assert set(params) == set(project.notebook_names())


def test_executed_notebook_does_not_embed_its_source_in_metadata(project):
    """papermill, given a notebook object, stores the whole input in metadata; we must not."""
    run_all(project)
    nb = nbformat.read(project.build_dir("smoke") / "executed" / "alpha.ipynb", as_version=4)
    meta = nb.metadata["papermill"]
    assert meta["input_path"] == "notebooks/alpha.md"
    assert ".tmp-" not in str(meta)


# ---- the chapter–profile contract ----------------------------------------------------------
def test_a_knob_forgotten_in_paper_yaml_is_a_one_line_error(project):
    (project.params_file("paper")).write_text("alpha:\n  n: 5\nbeta:\n  inherit: [n, fail]\n")
    with pytest.raises(pl.PipelineError) as e:
        pl.validate(project, "paper", "cpu")
    msg = str(e.value)
    assert "\n" not in msg
    assert "paper.yaml: alpha.fail is not set for the paper profile" in msg
    assert "inherit" in msg
    pl.validate(project, "smoke", "cpu")          # the smoke profile is the cell: no such rule


@pytest.mark.parametrize("block, match", [
    ("alpha:\n  n: 5\n  inherit: [n, fail]\n", r"alpha\.n is both set and inherited"),
    ("alpha:\n  n: 5\n  inherit: [nope, fail]\n", r"unknown parameter alpha\.'nope'"),
    ("alpha:\n  n: 5\n  inherit: fail\n", r"alpha\.inherit = 'fail' is not allowed"),
])
def test_inherit_lists_are_checked(project, block, match):
    (project.params_file("default")).write_text(block + "beta:\n  inherit: [n, fail]\n")
    with pytest.raises(pl.PipelineError, match=match):
        pl.validate(project, "default", "cpu")


def test_same_as_takes_another_profiles_block_whole(project):
    (project.params_file("paper")).write_text("alpha:\n  n: 7\n  inherit: [fail]\n"
                                              "beta:\n  inherit: [n, fail]\n")
    (project.params_file("default")).write_text("alpha:\n  same_as: paper\n"
                                                "beta:\n  n: 2\n  inherit: [fail]\n")
    params = pl.load_params(project, "default")
    assert params["alpha"] == pl.load_params(project, "paper")["alpha"] == {"n": 7}
    assert params["beta"] == {"n": 2}


@pytest.mark.parametrize("alpha, match", [
    ("  same_as: paper\n  n: 5\n", r"alpha\.same_as = 'paper' is not allowed"),
    ("  same_as: default\n", r"alpha\.same_as = 'default' is not allowed"),
    ("  same_as: smoke\n", r"alpha\.same_as = 'smoke' is not allowed"),
    ("  same_as: nope\n", r"alpha\.same_as = 'nope' is not allowed"),
    ("  same_as: [paper]\n", r"alpha\.same_as = \['paper'\] is not allowed"),
    ("  same_as: paper\n", r"paper\.yaml: alpha\.same_as = 'default' is not allowed"),  # a loop
])
def test_same_as_is_checked(project, alpha, match):
    (project.params_file("paper")).write_text("alpha:\n  same_as: default\n"
                                              "beta:\n  inherit: [n, fail]\n")
    (project.params_file("default")).write_text("alpha:\n" + alpha
                                                + "beta:\n  inherit: [n, fail]\n")
    with pytest.raises(pl.PipelineError, match=match):
        pl.load_params(project, "default")


def test_without_smoke_yaml_the_parameters_cell_is_the_smoke_profile(project):
    project.params_file("smoke").unlink()
    params, _ = pl.validate(project, "smoke", "cpu")
    assert params == {"alpha": {}, "beta": {}}


def test_the_repository_keeps_smoke_values_in_one_place():
    root = Path(__file__).resolve().parents[1]
    assert not (root / "notebooks" / "params" / "smoke.yaml").exists()
    real = pl.Project(root)
    for profile in ("default", "paper"):
        pl.load_params(real, profile)              # every knob set or inherited


def test_grid_settings_are_checked_even_when_nothing_would_run(project, monkeypatch):
    run_all(project)                                # every chapter up to date
    for env, match in [
            ({"MOE_GRID_EXECUTOR": "bogus"}, r"EXECUTOR \(MOE_GRID_EXECUTOR\) = 'bogus'"),
            ({"MOE_GRID_WORKERS": "-2"}, r"WORKERS \(MOE_GRID_WORKERS\)"),
            ({"MOE_GRID_WORKERS": "many"}, r"WORKERS \(MOE_GRID_WORKERS\) = 'many'")]:
        with monkeypatch.context() as m:
            for k, v in env.items():
                m.setenv(k, v)
            with pytest.raises(pl.PipelineError, match=match):
                pl.validate(project, "smoke", "cpu")
    pl.validate(project, "smoke", "cpu")            # and nothing is left behind


# ---- the reader's notebook on Colab ----------------------------------------------------------

def _executed(source: str = "print(1)") -> nbformat.NotebookNode:
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source)]
    return nb


def _git_repo(root: Path) -> str:
    """``root`` as a git repository with one commit of its files; returns the full commit."""
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org", "-c",
           "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "book"]):
        subprocess.run([*git, *args], cwd=root, check=True, capture_output=True)
    return subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True,
                          text=True).stdout.strip()


def run_colab_cell(source: str, monkeypatch, *, colab: bool) -> list[list[str]]:
    """Execute the cell as a kernel would, with ``google.colab`` imported or not and pip
    replaced by a recorder; returns the commands it would have run."""
    import types

    calls = []

    def fake_run(cmd, *args, check=False, **kwargs):
        assert check, "a failed install must stop the notebook"
        calls.append(list(cmd))
        return subprocess.CompletedProcess(cmd, 0)

    monkeypatch.setattr(subprocess, "run", fake_run)
    if colab:
        google = types.ModuleType("google")
        google.colab = types.ModuleType("google.colab")
        monkeypatch.setitem(sys.modules, "google", google)
        monkeypatch.setitem(sys.modules, "google.colab", google.colab)
    else:
        monkeypatch.delitem(sys.modules, "google.colab", raising=False)
    exec(compile(source, "colab-cell", "exec"), {"__name__": "__main__"})
    return calls


def test_the_colab_cell_installs_the_books_commit_on_colab_and_nothing_elsewhere(tmp_path,
                                                                               monkeypatch):
    from moe_book.home import parse
    from moe_routing import __version__

    root = tmp_path / "repo"
    (root / "src" / "moe_routing").mkdir(parents=True)
    (root / "src" / "moe_routing" / "__init__.py").write_text("X = 1\n")
    (root / "pyproject.toml").write_text("[project]\nname = 'moe_routing'\n")
    sha = _git_repo(root)
    home = parse("https://github.com/owner/book")
    requirement = staging.colab_requirement(root, home)
    assert requirement == f"moe_routing[notebooks] @ git+https://github.com/owner/book@{sha}"
    nb = _executed()
    staging.reader_notebook(nb, "alpha", "default", home, requirement)
    cell, note = nb.cells[:2]
    assert cell.cell_type == "code" and cell.metadata["tags"] == ["remove-cell", "colab-install"]
    assert "install-note" in note.metadata["tags"] and "cell above installs it" in note.source
    staging.reader_notebook(nb, "alpha", "default", home, requirement)     # staged again: unchanged
    assert len(nb.cells) == 3

    assert run_colab_cell(cell.source, monkeypatch, colab=False) == []          # a no-op
    assert run_colab_cell(cell.source, monkeypatch, colab=True) == [
        [sys.executable, "-m", "pip", "install", "--quiet", requirement]]
    # an older library left installed is one clear error, not a silent mismatch
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda _name: "0.0.1")
    with pytest.raises(RuntimeError, match=f"0.0.1 is installed, not {__version__}"):
        run_colab_cell(cell.source, monkeypatch, colab=True)


def test_the_colab_cell_falls_back_to_the_books_wheel(tmp_path, monkeypatch):
    """A library with uncommitted changes is not its commit: the site's wheel (built from the
    working tree) is installed; without a home, the wheel uploaded beside the notebook."""
    from moe_book.home import parse
    from moe_routing import __version__

    wheel = f"moe_routing-{__version__}-py3-none-any.whl"
    root = tmp_path / "repo"
    (root / "src").mkdir(parents=True)
    (root / "src" / "mod.py").write_text("X = 1\n")
    _git_repo(root)
    (root / "src" / "mod.py").write_text("X = 2\n")
    home = parse("https://github.com/Owner/book")
    assert staging.colab_requirement(root, home) == \
        f"moe_routing[notebooks] @ https://owner.github.io/book/_static/downloads/{wheel}"
    assert staging.colab_requirement(tmp_path / "not-a-repo", home).endswith(f"/_static/downloads/{wheel}")
    monkeypatch.setenv("GITHUB_SHA", "a" * 40)              # a CI checkout git cannot read
    assert staging.colab_requirement(tmp_path / "not-a-repo", home) == \
        f"moe_routing[notebooks] @ git+https://github.com/Owner/book@{'a' * 40}"

    nb = _executed()
    staging.reader_notebook(nb, "alpha", "default", None, staging.colab_requirement(root, None))
    source = nb.cells[0].source
    assert run_colab_cell(source, monkeypatch, colab=False) == []
    monkeypatch.chdir(tmp_path)
    with pytest.raises(RuntimeError, match=f"{wheel} is not beside this notebook"):
        run_colab_cell(source, monkeypatch, colab=True)
    (tmp_path / wheel).write_bytes(b"")
    assert run_colab_cell(source, monkeypatch, colab=True) == [
        [sys.executable, "-m", "pip", "install", "--quiet", f"{wheel}[notebooks]"]]


def test_stage_offers_the_built_pdfs_and_the_version_in_the_footer(project):
    """The PDFs of ``make pdf`` are copied beside the HTML and linked from the introduction
    (substitution ``pdf_editions``); the student edition offers its own PDF only.  The footer
    states the library's version."""
    import yaml

    from moe_book.project import pdf_path
    from moe_routing import __version__

    (project.book_dir / "_config.yml").write_text(
        "title: T\nhtml:\n  extra_footer: '<p>Version {version}</p>'\nparse:\n"
        "  myst_enable_extensions: [substitution]\n")
    (project.book_dir / "_toc.yml").write_text("format: jb-book\nroot: chapters/alpha\n")
    real = Path(__file__).resolve().parents[1]
    (project.root / "CITATION.cff").write_text((real / "CITATION.cff").read_text())
    (project.book_dir / "references.bib").write_text((real / "book" / "references.bib").read_text())
    out = staging.stage(project, "smoke")
    cfg = yaml.safe_load((out / "_config.yml").read_text())
    assert cfg["html"]["extra_footer"] == f"<p>Version {__version__}</p>"
    assert "make pdf" in cfg["parse"]["myst_substitutions"]["pdf_editions"]
    assert not list((out / "_static" / "downloads").glob("*.pdf"))
    for edition in ("full", "student"):
        pdf_path(project, "smoke", edition).parent.mkdir(parents=True, exist_ok=True)
        pdf_path(project, "smoke", edition).write_bytes(b"%PDF-1.4 " + edition.encode())
    full, student = (pdf_path(project, "smoke", e).name for e in ("full", "student"))
    for edition, offered in (("full", {full, student}), ("student", {student})):
        out = staging.stage(project, "smoke", edition)
        assert {p.name for p in (out / "_static" / "downloads").glob("*.pdf")} == offered
        text = yaml.safe_load((out / "_config.yml").read_text())["parse"]["myst_substitutions"][
            "pdf_editions"]
        assert all(f"/_static/downloads/{n}>" in text for n in offered)
        assert (full in text) == (edition == "full"), text
    pdf_path(project, "smoke", "full").unlink()              # gone from the build: gone here
    out = staging.stage(project, "smoke")
    assert {p.name for p in (out / "_static" / "downloads").glob("*.pdf")} == {student}


@pytest.mark.parametrize("executor,package", [("ray", "ray"), ("SLURM", "submitit")])
def test_a_grid_backend_without_its_package_is_refused_before_anything_runs(executor, package,
                                                                          monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == package else real(name, *a))
    with pytest.raises(pl.PipelineError) as err:
        pl.check_grid_settings({"MOE_GRID_EXECUTOR": executor})
    msg = str(err.value)
    assert f"= {executor!r} needs the {package} package" in msg
    assert f"moe_routing[{executor.lower()}]" in msg
    pl.check_grid_settings({"MOE_GRID_EXECUTOR": "local"})          # needs nothing
    with pytest.raises(pl.PipelineError, match="'dask' is not allowed; accepted: local, ray, slurm"):
        pl.check_grid_settings({"MOE_GRID_EXECUTOR": "dask"})


def test_book_runs_the_grid_chapters_in_order_beside_the_others():
    """`make book` runs GRID_NOTEBOOKS in one stream, training first and alone (its pool
    trains the bridge chapter's runs too), then the others together; beside that stream every
    other chapter BOOK_JOBS
    at a time, longest first, all of them on one thread: every name there is a chapter, every
    chapter with a `workers` knob (a grid of training runs) is among them, and the book is
    staged and reported once, after both streams."""
    import re
    import subprocess

    import yaml

    ROOT = Path(__file__).resolve().parents[1]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    first = re.search(r"^GRID_FIRST\s*:=\s*(.*)$", makefile, re.M).group(1).split()
    after = re.search(r"^GRID_AFTER\s*:=\s*(.*)$", makefile, re.M).group(1).split()
    assert re.search(r"^GRID_NOTEBOOKS\s*:=\s*\$\(GRID_FIRST\) \$\(GRID_AFTER\)$", makefile, re.M)
    grid = first + after
    chapters = {p.stem for p in (ROOT / "notebooks").glob("*.md") if p.stem != "README"}
    assert set(grid) <= chapters, set(grid) - chapters
    assert first == ["training"] and "bridge" in after
    default = yaml.safe_load((ROOT / "notebooks/params/default.yaml").read_text())
    with_workers = {c for c, block in default.items() if isinstance(block, dict) and "workers" in block}
    assert with_workers and with_workers <= set(grid), with_workers - set(grid)
    # the recipe (read, not run: `make -n` would still run the recursive makes)
    recipe = makefile[makefile.index("\nbook:"):].split("\n\n")[0]
    one_thread = recipe.index("export $(ONE_THREAD) $(HEAP_REUSE);")
    grids = recipe.index("$(addprefix run-,$(filter $(GRID_FIRST),$(ALL_NOTEBOOKS)))")
    together = recipe.index("-j2 $(addprefix run-,$(filter $(GRID_AFTER),$(ALL_NOTEBOOKS)))")
    background = recipe.index("& grids=$$!")
    assert grids < together < background
    theory = recipe.index("-j$(BOOK_JOBS) $(addprefix run-,$(THEORY_NOTEBOOKS))")
    wait = recipe.index("wait $$grids")
    stage = recipe.index("moe_book.pipeline stage")
    assert one_thread < grids < background < theory < wait < stage
    assert recipe.count("moe_book.pipeline stage") == 1
    assert "report --profile default $(ALL_NOTEBOOKS)" in recipe
    # the theory stream: every other chapter exactly once, the longest first
    theory = subprocess.run(["make", "-s", "--no-print-directory", "print-theory-notebooks"],
                            cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    assert sorted(theory) == sorted(chapters - set(grid)), theory
    longest = re.search(r"^LONGEST_FIRST\s*:=\s*(.*)$", makefile, re.M).group(1).split()
    assert longest and set(longest) <= set(theory) and theory[:len(longest)] == longest


def test_heap_reuse_is_what_its_benchmark_measures():
    """The allocator settings every lane of the Makefile exports (book, tests, floors) are the
    ones benchmarks/bench_heap_reuse.py reads and measures, and each is a setting glibc reads (a
    name misspelt is ignored by glibc without a word)."""
    import importlib.util
    import re

    ROOT = Path(__file__).resolve().parents[1]
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    line = re.search(r"^HEAP_REUSE\s*:=\s*(.*)$", makefile, re.M).group(1)
    settings = dict(item.split("=", 1) for item in line.split())
    spec = importlib.util.spec_from_file_location("bench_heap_reuse",
                                                  ROOT / "benchmarks/bench_heap_reuse.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    assert settings == bench.heap_reuse() and settings
    with pytest.raises(ValueError, match="no line 'HEAP_REUSE"):
        bench.heap_reuse(ROOT / "README.md")
    glibc = {"MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_",
             "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX"}
    assert set(settings) <= glibc, set(settings) - glibc
    # the mmap threshold is honoured up to 32 MiB on 64-bit glibc (a larger value is refused)
    assert 0 < int(settings["MALLOC_MMAP_THRESHOLD_"]) <= 32 * 2**20
    assert makefile.count("export $(ONE_THREAD) $(HEAP_REUSE);") == 3
    assert makefile.count("export $(ONE_THREAD)") == 3


def test_grid_environment_names_are_the_executors():
    """The pipeline skips importing the executor (and torch) when neither variable is set: its
    names must be the executor's."""
    from moe_routing.experiments.grid.executor import ENV_EXECUTOR, ENV_WORKERS

    assert pl.GRID_ENV == (ENV_EXECUTOR, ENV_WORKERS)


# --- runs_from: what the pipeline injects into a chapter that declares it ---------------------

def declare_runs_from(project, name="beta"):
    path = project.notebook_path(name)
    path.write_text(path.read_text().replace(
        "artifacts_dir = None\n", "artifacts_dir = None\nruns_from = []\n", 1).replace(
        'print("value", n * 2)', 'print("value", n * 2)\nprint("runs_from", runs_from)'))


def test_runs_from_is_injected_where_declared_and_never_shown_on_the_page(project):
    declare_runs_from(project)
    run_all(project)
    bdir = project.build_dir("smoke")
    executed = {n: nbformat.read(bdir / "executed" / f"{n}.ipynb", as_version=4)
                for n in ("alpha", "beta")}
    injected = {n: nb.metadata["papermill"]["parameters"] for n, nb in executed.items()}
    assert "runs_from" not in injected["alpha"]               # not declared: not injected
    assert injected["beta"]["runs_from"] == [
        str(p.resolve()) for p in pl.run_folders(project, "smoke", "beta")]
    assert pl.run_folders(project, "smoke", "beta") == [
        bdir / "artifacts" / "beta", bdir / "failed" / "beta.artifacts", bdir / "artifacts" / "alpha"]
    printed = "".join(o.get("text", "") for c in executed["beta"].cells for o in c.get("outputs", []))
    assert str((bdir / "artifacts" / "alpha").resolve()) in printed
    # the reader's notebook: no build path, an empty list instead
    (project.book_dir / "_toc.yml").write_text(
        "format: jb-book\nroot: chapters/alpha\nchapters:\n  - file: chapters/beta\n")
    out = staging.stage(project, "smoke")
    staged = nbformat.read(out / "chapters" / "beta.ipynb", as_version=4)
    cell = next(c for c in staged.cells if "injected-parameters" in c.metadata.get("tags", []))
    assert "runs_from = []" in cell.source and str(bdir) not in cell.source
    ns: dict = {}
    exec(cell.source, ns)
    assert ns["runs_from"] == []


def test_a_profile_cannot_set_runs_from(project):
    declare_runs_from(project)
    project.params_file("smoke").write_text("alpha:\n  n: 5\nbeta:\n  runs_from: [x]\n")
    with pytest.raises(pl.PipelineError, match=r"beta\.runs_from is set by the pipeline"):
        pl.validate(project, "smoke", "cpu")


def test_the_command_lines_processes_share_the_parsed_parameters_cells(project, monkeypatch):
    """A no-op `make book` starts one `pipeline run` per chapter, and each validates every
    chapter's parameters cell: the command line keeps the parsed cells in
    build/.parameters-cells.json, keyed by the file's content, so a second process parses
    nothing (no jupytext), an edited chapter is parsed again, and none of it outlives main."""
    import jupytext

    monkeypatch.chdir(project.root)
    assert main(["validate", "--profile", "default", "--device", "cpu"]) == 0
    cache = project.root / "build" / ".parameters-cells.json"
    assert sorted(Path(p).stem for p in json.loads(cache.read_text())) == ["alpha", "beta"]
    assert pl.CELL_CACHE is None                       # the tests' own calls never see it

    def no_parse(*_a, **_k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(jupytext, "read", no_parse)
    pl._parameters_cell.cache_clear()                 # as a new process would start
    assert main(["validate", "--profile", "default", "--device", "cpu"]) == 0
    md = project.notebook_path("beta")
    md.write_text(md.read_text() + "\n<!-- edited -->\n")
    pl._parameters_cell.cache_clear()
    with pytest.raises(AssertionError, match="parsed again"):
        main(["validate", "--profile", "default", "--device", "cpu"])
    cache.write_text("{not json")                     # a damaged cache is no cache
    monkeypatch.undo()
    pl._parameters_cell.cache_clear()
    monkeypatch.chdir(project.root)
    assert main(["validate", "--profile", "default", "--device", "cpu"]) == 0


def test_status_page_says_the_shared_device_torch_and_commit_once(project):
    """Device, torch version and commit are the same on every row of a normal build: they are
    said once above the table; a value that differs between chapters keeps its column."""
    from moe_book.pages import status_page

    def state(device, commit):
        return {"status": "ok", "wall_s": 1.0, "finished_at": "2026-01-01T00:00:00",
                "provenance": {"device_name": device, "torch_version": "2.9.0",
                               "git_commit": commit}}

    same = status_page(project, "smoke", {"alpha": state("cpu (2 cores)", "abc123"),
                                          "beta": state("cpu (2 cores)", "abc123")})
    assert "Every chapter listed ran on **cpu (2 cores)**, with torch **2.9.0**, from commit " \
           "`abc123`." in same
    assert "| Chapter | Status | Wall time |\n" in same and same.count("2.9.0") == 1
    assert same.count("✓ ok") == 2
    mixed = status_page(project, "smoke", {"alpha": state("cpu (2 cores)", "abc123"),
                                           "beta": state("cpu (2 cores)", "def456+dirty")})
    assert "| Chapter | Status | Wall time | Commit |" in mixed
    assert "`def456+dirty`" in mixed and "from commit" not in mixed
    assert "on **cpu (2 cores)**, with torch **2.9.0**." in mixed


@pytest.mark.parametrize("text, match", [
    ("shared: {g: {n: 4, fail: false}}\nalpha: {use: [g]}\nbeta: {use: [g]}\n", None),
    ("shared: {g: {n: 4}}\nalpha: {use: [g], n: 5}\nbeta: {n: 1}\n", "set both in the block"),
    ("shared: {g: {n: 4}}\nalpha: {use: [h]}\nbeta: {n: 1}\n", "alpha.use = \\['h'\\]"),
    ("shared: {g: {n: 4}}\nalpha: {n: 2, fail: false}\nbeta: {n: 1, fail: false}\n",
     "shared.g is used by no block"),
    ("shared: [n]\nalpha: {n: 2}\nbeta: {n: 1}\n", "shared = \\['n'\\] is not allowed"),
    ("shared: {g: {m: 4}}\nalpha: {use: [g], n: 2}\nbeta: {n: 1}\n",
     "unknown parameter alpha.'m'"),
])
def test_a_shared_group_is_one_home_for_knobs_of_several_chapters(project, text, match):
    """Both chapters take the group's values; a knob set twice, an unknown or unused group, a
    malformed ``shared`` and a group knob the chapter does not have are refused by name."""
    (project.root / "notebooks" / "params" / "default.yaml").write_text(text)
    if match is None:
        params = pl.load_params(project, "default")
        assert params["alpha"] == params["beta"] == {"n": 4, "fail": False}
    else:
        with pytest.raises(pl.PipelineError, match=match):
            pl.load_params(project, "default")
