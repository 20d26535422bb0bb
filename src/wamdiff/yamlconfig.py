"""The one reader of wamdiff's YAML configs: training recipes (`configs/recipes/`), pipeline configs (`configs/*.yaml`)
and studies (`configs/studies/`, pipeline configs on top of the default).

A file may name `base:`, a path relative to it or a list of them (later ones winning): the bases' values, then the
file's own on top. Mappings merge key by key; a mapping tagged `!replace` replaces the base's whole instead; a key
`X_extra` appends its items to the base's list or mapping `X` (a study adds stages and report rows to the default
pipeline without copying it); any other value replaces the base's. Each file's own keys are checked before they are
merged (`check(raw, path)`), so an unknown key is refused naming the file that holds it. Every problem is a
`UserError` that names the file: one line and exit code 2 on the command line.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Callable, Iterable

import yaml

from wamdiff.errors import UserError, one_line


class Replace(dict):
    """A mapping tagged `!replace`: it replaces the base's mapping instead of merging into it."""


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_constructor("!replace", lambda loader, node: Replace(loader.construct_mapping(node, deep=True)))


def read_config(path: str | Path, check: Callable[[dict, Path], None] | None = None, _seen: tuple = ()) -> dict:
    """The mapping in the YAML file `path` with its `base:` chain resolved (see the module docstring)."""
    path = Path(path).resolve()
    if path in _seen:
        raise UserError(f"{path}: circular `base:` chain ({' -> '.join(str(p) for p in (*_seen, path))})")
    try:
        raw = yaml.load(path.read_text(), Loader=_Loader)
    except FileNotFoundError:
        raise UserError(f"{path}: config file not found") from None
    except yaml.YAMLError as err:
        raise UserError(f"{path}: not valid YAML ({one_line(str(err))})") from None
    raw = {} if raw is None else raw
    if not isinstance(raw, dict):
        raise UserError(f"{path}: the top level must be a mapping, got {type(raw).__name__}")
    base = raw.pop("base", None)
    if check is not None:
        check(raw, path)
    merged: dict = {}
    for b in [base] if isinstance(base, str) else list(base or []):
        merged = merge(merged, read_config(path.parent / b, check, _seen + (path,)), path)
    return merge(merged, raw, path)


def merge(base: dict, over: dict, where: str | Path = "config") -> dict:
    """`over` laid on `base` (neither is changed): mappings key by key, `!replace` and `X_extra` as documented above."""
    out = copy.deepcopy(base)
    for key, value in over.items():
        if isinstance(key, str) and key.endswith("_extra"):
            target = key[: -len("_extra")]
            have = out.get(target)
            if isinstance(have, list) and isinstance(value, list):
                out[target] = have + copy.deepcopy(value)
            elif isinstance(have, dict) and isinstance(value, dict):
                out[target] = {**have, **copy.deepcopy(value)}
            else:
                raise UserError(f"{where}: {key} extends {target!r}, which the base does not have as a list or mapping")
        elif isinstance(value, dict) and isinstance(out.get(key), dict) and not isinstance(value, Replace):
            out[key] = merge(out[key], value, where)
        else:
            out[key] = copy.deepcopy(value)
    return out


def refuse_unknown(keys: Iterable, allowed: Iterable[str], where: str) -> None:
    """A UserError naming the first key of `keys` that is not in `allowed` (an `X_extra` key counts as `X`)."""
    allowed = set(allowed)
    for key in keys:
        name = key[: -len("_extra")] if isinstance(key, str) and key.endswith("_extra") else key
        if name not in allowed:
            raise UserError(f"{where}: unknown key {key!r} (known: {', '.join(sorted(allowed))})")
