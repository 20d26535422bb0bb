"""Loading scenes for evaluation: every `*.npz` Scene under a directory (recursively), filtered and sorted."""

from __future__ import annotations

import os
from pathlib import Path


def find_scene_files(data: str | Path) -> list[Path]:
    from wamdiff.driving.scene import is_scene_file

    root = Path(data)
    if root.is_file():
        return [root]
    if not root.exists():
        raise ValueError(f"{root}: no such scene directory")
    # os.walk with followlinks: a dataset's scenes/ may be a symlink to shared scenes (the pipeline's other answer
    # formats), which Path.rglob does not enter
    return sorted(Path(d) / f for d, _, files in os.walk(root, followlinks=True) for f in files if is_scene_file(f))


def load_scenes(data: str | Path, split: str | None = None, families: list[str] | None = None, limit: int | None = None,
                strict: bool = False) -> tuple[list, list[dict]]:
    """(scenes, problems): unreadable files are reported (or raise with `strict`), never silently dropped."""
    from wamdiff.driving.scene import Scene

    scenes, problems = [], []
    for path in find_scene_files(data):
        try:
            s = Scene.load(path)
        except ValueError as err:
            if strict:
                raise
            problems.append({"file": str(path), "reason": str(err)})
            continue
        if split and s.split != split:
            continue
        if families and s.family not in families:
            continue
        scenes.append(s)
        if limit and len(scenes) >= limit:
            break
    return scenes, problems
