"""The pinned environment: one list of versions, used by make, CI and conda alike."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

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


def test_environment_yml_has_exactly_the_lock_pins():
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_block = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    env_pins = {}
    for item in pip_block:
        name, version = item.split("==")
        env_pins[name.lower().replace("_", "-")] = version
    assert env_pins == lock_pins()
    assert "python=3.11" in env["dependencies"]


def test_torch_is_pinned_to_the_release_with_cpu_and_cuda_wheels():
    assert lock_pins()["torch"] == "2.13.0"


def test_every_declared_dependency_is_locked():
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = list(meta["dependencies"])
    for extra in ("notebooks", "data", "book", "test", "ray"):
        declared += meta["optional-dependencies"][extra]
    pins = lock_pins()
    for req in declared:
        name = re.match(r"[A-Za-z0-9_.\-]+", req).group(0).lower().replace("_", "-")
        assert name in pins, f"{name} is declared in pyproject.toml but not locked"
