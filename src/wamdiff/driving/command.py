"""The driving command (left / straight / right / unknown), derived from the planned ROUTE only.

Never from the expert's future (that leaks the answer: docs/concepts/world.md, "The driving command"). Rules, in order,
on the route centreline in the ego frame (x forward, y left), with the ego projected onto it at arc length s0:
1. Junction turn: the first run of route points inside a junction (intersection box / roundabout ring) that
   starts within the lookahead `L = clip(4 s * speed + 25 m, 35, 80)` and has not been left yet. Its turn is
   the heading change from the route just before the run to just after it (a roundabout's exit: first exit
   ~ -90 deg = right, opposite exit = straight, third exit = left). |turn| > 35 deg -> left (+) / right (-).
2. Without junction marks, the heading change of the route between s0 and s0 + L (same threshold).
3. A lane change the route asks for within the lookahead (`lane_change`: +1 left, -1 right).
4. Otherwise straight; a route shorter than 2 points (or ending behind the ego) is unknown.
"""

from __future__ import annotations

import numpy as np

from wamdiff.driving import geometry as geo

TURN_THRESHOLD = np.deg2rad(35.0)
JUNCTION_MARGIN = 25.0  # m


def lookahead(speed: float) -> float:
    return float(np.clip(4.0 * speed + 25.0, 35.0, 80.0))


def _heading_at(xy: np.ndarray, s: np.ndarray, at: float, span: float = 4.0) -> float:
    """Mean direction of the route over [at - span, at + span] (robust to sampling noise)."""
    a = np.array([np.interp(at - span, s, xy[:, 0]), np.interp(at - span, s, xy[:, 1])])
    b = np.array([np.interp(at + span, s, xy[:, 0]), np.interp(at + span, s, xy[:, 1])])
    d = b - a
    return float(np.arctan2(d[1], d[0]))


def command_from_route(route_xy: np.ndarray, junction: np.ndarray | None = None, speed: float = 10.0,
                       lane_change: int = 0) -> str:
    """`route_xy` (N, 2) ego frame; `junction` (N,) bool marks points inside a junction; see the module doc."""
    route_xy = np.asarray(route_xy, np.float64)
    if len(route_xy) < 2:
        return "unknown"
    s = geo.polyline_arclength(route_xy)
    s0, _, _ = geo.project_on_polyline(route_xy, (0.0, 0.0))
    if s0 >= s[-1] - 1.0:
        return "unknown"
    L = lookahead(speed)
    turn = None
    if junction is not None and np.any(junction):
        junction = np.asarray(junction, bool)
        idx = np.flatnonzero(junction)
        runs = np.split(idx, np.flatnonzero(np.diff(idx) > 1) + 1)
        for run in runs:
            start, end = s[run[0]], s[run[-1]]
            if end > s0 and start < s0 + L:
                # 25 m margins: roundabout arms flare (sine lanes) just before and after the ring
                before = _heading_at(route_xy, s, max(start - JUNCTION_MARGIN, 0.0))
                after = _heading_at(route_xy, s, min(end + JUNCTION_MARGIN, s[-1]))
                turn = float(geo.wrap_angle(after - before))
                break
    if turn is None and (junction is None or not np.any(junction)):
        turn = float(geo.wrap_angle(_heading_at(route_xy, s, min(s0 + L, s[-1] - 2.0)) - _heading_at(route_xy, s, s0)))
    if turn is not None and abs(turn) > TURN_THRESHOLD:
        return "left" if turn > 0 else "right"
    if lane_change:
        return "left" if lane_change > 0 else "right"
    return "straight"
