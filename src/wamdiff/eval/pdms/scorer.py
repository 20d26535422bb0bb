"""NAVSIM v1.1 sub-scores for a batch of simulated proposals in one scene (`pdm_scorer.py`, vectorised).

All proposals of a scene are scored together: (P, 41) ego boxes against (A, 51) agent boxes with an exact
separating-axis test, map membership with shapely's vectorised `contains_xy`. NAVSIM's sequential rule
"a track found not at fault is ignored for the rest of that proposal" becomes: for each
(proposal, track), only the events before its first not-at-fault event count.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .comfort import comfort_checks, comfort_checks_v2, is_comfortable
from .geometry import convex_intersect, relative_angle
from .scene_data import AgentTracks, SceneMapIndex
from .vehicle import HEADING, VX, VY, X, Y, VehicleParams, states_to_centers, states_to_corners

EGO_STOPPED_SPEED = 5e-2  # collision typing (nuPlan)
TTC_STOPPED_SPEED = 5e-3  # TTC is skipped below this ego speed
TTC_STEPS = (0, 3, 6, 9)  # 0, 0.3, 0.6, 0.9 s ahead at 10 Hz
AHEAD_DEG, BEHIND_DEG = 30.0, 150.0
PROGRESS_THRESHOLD = 5.0  # [m] below this best progress every plan gets full EP

# Weighted terms of the scores (NAVSIM `PDMScorerConfig`); the multiplicative terms gate them.
PDMS_WEIGHTS = {"ttc": 5.0, "ep": 5.0, "c": 2.0}  # v1.1: PDMS = NC * DAC * weighted mean
EPDMS_WEIGHTS = {"ep": 5.0, "ttc": 5.0, "lk": 2.0, "hc": 2.0, "ec": 2.0}  # v2: EPDMS = NC * DAC * DDC * TLC * ...
EPDMS_MULTIPLIERS = ("nc", "dac", "ddc", "tlc")
# v2's human filter: a term the logged human also fails (scores 0) is set to 1 for the plan
HUMAN_FILTERED = ("nc", "dac", "ddc", "tlc", "ep", "ttc", "lk", "hc")


@dataclass(frozen=True)
class ScoreConfig:
    epdms: bool = False  # also compute DDC, LK, HC (EC = TLC = 1 here, see score_epdms)
    ddc_horizon_s: float = 1.0
    ddc_compliance_m: float = 2.0
    ddc_violation_m: float = 6.0
    lk_deviation_m: float = 0.5
    lk_window_s: float = 2.0
    dt: float = 0.1


def _first_true(mask: np.ndarray, axis: int) -> np.ndarray:
    """Index of the first True along axis, or the axis length when none."""
    n = mask.shape[axis]
    return np.where(mask.any(axis), np.argmax(mask, axis=axis), n)


def ego_areas(corners: np.ndarray, centers: np.ndarray, rear_axle: np.ndarray, geo: SceneMapIndex):
    """(P, T) masks: multiple lanes, off the drivable area, rear axle in an intersection."""
    in_lane = geo.in_lanes(corners)  # (L, P, T, 4)
    if len(in_lane):
        touched = in_lane.any(-1).sum(0)
        single = in_lane.all(-1).any(0)
        multiple = (touched > 1) & ~single
    else:
        multiple = np.zeros(corners.shape[:2], bool)
    off_road = ~geo.in_drivable(corners).all(-1)
    in_inter = geo.in_intersection(rear_axle)
    return multiple, off_road, in_inter


def no_at_fault_collision(states, corners, multiple, off_road, agents: AgentTracks):
    """NC (P,) in {0, 0.5, 1} and the first at-fault collision step (P,) (inf if none)."""
    p, t = corners.shape[:2]
    if agents.num == 0:
        return np.ones(p), np.full(p, np.inf)
    ag = agents.corners[:, :t].transpose(1, 0, 2, 3)  # (T, A, 4, 2)
    valid = agents.valid[:, :t].T  # (T, A)
    hit = convex_intersect(corners[:, :, None], ag[None]) & valid[None]  # (P, T, A)
    if not hit.any():
        return np.ones(p), np.full(p, np.inf)
    speed = np.hypot(states[..., VX], states[..., VY])
    ego_stopped = (speed <= EGO_STOPPED_SPEED)[..., None]
    track_stopped = agents.stopped[None, None, :]
    centers = agents.centers[:, :t].transpose(1, 0, 2)  # (T, A, 2)
    rear = relative_angle(states[..., None, [X, Y]], states[..., HEADING][..., None], centers[None]) > np.deg2rad(BEHIND_DEG)
    front_edge = corners[:, :, [0, 3]]  # front-left, front-right
    front = convex_intersect(front_edge[:, :, None], ag[None])
    lateral_at_fault = (multiple | off_road)[..., None]
    active = ~ego_stopped & ~track_stopped
    at_fault = ~ego_stopped & (track_stopped | (active & ~rear & (front | lateral_at_fault)))
    # sequential "ignore after a not-at-fault contact": only events before that contact count
    first_ok = _first_true(hit & ~at_fault, axis=1)  # (P, A)
    counted = hit & at_fault & (np.arange(t)[None, :, None] < first_ok[:, None, :])
    penalty = np.where(agents.is_vehicle, 0.0, 0.5)[None, None, :]
    nc = np.where(counted, penalty, 1.0).min(axis=(1, 2))
    first = np.where(counted.any(2).any(1), np.argmax(counted.any(2), axis=1), np.inf)
    return nc, first


def time_to_collision(states, corners, multiple, off_road, in_inter, agents: AgentTracks):
    """TTC (P,) in {0, 1}: projected ego boxes 0/0.3/0.6/0.9 s ahead at constant velocity."""
    p, t = corners.shape[:2]
    if agents.num == 0:
        return np.ones(p)
    steps = np.asarray(TTC_STEPS)
    speed = np.hypot(states[..., VX], states[..., VY])
    vel = np.stack([np.cos(states[..., HEADING]), np.sin(states[..., HEADING])], -1) * speed[..., None]  # (P, T, 2)
    proj = corners[:, :, None] + vel[:, :, None, None, :] * (steps * 0.1)[None, None, :, None, None]  # (P, T, S, 4, 2)
    tidx = np.minimum(np.arange(t)[:, None] + steps[None], agents.corners.shape[1] - 1)  # (T, S)
    ag = agents.corners[:, tidx].transpose(1, 2, 0, 3, 4)  # (T, S, A, 4, 2)
    valid = agents.valid[:, tidx].transpose(1, 2, 0)  # (T, S, A)
    hit = convex_intersect(proj[:, :, :, None], ag[None]) & valid[None] & (speed >= TTC_STOPPED_SPEED)[..., None, None]
    if not hit.any():
        return np.ones(p)
    centers = agents.centers[:, tidx].transpose(1, 2, 0, 3)  # (T, S, A, 2)
    ang = relative_angle(states[:, :, None, None, [X, Y]], states[..., HEADING][:, :, None, None], centers[None])
    ahead = ang < np.deg2rad(AHEAD_DEG)
    behind = ang > np.deg2rad(BEHIND_DEG)
    risky_area = (multiple | off_road | in_inter)[:, :, None, None]
    bad = ahead | (risky_area & ~behind)
    h = hit.reshape(p, -1, agents.num)  # order: time-major, then projection step (NAVSIM's loop order)
    b = bad.reshape(p, -1, agents.num)
    first_ok = _first_true(h & ~b, axis=1)
    counted = h & b & (np.arange(h.shape[1])[None, :, None] < first_ok[:, None, :])
    return np.where(counted.any(axis=(1, 2)), 0.0, 1.0)


def driving_direction(centers, geo: SceneMapIndex, cfg: ScoreConfig, same_direction_lanes: np.ndarray):
    """DDC (P,) in {0, 0.5, 1}: distance driven within 1 s windows while the centre is on no same-direction lane."""
    p, t = centers.shape[:2]
    in_lane = geo.in_lanes(centers)  # (L, P, T)
    if len(in_lane):
        on_route = (in_lane & same_direction_lanes[:, None, None]).any(0)
    else:
        on_route = np.ones((p, t), bool)
    on_route |= geo.in_intersection(centers)
    step = np.zeros((p, t))
    step[:, 1:] = np.linalg.norm(np.diff(centers, axis=1), axis=-1)
    step[on_route] = 0.0
    h = int(round(cfg.ddc_horizon_s / cfg.dt))
    c = np.concatenate([np.zeros((p, 1)), np.cumsum(step, 1)], 1)
    window = c[:, 1:] - c[:, np.maximum(0, np.arange(t) - h)]
    worst = window.max(1)
    return np.where(worst < cfg.ddc_compliance_m, 1.0, np.where(worst < cfg.ddc_violation_m, 0.5, 0.0))


def lane_keeping(centers, geo: SceneMapIndex, cfg: ScoreConfig):
    """LK (P,): 0 if the centre stays > 0.5 m from the route centreline for 2 s (intersections do not reset)."""
    p, t = centers.shape[:2]
    dev = geo.lateral_distance(centers) > cfg.lk_deviation_m
    inter = geo.in_intersection(centers)
    need = int(np.ceil(cfg.lk_window_s / cfg.dt))
    out = np.ones(p)
    count = np.zeros(p, int)
    for k in range(t):  # 41 steps, vector over proposals
        count = np.where(inter[:, k], count, np.where(dev[:, k], count + 1, 0))
        out[count >= need] = 0.0
    return out


def same_direction_lanes(geo: SceneMapIndex) -> np.ndarray:
    """Per lane: does its centreline run the way of the route (cos > 0 at the lane's middle)?"""
    n = len(geo.lanes)
    if geo.centerline is None or len(geo.lane_centerlines) != n:
        return np.ones(n, bool)
    out = np.ones(n, bool)
    route = geo.centerline_xy
    for i, cl in enumerate(geo.lane_centerlines):
        if len(cl) < 2:
            continue
        mid = len(cl) // 2
        d = cl[min(mid + 1, len(cl) - 1)] - cl[max(mid - 1, 0)]
        j = int(np.argmin(np.linalg.norm(route - cl[mid], axis=1)))
        r = route[min(j + 1, len(route) - 1)] - route[max(j - 1, 0)]
        out[i] = float(d @ r) > 0
    return out


def score_states(states: np.ndarray, agents: AgentTracks, geo: SceneMapIndex, vehicle: VehicleParams,
                 cfg: ScoreConfig = ScoreConfig(), history_states: np.ndarray | None = None) -> dict[str, np.ndarray]:
    """Unnormalised sub-scores of simulated proposals (P, T, 11) in one scene. EP is normalised by `combine`."""
    corners = states_to_corners(states, vehicle)
    centers = states_to_centers(states, vehicle)
    multiple, off_road, in_inter = ego_areas(corners, centers, states[..., [X, Y]], geo)
    checks = comfort_checks(states, cfg.dt)
    nc, t_col = no_at_fault_collision(states, corners, multiple, off_road, agents)
    out = {
        "nc": nc,
        "dac": np.where(off_road.any(1), 0.0, 1.0),
        "ttc": time_to_collision(states, corners, multiple, off_road, in_inter, agents),
        "c": is_comfortable(states, cfg.dt, checks).astype(float),
        "progress_m": np.clip(geo.progress(centers[:, -1]) - geo.progress(centers[:, 0]), 0.0, None)
        if geo.centerline is not None else np.zeros(len(states)),
        "collision_step": t_col,
    }
    for name, ok in checks.items():
        out[f"c_{name}"] = ok.astype(float)
    if cfg.epdms:
        out["ddc"] = driving_direction(centers, geo, cfg, same_direction_lanes(geo))
        out["lk"] = lane_keeping(centers, geo, cfg) if geo.centerline is not None else np.ones(len(states))
        if history_states is not None:  # v2 comfort over [history | simulated states] on one 0.1 s grid
            padded = np.concatenate([np.broadcast_to(history_states, (len(states),) + history_states.shape), states], 1)
            out["hc"] = is_comfortable(padded, cfg.dt, comfort_checks_v2(padded, cfg.dt)).astype(float)
        else:  # NAVSIM: no past trajectory -> HC = 1
            out["hc"] = np.ones(len(states))
        out["ec"] = np.ones(len(states))
        out["tlc"] = np.ones(len(states))
    return out


def _weighted(metrics: dict[str, np.ndarray], weights: dict[str, float]) -> np.ndarray:
    return sum(w * metrics[k] for k, w in weights.items()) / sum(weights.values())


def combine(metrics: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """NAVSIM v1.1 PDMS over one scene's proposal set.

    EP = progress x NC x DAC normalised by its best value over the set (so a colliding reference does not set the
    bar); below 5 m of best progress EP = 1, except 0 where NC x DAC = 0.
    """
    mult = metrics["nc"] * metrics["dac"]
    raw = metrics["progress_m"] * mult
    best = raw.max()
    ep = raw / best if best > PROGRESS_THRESHOLD else np.where(mult == 0.0, 0.0, 1.0)
    out = dict(metrics, ep=ep)
    out["pdms"] = mult * _weighted(out, PDMS_WEIGHTS)
    return out


def epdms_progress(metrics: dict[str, np.ndarray]) -> np.ndarray:
    """NAVSIM v2 EP: raw progress over the best multiplier-weighted progress, clipped to [0, 1]; never zeroed by the
    multipliers (a plan that touched a cone, NC 0.5, with the reference's progress keeps EP 1)."""
    mult = np.prod([metrics[k] for k in EPDMS_MULTIPLIERS], axis=0)
    best = (metrics["progress_m"] * mult).max()
    if best > PROGRESS_THRESHOLD:
        return np.clip(metrics["progress_m"] / best, 0.0, 1.0)
    return np.ones(len(mult))


def combine_epdms(metrics: dict[str, np.ndarray], human: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """NAVSIM v2 EPDMS over one scene's proposal set; `human` = the logged human's terms, scored alone.

    As `navsim/evaluate/pdm_score.py` does it: the set is scored first (EP normalised with the unfiltered
    multipliers), then every term the human also fails is set to 1 (the human filter), then the score is
    recomputed from the filtered terms. EC (two-frame extended comfort) needs the previous frame's plan and is 1.
    """
    out = dict(metrics, ep=epdms_progress(metrics))
    if human is not None:
        human = dict(human, ep=epdms_progress(human))
        for k in HUMAN_FILTERED:
            out[k] = np.where(human[k] == 0.0, 1.0, out[k])
    mult = np.prod([out[k] for k in EPDMS_MULTIPLIERS], axis=0)
    out["epdms"] = mult * _weighted(out, EPDMS_WEIGHTS)
    return out
