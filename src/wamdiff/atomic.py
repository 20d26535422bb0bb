"""Atomic file writes: the bytes go to `<name>.<pid>.partial` and are renamed in one `os.replace`, so a reader or a resumed
run never sees half a file. The temporary keeps no `.npz`/`.png`/`.json` ending on purpose: a glob for the real
files never matches it (a killed writer once left `x.tmp.npz`, which `*.npz` readers took for a scene)."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import IO

PARTIAL_SUFFIX = ".partial"


def write_atomically(path: str | Path, write: Callable[[IO], None], text: bool = False) -> Path:
    """Call `write(file)` on a temporary beside `path` (binary, or UTF-8 text with `text`), then rename it to
    `path`; creates the folder. An OSError that names no file (ENOSPC, EIO) is raised again naming `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}{PARTIAL_SUFFIX}")  # the pid: two writers of one file never share it
    try:
        with (open(tmp, "w", encoding="utf-8", newline="") if text else open(tmp, "wb")) as f:
            write(f)
    except OSError as err:
        tmp.unlink(missing_ok=True)
        if err.filename is None:  # a full disk's error names no file: name the one being written
            raise OSError(err.errno, err.strerror or str(err), str(path)) from err
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    tmp.replace(path)
    return path
