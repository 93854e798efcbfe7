"""The book pipeline: MyST notebook --jupytext--> papermill (+ profile parameters) --> executed
notebook + artifacts --> staged Jupyter Book source --> static HTML.

Usage (the Makefile calls these; every command validates its arguments before any work)::

    python -m moe_routing.pipeline validate --profile P --device D
    python -m moe_routing.pipeline run NAME [NAME ...] --profile P --device D
    python -m moe_routing.pipeline stage --profile P        # book source + generated pages
    python -m moe_routing.pipeline report --profile P       # exit 1 if any notebook failed

Why not jupyter-cache (what Jupyter Book uses by itself)?  It hashes code cells only, so an edit
in ``src/`` would not re-execute the notebooks that import it.  Here a notebook's *key* is the
SHA-256 of everything its output depends on: its MyST source, its resolved parameters, the
profile and device, the lock file and every file under ``src/``.  A notebook re-executes only
when its key changed (or its last run failed).

Layout, per profile P (all under ``build/P/``)::

    executed/NAME.ipynb      last successful execution (atomic rename)
    artifacts/NAME/          files the notebook wrote (claims.json, results); swapped atomically
    state/NAME.json          key, status, error, provenance, wall time of the last attempt
    failed/NAME.ipynb        the partial notebook of a failed attempt (for debugging)
    book/                    the staged Jupyter Book source (what ``jupyter-book build`` reads)

A failed run never touches ``executed/`` or ``artifacts/``: the previous good outputs stay.
"""

from __future__ import annotations

import argparse
import ast
import datetime as _dt
import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import sys
import time
import traceback
from dataclasses import dataclass
from pathlib import Path

import yaml

from ._io import atomic_write_bytes, atomic_write_json, atomic_write_text
from .runtime import DEVICES, PROFILES

INJECTED = ("profile", "device", "artifacts_dir")


class PipelineError(Exception):
    """A bad argument or input: reported on one line, before any notebook runs."""


# --------------------------------------------------------------------------------------------
# Project layout


@dataclass(frozen=True)
class Project:
    root: Path

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


def load_params(project: Project, profile: str) -> dict[str, dict]:
    """Read and validate ``notebooks/params/<profile>.yaml`` against every notebook.

    Checks, each reported on one line naming the bad value: the file exists and is a mapping;
    every top-level key is a notebook; every notebook has a block; every key of a block is a
    variable of that notebook's parameters cell and is not one of the injected names.
    """
    path = project.params_file(profile)
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
        for k in block:
            if k in INJECTED:
                raise PipelineError(f"{rel}: {name}.{k} is set by the pipeline; remove it")
            if k not in allowed:
                accepted = sorted(allowed - set(INJECTED))
                raise PipelineError(f"{rel}: unknown parameter {name}.{k!r}; accepted: "
                                    f"{', '.join(accepted) or '(none)'}")
        data[name] = block
    return data


def validate(project: Project, profile: str, device: str,
             notebooks: list[str] | None = None) -> tuple[dict[str, dict], str]:
    """All argument checks; returns the parameters and the resolved device."""
    if profile not in PROFILES:
        raise PipelineError(f"unknown PROFILE {profile!r}; accepted: {', '.join(PROFILES)}")
    if device not in DEVICES:
        raise PipelineError(f"unknown DEVICE {device!r}; accepted: {', '.join(DEVICES)}")
    names = project.notebook_names()
    for n in notebooks or []:
        if n not in names:
            raise PipelineError(f"unknown notebook {n!r}; accepted: {', '.join(names)}")
    params = load_params(project, profile)
    from .runtime import resolve_device

    try:
        resolved = resolve_device(device)
    except ValueError as exc:
        raise PipelineError(str(exc)) from None
    return params, resolved


# --------------------------------------------------------------------------------------------
# Content-addressed keys


def _hash_tree(h: "hashlib._Hash", root: Path) -> None:
    for f in sorted(root.rglob("*")):
        rel = f.relative_to(root).parts
        if (f.is_file() and not f.name.endswith(".pyc")
                and not any(p == "__pycache__" or p.startswith(".") or p.endswith(".egg-info")
                            for p in rel)):
            h.update(str(f.relative_to(root)).encode())
            h.update(b"\0")
            h.update(f.read_bytes())
            h.update(b"\0")


def notebook_key(project: Project, name: str, params: dict, profile: str, device: str) -> str:
    h = hashlib.sha256()
    h.update(b"moe-routing-pipeline-v1\0")
    h.update(project.notebook_path(name).read_bytes())
    h.update(json.dumps({"profile": profile, "device": device, "params": params},
                        sort_keys=True).encode())
    lock = project.root / "requirements.lock"
    h.update(lock.read_bytes() if lock.exists() else b"no-lock")
    _hash_tree(h, project.root / "src")
    return h.hexdigest()


# --------------------------------------------------------------------------------------------
# Execution


def _read_state(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None


def _finalise_notebook(nb, name: str, profile: str, params: dict, prov: dict,
                       artifacts: Path) -> None:
    """Hide the pipeline's plumbing from readers: drop the defaults cell, keep the injected
    cell (the values actually used) with a comment naming the profile, record provenance.

    papermill records its input as the whole input notebook when given a notebook object
    (doubling the file and leaking every cell, solutions included, into metadata): replace it
    by the source path, and the temporary output/artifact paths by the final ones.
    """
    pm_meta = nb.metadata.get("papermill", {})
    pm_meta["input_path"] = f"notebooks/{name}.md"
    pm_meta["output_path"] = f"build/{profile}/executed/{name}.ipynb"
    if "parameters" in pm_meta:
        pm_meta["parameters"] = {**pm_meta["parameters"], "artifacts_dir": str(artifacts)}
    for cell in nb.cells:
        tags = cell.get("metadata", {}).get("tags", [])
        if "parameters" in tags and "remove-cell" not in tags:
            tags.append("remove-cell")
        if "injected-parameters" in tags:
            shown = {k: v for k, v in params.items()}
            lines = [f"# Parameters of the `{profile}` profile (notebooks/params/{profile}.yaml)"]
            lines += [f"{k} = {v!r}" for k, v in shown.items()]
            lines.append(f"device = {prov['device']!r}  # {prov['device_name']}")
            cell.source = "\n".join(lines)
            cell.metadata.setdefault("tags", [])
            if "remove-input" not in cell.metadata["tags"]:
                cell.metadata["tags"].append("hide-input")
    nb.metadata["moe_routing"] = prov


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

    return IPCKernelManager


def run_notebook(project: Project, name: str, profile: str, device: str, params: dict,
                 force: bool = False, log=print) -> dict:
    """Execute one notebook if its key changed; returns its state record."""
    import jupytext
    import nbformat
    import papermill as pm

    from .runtime import provenance

    bdir = project.build_dir(profile)
    state_dir, exe_dir, art_root = bdir / "state", bdir / "executed", bdir / "artifacts"
    for d in (state_dir, exe_dir, art_root):
        d.mkdir(parents=True, exist_ok=True)
    state_path = state_dir / f"{name}.json"
    key = notebook_key(project, name, params, profile, device)

    with open(state_dir / f"{name}.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)  # two makes on one notebook never interleave
        old = _read_state(state_path)
        if (not force and old and old.get("key") == key and old.get("status") == "ok"
                and (exe_dir / f"{name}.ipynb").exists()):
            log(f"[{profile}] {name}: up to date")
            return {**old, "skipped": True}

        log(f"[{profile}] {name}: executing on {device} ...")
        prov = provenance(profile, device).as_dict()
        tmp_art = art_root / f".{name}.tmp-{os.getpid()}"
        shutil.rmtree(tmp_art, ignore_errors=True)
        tmp_art.mkdir(parents=True)
        tmp_nb = exe_dir / f".{name}.tmp-{os.getpid()}.ipynb"
        nb = jupytext.read(project.notebook_path(name))
        injected = {**params, "profile": profile, "device": device,
                    "artifacts_dir": str(tmp_art.resolve())}
        t0 = time.perf_counter()
        status, error = "ok", None
        sock_dir = tempfile.mkdtemp(prefix="moe-kernel-")       # private (0700)
        try:
            out = pm.execute_notebook(nb, str(tmp_nb), parameters=injected, kernel_name="python3",
                                      cwd=str(project.notebooks_dir), progress_bar=False,
                                      log_output=False, request_save_on_cell_execute=False,
                                      kernel_manager_class=_ipc_kernel_manager(sock_dir))
        except Exception as exc:  # noqa: BLE001 -- any notebook error is reported, not raised
            status = "failed"
            error = _short_error(exc)
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
            _finalise_notebook(out, name, profile, params, {**prov, "wall_s": record["wall_s"]},
                               (art_root / name).resolve())
            atomic_write_text(exe_dir / f"{name}.ipynb", nbformat.writes(out))
            final = art_root / name
            trash = art_root / f".{name}.old-{os.getpid()}"
            if final.exists():
                os.replace(final, trash)
            os.replace(tmp_art, final)
            shutil.rmtree(trash, ignore_errors=True)
            log(f"[{profile}] {name}: ok in {wall:.1f} s")
        else:
            failed_dir = bdir / "failed"
            failed_dir.mkdir(exist_ok=True)
            if tmp_nb.exists():
                os.replace(tmp_nb, failed_dir / f"{name}.ipynb")
            shutil.rmtree(tmp_art, ignore_errors=True)
            log(f"[{profile}] {name}: FAILED after {wall:.1f} s: {error}")
        if tmp_nb.exists():
            tmp_nb.unlink()
        atomic_write_json(state_path, record)
        return record


def _short_error(exc: BaseException) -> str:
    """One readable line: papermill's error name, value and the cell it happened in."""
    ename = getattr(exc, "ename", type(exc).__name__)
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


def stage(project: Project, profile: str, edition: str = "full") -> Path:
    """Assemble the Jupyter Book source for ``profile`` under ``build/P/book`` (or, for the
    student edition, ``build/P/book-student``, with every exercise solution cut from the
    sources so that none can reach the HTML, the page sources or the search index)."""
    import nbformat

    from . import bookpages
    from .classroom import strip_notebook, strip_solutions

    if edition not in EDITIONS:
        raise PipelineError(f"unknown edition {edition!r}; accepted: {', '.join(EDITIONS)}")
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
        dst.parent.mkdir(parents=True, exist_ok=True)
        if student and src.suffix == ".md":
            _write_if_changed(dst, strip_solutions(src.read_text(encoding="utf-8")))
        elif student and rel == Path("_config.yml"):
            cfg = yaml.safe_load(src.read_text(encoding="utf-8"))
            cfg["title"] = f"{cfg['title']} (student edition)"
            _write_if_changed(dst, yaml.safe_dump(cfg, sort_keys=False, allow_unicode=True))
        else:
            _copy_if_changed(src, dst)
        wanted.add(dst)
    names = project.notebook_names()
    chapters = out / "chapters"
    chapters.mkdir(exist_ok=True)
    states = {}
    for name in names:
        states[name] = _read_state(bdir / "state" / f"{name}.json")
        exe = bdir / "executed" / f"{name}.ipynb"
        dst = chapters / f"{name}.ipynb"
        if exe.exists() and student:
            nb = nbformat.read(exe, as_version=4)
            strip_notebook(nb)
            _write_if_changed(dst, nbformat.writes(nb))
        elif exe.exists():
            _copy_if_changed(exe, dst)
        else:
            _write_if_changed(dst, bookpages.not_executed_notebook(name, states[name]))
        wanted.add(dst)
    gen = out / "generated"
    gen.mkdir(exist_ok=True)
    for page, text in bookpages.generated_pages(project, profile, states).items():
        _write_if_changed(gen / page, text)
        wanted.add(gen / page)
    toc = bookpages.staged_toc(project.book_dir / "_toc.yml", names)
    _write_if_changed(out / "_toc.yml", toc)
    wanted.add(out / "_toc.yml")
    for f in out.rglob("*"):  # stale files (a removed chapter) would break the toc check
        if (f.is_file() and f not in wanted and "_build" not in f.parts
                and "__pycache__" not in f.parts):
            f.unlink()
    return out


def failed(project: Project, profile: str) -> list[dict]:
    bad = []
    for name in project.notebook_names():
        st = _read_state(project.build_dir(profile) / "state" / f"{name}.json")
        if st is None or st.get("status") != "ok":
            bad.append(st or {"notebook": name, "status": "not executed", "error": None})
    return bad


# --------------------------------------------------------------------------------------------
# Command line


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m moe_routing.pipeline", description=__doc__,
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
                                   force=args.force)
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
