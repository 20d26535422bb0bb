"""Answer quality of a decoding setting: exact match with the AR output, waypoint L2 to AR and to the expert.

The waypoints are read with the parser the bench's caller hands over (`prompts.BenchInputs.parse`: the answer
format's `parse`, or the driving layer's per-answer guess when no format is known)."""

from __future__ import annotations

import statistics

import numpy as np

from wamdiff.decoding.answer import AnswerFormat
from wamdiff.decoding.bench.prompts import Parser
from wamdiff.decoding.config import Generation


def parser_for(fmt: AnswerFormat | None, parse: Parser | None = None) -> Parser | None:
    """The parser a bench reads answers with: `parse` when given, else the format's own; None when neither."""
    if parse is not None:
        return parse
    return None if fmt is None else fmt.parse


def parse_xy(text: str, parse: Parser | None) -> np.ndarray | None:
    """(waypoints, 2) of an answer, or None when it does not parse (or there is no parser)."""
    parsed = parse(text) if parse is not None else None
    return np.asarray(parsed.xy, float)[:, :2] if parsed is not None and parsed.ok else None


def _mean_l2(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.linalg.norm(a - b, axis=-1).mean())


def quality(gens: list[Generation], ref: list[Generation], expert: list[str] | None, parse: Parser | None) -> dict:
    """Exact-match rate vs the AR output, and mean per-waypoint L2 vs AR / expert where answers parse (`parse`:
    answer text -> parsed answer, `parser_for`)."""
    q = {"exact_match_vs_ar": sum(g.token_ids == r.token_ids for g, r in zip(gens, ref)) / max(1, len(gens))}
    l2_ar, l2_ex, fails = [], [], 0
    for i, (g, r) in enumerate(zip(gens, ref)):
        xy = parse_xy(g.text, parse)
        if xy is None:
            fails += 1
            continue
        rxy = parse_xy(r.text, parse)
        if rxy is not None:
            l2_ar.append(_mean_l2(xy, rxy))
        exy = parse_xy(expert[i], parse) if expert is not None and expert[i] is not None else None
        if exy is not None:
            l2_ex.append(_mean_l2(xy, exy))
    q["parse_failures"] = fails
    q["l2_vs_ar"] = statistics.fmean(l2_ar) if l2_ar else None
    q["l2_vs_expert"] = statistics.fmean(l2_ex) if l2_ex else None
    return q
