"""Output folders: checked writable before any work starts, and written by one run at a time.

`claim_output_dir(path)` creates the folder and takes an exclusive lock on `path/.wamdiff.lock` (filelock:
an OS lock, released by the kernel when the process dies, so a killed run never leaves a stale lock).
Creating the lock file is the writability check: a read-only or impossible `--out` fails at once, before any
simulation, training or planning. A second run on the same folder gets a `UserError` naming the run that
holds it (pid, command, start time from `.wamdiff.lock.json`).

`path_name(name, what)` checks a name that becomes a file or folder inside such a folder (a stage, a variant):
one path component, so nothing is written outside the folders a user named.
"""

from __future__ import annotations

import json
import os
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from wamdiff.errors import UserError

LOCK_FILE = ".wamdiff.lock"
MAX_NAME_CHARS = 100
OWNER_FILE = ".wamdiff.lock.json"


def _not_writable(path: Path, option: str, err: OSError) -> UserError:
    return UserError(f"{path}: output folder cannot be written ({err.strerror or err}); "
                     f"fix its permissions or choose another {option}")


def _owner(path: Path) -> str:
    try:
        o = json.loads((path / OWNER_FILE).read_text())
        return f"pid {o['pid']}, `{o['command']}`, since {o['started']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "owner unknown"


@contextmanager
def claim_output_dir(path: str | Path, *, option: str = "--out") -> Iterator[Path]:
    """Create `path`, check it is writable and hold it exclusively while the block runs."""
    from filelock import FileLock, Timeout

    path = Path(path)
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _not_writable(path, option, err) from err
    lock = FileLock(path / LOCK_FILE, timeout=0)
    try:
        lock.acquire()
    except Timeout:
        raise UserError(f"{path}: output folder is in use by another wamdiff run ({_owner(path)}); "
                        f"wait for it to finish or choose another {option}") from None
    except OSError as err:
        raise _not_writable(path, option, err) from err
    try:
        try:
            owner = {"pid": os.getpid(), "command": " ".join(["wamdiff", *sys.argv[1:]]),
                     "started": time.strftime("%Y-%m-%d %H:%M:%S")}
            (path / OWNER_FILE).write_text(json.dumps(owner))
        except OSError as err:
            raise _not_writable(path, option, err) from err
        yield path
    finally:
        lock.release()


def claim_for_command(path: str | Path, *, option: str = "--out") -> Path:
    """`claim_output_dir` for the CLI command now running: held until the command returns."""
    from typer._click.globals import get_current_context  # typer vendors click

    return get_current_context().with_resource(claim_output_dir(path, option=option))


def path_name(name, what: str) -> str:
    """`name` checked to be usable as one path component under a folder the user named (a stage, a variant, a
    row that becomes `<folder>/<name>...`): a non-empty string with no separator, not `.` or `..`, no control
    character. Else a UserError naming `what` (where it came from)."""
    if not isinstance(name, str) or not name:
        raise UserError(f"{what}: a name must be a non-empty string, got {name!r}")
    bad = ("/" in name or "\\" in name or os.sep in name or (os.altsep and os.altsep in name) or name in (".", "..")
           or any(ord(c) < 32 or ord(c) == 127 for c in name) or len(name) > MAX_NAME_CHARS)
    if bad:
        raise UserError(f"{what}: {name[:MAX_NAME_CHARS]!r} cannot name a file or folder (no '/', '\\', '..' or "
                        f"control characters, at most {MAX_NAME_CHARS} characters); rename it")
    return name
