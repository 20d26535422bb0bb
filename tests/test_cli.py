"""The `wamdiff` entry point: every sub-command is wired, and package exports resolve to the real objects."""

from __future__ import annotations

import importlib
import subprocess
import sys


def test_help_lists_every_subcommand():
    out = subprocess.run([sys.executable, "-m", "wamdiff.cli", "--help"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    for cmd in ("data", "model", "train", "eval", "bench", "pipeline", "demo"):
        assert cmd in out.stdout
    assert "unavailable" not in out.stdout  # no area failed to import


def test_lazy_exports_are_the_objects_not_submodules():
    import wamdiff.decoding.engine  # noqa: F401  (a direct sub-module import must not shadow the export)
    from wamdiff.decoding import DecodeConfig, generate
    from wamdiff.models import build_model, load_model
    from wamdiff.training import train

    for obj in (DecodeConfig, generate, build_model, load_model, train):
        assert callable(obj) and not isinstance(obj, type(importlib))


def test_lazy_exports_refuse_a_name_that_is_also_a_submodule():
    import pytest

    from wamdiff._lazy import lazy_exports

    with pytest.raises(ValueError, match="same name as a sub-module"):
        lazy_exports("wamdiff.decoding", {"engine": ["engine"]})
