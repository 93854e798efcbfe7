"""The pinned environment: one list of versions, used by make, CI and conda alike."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


def lock_pins() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "requirements.lock").read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.\-]+)==([^\s;]+)", line)
        assert m, f"requirements.lock: not an exact pin: {line!r}"
        pins[m.group(1).lower().replace("_", "-")] = m.group(2)
    return pins


def env_pip(path: Path) -> tuple[dict[str, str], list[str]]:
    """(pins, option lines) of a conda environment file's pip section."""
    env = yaml.safe_load(path.read_text())
    assert "python=3.11" in env["dependencies"]
    pip_block = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    pins, options = {}, []
    for item in pip_block:
        if item.startswith("--"):
            options.append(item)
            continue
        name, version = item.split("==")
        pins[name.lower().replace("_", "-")] = version
    return pins, options


def test_environment_yml_has_exactly_the_lock_pins():
    pins, options = env_pip(ROOT / "environment.yml")
    assert pins == lock_pins()
    # torch's CPU build: pip prefers 2.13.0+cpu there over PyPI's CUDA 2.13.0 for torch==2.13.0
    assert options == ["--extra-index-url https://download.pytorch.org/whl/cpu"]


def test_the_generated_files_are_up_to_date(tmp_path, monkeypatch):
    """environment.yml and binder/environment.yml are what the generator writes from the lock."""
    from moe_book import environment

    for rel in ("environment.yml", "binder/environment.yml", "requirements.lock", "pyproject.toml"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_bytes((ROOT / rel).read_bytes())
    monkeypatch.setattr(environment, "ROOT", tmp_path)
    monkeypatch.setattr(environment.binder_pins, "__defaults__",
                        (tmp_path / "requirements.lock", tmp_path / "pyproject.toml"))
    environment.main()
    for rel in ("environment.yml", "binder/environment.yml"):
        assert (tmp_path / rel).read_text() == (ROOT / rel).read_text(), \
            f"{rel} is stale: python -m moe_book.environment"


def test_binder_runs_the_chapters_without_the_book_tooling():
    pins, options = env_pip(ROOT / "binder" / "environment.yml")
    lock = lock_pins()
    assert pins and all(lock.get(n) == v for n, v in pins.items()), "not the lock's versions"
    assert options == []
    # the library's needs, its notebooks extra and jupytext; torch comes from postBuild
    for name in ("numpy", "scipy", "pyyaml", "tqdm", "threadpoolctl", "matplotlib", "seaborn",
                 "pandas", "ipykernel", "jupytext", "sympy", "filelock"):
        assert name in pins, name
    for name in ("torch", "jupyter-book", "otter-grader", "papermill", "sphinx", "pytest",
                 "playwright", "ray", "ruff"):
        assert name not in pins, name
    assert len(pins) < len(lock) / 2
    post = (ROOT / "binder" / "postBuild").read_text()
    assert 'TORCH_INDEX="${TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"' in post
    assert 'pip install --no-deps --index-url "$TORCH_INDEX" "torch==$torch_version"' in post
    assert (ROOT / "binder" / "postBuild").stat().st_mode & 0o111
    # repo2docker reads binder/ alone when it exists: no second, ignored postBuild at the root
    assert not (ROOT / "postBuild").exists()


def test_torch_is_pinned_to_the_release_with_cpu_and_cuda_wheels():
    assert lock_pins()["torch"] == "2.13.0"


def test_every_declared_dependency_is_locked():
    declared = []
    for path in ("pyproject.toml", "tooling/pyproject.toml"):
        meta = tomllib.loads((ROOT / path).read_text())["project"]
        declared += list(meta.get("dependencies", []))
        for reqs in meta.get("optional-dependencies", {}).values():
            declared += reqs
    pins = lock_pins()
    for req in declared:
        name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0).lower().replace("_", "-")
        assert name in pins, f"{name} is declared but not locked"


def _floors_script():
    import importlib.util

    spec = importlib.util.spec_from_file_location("floors", ROOT / "scripts" / "floors.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_declared_floors_are_the_tested_releases():
    """A floor is a release some test ran on. The library's runtime dependencies (and pandas
    and matplotlib, which it imports) have floors of their own, the releases `make floors`
    installs and tests (scripts/floors.py reads them from pyproject.toml), which the lock
    satisfies; every other requirement's floor is the lock's release series, the one
    `make test` runs on."""
    from packaging.requirements import Requirement
    from packaging.version import Version

    pins = lock_pins()
    own_floors = set(_floors_script().floor_pins(ROOT))
    for path in ("pyproject.toml", "tooling/pyproject.toml"):
        meta = tomllib.loads((ROOT / path).read_text())["project"]
        declared = [(r, path == "pyproject.toml") for r in meta.get("dependencies", [])]
        for reqs in meta.get("optional-dependencies", {}).values():
            declared += [(r, False) for r in reqs]
        for text, runtime in declared:
            req = Requirement(text)
            name = req.name.lower().replace("_", "-")
            locked = Version(pins[name].split("+")[0])
            if path == "pyproject.toml" and req.name.lower() in own_floors:
                assert req.specifier.contains(locked), f"{path}: {req} excludes the lock's {locked}"
                continue
            assert not runtime, f"{path}: runtime dependency {req} has no floor of its own"
            for spec in req.specifier:
                if spec.operator in (">=", "~=", "=="):
                    floor = Version(spec.version)
                    assert (floor.major, floor.minor) == (locked.major, locked.minor), \
                        f"{path}: {req} has floor {floor}, the lock tests {locked}"


def test_make_floors_pins_every_floor_and_selects_tests_that_need_nothing_else(tmp_path):
    floors = _floors_script()
    pins = floors.floor_pins(ROOT)
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    assert {d.split(">")[0].split("<")[0].strip().lower() for d in deps} <= set(pins)
    assert {"pandas", "matplotlib"} <= set(pins) and all("==" in p for p in pins.values())
    chosen = {p.name for p in floors.floor_tests(ROOT)}
    assert "test_boundary_mass.py" in chosen and "test_losses.py" in chosen
    assert not {"test_hf.py", "test_book.py", "test_pipeline.py"} & chosen   # transformers, tooling
    (tmp_path / "tests").mkdir()
    (tmp_path / "pyproject.toml").write_text(
        '[project]\ndependencies = ["numpy>=1.26.4", "torch<3"]\n'
        '[project.optional-dependencies]\nnotebooks = ["pandas>=2.2"]\n')
    with pytest.raises(SystemExit, match="torch<3.*states no floor"):
        floors.floor_pins(tmp_path)


def test_the_wheel_declares_no_extra_for_tooling_it_does_not_contain():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "book" not in extras and "test" not in extras
    assert {"notebooks", "data", "ray", "slurm"} <= set(extras)


FAKE_PYTHON = """#!/bin/bash
# stands for the interpreter of a virtual environment: logs its arguments, installs nothing
echo "$*" >> "$(dirname "$0")/../calls.log"
if [ "$1" = -c ]; then
  case "$2" in *version_info*) exit "${FAKE_TOO_OLD:-0}";; *) echo 3.10.14;; esac
fi
case "$*" in *unreachable.invalid*) exit 1;; esac     # an index that cannot be reached
exit 0
"""


def _make_env(venv: Path, *args: str, too_old: bool = False):
    import os
    import subprocess

    env = {k: v for k, v in os.environ.items() if not k.startswith("MAKE") and k != "TORCH_INDEX"}
    env["FAKE_TOO_OLD"] = "1" if too_old else "0"
    res = subprocess.run(["make", "--no-print-directory", "env", f"VENV={venv}",
                          f"PYTHON={venv}/bin/python", *args], cwd=ROOT, env=env,
                         capture_output=True, text=True)
    log = venv / "calls.log"
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return res, [c for c in calls if c.startswith("-m pip install")]


def test_make_env_installs_torch_alone_from_the_torch_index(tmp_path):
    """The Makefile's install, run with a stand-in interpreter: torch first, alone (--no-deps),
    from TORCH_INDEX (the CPU index by default); the lock from PyPI without any extra index, so
    that no other package can come from PyTorch's index; another index reinstalls torch."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    res, calls = _make_env(venv)
    assert res.returncode == 0, res.stderr
    assert calls[0].endswith("--no-deps --index-url https://download.pytorch.org/whl/cpu "
                             "torch==2.13.0"), calls
    assert calls[1].endswith("-r requirements.lock") and "index" not in calls[1], calls
    assert "torch-index: https://download.pytorch.org/whl/cpu" in (venv / ".installed").read_text()
    assert _make_env(venv)[1] == []                                  # up to date: nothing runs
    cuda = "https://download.pytorch.org/whl/cu128"
    res, calls = _make_env(venv, f"TORCH_INDEX={cuda}")
    assert res.returncode == 0, res.stderr
    assert f"--force-reinstall --index-url {cuda} torch==2.13.0" in calls[0], calls
    assert _make_env(venv, f"TORCH_INDEX={cuda}")[1] == []          # recorded: not again
    assert _make_env(venv)[1] == []          # a later plain `make` keeps the CUDA build
    res, calls = _make_env(venv, "TORCH_INDEX=")                     # PyPI's own torch
    assert not any("torch==" in c for c in calls) and calls[0].endswith("-r requirements.lock")


def test_an_unreachable_torch_index_is_one_clear_error_before_the_lock(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    res, calls = _make_env(venv, "TORCH_INDEX=https://unreachable.invalid/whl")
    assert res.returncode != 0 and len(calls) == 1                   # the lock never ran
    assert ("error: torch==2.13.0 could not be installed from "
            "TORCH_INDEX=https://unreachable.invalid/whl") in res.stderr
    assert not (venv / ".installed").exists()


def test_make_env_refuses_an_old_python_before_pip_runs(tmp_path):
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (venv / "bin" / "python").write_text(FAKE_PYTHON)
    (venv / "bin" / "python").chmod(0o755)
    res, calls = _make_env(venv, too_old=True)
    assert res.returncode != 0 and calls == []
    line = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and "Python >= 3.11 is required" in line[0] and "is 3.10.14" in line[0], \
        res.stderr
    assert not (venv / ".installed").exists()


def test_make_help_names_the_environment_targets_and_settings():
    import subprocess

    out = subprocess.run(["make", "--no-print-directory", "help"], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    for word in ("make env", "make unit", "make clean", "make lock", "PYTHON=", "TORCH_INDEX=",
                 "make book", "make test", "make publish"):
        assert word in out, word
