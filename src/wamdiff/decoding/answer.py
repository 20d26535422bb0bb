"""The answer-format interface: what the decode engine needs to know about a planner's answer text.

The engine never resolves a format by name and knows no format of its own: whoever calls it (the eval, serve and
pipeline layers, the `wamdiff bench` command) passes an object with this interface. Today's formats (text2, text1,
fixed1, fixed2, bins, delta) implement it in `wamdiff.driving.answer_format` (`BUILTIN`, and `answer_format(name)`
turns a name into one); a user whose VLA answers in its own layout passes an object with the same attributes and
methods.

- `name`: for messages and for what a result records (`format` of a bench result, of a dial curve);
- `waypoints`, `interval_s`: what one answer holds (`horizon_s = waypoints * interval_s`);
- `precision_m`: the largest per-axis error a round trip (format, then parse) may add;
- `layout`: "text" (variable-width numbers: no grammar), "fixed" (fixed-width characters: a per-position grammar)
  or "tokens" (one dedicated token per coordinate, ordinal: neighbouring tokens are neighbouring values, which
  the decoder's ordinal read-out relies on);
- `format(xy) -> str`; `parse(text) -> ParsedAnswer` (never raises; `ok`, `xy` ((waypoints, 2) when ok),
  `reason`);
- `cells()`: the fixed-width layouts' allowed strings per position (one character, or a whole token), in order —
  every answer `format` writes is one choice per cell; None for a variable-width layout.

Derived here for the decoder: `fixed_width(fmt)` (a per-position grammar exists: `Grammar.for_format`),
`ordinal(fmt)` and `ordinal_layout(fmt)` (the value grids of a "tokens" layout and which grid each cell is).
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

LAYOUTS = ("text", "fixed", "tokens")
FIXED_WIDTH_LAYOUTS = ("fixed", "tokens")  # token positions never shift: a per-position grammar
ORDINAL_LAYOUTS = ("tokens",)  # one token per coordinate on a grid in value order: the ordinal read-out


@runtime_checkable
class ParsedAnswer(Protocol):
    ok: bool
    xy: Any  # (waypoints, 2) array when ok, else None
    reason: str


@runtime_checkable
class AnswerFormat(Protocol):
    name: str
    waypoints: int
    interval_s: float
    precision_m: float
    layout: str

    def format(self, xy) -> str: ...

    def parse(self, text: str) -> ParsedAnswer: ...

    def cells(self) -> list[tuple[str, ...]] | None: ...


def fixed_width(fmt: AnswerFormat | None) -> bool:
    """Whether `fmt` has stable per-position cells (a grammar can be built); False for None."""
    return fmt is not None and fmt.layout in FIXED_WIDTH_LAYOUTS


def ordinal(fmt: AnswerFormat | None) -> bool:
    """Whether `fmt` is one token per coordinate on value grids (the ordinal read-out applies); False for None."""
    return fmt is not None and fmt.layout in ORDINAL_LAYOUTS


def format_name(fmt: AnswerFormat | None) -> str | None:
    """What a result records of the format: its name (None when there is none)."""
    return None if fmt is None else fmt.name


def ordinal_layout(fmt: AnswerFormat) -> tuple[list[tuple[str, ...]], list[int]]:
    """(grids, grid of each answer cell) of an ordinal format: its distinct cells, each a tuple of tokens in value
    order, and which of them every cell of an answer is. ValueError for a format without grids."""
    if not ordinal(fmt):
        raise ValueError(f"answer format {fmt.name!r} (layout {fmt.layout!r}) has no value grid (layouts with one: "
                         f"{ORDINAL_LAYOUTS})")
    cells = fmt.cells()
    grids: list[tuple[str, ...]] = []
    for cell in cells:
        if cell not in grids:
            grids.append(cell)
    return grids, [grids.index(cell) for cell in cells]
