"""Mutual consistency of a plan's waypoints: where a planner's trajectories jump, and (digit formats) which digit.

Comfort and DAC failures of a diffusion student came from waypoints that are each plausible but do not belong
together. This measures it on the plans themselves, no simulation:
- `accel` = second differences of the waypoints (origin prepended) over 0.5 s, in m/s^2; a *jump* is a plan whose
  largest |accel| exceeds `JUMP_MS2` (8 m/s^2: no car brakes or turns that hard; the expert's own plans stay
  below 4);
- `jump_at`: which waypoint the largest jump of each jumping plan sits on (1..8);
- for the digit formats (`fixed1`, `fixed2`, `text1`, `text2`) `digit_at`: at that waypoint, the most
  significant digit where the plan's number differs from the expert's (tens, units, tenths, ...), counted over
  the x and y values of the jumping plans: a tens digit off by one is the "+059.7 -> +069.7" failure of
  parallel decoding.
"""

from __future__ import annotations

from collections import Counter

import numpy as np

JUMP_MS2 = 8.0
DT = 0.5
DIGIT_PLACES = {2: "hundreds", 1: "tens", 0: "units", -1: "tenths", -2: "hundredths"}


def waypoint_accelerations(xy: np.ndarray) -> np.ndarray:
    """(8, 2) waypoints from the origin -> (7, 2) accelerations [m/s^2] at waypoints 1..7."""
    p = np.vstack([[0.0, 0.0], np.asarray(xy, float)])
    return np.diff(p, 2, axis=0) / DT**2


def first_differing_place(a: float, b: float, decimals: int = 1) -> str | None:
    """The most significant decimal place where |a| and |b| differ (rounded to `decimals`), or None if equal
    (a sign change counts as 'sign')."""
    if np.sign(round(a, decimals)) != np.sign(round(b, decimals)) and round(a, decimals) and round(b, decimals):
        return "sign"
    sa, sb = f"{abs(a):08.{decimals}f}", f"{abs(b):08.{decimals}f}"
    point = sa.index(".")
    for i, (ca, cb) in enumerate(zip(sa, sb)):
        if ca != cb:
            place = point - i - 1 if i < point else point - i
            return DIGIT_PLACES.get(place, f"1e{place}")
    return None


def consistency_report(plans: list, scenes: list, fmt: str | None = None) -> dict:
    """Jump share, where the jumps sit and (digit formats) which digit is off, for one planner's plans."""
    decimals = {"fixed1": 1, "text1": 1, "fixed2": 2, "text2": 2}.get(fmt or "")
    jumps, at, digits, n = 0, Counter(), Counter(), 0
    peak = []
    for plan, scene in zip(plans, scenes):
        if plan.xy is None:
            continue
        n += 1
        a = np.abs(waypoint_accelerations(plan.xy)).max(axis=1)  # (7,)
        peak.append(float(a.max()))
        if a.max() <= JUMP_MS2:
            continue
        jumps += 1
        k = int(np.argmax(a)) + 1  # waypoint 1..7 (index into the plan: the middle point of the second difference)
        at[k] += 1
        if decimals is not None and np.any(scene.future):
            for axis in (0, 1):
                place = first_differing_place(float(plan.xy[k - 1, axis]), float(scene.future[k - 1, axis]), decimals)
                if place is not None:
                    digits[place] += 1
    return {"n_plans": n, "jump_share": jumps / n if n else None, "jump_threshold_ms2": JUMP_MS2,
            "median_peak_accel_ms2": float(np.median(peak)) if peak else None,
            "jump_at_waypoint": dict(sorted(at.items())), "digit_off_at_jump": dict(digits.most_common())}
