"""Answer formats for the 8 future waypoints, a tolerant parser, and quantisation error.

Formats (`FORMATS`), always x1,y1,...,x8,y8 in metres, ego frame:
- `text2` (default, WAM-Diff2): "12.34,-0.56,..." two decimals, minimal width.
- `text1`: one decimal.
- `fixed1`: every number as sign + 3 integer digits + "." + 1 decimal ("+012.3,-001.5,..."): character
  positions never shift, which helps parallel (block-diffusion) decoding. |v| <= 999.9.
- `fixed2`: likewise with 2 decimals ("+012.34").
- `bins`: 16 dedicated tokens "<|bin_i|>", 256 uniform bins per axis (x in [-5, 120], y in [-30, 30]; a
  value is coded by the bin it falls in and decoded as the bin centre, values outside are clipped).
- `delta`: 16 dedicated tokens, the ego-frame displacement over each 0.5 s step ("<|dx_i|><|dy_j|>" x 8) on a
  0.1 m grid (`models.tokens.DELTA_*`). Why: with digits, a block decoded in parallel can pick the tens digit
  of "+059.7" as 6 while the units stay 9.7 (a 10 m jump: measured in 20 % of a B=32 student's plans, and the
  cause of its comfort failures); a single token per coordinate has no carry, and a displacement is the
  velocity, which changes smoothly from token to token. Encoding feeds the rounding error forward (each
  displacement is taken to the exact target from the reconstructed previous point), so the decoded positions
  are within 0.05 m per axis of the truth at every waypoint, like 1-decimal text; out-of-grid steps clip.
`parse_trajectory` never raises: malformed, truncated, wrong-count or out-of-bounds text gives
`ParsedTrajectory(ok=False, xy=None, reason=...)`. `format_cells` spells out the character structure of the
fixed-width formats (what `wamdiff.decoding.grammar` turns into per-token sets for a given tokenizer).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from wamdiff.models import tokens as T
from wamdiff.models.tokens import IM_END, N_BINS, PAD, bin_token
from wamdiff.names import FIXED_WIDTH_FORMATS, FORMATS  # noqa: F401  (the formats this module implements)

# one token per coordinate on a uniform grid, `format_cells` lists each cell's tokens in value order: neighbouring
# tokens are neighbouring values (what the decoder's ordinal read-out relies on)
ORDINAL_FORMATS = ("bins", "delta")
N_POINTS = 8
BINS = N_BINS  # one token per bin (models.tokens)
BIN_RANGE_X = (-5.0, 120.0)
BIN_RANGE_Y = (-30.0, 30.0)
MAX_ABS = 250.0  # m: sanity bound; nothing drives further than this in 4 s
_DECIMALS = {"text2": 2, "text1": 1, "fixed1": 1, "fixed2": 2}
_NUMBER = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)")
_BIN = re.compile(r"<\|bin_(\d+)\|>")
_DELTA = re.compile(r"<\|d([xy])_(\d+)\|>")
_ALLOWED_TEXT = re.compile(r"^[\s\d.,+\-\[\]()]*$")


@dataclass
class ParsedTrajectory:
    ok: bool
    xy: np.ndarray | None  # (8, 2) when ok
    reason: str = ""


def _bin_index(v: np.ndarray, lo: float, hi: float) -> np.ndarray:
    width = (hi - lo) / BINS
    return np.clip(np.floor((v - lo) / width), 0, BINS - 1).astype(int)


def _bin_value(i: np.ndarray, lo: float, hi: float) -> np.ndarray:
    width = (hi - lo) / BINS
    return lo + (np.asarray(i, np.float64) + 0.5) * width


def _delta_codes(xy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Grid indices (8,), (8,) of the displacements, each taken from the reconstructed previous point."""
    lo = np.array([T.DELTA_X_RANGE[0], T.DELTA_Y_RANGE[0]])
    n = np.array([T.N_DELTA_X, T.N_DELTA_Y])
    codes = np.zeros((N_POINTS, 2), int)
    prev = np.zeros(2)
    for k in range(N_POINTS):
        codes[k] = np.clip(np.round((xy[k] - prev - lo) / T.DELTA_STEP), 0, n - 1).astype(int)
        prev = prev + lo + codes[k] * T.DELTA_STEP
    return codes[:, 0], codes[:, 1]


def _delta_points(ix: np.ndarray, iy: np.ndarray) -> np.ndarray:
    steps = np.stack([T.DELTA_X_RANGE[0] + ix * T.DELTA_STEP, T.DELTA_Y_RANGE[0] + iy * T.DELTA_STEP], -1)
    return np.cumsum(steps, axis=0)


def format_trajectory(xy, fmt: str = "text2") -> str:
    """(8, 2) or (8, >=2) waypoints -> answer text in `fmt`."""
    xy = np.asarray(xy, np.float64)[:, :2]
    if xy.shape != (N_POINTS, 2):
        raise ValueError(f"format_trajectory: expected (8, 2) waypoints, got {xy.shape}")
    if not np.all(np.isfinite(xy)):
        raise ValueError("format_trajectory: non-finite waypoint")
    if fmt == "bins":
        ix = _bin_index(xy[:, 0], *BIN_RANGE_X)
        iy = _bin_index(xy[:, 1], *BIN_RANGE_Y)
        return "".join(bin_token(int(a)) + bin_token(int(b)) for a, b in zip(ix, iy))
    if fmt == "delta":
        ix, iy = _delta_codes(xy)
        return "".join(T.DELTA_X_TOKENS[a] + T.DELTA_Y_TOKENS[b] for a, b in zip(ix, iy))
    if fmt not in _DECIMALS:
        raise ValueError(f"unknown trajectory format {fmt!r}; expected one of {FORMATS}")
    d = _DECIMALS[fmt]
    vals = np.round(xy.reshape(-1), d) + 0.0  # + 0.0 turns -0.0 into 0.0
    if fmt.startswith("fixed"):
        if np.any(np.abs(vals) >= 1000):
            raise ValueError(f"{fmt}: |value| must be < 1000 m")
        return ",".join(f"{v:+0{5 + d}.{d}f}" for v in vals)
    return ",".join(f"{v:.{d}f}" for v in vals)


def format_cells(fmt: str) -> list[tuple[str, ...]]:
    """The cells of a fixed-width format, in order: each a tuple of the strings allowed there (one character,
    or a whole bin token); every answer `format_trajectory` writes in `fmt` is one choice per cell.
    ValueError for the variable-width text formats."""
    if fmt == "bins":
        return [tuple(T.BIN_TOKENS)] * (2 * N_POINTS)
    if fmt == "delta":
        return [tuple(T.DELTA_X_TOKENS), tuple(T.DELTA_Y_TOKENS)] * N_POINTS
    if fmt not in FIXED_WIDTH_FORMATS:
        raise ValueError(f"trajectory format {fmt!r} has no fixed width (fixed-width formats: {FIXED_WIDTH_FORMATS})")
    digits = tuple("0123456789")
    number = [("+", "-"), digits, digits, digits, (".",), *[digits] * _DECIMALS[fmt]]
    return number + [(",",), *number] * (2 * N_POINTS - 1)


def parse_trajectory(text, fmt: str = "text2") -> ParsedTrajectory:
    """Tolerant parser: never raises. Surrounding whitespace, a trailing end-of-turn token and brackets are
    accepted; anything else that is off (count, junk, fixed-width violation, bounds) gives ok=False."""
    try:
        return _parse(text, fmt)
    except Exception as err:  # noqa: BLE001 — a model output must never crash evaluation
        return ParsedTrajectory(False, None, f"parser error: {type(err).__name__}")


def _parse(text, fmt: str) -> ParsedTrajectory:
    if not isinstance(text, str):
        return ParsedTrajectory(False, None, f"not text ({type(text).__name__})")
    if fmt not in FORMATS:
        return ParsedTrajectory(False, None, f"unknown format {fmt!r}")
    body = text.replace(IM_END, "").replace(PAD, "").strip()
    if not body:
        return ParsedTrajectory(False, None, "empty")
    if fmt == "bins":
        ids = _BIN.findall(body)
        rest = _BIN.sub("", body).strip()
        if rest:
            return ParsedTrajectory(False, None, f"unexpected text between bin tokens: {rest[:20]!r}")
        if len(ids) != 2 * N_POINTS:
            return ParsedTrajectory(False, None, f"expected 16 bin tokens, got {len(ids)}")
        idx = np.array([int(i) if len(i) <= 4 else BINS for i in ids])
        if np.any(idx >= BINS):
            return ParsedTrajectory(False, None, "bin index out of range")
        xy = np.stack([_bin_value(idx[0::2], *BIN_RANGE_X), _bin_value(idx[1::2], *BIN_RANGE_Y)], -1)
        return ParsedTrajectory(True, xy, "")
    if fmt == "delta":
        found = _DELTA.findall(body)
        rest = _DELTA.sub("", body).strip()
        if rest:
            return ParsedTrajectory(False, None, f"unexpected text between step tokens: {rest[:20]!r}")
        if len(found) != 2 * N_POINTS:
            return ParsedTrajectory(False, None, f"expected 16 step tokens, got {len(found)}")
        if [axis for axis, _ in found] != ["x", "y"] * N_POINTS:
            return ParsedTrajectory(False, None, "step tokens out of order (expected dx, dy, dx, dy, ...)")
        idx = np.array([int(i) if len(i) <= 4 else 10**4 for _, i in found])
        ix, iy = idx[0::2], idx[1::2]
        if np.any(ix >= T.N_DELTA_X) or np.any(iy >= T.N_DELTA_Y):
            return ParsedTrajectory(False, None, "step token index out of range")
        return ParsedTrajectory(True, _delta_points(ix, iy), "")
    if not _ALLOWED_TEXT.match(body):
        bad = next(c for c in body if not re.match(r"[\s\d.,+\-\[\]()]", c))
        return ParsedTrajectory(False, None, f"unexpected character {bad!r}")
    fields = [f.strip(" \t\n[]()") for f in body.strip("[]() \n").split(",")]
    if len(fields) != 2 * N_POINTS:
        return ParsedTrajectory(False, None, f"expected 16 numbers, got {len(fields)}")
    vals = []
    for k, f in enumerate(fields):
        if not f or _NUMBER.fullmatch(f) is None:
            return ParsedTrajectory(False, None, f"number {k + 1} malformed: {f[:12]!r}")
        if fmt.startswith("fixed"):
            d = _DECIMALS[fmt]
            if not re.fullmatch(rf"[+-]\d{{3}}\.\d{{{d}}}", f):
                return ParsedTrajectory(False, None, f"number {k + 1} breaks the fixed width: {f[:12]!r}")
        if len(f) > 12:
            return ParsedTrajectory(False, None, f"number {k + 1} too long")
        v = float(f)
        if not math.isfinite(v) or abs(v) > MAX_ABS:
            return ParsedTrajectory(False, None, f"number {k + 1} out of bounds: {v:g}")
        vals.append(v)
    return ParsedTrajectory(True, np.array(vals, np.float64).reshape(N_POINTS, 2), "")


def headings_from_xy(xy, min_step: float = 0.2) -> np.ndarray:
    """(8,) headings from consecutive points (the ego's origin prepended). Where the step is shorter than
    `min_step` m (standing still) the previous heading is kept, starting from 0 (the ego's heading at t0)."""
    xy = np.asarray(xy, np.float64)[:, :2]
    prev = np.vstack([[0.0, 0.0], xy[:-1]])
    d = xy - prev
    out = np.zeros(len(xy))
    h = 0.0
    for k, (dx, dy) in enumerate(d):
        if math.hypot(dx, dy) >= min_step:
            h = math.atan2(dy, dx)
        out[k] = h
    return out


def quantization_error(xy, fmt: str) -> float:
    """Mean 2-D L2 (m per waypoint) between `xy` and what survives a round trip through `fmt`."""
    xy = np.asarray(xy, np.float64)[:, :2]
    parsed = parse_trajectory(format_trajectory(xy, fmt), fmt)
    if not parsed.ok:
        raise ValueError(f"{fmt}: round trip failed ({parsed.reason})")
    return float(np.linalg.norm(parsed.xy - xy, axis=1).mean())
