"""Answer quality of a decoding setting: exact match with the AR output, waypoint L2 to AR and to the expert."""

from __future__ import annotations

import re
import statistics

import numpy as np

from wamdiff.decoding.config import Generation
from wamdiff.driving.trajectory import parse_trajectory


def guess_format(answer: str | None) -> str | None:
    """Trajectory format of an expert answer text (for L2 parsing)."""
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


def parse_xy(text: str, fmt: str | None) -> np.ndarray | None:
    """(8, 2) waypoints of an answer, or None when it does not parse (`fmt` None: guessed from the text)."""
    fmt = fmt or guess_format(text)
    parsed = parse_trajectory(text, fmt) if fmt else None
    return np.asarray(parsed.xy, float)[:, :2] if parsed is not None and parsed.ok else None


def _mean_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b, axis=-1).mean())


def quality(gens: list[Generation], ref: list[Generation], expert: list[str] | None, fmt: str | None) -> dict:
    """Exact-match rate vs the AR output, and mean per-waypoint L2 vs AR / expert where answers parse."""
    q = {"exact_match_vs_ar": sum(g.token_ids == r.token_ids for g, r in zip(gens, ref)) / max(1, len(gens))}
    l2_ar, l2_ex, fails = [], [], 0
    for i, (g, r) in enumerate(zip(gens, ref)):
        xy = parse_xy(g.text, fmt)
        if xy is None:
            fails += 1
            continue
        rxy = parse_xy(r.text, fmt)
        if rxy is not None:
            l2_ar.append(_mean_l2(xy, rxy))
        exy = parse_xy(expert[i], fmt) if expert is not None and expert[i] is not None else None
        if exy is not None:
            l2_ex.append(_mean_l2(xy, exy))
    q["parse_failures"] = fails
    q["l2_vs_ar"] = statistics.fmean(l2_ar) if l2_ar else None
    q["l2_vs_expert"] = statistics.fmean(l2_ex) if l2_ex else None
    return q
