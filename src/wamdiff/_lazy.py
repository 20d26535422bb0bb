"""Lazy package exports (PEP 562): `wamdiff --help` and `wamdiff data ...` must not pay for importing
transformers and torch when the command does not need them."""

from __future__ import annotations

import importlib
import importlib.util


def lazy_exports(package: str, exports: dict[str, list[str]]):
    """A module `__getattr__` that imports `name` from its sub-module on first use.

    `exports` maps a sub-module (relative to `package`) to the names it provides.
    """
    where = {name: module for module, names in exports.items() for name in names}
    # a name that is also a sub-module would be shadowed by the module once anything imports it directly
    clash = [n for n in where if importlib.util.find_spec(f"{package}.{n}") is not None]
    if clash:
        raise ValueError(f"{package}: lazy exports {clash} have the same name as a sub-module; rename one")

    def __getattr__(name: str):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{where[name]}"), name)
        globals_ = importlib.import_module(package).__dict__
        globals_[name] = value  # cache: later look-ups skip __getattr__
        return value

    return __getattr__, sorted(where)
