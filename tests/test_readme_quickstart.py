"""The README's library section as a researcher meets it: the install steps in their order (torch
from PyTorch's CPU index first, then the library from the repository, named as the README names
the repository elsewhere), and the quickstart run exactly as the README shows it, with the
library installed from its wheel into a fresh virtual environment outside the repository.

The environment is new and empty but for the wheel; the library's dependencies (torch,
transformers, ...) are reached through a path entry to this environment's site-packages, after
the environment's own (the effect of ``--system-site-packages``, without downloading torch
again). That entry is a plain path, not a site directory: the editable install of the checkout
there (a ``.pth`` file) is not read, so ``import moe_routing`` can only find the wheel's copy,
and the test checks that it does. About 20 s (a wheel build, a transformers import, a tiny
Mixtral's forward pass): it runs in the unit lane."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTION = "## Use the library without the book"


def library_section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(SECTION + "\n")
    end = text.index("\n## ", start + len(SECTION))
    return text[start:end]


def code_blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```$", text, re.S | re.M)


def test_the_install_steps_come_first_and_in_order():
    section = library_section()
    [install] = code_blocks(section, "bash")
    lines = install.strip().splitlines()
    # torch first, from the CPU index (said before the block), then the library with its extra
    assert lines[0] == "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert lines[1] == 'pip install "moe_routing[hf] @ git+https://github.com/<owner>/<repo>"'
    assert section.index("PyTorch's CPU index") < section.index("```bash")
    assert section.index("```bash") < section.index("```python")   # installed, then used
    # the repository's placeholder is the one the README uses for the book's home
    assert "REPOSITORY=https://github.com/<owner>/<repo>" in README.read_text(encoding="utf-8")


def test_the_wheel_named_in_the_readme_is_this_version():
    from moe_book.dist import version

    names = set(re.findall(r"moe_routing-([0-9][^-]*)-py3-none-any\.whl",
                           README.read_text(encoding="utf-8")))
    assert names == {version(ROOT)}, names


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    res = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                          "--no-build-isolation", "--no-index", "--wheel-dir", str(out), str(ROOT)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    [built] = out.glob("moe_routing-*-py3-none-any.whl")
    return built


def test_the_quickstart_runs_from_the_wheel_outside_the_repository(tmp_path, wheel):
    [quickstart] = code_blocks(library_section(), "python")
    assert 8 <= len([ln for ln in quickstart.splitlines() if ln.strip()]) <= 16
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    python = env_dir / "bin" / "python"
    res = subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install",
                          "--quiet", "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stdout + res.stderr
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; "
                                "print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "zz_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = tmp_path / "work"                       # outside the repository: no src/ in reach
    work.mkdir()
    (work / "quickstart.py").write_text(quickstart, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    where = subprocess.run([str(python), "-c", "import moe_routing; print(moe_routing.__file__)"],
                           cwd=work, env=env, capture_output=True, text=True)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(env_dir), where.stdout
    run = subprocess.run([str(python), "quickstart.py"], cwd=work, env=env, capture_output=True,
                         text=True, timeout=600)
    assert run.returncode == 0, run.stdout + run.stderr
    out = run.stdout
    assert re.search(r"^BM\(w\) = \[[0-9. ]+\]$", out, re.M), out
    assert re.search(r"^LB = 0\.0\d+", out, re.M), out               # ≈ α = 0.01 near uniform
    assert re.search(r"^task-router = \d", out, re.M), out
    counts = re.findall(r"^tokens per expert: \[(.*)\]$", out, re.M)
    assert len(counts) == 2 and all(sum(map(int, c.split(","))) == 64 for c in counts), out
