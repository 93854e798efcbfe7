"""The book pipeline: MyST notebook --jupytext--> papermill (+ profile parameters) --> executed
notebook + artifacts --> staged Jupyter Book source --> static HTML.

Usage (the Makefile calls these; every command validates its arguments before any work)::

    python -m moe_book.pipeline validate --profile P --device D
    python -m moe_book.pipeline run NAME [NAME ...] --profile P --device D
    python -m moe_book.pipeline stage --profile P        # book source + generated pages
    python -m moe_book.pipeline report --profile P       # exit 1 if any notebook failed

Why not jupyter-cache (what Jupyter Book uses by itself)?  It hashes code cells only, so an edit
in ``src/`` would not re-execute the notebooks that import it.  Here a notebook's *key* is the
SHA-256 of everything its output depends on (:mod:`moe_book.keys`): its MyST source, its
resolved parameters, the profile and device, the lock file and the science library's source.
A notebook re-executes only when its key changed (or its last run failed).

Layout, per profile P (all under ``build/P/``)::

    executed/NAME.ipynb      last successful execution (atomic rename)
    artifacts/NAME/          files the notebook wrote (claims.json, results); swapped atomically
    state/NAME.json          key, status, error, provenance, wall time of the last attempt
    failed/NAME.ipynb        the partial notebook of a failed attempt (for debugging)
    failed/NAME.artifacts/   what that attempt wrote (a chapter may reuse it: training runs)
    book/                    the staged Jupyter Book source (what ``jupyter-book build`` reads)

A failed run never touches ``executed/`` or ``artifacts/``: the previous good outputs stay.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import fcntl
import json
import os
import re
import shutil
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import yaml

from moe_routing.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from moe_routing.fingerprint import PACKAGE_ROOT
from moe_routing.runtime import DEVICES, PROFILES

from .keys import chapter_key, file_sha256

INJECTED = ("profile", "device", "artifacts_dir")


class PipelineError(Exception):
    """A bad argument or input: reported on one line, before any notebook runs."""


# --------------------------------------------------------------------------------------------
# Project layout


@dataclass(frozen=True)
class Project:
    root: Path
    library: Path = PACKAGE_ROOT   # the science package whose source the keys hash

    @property
    def notebooks_dir(self) -> Path:
        return self.root / "notebooks"

    @property
    def book_dir(self) -> Path:
        return self.root / "book"

    def params_file(self, profile: str) -> Path:
        return self.notebooks_dir / "params" / f"{profile}.yaml"

    def build_dir(self, profile: str) -> Path:
        return self.root / "build" / profile

    def html_dir(self, profile: str, edition: str = "full") -> Path:
        """Where the HTML lands: ``book/_build/html`` for the default profile (what ``make book``
        promises), ``build/P/_build/html`` for the others, ``build/P/student/_build/html`` for
        a student edition."""
        if edition == "student":
            return self.build_dir(profile) / "student" / "_build" / "html"
        if profile == "default":
            return self.book_dir / "_build" / "html"
        return self.build_dir(profile) / "_build" / "html"

    def notebook_names(self) -> list[str]:
        return sorted(p.stem for p in self.notebooks_dir.glob("*.md") if p.name != "README.md")

    def notebook_path(self, name: str) -> Path:
        return self.notebooks_dir / f"{name}.md"


def find_root(start: Path | None = None) -> Path:
    here = (start or Path.cwd()).resolve()
    for cand in (here, *here.parents):
        if (cand / "notebooks" / "params").is_dir() and (cand / "book").is_dir():
            return cand
    raise PipelineError(f"no project root (with notebooks/params and book/) above {here}")


# --------------------------------------------------------------------------------------------
# Parameters


def parameters_cell_names(md_path: Path) -> tuple[set[str], str]:
    """Names assigned in the notebook's ``parameters`` cell, and that cell's source."""
    import jupytext

    nb = jupytext.read(md_path)
    cells = [c for c in nb.cells
             if c.cell_type == "code" and "parameters" in c.get("metadata", {}).get("tags", [])]
    if len(cells) != 1:
        raise PipelineError(f"{md_path.name}: expected exactly one code cell tagged `parameters`, "
                            f"found {len(cells)}")
    src = cells[0].source
    names = set()
    for node in ast.parse(src).body:
        targets = node.targets if isinstance(node, ast.Assign) else (
            [node.target] if isinstance(node, ast.AnnAssign) else [])
        for t in targets:
            if isinstance(t, ast.Name):
                names.add(t.id)
    missing = [n for n in INJECTED if n not in names]
    if missing:
        raise PipelineError(f"{md_path.name}: the parameters cell must define {', '.join(missing)}")
    return names, src


#: the key of a profile block that lists the knobs taking the parameters cell's value
INHERIT = "inherit"


def load_params(project: Project, profile: str) -> dict[str, dict]:
    """Read and validate ``notebooks/params/<profile>.yaml`` against every notebook.

    The contract between a chapter and the profiles: the chapter's ``parameters`` cell *is* the
    ``smoke`` profile (the repository keeps no ``smoke.yaml``; one, if present, overrides it —
    the pipeline's own tests use that), and the ``default`` and ``paper`` profiles set **every**
    knob of the cell, or list it under the block's ``inherit:`` to take the cell's value on
    purpose.  A knob forgotten in ``paper.yaml`` would otherwise run the papers' scale at its
    smoke value, silently.

    Checks, each reported on one line naming the bad value: the file exists (but for smoke)
    and is a mapping; every top-level key is a notebook; every notebook has a block; every key
    of a block is a variable of that notebook's parameters cell and is not one of the injected
    names; for default and paper, every knob is set or inherited.
    """
    path = project.params_file(profile)
    if profile == "smoke" and not path.is_file():
        for name in project.notebook_names():
            parameters_cell_names(project.notebook_path(name))
        return {name: {} for name in project.notebook_names()}
    if not path.is_file():
        raise PipelineError(f"missing parameter file {path.relative_to(project.root)}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        raise PipelineError(f"{path.relative_to(project.root)}{where}: malformed YAML "
                            f"({getattr(exc, 'problem', exc)})") from None
    if not isinstance(data, dict):
        raise PipelineError(f"{path.relative_to(project.root)}: expected a mapping of notebook "
                            f"name -> parameters, got {type(data).__name__}")
    names = project.notebook_names()
    rel = path.relative_to(project.root)
    for key in data:
        if key not in names:
            raise PipelineError(f"{rel}: unknown notebook {key!r}; accepted: {', '.join(names)}")
    for name in names:
        if name not in data:
            raise PipelineError(f"{rel}: no block for notebook {name!r} (add `{name}: {{}}`)")
        block = data[name] or {}
        if not isinstance(block, dict):
            raise PipelineError(f"{rel}: block {name!r} must be a mapping, got "
                                f"{type(block).__name__}")
        allowed, _ = parameters_cell_names(project.notebook_path(name))
        knobs = allowed - set(INJECTED)
        inherit = block.pop(INHERIT, [])
        if not (isinstance(inherit, list) and all(isinstance(k, str) for k in inherit)):
            raise PipelineError(f"{rel}: {name}.{INHERIT} = {inherit!r} is not allowed; "
                                "accepted: a list of parameter names")
        for k in [*block, *inherit]:
            if k in INJECTED:
                raise PipelineError(f"{rel}: {name}.{k} is set by the pipeline; remove it")
            if k not in allowed:
                raise PipelineError(f"{rel}: unknown parameter {name}.{k!r}; accepted: "
                                    f"{', '.join(sorted(knobs)) or '(none)'}")
        both = sorted(set(block) & set(inherit))
        if both:
            raise PipelineError(f"{rel}: {name}.{both[0]} is both set and inherited; keep one")
        if profile != "smoke":
            missing = sorted(knobs - set(block) - set(inherit))
            if missing:
                raise PipelineError(
                    f"{rel}: {name}.{missing[0]} is not set for the {profile} profile (set it, "
                    f"or list it under {name}.{INHERIT} to take the parameters cell's value)"
                    + (f"; also missing: {', '.join(missing[1:])}" if missing[1:] else ""))
        data[name] = block
    return data


def check_grid_settings(environ=None) -> None:
    """``EXECUTOR`` and ``WORKERS`` of ``make execute`` (passed to the chapters as
    ``MOE_GRID_EXECUTOR`` / ``MOE_GRID_WORKERS``), checked before anything runs -- also when
    every chapter is up to date and none would read them."""
    import importlib.util

    from moe_routing.executor import ENV_EXECUTOR, ENV_WORKERS, EXECUTORS, parse_workers

    env = os.environ if environ is None else environ
    ex = env.get(ENV_EXECUTOR)
    if ex not in (None, ""):
        if ex.strip().lower() not in EXECUTORS:
            raise PipelineError(f"EXECUTOR ({ENV_EXECUTOR}) = {ex!r} is not allowed; accepted: "
                                + ", ".join(EXECUTORS))
        package = {"ray": "ray", "slurm": "submitit"}.get(ex.strip().lower())
        if package is not None and importlib.util.find_spec(package) is None:
            raise PipelineError(f"EXECUTOR ({ENV_EXECUTOR}) = {ex!r} needs the {package} package: "
                                f"pip install 'moe_routing[{ex.strip().lower()}]'")
    w = env.get(ENV_WORKERS)
    if w not in (None, ""):
        try:
            parse_workers(f"WORKERS ({ENV_WORKERS})", w)
        except ValueError as e:
            raise PipelineError(str(e)) from None


def validate(project: Project, profile: str, device: str,
             notebooks: list[str] | None = None) -> tuple[dict[str, dict], str]:
    """All argument checks; returns the parameters and the resolved device."""
    check_grid_settings()
    if profile not in PROFILES:
        raise PipelineError(f"unknown PROFILE {profile!r}; accepted: {', '.join(PROFILES)}")
    if device not in DEVICES:
        raise PipelineError(f"unknown DEVICE {device!r}; accepted: {', '.join(DEVICES)}")
    names = project.notebook_names()
    for n in notebooks or []:
        if n not in names:
            raise PipelineError(f"unknown notebook {n!r}; accepted: {', '.join(names)}")
    params = load_params(project, profile)
    from moe_routing.runtime import resolve_device

    try:
        resolved = resolve_device(device)
    except ValueError as exc:
        raise PipelineError(str(exc)) from None
    return params, resolved


# --------------------------------------------------------------------------------------------
# Content-addressed keys


def notebook_key(project: Project, name: str, params: dict, profile: str, device: str) -> str:
    return chapter_key(project.notebook_path(name), params, profile, device,
                       project.root / "requirements.lock", project.library)


# --------------------------------------------------------------------------------------------
# Execution


def read_state(path: Path) -> dict | None:
    """The state record, or ``None`` when it is missing or unreadable (a corrupt state makes
    the chapter stale, never crashes the build)."""
    try:
        st = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    return st if isinstance(st, dict) else None


def output_checksums(bdir: Path, name: str) -> dict[str, str]:
    """SHA-256 of every output of a chapter, keyed by its path relative to ``build/P``: the
    executed notebook and every file under ``artifacts/NAME/``."""
    files = [bdir / "executed" / f"{name}.ipynb"]
    art = bdir / "artifacts" / name
    if art.is_dir():
        files += sorted(f for f in art.rglob("*") if f.is_file())
    return {str(f.relative_to(bdir)): file_sha256(f) for f in files if f.is_file()}


def verify_outputs(bdir: Path, name: str, state: dict | None) -> str | None:
    """Why a chapter's recorded outputs cannot be trusted, or ``None`` when every output its
    state lists is present with the recorded checksum (and nothing was added beside them)."""
    if state is None:
        return "no readable state"
    recorded = state.get("outputs")
    if not isinstance(recorded, dict) or not recorded:
        return "state records no output checksums"
    exe = f"executed/{name}.ipynb"
    if exe not in recorded:
        return f"state does not list {exe}"
    for rel, digest in sorted(recorded.items()):
        f = bdir / rel
        if not f.is_file():
            return f"{rel} is missing"
        if file_sha256(f) != digest:
            return f"{rel} does not match its recorded checksum"
    extra = sorted(set(output_checksums(bdir, name)) - set(recorded))
    if extra:
        return f"{extra[0]} was not produced by the recorded execution"
    return None


# Cell timeout per profile (seconds): a hung cell fails its chapter with a clear message instead
# of hanging the build; ``make execute TIMEOUT=s`` overrides it.
CELL_TIMEOUT_S = {"smoke": 600, "default": 1800, "paper": 12 * 3600}


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


def _finalise_notebook(nb, name: str, profile: str, prov: dict, artifacts: Path) -> None:
    """Record provenance and the true paths in the executed notebook.

    papermill records its input as the whole input notebook when given a notebook object
    (doubling the file and leaking every cell, solutions included, into metadata): replace it
    by the source path, and the temporary output/artifact paths by the final ones. What the
    reader sees of the parameters is set at staging time (:func:`reader_notebook`), so changing
    it re-executes nothing.
    """
    pm_meta = nb.metadata.get("papermill", {})
    pm_meta["input_path"] = f"notebooks/{name}.md"
    pm_meta["output_path"] = f"build/{profile}/executed/{name}.ipynb"
    if "parameters" in pm_meta:
        pm_meta["parameters"] = {**pm_meta["parameters"], "artifacts_dir": str(artifacts)}
    nb.metadata["moe_routing"] = prov


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
    params = {k: v for k, v in nb.metadata.get("papermill", {}).get("parameters", {}).items()
              if k not in INJECTED}
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


def _ipc_kernel_manager(sock_dir: str):
    """A kernel manager talking to the kernel over Unix sockets in ``sock_dir`` (a private
    temporary directory) instead of TCP on localhost: no port is opened, and the kernel no
    longer warns that it runs over unencrypted TCP."""
    from jupyter_client.manager import AsyncKernelManager

    class IPCKernelManager(AsyncKernelManager):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.transport = "ipc"
            self.ip = os.path.join(sock_dir, "kernel")

        async def _async_interrupt_kernel(self):
            # jupyter_client interrupts every kernel before shutting it down; an idle kernel
            # then logs "ERROR | KeyboardInterrupt caught in kernel" into a successful build.
            # At shutdown the notebook has finished: ask the kernel to quit instead. (Timeouts
            # still interrupt: nbclient calls the public interrupt_kernel.)
            if self.shutting_down:
                return
            await super()._async_interrupt_kernel()

    return IPCKernelManager


def _clear_leftovers(bdir: Path, name: str) -> None:
    """Remove what an attempt killed mid-way (SIGKILL, power loss) left behind: temporary
    notebooks and artifact folders. Called under the chapter's lock, so no live attempt owns
    them."""
    for d in (bdir / "executed", bdir / "artifacts"):
        for f in d.glob(f".{name}.tmp-*"):
            shutil.rmtree(f) if f.is_dir() else f.unlink()
        for f in d.glob(f".{name}.old-*"):
            shutil.rmtree(f, ignore_errors=True)


def run_notebook(project: Project, name: str, profile: str, device: str, params: dict,
                 force: bool = False, log=print, timeout_s: float | None = None) -> dict:
    """Execute one notebook unless its key is unchanged and its recorded outputs verify;
    returns its state record.

    The chapter's cell outputs and progress messages go to ``build/P/logs/NAME.log`` as they
    happen (``tail -f`` it during a long run); ``timeout_s`` bounds every cell (default: the
    profile's :data:`CELL_TIMEOUT_S`).
    """
    import jupytext
    import nbformat
    import papermill as pm

    from moe_routing.runtime import provenance

    bdir = project.build_dir(profile)
    state_dir, exe_dir, art_root = bdir / "state", bdir / "executed", bdir / "artifacts"
    log_dir = bdir / "logs"
    for d in (state_dir, exe_dir, art_root, log_dir):
        d.mkdir(parents=True, exist_ok=True)
    state_path = state_dir / f"{name}.json"
    key = notebook_key(project, name, params, profile, device)
    timeout_s = CELL_TIMEOUT_S[profile] if timeout_s is None else timeout_s

    with open(state_dir / f"{name}.lock", "w") as lockf:
        try:
            fcntl.flock(lockf, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # another make runs this chapter: wait for it, then re-check
            log(f"[{profile}] {name}: another run holds this chapter; waiting for it")
            fcntl.flock(lockf, fcntl.LOCK_EX)
        _clear_leftovers(bdir, name)
        old = read_state(state_path)
        if not force and old and old.get("key") == key and old.get("status") == "ok":
            why = verify_outputs(bdir, name, old)
            if why is None:
                log(f"[{profile}] {name}: up to date")
                return {**old, "skipped": True}
            log(f"[{profile}] {name}: stale: {why}; re-executing")
        elif not force and old is None and state_path.exists():
            log(f"[{profile}] {name}: stale: its state file is unreadable; re-executing")

        log(f"[{profile}] {name}: executing on {device} (log: {_rel(project, log_dir)}/{name}.log)")
        prov = provenance(profile, device).as_dict()
        tmp_art = art_root / f".{name}.tmp-{os.getpid()}"
        tmp_art.mkdir(parents=True)
        tmp_nb = exe_dir / f".{name}.tmp-{os.getpid()}.ipynb"
        nb = jupytext.read(project.notebook_path(name))
        injected = {**params, "profile": profile, "device": device,
                    "artifacts_dir": str(tmp_art.resolve())}
        t0 = time.perf_counter()
        status, error = "ok", None
        sock_dir = tempfile.mkdtemp(prefix="moe-kernel-")       # private (0700)
        try:
            with _chapter_log(log_dir / f"{name}.log"):
                out = pm.execute_notebook(
                    nb, str(tmp_nb), parameters=injected, kernel_name="python3",
                    cwd=str(project.notebooks_dir), progress_bar=False, log_output=True,
                    request_save_on_cell_execute=False, execution_timeout=timeout_s,
                    kernel_manager_class=_ipc_kernel_manager(sock_dir))
        except Exception as exc:  # noqa: BLE001 -- any notebook error is reported, not raised
            status = "failed"
            error = _short_error(exc, timeout_s)
            out = None
        finally:
            shutil.rmtree(sock_dir, ignore_errors=True)
        wall = time.perf_counter() - t0
        record = {"notebook": name, "key": key, "status": status, "error": error,
                  "wall_s": round(wall, 2), "profile": profile,
                  "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
                  "provenance": prov}
        if status == "ok":
            # Final artifacts dir name replaces the temp name in the displayed parameters.
            _finalise_notebook(out, name, profile, {**prov, "wall_s": record["wall_s"]},
                               (art_root / name).resolve())
            atomic_write_text(exe_dir / f"{name}.ipynb", nbformat.writes(out))
            final = art_root / name
            trash = art_root / f".{name}.old-{os.getpid()}"
            if final.exists():
                os.replace(final, trash)
            os.replace(tmp_art, final)
            shutil.rmtree(trash, ignore_errors=True)
            record["outputs"] = output_checksums(bdir, name)
            log(f"[{profile}] {name}: ok in {wall:.1f} s")
        else:
            failed_dir = bdir / "failed"
            failed_dir.mkdir(exist_ok=True)
            if tmp_nb.exists():
                os.replace(tmp_nb, failed_dir / f"{name}.ipynb")
            # what the failed attempt wrote (e.g. training runs, each written as it finished)
            # is kept for the next attempt to reuse, never for the book
            kept = failed_dir / f"{name}.artifacts"
            shutil.rmtree(kept, ignore_errors=True)
            os.replace(tmp_art, kept)
            if old and old.get("status") == "ok" and verify_outputs(bdir, name, old) is None:
                # the previous good outputs stay in place and stay verifiable
                record["outputs"] = old["outputs"]
            log(f"[{profile}] {name}: FAILED after {wall:.1f} s: {error}")
        if tmp_nb.exists():
            tmp_nb.unlink()
        atomic_write_json(state_path, record)
        return record


def _rel(project: Project, path: Path) -> str:
    try:
        return str(path.relative_to(project.root))
    except ValueError:
        return str(path)


class _chapter_log:
    """Route papermill's cell-output logging (and nbclient's) into one file per chapter for the
    duration of an execution."""

    def __init__(self, path: Path):
        import logging

        self.path = path
        self.handler = logging.FileHandler(path, mode="w", encoding="utf-8")
        self.handler.setFormatter(logging.Formatter("%(asctime)s %(message)s", "%H:%M:%S"))
        self.loggers = [logging.getLogger(n) for n in ("papermill", "nbclient")]

    def __enter__(self):
        import logging

        self.saved = [(lg.level, lg.propagate) for lg in self.loggers]
        for lg in self.loggers:
            lg.addHandler(self.handler)
            lg.setLevel(logging.INFO)
            lg.propagate = False          # the terminal shows one line per chapter, not this
        return self

    def __exit__(self, *exc):
        for lg, (level, prop) in zip(self.loggers, self.saved):
            lg.removeHandler(self.handler)
            lg.setLevel(level)
            lg.propagate = prop
        self.handler.close()
        return False


def _short_error(exc: BaseException, timeout_s: float | None = None) -> str:
    """One readable line: papermill's error name, value and the cell it happened in."""
    ename = getattr(exc, "ename", type(exc).__name__)
    if ename in ("CellTimeoutError", "TimeoutError") or "timed out" in str(exc).lower():
        cell = getattr(exc, "exec_count", None)
        return (f"a cell ran longer than the {timeout_s:g} s cell timeout"
                + (f" (cell [{cell}])" if cell is not None else "")
                + "; raise it with make execute TIMEOUT=seconds")
    evalue = getattr(exc, "evalue", str(exc))
    cell = getattr(exc, "exec_count", None)
    where = f" (cell [{cell}])" if cell is not None else ""
    text = f"{ename}: {evalue}{where}".replace("\n", " ")
    return text[:500]


# --------------------------------------------------------------------------------------------
# Book staging and generated pages


def _copy_if_changed(src: Path, dst: Path) -> None:
    """Copy keeping the target's mtime when content is unchanged, so Sphinx rebuilds only the
    pages that really changed."""
    data = src.read_bytes()
    if dst.exists() and dst.read_bytes() == data:
        return
    atomic_write_bytes(dst, data)


def _write_if_changed(dst: Path, text: str) -> None:
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
                                         lock=project.root / "requirements.lock")
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
    from .pdf import pdf_path

    offered = ("full", "student") if edition == "full" else ("student",)
    return [p for p in (pdf_path(project, profile, e) for e in offered) if p.is_file()]


def pdf_editions_text(pdfs: list[Path], book_home=None, student: bool = False) -> str:
    """The introduction's sentence on the PDF editions (substitution ``pdf_editions``).

    Built PDFs are offered beside the HTML (``_static/downloads``); a book with a home and no
    PDF of its own (the site that ``main`` publishes) links the PDFs attached to the
    repository's latest release (``.github/workflows/release.yml``); otherwise the sentence
    says how to build them."""
    from .pdf import NAME

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


#: book/ files that stage() rewrites (the cited keys; the chapters in the toc) instead of copying
STAGED_LATER = (Path("bibliography.md"), Path("_toc.yml"))


def stage(project: Project, profile: str, edition: str = "full") -> Path:
    """Assemble the Jupyter Book source for ``profile`` under ``build/P/book`` (or, for the
    student edition, ``build/P/book-student``, with every exercise solution cut from the
    sources so that none can reach the HTML, the page sources or the search index)."""
    import nbformat

    from . import home
    from . import pages as bookpages
    from .classroom import strip_notebook, strip_solutions

    if edition not in EDITIONS:
        raise PipelineError(f"unknown edition {edition!r}; accepted: {', '.join(EDITIONS)}")
    try:
        book_home = home.from_environment()      # repository and launch buttons, or none
    except ValueError as exc:
        raise PipelineError(str(exc)) from None
    student = edition == "student"
    bdir = project.build_dir(profile)
    out = bdir / ("book-student" if student else "book")
    out.mkdir(parents=True, exist_ok=True)
    wanted: set[Path] = set()
    for src in project.book_dir.rglob("*"):
        rel = src.relative_to(project.book_dir)
        if rel.parts[0].startswith("_build") or src.is_dir() or "__pycache__" in rel.parts:
            continue
        dst = out / rel
        if rel in STAGED_LATER:
            wanted.add(dst)      # written once, below: a raw copy first would change its mtime
            continue             # on every build, and Sphinx would re-read it every time
        dst.parent.mkdir(parents=True, exist_ok=True)
        if student and src.suffix == ".md":
            _write_if_changed(dst, strip_solutions(_without_teacher_only(src.read_text(encoding="utf-8"))))
        elif rel == Path("_config.yml"):
            cfg = home.configure(yaml.safe_load(src.read_text(encoding="utf-8")), book_home)
            if student:
                cfg["title"] = f"{cfg['title']} (student edition)"
            cfg = versioned_config(cfg, pdf_editions_text(
                pdf_editions(project, profile, edition), book_home, student))
            _write_if_changed(dst, yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
        else:
            _copy_if_changed(src, dst)
        wanted.add(dst)
    names = project.notebook_names()
    bib = out / "bibliography.md"
    if (project.book_dir / "bibliography.md").exists():
        # Sphinx rebuilds only changed pages, and sphinxcontrib-bibtex's list of cited works
        # lives on the bibliography page: record the cited keys in it (a MyST comment), so that a
        # new citation anywhere changes that page and its entries and anchors are rebuilt.
        keys = sorted(cited_keys([project.notebook_path(n) for n in names]
                                 + sorted(project.book_dir.glob("*.md"))))
        text = (project.book_dir / "bibliography.md").read_text(encoding="utf-8")
        _write_if_changed(bib, text.rstrip("\n") + "\n\n% cited: " + " ".join(keys) + "\n")
    chapters = out / "chapters"
    chapters.mkdir(exist_ok=True)
    states = {}
    colab = colab_requirement(project.root, book_home)     # what each notebook installs on Colab
    for name in names:
        states[name] = read_state(bdir / "state" / f"{name}.json")
        exe = bdir / "executed" / f"{name}.ipynb"
        dst = chapters / f"{name}.ipynb"
        broken = exe.exists() and verify_outputs(bdir, name, states[name])
        if broken:  # never hand Sphinx a truncated or altered notebook
            states[name] = {**(states[name] or {}), "status": "corrupt",
                            "error": f"outputs do not verify ({broken}); run make execute"}
            _write_if_changed(dst, bookpages.not_executed_notebook(name, states[name]))
        elif exe.exists():
            nb = nbformat.read(exe, as_version=4)
            if student:
                strip_notebook(nb)
            reader_notebook(nb, name, profile, book_home, colab)
            _write_if_changed(dst, nbformat.writes(nb))
        else:
            _write_if_changed(dst, bookpages.not_executed_notebook(name, states[name]))
        wanted.add(dst)
    gen = out / "generated"
    gen.mkdir(exist_ok=True)
    # Downloads offered by the book: each chapter's MyST source (without solutions in the
    # student edition) and the library's wheel (built by `make wheel`), so that a downloaded
    # chapter can be run where only the book is at hand.
    dl = out / "_static" / "downloads"
    dl.mkdir(parents=True, exist_ok=True)
    downloads = []
    for name in names:
        text = project.notebook_path(name).read_text(encoding="utf-8")
        _write_if_changed(dl / f"{name}.md", strip_solutions(text) if student else text)
        wanted.add(dl / f"{name}.md")
    from moe_routing import __version__

    wheel = project.root / "dist" / f"moe_routing-{__version__}-py3-none-any.whl"
    if wheel.is_file():
        _copy_if_changed(wheel, dl / wheel.name)
        wanted.add(dl / wheel.name)
        downloads.append(wheel.name)
        wanted |= _stage_assignments(project, dl / "assignments", wheel, student)
    for pdf in pdf_editions(project, profile, edition):    # linked from the introduction
        _copy_if_changed(pdf, dl / pdf.name)
        wanted.add(dl / pdf.name)
    for page, text in bookpages.generated_pages(project, profile, states, downloads).items():
        _write_if_changed(gen / page, text)
        wanted.add(gen / page)
    toc = bookpages.staged_toc(project.book_dir / "_toc.yml", names)
    _write_if_changed(out / "_toc.yml", toc)
    wanted.add(out / "_toc.yml")
    # Sphinx copies _static into the site but never deletes there: a download no longer
    # offered (an autograder zip of an older build, a removed chapter's source) would stay
    # in the built site.  Remove it from the site too.
    site_dl = project.html_dir(profile, edition) / "_static" / "downloads"
    offered = {f.relative_to(dl) for f in wanted if dl in f.parents}
    if site_dl.is_dir():
        for f in site_dl.rglob("*"):
            if f.is_file() and f.relative_to(site_dl) not in offered:
                f.unlink()
    site = project.html_dir(profile, edition)      # and Sphinx's _downloads of older builds
    for f in (site.rglob("*-autograder.zip") if site.is_dir() else ()):
        f.unlink()
    for f in out.rglob("*"):  # stale files (a removed chapter) would break the toc check
        if (f.is_file() and f not in wanted and "_build" not in f.parts
                and "__pycache__" not in f.parts):
            f.unlink()
    return out


_CITE = re.compile(r"\{cite(?::[a-z]+)?\}`([^`]+)`")


def cited_keys(paths: list[Path]) -> set[str]:
    """Every bibliography key cited with a ``{cite}`` role in the MyST files ``paths``."""
    keys: set[str] = set()
    for p in paths:
        for group in _CITE.findall(p.read_text(encoding="utf-8")):
            keys.update(k.strip() for k in group.split(",") if k.strip())
    return keys


def failed(project: Project, profile: str) -> list[dict]:
    bad = []
    for name in project.notebook_names():
        bdir = project.build_dir(profile)
        st = read_state(bdir / "state" / f"{name}.json")
        if st is None or st.get("status") != "ok":
            bad.append(st or {"notebook": name, "status": "not executed", "error": None})
        elif (why := verify_outputs(bdir, name, st)) is not None:
            bad.append({**st, "status": "corrupt", "error": why})
    return bad


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moe_book.pipeline", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    for cmd in ("validate", "run", "stage", "report"):
        p = sub.add_parser(cmd)
        p.add_argument("--profile", default="default")
        p.add_argument("--device", default="auto")
        p.add_argument("notebooks", nargs="*")
        if cmd == "validate":
            p.add_argument("--print-device", action="store_true",
                           help="print the resolved device (auto -> cuda or cpu)")
        if cmd == "run":
            p.add_argument("--force", action="store_true", help="execute even if up to date")
            p.add_argument("--timeout", type=float, default=None,
                           help="cell timeout in seconds (default: the profile's)")
        if cmd == "stage":
            p.add_argument("--edition", default="full", help="full | student")
    args = ap.parse_args(argv)
    try:
        project = Project(find_root())
        if args.cmd == "validate":
            _, device = validate(project, args.profile, args.device, args.notebooks)
            if args.print_device:
                print(device)
            return 0
        if args.cmd == "run":
            params, device = validate(project, args.profile, args.device, args.notebooks)
            names = args.notebooks or project.notebook_names()
            status = 0
            for name in names:
                rec = run_notebook(project, name, args.profile, device, params[name],
                                   force=args.force, timeout_s=args.timeout)
                status |= rec["status"] != "ok"
            return status
        if args.cmd == "stage":
            if args.profile not in PROFILES:
                raise PipelineError(f"unknown PROFILE {args.profile!r}; accepted: "
                                    f"{', '.join(PROFILES)}")
            print(stage(project, args.profile, args.edition))
            return 0
        if args.cmd == "report":
            bad = [st for st in failed(project, args.profile)
                   if not args.notebooks or st["notebook"] in args.notebooks]
            for st in bad:
                print(f"[{args.profile}] {st['notebook']}: {st['status']}"
                      + (f": {st['error']}" if st.get("error") else ""), file=sys.stderr)
            return 1 if bad else 0
    except PipelineError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception:  # noqa: BLE001
        traceback.print_exc()
        sys.exit(1)
