"""The closed sets of values that command-line options accept, as `typing.Literal` types typer turns into choices.

Each set is the registry the code itself validates with (answer formats, decode modes, dtypes, attention kernels,
lean modes, executors, splits, route sets, families), so `wamdiff <cmd> --help` lists exactly the values the
validation accepts; `tests/test_cli_choices.py` checks every such option against its registry. Options that take a
comma-separated list of such values (`--families`, `bench --dtypes`, `bench --caches`) say their values with
`list_help` and check them with `parse_list`. The names come from `wamdiff.names` (free of torch and highway-env,
so `wamdiff --help` stays fast); the registries that give them meaning check that they agree.
"""

from __future__ import annotations

from typing import Literal

import typer

from wamdiff.executors import EXECUTOR_KINDS
from wamdiff.names import (
    ATTENTIONS, CACHES, DECODE_MODES, DTYPES, FAMILIES, FIXED_WIDTH_FORMATS, FORMATS, GRID_DTYPES, LEAN_MODES,
    PREDICTIONS, ROUTE_SETS, SPLITS,
)

AnswerFormat = Literal[FORMATS]
FixedWidthFormat = Literal[FIXED_WIDTH_FORMATS]
DecodeMode = Literal[DECODE_MODES]
Dtype = Literal[DTYPES]
Attention = Literal[ATTENTIONS]
Lean = Literal[LEAN_MODES]
Prediction = Literal[PREDICTIONS]
Executor = Literal[EXECUTOR_KINDS]
Split = Literal[SPLITS]
RouteSet = Literal[ROUTE_SETS]

__all__ = ["AnswerFormat", "Attention", "CACHES", "DecodeMode", "Dtype", "Executor", "FAMILIES", "FixedWidthFormat",
           "GRID_DTYPES", "Lean", "Prediction", "RouteSet", "Split", "list_help", "parse_list"]


def list_help(values: tuple[str, ...]) -> str:
    """The help sentence of a comma-separated list option: its allowed values, from the registry."""
    return "one or more of " + ", ".join(values) + ", comma separated"


def parse_list(text: str, values: tuple[str, ...], option: str) -> list[str]:
    """The words of a comma-separated list option, each one of `values`; otherwise a usage error (exit 2) naming the
    option and the allowed values."""
    words = [w.strip() for w in str(text).split(",") if w.strip()]
    bad = [w for w in words if w not in values]
    if bad or not words:
        raise typer.BadParameter(f"{', '.join(bad) or repr(text)} not allowed; {list_help(values)}", param_hint=option)
    return words
