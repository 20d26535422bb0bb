"""The sha256 of a checkpoint's weight files, recorded next to them and checked when they load.

A weights file whose bytes were changed with its header intact (bit rot, a bad copy, a swapped file) loads without
complaint and plans badly; only a checksum tells. `save_model` writes `SHA256SUMS` (the `sha256sum` format:
`sha256sum -c SHA256SUMS` checks it too) beside the weights; `load_model` refuses a directory whose weights no longer
match it, in one line naming the file. A directory without the file (a foreign checkpoint, a stand-in) loads
unchecked; `wamdiff model verify DIR --record` records the weights as they are.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from wamdiff.atomic import write_atomically
from wamdiff.errors import UserError

SUMS_FILE = "SHA256SUMS"
WEIGHT_PATTERNS = ("*.safetensors", "*.bin")
_LINE = re.compile(r"^([0-9a-f]{64}) [ *](\S+)$")


def weight_files(directory: str | Path) -> list[Path]:
    directory = Path(directory)
    return sorted({f for pattern in WEIGHT_PATTERNS for f in directory.glob(pattern) if f.is_file()})


def sha256_file(path: str | Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def read_checksums(directory: str | Path) -> dict[str, str] | None:
    """{file name: sha256} of `directory/SHA256SUMS`, None when there is none; a malformed line is a UserError."""
    sums = Path(directory) / SUMS_FILE
    if not sums.is_file():
        return None
    recorded = {}
    for number, line in enumerate(sums.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        match = _LINE.match(line.strip())
        if match is None or "/" in match.group(2) or match.group(2) in (".", ".."):
            raise UserError(f"{sums}:{number}: not a '<sha256>  <file name>' line; record the weights again with "
                            f"`wamdiff model verify {directory} --record`")
        recorded[match.group(2)] = match.group(1)
    return recorded


def record_checksums(directory: str | Path) -> dict[str, str]:
    """Write `SHA256SUMS` for the weight files now in `directory` (their bytes are only read); returns it."""
    directory = Path(directory)
    sums = {f.name: sha256_file(f) for f in weight_files(directory)}
    if not sums:
        raise UserError(f"{directory}: no weight files (*.safetensors, *.bin) to record")
    text = "".join(f"{digest}  {name}\n" for name, digest in sums.items())
    write_atomically(directory / SUMS_FILE, lambda f: f.write(text), text=True)
    return sums


def forget_checksums(directory: str | Path) -> None:
    """Drop the record before weights are rewritten: a save cut short must not leave a record of other bytes."""
    (Path(directory) / SUMS_FILE).unlink(missing_ok=True)


def verify_checksums(directory: str | Path, recorded: dict[str, str] | None = None, source: str = SUMS_FILE) -> dict:
    """Check every weight file against `recorded` (default: `SHA256SUMS`; `source` names it in messages): a
    mismatch, a recorded file that is missing or a weight file that is not recorded is a one-line UserError.
    Returns the recorded sums ({} when there is no record: nothing to check)."""
    directory = Path(directory)
    recorded = read_checksums(directory) if recorded is None else recorded
    if not recorded:
        return {}
    redo = f"copy or export the checkpoint again (or, for weights you trust, `wamdiff model verify {directory} --record`)"
    for name, expected in recorded.items():
        f = directory / name
        if not f.is_file():
            raise UserError(f"{f}: recorded in {source} but missing; {redo}")
        actual = sha256_file(f)
        if actual != expected:
            raise UserError(f"{f}: sha256 {actual[:16]}... does not match {expected[:16]}... recorded in {source}: "
                            f"the file is truncated or corrupt, or was replaced; {redo}")
    unrecorded = [f.name for f in weight_files(directory) if f.name not in recorded]
    if unrecorded:
        raise UserError(f"{directory / unrecorded[0]}: a weight file not recorded in {source}; {redo}")
    return recorded
