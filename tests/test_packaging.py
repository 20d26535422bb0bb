"""What `pip install .` declares: one pygame (pygame-ce, highway-env's), the extras, the license, the configs."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~ \[;]", requirement.strip(), maxsplit=1)[0].lower()


def test_pygame_and_pygame_ce_are_never_both_required():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = [line.split("#")[0] for line in (ROOT / "requirements.txt").read_text().splitlines() if line.split("#")[0].strip()]
    for names in ({_name(r) for r in project["dependencies"]}, {_name(r) for r in pins}):
        assert "pygame-ce" in names and "pygame" not in names


def test_extras_license_and_package_data_are_declared():
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    extras = cfg["project"]["optional-dependencies"]
    assert {_name(r) for r in extras["ray"]} == {"ray"} and {_name(r) for r in extras["gpu"]} == {"flashinfer-python"}
    assert {"pytest", "hypothesis", "ruff"} <= {_name(r) for r in extras["dev"]}
    assert cfg["project"]["license"] == "MIT" and (ROOT / "LICENSE").read_text().startswith("MIT License")
    assert "configs/**/*.yaml" in cfg["tool"]["setuptools"]["package-data"]["wamdiff"]
    assert (ROOT / "src" / "wamdiff" / "configs" / "demo.yaml").is_file()  # the package's view of configs/
