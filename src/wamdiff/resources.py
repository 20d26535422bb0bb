"""Where configs and shipped checkpoints are found, so `wamdiff ...` runs from any directory after `pip install`.

Configs are package data (`wamdiff/configs/`, the repository's `configs/`): a path such as `configs/demo.yaml`
is read from the working directory when it is there, else from the installed package. Checkpoint folders named
by a config (`checkpoints/ar_vla`) are read from the working directory when there, else from the folder that the
environment variable `WAMDIFF_CHECKPOINTS` names (`$WAMDIFF_CHECKPOINTS/ar_vla`).
"""

from __future__ import annotations

import os
from importlib.resources import files
from pathlib import Path

CHECKPOINTS_ENV = "WAMDIFF_CHECKPOINTS"
CONFIGS = "configs"
CHECKPOINTS = "checkpoints"


def packaged_configs() -> Path:
    """The configs shipped inside the installed package."""
    return Path(str(files("wamdiff") / CONFIGS))


def _under(path: Path, top: str) -> Path | None:
    """`path` relative to a leading `top/` folder, or None when it does not start with one."""
    parts = path.parts
    return Path(*parts[1:]) if len(parts) > 1 and parts[0] == top else None


def config_file(path: str | Path) -> Path:
    """`path` when it exists, else the packaged config it names (configs/<name>.yaml or <name>.yaml under the package's
    configs), else `path` unchanged (the caller says it is missing)."""
    path = Path(path)
    if path.exists() or path.is_absolute():
        return path
    for rel in (_under(path, CONFIGS), path):
        if rel is not None and (packaged_configs() / rel).is_file():
            return packaged_configs() / rel
    return path


def checkpoints_root() -> Path | None:
    """The folder `WAMDIFF_CHECKPOINTS` names (None when unset)."""
    got = os.environ.get(CHECKPOINTS_ENV)
    return Path(got).expanduser() if got else None


def shipped_path(path: str | Path) -> Path:
    """A checkpoint folder or file a config names: `path` when it exists, else `$WAMDIFF_CHECKPOINTS/<rest>` for a
    path under `checkpoints/` (or `$WAMDIFF_CHECKPOINTS/<path>` for a bare relative name) when that exists, else
    `path` unchanged."""
    path = Path(path)
    root = checkpoints_root()
    if path.exists() or path.is_absolute() or root is None:
        return path
    for rel in (_under(path, CHECKPOINTS), path):
        if rel is not None and (root / rel).exists():
            return root / rel
    return path
