"""Today's answer formats as implementations of the answer-format interface (what a planner's answer text is:
waypoint count, time horizon, precision, token layout; and how waypoints become that text and back).

`AnswerFormat` is the interface, defined where the decode engine reads it (`wamdiff.decoding.answer`, a layer below
this one) and re-exported here; today's formats (`driving.trajectory.FORMATS`: text2, text1, fixed1, fixed2, bins,
delta) are its implementations (`BUILTIN`), and `answer_format(x)` turns a format name or an object into one, so a
user whose VLA answers in its own layout passes an object with the same attributes and methods instead of a name.

- `waypoints`, `interval_s` (so `horizon_s = waypoints * interval_s`): what one answer holds;
- `precision_m`: the largest per-axis error a round trip (format, then parse) may add (half the grid step);
- `layout`: "text" (variable-width numbers), "fixed" (fixed-width characters: a per-position grammar) or "tokens"
  (one dedicated token per coordinate, `ordinal`: neighbouring tokens are neighbouring values);
- `format(xy) -> str`, `parse(text) -> ParsedTrajectory` (never raises), `cells()` (the fixed-width layout's
  allowed strings per position, None for variable-width text).

`guess_format(answer)` names the format of an answer text (what the bench parses with when no format is given).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from wamdiff.decoding.answer import LAYOUTS, AnswerFormat, ordinal_layout
from wamdiff.driving import trajectory as tr

__all__ = ["BUILTIN", "INTERVAL_S", "LAYOUTS", "AnswerFormat", "BuiltinFormat", "answer_format", "guess_format",
           "round_trip_error"]

INTERVAL_S = 0.5


@dataclass(frozen=True)
class BuiltinFormat:
    """One of today's formats (`driving.trajectory`), through the interface."""

    name: str
    precision_m: float
    layout: str
    waypoints: int = tr.N_POINTS
    interval_s: float = INTERVAL_S

    @property
    def horizon_s(self) -> float:
        return self.waypoints * self.interval_s

    @property
    def fixed_width(self) -> bool:
        return self.name in tr.FIXED_WIDTH_FORMATS

    @property
    def ordinal(self) -> bool:
        return self.name in tr.ORDINAL_FORMATS

    def format(self, xy) -> str:
        return tr.format_trajectory(xy, self.name)

    def parse(self, text: str) -> tr.ParsedTrajectory:
        return tr.parse_trajectory(text, self.name)

    def cells(self) -> list[tuple[str, ...]] | None:
        return tr.format_cells(self.name) if self.fixed_width else None


def _bin_half_width() -> float:
    return max(hi - lo for lo, hi in (tr.BIN_RANGE_X, tr.BIN_RANGE_Y)) / tr.BINS / 2


BUILTIN: dict[str, BuiltinFormat] = {
    "text2": BuiltinFormat("text2", 0.005, "text"),
    "text1": BuiltinFormat("text1", 0.05, "text"),
    "fixed1": BuiltinFormat("fixed1", 0.05, "fixed"),
    "fixed2": BuiltinFormat("fixed2", 0.005, "fixed"),
    "bins": BuiltinFormat("bins", _bin_half_width(), "tokens"),
    "delta": BuiltinFormat("delta", 0.05, "tokens"),
}
assert tuple(BUILTIN) == tr.FORMATS


def answer_format(fmt: str | AnswerFormat) -> AnswerFormat:
    """A format name (`BUILTIN`) or an object with the interface -> the format; ValueError naming what is wrong."""
    if isinstance(fmt, str):
        if fmt not in BUILTIN:
            raise ValueError(f"unknown answer format {fmt!r}; expected one of {tuple(BUILTIN)} or an AnswerFormat object")
        return BUILTIN[fmt]
    if not isinstance(fmt, AnswerFormat):
        missing = [a for a in ("name", "waypoints", "interval_s", "precision_m", "layout", "format", "parse", "cells")
                   if not hasattr(fmt, a)]
        raise ValueError(f"answer format {type(fmt).__name__}: lacks {missing} of the AnswerFormat interface")
    if fmt.layout not in LAYOUTS:
        raise ValueError(f"answer format {fmt.name!r}: layout {fmt.layout!r} is not one of {LAYOUTS}")
    return fmt


def guess_format(answer: str | None) -> str | None:
    """The name of the format an answer text is written in (None for no text): bins and delta by their tokens,
    fixed2 and fixed1 by the first number's width, text2 otherwise."""
    if not answer:
        return None
    if "<|bin_" in answer:
        return "bins"
    if "<|dx_" in answer:
        return "delta"
    if re.match(r"^[+-]\d{3}\.\d{2},", answer):
        return "fixed2"
    if re.match(r"^[+-]\d{3}\.\d,", answer):
        return "fixed1"
    return "text2"


def round_trip_error(fmt: str | AnswerFormat, xy) -> float:
    """The largest per-axis error a round trip through `fmt` adds to `xy` (m); ValueError if it does not parse."""
    f = answer_format(fmt)
    xy = np.asarray(xy, np.float64)[:, :2]
    parsed = f.parse(f.format(xy))
    if not parsed.ok:
        raise ValueError(f"{f.name}: round trip failed ({parsed.reason})")
    return float(np.abs(np.asarray(parsed.xy) - xy).max())


def vocabulary_grids(tokenizer) -> list[list[int]]:
    """Token ids of every value grid of the ordinal formats that `tokenizer` has all tokens of (training's ordinal
    targets: whatever the data's format, a target on one of these grids is a value)."""
    from wamdiff.models.tokens import token_id  # noqa: PLC0415

    vocab = tokenizer.get_vocab()
    return [[token_id(tokenizer, t) for t in grid] for name in tr.ORDINAL_FORMATS
            for grid in ordinal_layout(BUILTIN[name])[0] if all(t in vocab for t in grid)]
