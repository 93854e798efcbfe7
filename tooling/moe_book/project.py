"""What every command of the book pipeline shares: the project's layout, the profiles'
parameters, validation, the chapters' keys and the records of verified outputs.

The base of the tooling: the command line (:mod:`moe_book.pipeline`), executing a chapter
(:mod:`moe_book.execution`), staging the book (:mod:`moe_book.staging`), printing it
(:mod:`moe_book.pdf`) and the release bundle (:mod:`moe_book.dist`) build on this module, and it
imports none of them (no circle: ``tests/test_architecture.py`` holds it).

Layout, per profile P (all under ``build/P/``)::

    executed/NAME.ipynb      last successful execution (atomic rename)
    artifacts/NAME/          files the notebook wrote (claims.json, results); swapped atomically
    state/NAME.json          key, status, error, provenance, wall time of the last attempt
    failed/NAME.ipynb        the partial notebook of a failed attempt (for debugging)
    failed/NAME.artifacts/   what that attempt wrote (a chapter may reuse it: training runs)
    book/                    the staged Jupyter Book source (what ``jupyter-book build`` reads)
    pdf/NAME.pdf             the printed book (:func:`pdf_path`)

A failed run never touches ``executed/`` or ``artifacts/``: the previous good outputs stay.
"""


from __future__ import annotations

import ast
import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import yaml

from moe_routing._internal.fingerprint import PACKAGE_ROOT
from moe_routing._internal.runtime import DEVICES, PROFILES

from .keys import chapter_key, file_sha256

INJECTED = ("profile", "device", "artifacts_dir")
#: what the pipeline also injects into a chapter whose parameters cell declares it:
#: ``runs_from``, the folders where cached training runs of this profile may already lie
#: (:func:`run_folders`) -- the chapter reads runs back from them without knowing the layout
INJECTED_IF_DECLARED = ("runs_from",)


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
    """Names assigned in the notebook's ``parameters`` cell, and that cell's source.

    Read once per file version (path, mtime, size): validating the profiles asks for each
    chapter's cell once per profile and per ``same_as`` link, and parsing a chapter costs
    ~50 ms -- 89 parses made a no-op ``make book`` spend 4 s per chapter in validation."""
    st = Path(md_path).stat()
    names, src = _parameters_cell(str(md_path), st.st_mtime_ns, st.st_size)
    return set(names), src


#: where the command line keeps the parsed parameters cells between its processes (``main``
#: sets it to build/.parameters-cells.json): a no-op ``make book`` starts one process per
#: chapter, each validates every chapter's cell, and parsing them (jupytext's import and twelve
#: MyST files) cost 1.2 s of the 1.3 s each process took.  Entries are keyed by the file's
#: content (sha256), so an edited chapter is parsed again; a bad cell is never stored.
CELL_CACHE: Path | None = None


def _read_cell_cache() -> dict:
    try:
        data = json.loads(CELL_CACHE.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _store_cell(md_path: Path, digest: str, names: frozenset, src: str) -> None:
    data = _read_cell_cache()
    data[str(md_path)] = {"sha256": digest, "names": sorted(names), "source": src}
    try:
        CELL_CACHE.parent.mkdir(parents=True, exist_ok=True)
        tmp = CELL_CACHE.with_name(f"{CELL_CACHE.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        os.replace(tmp, CELL_CACHE)               # atomic: a reader sees the old or the new
    except OSError:
        pass                                      # a cache that cannot be written is no cache


@lru_cache(maxsize=64)
def _parameters_cell(md_path: str, _mtime_ns: int, _size: int) -> tuple[frozenset, str]:
    md_path = Path(md_path)
    digest = None
    if CELL_CACHE is not None:
        digest = f"{file_sha256(md_path)} {','.join(INJECTED)}"   # the file, and what is checked
        entry = _read_cell_cache().get(str(md_path))
        if isinstance(entry, dict) and entry.get("sha256") == digest:
            return frozenset(entry["names"]), entry["source"]
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
    if digest is not None:
        _store_cell(md_path, digest, frozenset(names), src)
    return frozenset(names), src


#: the key of a profile block that lists the knobs taking the parameters cell's value
INHERIT = "inherit"
#: the key of a profile block that takes another profile's block whole (``{same_as: paper}``):
#: one scale for a chapter whose paper profile fits the default's budget, kept in one place
SAME_AS = "same_as"
#: the top-level key of a profile file for groups of knobs that several chapters set alike
#: (``shared: {fig2: {...}}``), and the key of a block that takes groups whole (``use: [fig2]``):
#: knobs that define the same runs in two chapters have one home
SHARED, USE = "shared", "use"


def load_params(project: Project, profile: str, _via: tuple = ()) -> dict[str, dict]:
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
    names; for default and paper, every knob is set or inherited.  A block ``{same_as: P}``
    (nothing else) is profile P's block for that notebook, validated there.  Knobs that define
    the same runs in several chapters live once, in a group under the top-level ``shared:``
    key; a block takes a group whole with ``use: [group]`` (a knob set both there and in the
    block, an unknown group and a group no block uses are refused).
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
    groups = data.pop(SHARED, None) or {}
    if not (isinstance(groups, dict) and all(isinstance(g, dict) for g in groups.values())):
        raise PipelineError(f"{rel}: {SHARED} = {groups!r} is not allowed; accepted: a mapping "
                            "of group name -> mapping of knob -> value")
    used: set[str] = set()
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
        if SAME_AS in block:
            other = block[SAME_AS]
            if set(block) != {SAME_AS} or other in (profile, "smoke", *_via) or not (
                    isinstance(other, str) and project.params_file(other).is_file()):
                raise PipelineError(
                    f"{rel}: {name}.{SAME_AS} = {other!r} is not allowed; accepted: the name of "
                    f"another profile with a parameter file (not smoke, not {profile}), as the "
                    "block's only key")
            data[name] = load_params(project, other, (*_via, profile))[name]
            continue
        allowed, _ = parameters_cell_names(project.notebook_path(name))
        knobs = allowed - set(INJECTED) - set(INJECTED_IF_DECLARED)
        block = dict(block)
        use = block.pop(USE, [])
        if not (isinstance(use, list) and all(isinstance(g, str) and g in groups for g in use)):
            raise PipelineError(f"{rel}: {name}.{USE} = {use!r} is not allowed; accepted: a list "
                                f"of the groups under {SHARED}: {', '.join(groups) or '(none)'}")
        for g in use:
            both = sorted(set(groups[g]) & set(block))
            if both:
                raise PipelineError(f"{rel}: {name}.{both[0]} is set both in the block and in "
                                    f"{SHARED}.{g}; keep one")
            block = {**groups[g], **block}
            used.add(g)
        inherit = block.pop(INHERIT, [])
        if not (isinstance(inherit, list) and all(isinstance(k, str) for k in inherit)):
            raise PipelineError(f"{rel}: {name}.{INHERIT} = {inherit!r} is not allowed; "
                                "accepted: a list of parameter names")
        for k in [*block, *inherit]:
            if k in INJECTED or k in INJECTED_IF_DECLARED:
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
    unused = sorted(set(groups) - used)
    if unused:
        raise PipelineError(f"{rel}: {SHARED}.{unused[0]} is used by no block (add "
                            f"`{USE}: [{unused[0]}]` to the chapters that share it, or remove it)")
    return data


#: the environment variables of ``make execute``'s EXECUTOR and WORKERS (those of
#: ``moe_routing.experiments.grid.executor``, which tests/test_pipeline.py holds equal)
GRID_ENV = ("MOE_GRID_EXECUTOR", "MOE_GRID_WORKERS")


def check_grid_settings(environ=None) -> None:
    """``EXECUTOR`` and ``WORKERS`` of ``make execute`` (passed to the chapters as
    ``MOE_GRID_EXECUTOR`` / ``MOE_GRID_WORKERS``), checked before anything runs -- also when
    every chapter is up to date and none would read them."""
    import importlib.util

    env = os.environ if environ is None else environ
    if not any(env.get(k) for k in GRID_ENV):
        return                   # nothing set: no need to import the executor (and torch)
    from moe_routing.experiments.grid.executor import (ENV_EXECUTOR, ENV_WORKERS, EXECUTORS,
                                                       parse_workers)

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
    from moe_routing._internal.runtime import resolve_device

    try:
        resolved = resolve_device(device)
    except ValueError as exc:
        raise PipelineError(str(exc)) from None
    return params, resolved


# --------------------------------------------------------------------------------------------
# Content-addressed keys


def run_folders(project: Project, profile: str, name: str) -> list[Path]:
    """Where cached training runs of ``profile`` may lie for chapter ``name`` (``runs_from``):
    its previous execution's artifacts, what its last failed attempt kept (runs are written as
    each finishes), then every other chapter's artifacts (a chapter that trains the same
    configurations, e.g. the bridge chapter's A-Fig. 2 runs, may have run first).  A run is
    found by its key, so a folder that holds none of the chapter's runs costs one lookup."""
    bdir = project.build_dir(profile)
    others = [bdir / "artifacts" / n for n in project.notebook_names() if n != name]
    return [bdir / "artifacts" / name, bdir / "failed" / f"{name}.artifacts", *others]


def notebook_key(project: Project, name: str, params: dict, profile: str, device: str) -> str:
    return chapter_key(project.notebook_path(name), params, profile, device,
                       project.root / "requirements", project.library)


# --------------------------------------------------------------------------------------------
# Recorded outputs: written by execution, trusted by staging and the report only if they verify


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


def failed(project: Project, profile: str) -> list[dict]:
    """The state of every chapter that did not execute, failed, or whose outputs no longer
    verify (``report`` exits 1 on any)."""
    bad = []
    for name in project.notebook_names():
        bdir = project.build_dir(profile)
        st = read_state(bdir / "state" / f"{name}.json")
        if st is None or st.get("status") != "ok":
            bad.append(st or {"notebook": name, "status": "not executed", "error": None})
        elif (why := verify_outputs(bdir, name, st)) is not None:
            bad.append({**st, "status": "corrupt", "error": why})
    return bad


#: the book's file name (its PDFs, the release bundle)
NAME = "moe-routing-companion"


def pdf_path(project: Project, profile: str, edition: str) -> Path:
    """Where the printed book of ``profile`` and ``edition`` lies (``full`` or ``student``)."""
    suffix = "" if edition == "full" else f"-{edition}"
    return project.build_dir(profile) / "pdf" / f"{NAME}{suffix}.pdf"
