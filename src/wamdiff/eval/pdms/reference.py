"""A PDM-Closed-style reference planner: the bar that Ego Progress is normalised by.

As NAVSIM's metric cache (`metric_cache_processor.py`, `pdm_planner/`): IDM (target = speed-limit
fraction 0.2..1.0, fallback 15 m/s, min gap 1 m, headway 1.5 s, a_max 1.5, b_max 3.0) unrolled at 10 Hz along
the route centreline shifted laterally by -1, 0, +1 m = 15 proposals; each proposal is tracked by the same
LQR + bicycle and scored with the same scorer against constant-velocity forecasts of the agents seen at
t=0; the best by its own PDMS wins. Simplifications (documented, not NAVSIM's): the leading object is the
nearest forecast box whose footprint overlaps the ego-width corridor of the path, gap measured along the
path; no emergency brake; the path is the scene's route centreline, extended straight at both ends.

One addition: the IDM target speed is capped by the path curvature with the same curve-speed rule the
world's drivers follow (`driving.expert.speed_cap_from_curvature`: lateral acceleration <= 2.5 m/s^2 and
yaw rate <= 0.6 rad/s), anticipated with 1.5 m/s^2 braking. nuPlan maps lower the speed limit on curved
connectors; the world's per-lane limits do not (a roundabout lane says 20 m/s), and NAVSIM's comfort checks
cannot see lateral acceleration (the bicycle writes a_y = 0), so without the cap the reference would take a
roundabout at the straight-road limit and set an EP bar no careful driver reaches.
`IDMParams(max_lat_acc=None, max_yaw_rate=None)` restores plain PDM-Closed behaviour.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import shapely

from .scene_data import AgentTracks, SceneMapIndex
from .scorer import combine, score_states
from .tracker import DT, NUM_STATES, simulate
from .vehicle import VehicleParams


@dataclass(frozen=True)
class IDMParams:
    speed_fractions: tuple[float, ...] = (0.2, 0.4, 0.6, 0.8, 1.0)
    lateral_offsets: tuple[float, ...] = (0.0, -1.0, 1.0)  # centreline first: ties go to it, as in PDM-Closed
    fallback_target_velocity: float = 15.0
    min_gap: float = 1.0
    headway: float = 1.5
    accel_max: float = 1.5
    decel_max: float = 3.0
    delta: float = 4.0
    extension_m: float = 200.0
    max_lat_acc: float | None = 2.5  # curvature speed cap [m/s^2]; None = off (NAVSIM)
    max_yaw_rate: float | None = 0.6  # [rad/s] second curve-speed limit (v <= yaw_rate / kappa)
    cap_brake: float = 1.5  # [m/s^2] deceleration assumed when anticipating a curve
    cap_lookahead_m: float = 80.0


@dataclass
class ReferencePlan:
    poses: np.ndarray  # (41, 3) reference poses at 0..4 s (initial ego pose first)
    best: int  # index of the chosen proposal (lateral path major, speed fraction minor)
    proposal_pdms: np.ndarray  # (15,) internal scores


def _path(centerline: np.ndarray, offset: float, ext: float) -> np.ndarray:
    """Route polyline extended straight at both ends and shifted `offset` m to the left."""
    c = np.asarray(centerline, float)
    keep = np.concatenate([[True], np.linalg.norm(np.diff(c, axis=0), axis=1) > 1e-6])
    c = c[keep]
    if len(c) < 2:
        c = np.array([[0.0, 0.0], [1.0, 0.0]])
    d0 = (c[1] - c[0]) / np.linalg.norm(c[1] - c[0])
    d1 = (c[-1] - c[-2]) / np.linalg.norm(c[-1] - c[-2])
    c = np.concatenate([[c[0] - d0 * ext], c, [c[-1] + d1 * ext]])
    seg = np.diff(c, axis=0)
    seg /= np.linalg.norm(seg, axis=1, keepdims=True)
    tang = np.concatenate([[seg[0]], seg[:-1] + seg[1:], [seg[-1]]])
    tang /= np.maximum(np.linalg.norm(tang, axis=1, keepdims=True), 1e-9)
    normal = np.stack([-tang[:, 1], tang[:, 0]], 1)
    return c + offset * normal


def curvature_speed_cap(path: np.ndarray, max_lat_acc: float, brake: float, lookahead: float, step: float = 1.0,
                        max_yaw_rate: float | None = None):
    """(arc-length grid, speed cap) along a path: min(sqrt(a_lat / |kappa|), yaw_rate / |kappa|), anticipated by
    braking at `brake`."""
    poly = _Polyline(path)
    s = np.arange(0.0, poly.s[-1] + step, step)
    pts = poly.point(s)
    h = np.unwrap(np.arctan2(np.gradient(pts[:, 1]), np.gradient(pts[:, 0])))
    kappa = np.abs(np.gradient(h, step))
    w = 5  # smooth over ~5 m: polyline vertices are not curvature
    kappa = np.convolve(np.pad(kappa, (w // 2, w // 2), mode="edge"), np.ones(w) / w, mode="valid")
    cap = np.sqrt(max_lat_acc / np.maximum(kappa, 1e-6))
    if max_yaw_rate:
        cap = np.minimum(cap, max_yaw_rate / np.maximum(kappa, 1e-6))
    n = int(lookahead / step)
    padded = np.pad(cap, (0, n), mode="edge")
    win = np.lib.stride_tricks.sliding_window_view(padded, n + 1)[: len(cap)]
    ant = np.sqrt(win**2 + 2 * brake * step * np.arange(n + 1)[None]).min(1)
    return s, ant


class _Polyline:
    """Arc-length interpolation on a polyline with numpy (shapely's line_interpolate_point is ~100x slower here)."""

    def __init__(self, xy: np.ndarray):
        self.xy = xy
        self.s = np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])

    def point(self, s: np.ndarray) -> np.ndarray:
        s = np.clip(s, 0.0, self.s[-1])
        return np.stack([np.interp(s, self.s, self.xy[:, 0]), np.interp(s, self.s, self.xy[:, 1])], -1)

    def heading(self, s: np.ndarray, eps: float = 0.5) -> np.ndarray:
        a, b = self.point(np.asarray(s) - eps), self.point(np.asarray(s) + eps)
        return np.arctan2(b[..., 1] - a[..., 1], b[..., 0] - a[..., 0])


def idm_proposals(scene, geo: SceneMapIndex, forecast: AgentTracks, vehicle: VehicleParams, p: IDMParams = IDMParams(),
                  initial_speed: float | None = None) -> np.ndarray:
    """(len(fractions) * len(offsets), 41, 3) IDM proposals along the shifted route centreline."""
    v_limit = geo.speed_limit if geo.speed_limit and geo.speed_limit > 0 else p.fallback_target_velocity
    v0 = scene.ego_speed if initial_speed is None else initial_speed
    steps = NUM_STATES
    proposals = []
    if forecast.num:  # heading, length, width per agent and step, recovered from the corner boxes
        c = forecast.corners
        fwd = c[..., 0, :] - c[..., 1, :]  # front-left - rear-left
        side = c[..., 0, :] - c[..., 3, :]  # front-left - front-right
        forecast_boxes = np.stack([np.arctan2(fwd[..., 1], fwd[..., 0]), np.linalg.norm(fwd, axis=-1), np.linalg.norm(side, axis=-1)], -1)
    for offset in p.lateral_offsets:
        path = _path(geo.centerline_xy if len(geo.centerline_xy) >= 2 else np.zeros((0, 2)), offset, p.extension_m)
        line, poly = shapely.LineString(path), _Polyline(path)
        s_ego0 = float(shapely.line_locate_point(line, shapely.Point(0.0, 0.0)))
        # forecast agents in path coordinates: progress and signed lateral offset of every corner
        if forecast.num:
            # agent centres in path coordinates; the footprint's extent along/across the path from its box
            centers = forecast.centers[:, :steps]  # (A, T, 2)
            s_center = np.asarray(shapely.line_locate_point(line, shapely.points(centers.reshape(-1, 2)))).reshape(centers.shape[:2])
            foot = poly.point(s_center)
            hc = poly.heading(s_center)
            lat = -np.sin(hc) * (centers[..., 0] - foot[..., 0]) + np.cos(hc) * (centers[..., 1] - foot[..., 1])
            box = forecast_boxes[:, :steps]  # (A, T, 3): heading, length, width
            dh = box[..., 0] - hc
            half_along = 0.5 * (box[..., 1] * np.abs(np.cos(dh)) + box[..., 2] * np.abs(np.sin(dh)))
            half_across = 0.5 * (box[..., 1] * np.abs(np.sin(dh)) + box[..., 2] * np.abs(np.cos(dh)))
            in_corridor = np.abs(lat) < vehicle.half_width + half_across  # (A, T)
            s_min = s_center - half_along
            vel = np.diff(centers, axis=1, append=centers[:, -1:] + (centers[:, -1:] - centers[:, -2:-1])) / DT
            v_along = vel[..., 0] * np.cos(hc) + vel[..., 1] * np.sin(hc)
        n_f = len(p.speed_fractions)
        target0 = np.array(p.speed_fractions) * v_limit
        cap_s, cap_v = (curvature_speed_cap(path, p.max_lat_acc, p.cap_brake, p.cap_lookahead_m, max_yaw_rate=p.max_yaw_rate)
                        if p.max_lat_acc else (None, None))
        s_e = np.full(n_f, s_ego0)
        v = np.full(n_f, max(v0, 0.0))
        prog = np.zeros((n_f, steps))
        prog[:, 0] = s_e
        for k in range(1, steps):
            gap = np.full(n_f, 1e6)
            v_lead = np.zeros(n_f)
            if forecast.num:
                ahead = in_corridor[:, k][None] & (s_center[:, k][None] > s_e[:, None])  # (F, A)
                g = s_min[:, k][None] - (s_e[:, None] + vehicle.front_length)
                g = np.where(ahead, np.maximum(g, 0.0), 1e6)
                j = np.argmin(g, axis=1)
                gap = g[np.arange(n_f), j]
                v_lead = np.where(gap < 1e6, v_along[j, k], 0.0)
            target = target0 if cap_s is None else np.minimum(target0, np.interp(s_e, cap_s, cap_v))
            s_star = p.min_gap + v * p.headway + v * (v - v_lead) / (2 * np.sqrt(p.accel_max * p.decel_max))
            acc = p.accel_max * (1 - (v / np.maximum(target, 1e-3)) ** p.delta - (np.maximum(s_star, 0) / np.maximum(gap, 1e-2)) ** 2)
            acc = np.clip(acc, -p.decel_max, p.accel_max)
            v_new = np.maximum(v + acc * DT, 0.0)
            s_e = s_e + 0.5 * (v + v_new) * DT
            v = v_new
            prog[:, k] = s_e
        pts = poly.point(prog)
        hd = poly.heading(prog)
        poses = np.concatenate([pts, hd[..., None]], -1)
        poses[:, 0] = 0.0  # the initial ego pose, as NAVSIM prepends the current state
        proposals.append(poses)
    # order: lateral path major (centreline first), speed fraction minor
    return np.concatenate(proposals, 0)


def plan_reference(scene, geo: SceneMapIndex, vehicle: VehicleParams, initial_state: np.ndarray,
                   p: IDMParams = IDMParams()) -> ReferencePlan:
    forecast = AgentTracks.constant_velocity_forecast(scene)
    proposals = idm_proposals(scene, geo, forecast, vehicle, p)
    states = simulate(proposals, np.repeat(initial_state[None], len(proposals), 0), vehicle)
    scores = combine(score_states(states, forecast, geo, vehicle))["pdms"]
    best = int(np.argmax(scores))
    return ReferencePlan(proposals[best], best, scores)
