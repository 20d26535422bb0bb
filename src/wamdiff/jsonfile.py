"""The one JSON writer of the project: atomic (temp file + rename), numpy-aware, readable (indented)."""

from __future__ import annotations

import json
import math
from pathlib import Path

from wamdiff.atomic import write_atomically


def to_jsonable(value):
    """`json.dumps(default=...)`: numpy scalars and arrays as Python values, anything else as its text."""
    if hasattr(value, "item") and getattr(value, "ndim", None) == 0:  # numpy / torch scalar
        value = value.item()
        return None if isinstance(value, float) and not math.isfinite(value) else value
    if hasattr(value, "tolist"):
        return value.tolist()
    return str(value)


def write_json(path: str | Path, obj, indent: int = 2) -> Path:
    """Write `obj` to `path` atomically (a reader never sees half a file); creates the folder."""
    text = json.dumps(obj, indent=indent, default=to_jsonable).encode()
    return write_atomically(path, lambda f: f.write(text))
