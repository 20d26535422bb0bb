"""Open-loop metrics: displacement errors against the logged expert, failed plans, plan-box collisions.

- L2 at each 0.5 s waypoint (`l2_0.5s` .. `l2_4.0s`) and at 1/2/3/4 s; also the ST-P3/UniAD-style running
  average up to 1/2/3/4 s (`l2avg_Ns`); ADE = mean over the 8 waypoints, FDE = the 4 s error.
- failure rate = share of plans the planner could not produce (text that does not parse, an error, ...). A
  distance to a missing trajectory is undefined, so the displacement means are over the plans that exist (the
  planner's own, plus its fallback's where the spec opted in: `n_fallback`), and over its own plans only
  (`own_*`); the failure rate stands next to them in every table (PDMS scores a failed plan 0).
- on a user's WAM-Diff2 JSON (`eval.json_data`) the logged future is each sample's `gpt` answer; with no agents
  and no ego state known, its rows have no collision and no `per_condition` split.
- collision rate = share of plans whose ego box (scene ego size, rear-axle origin, heading from the
  waypoints) overlaps a logged agent box at the same instant (0.5 .. 4.0 s).
- relative change vs a reference planner's aggregate: (value - ref) / |ref| per metric.
- per ego condition at t0 (`per_condition`): the same summary over the scenes where the ego already brakes hard
  (longitudinal acceleration below `HARD_BRAKING_MS2`) and over the others. Measured: the diffusion student's whole
  L2@4s deficit to the AR VLA sat in the hard-braking fifth of the test split (docs/PARITY.md).
"""

from __future__ import annotations

import numpy as np

from wamdiff.driving.scene import HARD_BRAKING_MS2
from wamdiff.eval.intervals import mean_ci95

from .pdms.geometry import convex_intersect
from .pdms.tracker import headings_from_xy
from .pdms.vehicle import box_corners, scene_vehicle

OPENLOOP_VERSION = "wamdiff-openloop/0.2"  # 0.2: ego_speed, ego_accel per row; per_condition
STEP_TIMES = tuple(round(0.5 * (i + 1), 1) for i in range(8))


def plan_collides(scene, xy: np.ndarray, heading: np.ndarray | None = None) -> bool:
    boxes = np.asarray(scene.agent_boxes, float)
    if len(boxes) == 0:
        return False
    veh = scene_vehicle(scene)
    h = headings_from_xy(xy) if heading is None else heading
    ego = box_corners(xy[:, 0], xy[:, 1], h, veh.half_length, veh.half_width, veh.rear_axle_to_center)  # (8, 4, 2)
    idx = np.arange(5, 45, 5)[: len(xy)]  # agents at 0.5 .. 4.0 s (10 Hz)
    ab = boxes[:, idx]
    ag = box_corners(ab[..., 0], ab[..., 1], ab[..., 2], ab[..., 3] / 2, ab[..., 4] / 2)  # (A, 8, 4, 2)
    hit = convex_intersect(ego[None], ag) & np.asarray(scene.agent_valid, bool)[:, idx]
    return bool(hit.any())


def openloop_row(scene, plan, planner_name: str = "") -> dict:
    row = {"scene_id": scene.scene_id, "family": scene.family, "split": scene.split, "planner": planner_name,
           "ego_speed": scene.ego_speed, "ego_accel": scene.ego_accel,
           "plan_ok": bool(plan.ok), "fallback": plan.fallback, "plan_reason": plan.reason,
           "forwards": plan.forwards, "new_tokens": plan.new_tokens, "version": OPENLOOP_VERSION, "valid": True, "reason": ""}
    fut = np.asarray(scene.future, float)
    if fut.shape != (8, 3) or not (np.any(fut) or getattr(scene, "future_known", False)):
        row.update(valid=False, reason="scene has no logged future")
        return row
    if plan.xy is None:  # failed plan: counted, no distance
        return row
    xy = np.asarray(plan.xy, float)
    err = np.linalg.norm(xy - fut[:, :2], axis=1)
    for t, e in zip(STEP_TIMES, err):
        row[f"l2_{t}s"] = float(e)
    for sec in (1, 2, 3, 4):
        row[f"l2avg_{sec}s"] = float(err[: 2 * sec].mean())
    row["ade"], row["fde"] = float(err.mean()), float(err[-1])
    if getattr(scene, "agent_boxes", None) is not None:  # a WAM-Diff2 sample (`eval.json_data`) has no other agents
        row["collision"] = float(plan_collides(scene, xy, plan.heading))
    return row


KEYS = [f"l2_{t}s" for t in STEP_TIMES] + [f"l2avg_{s}s" for s in (1, 2, 3, 4)] + ["ade", "fde", "collision"]


def aggregate_openloop(rows: list[dict], reference: dict | None = None) -> dict:
    def summary(rs):
        valid = [r for r in rs if r["valid"]]
        scored = [r for r in valid if "ade" in r]
        own = [r for r in scored if r["plan_ok"]]
        out = {"n": len(rs), "n_valid": len(valid), "n_invalid": len(rs) - len(valid),
               "n_failed": sum(not r["plan_ok"] for r in rs), "n_fallback": sum(bool(r["fallback"]) for r in rs)}
        out["failure_rate"] = out["n_failed"] / max(1, len(rs))
        for k in KEYS:  # a metric no row has (collision: samples without agents) is None
            values, own_values = [r[k] for r in scored if k in r], [r[k] for r in own if k in r]
            out[k] = float(np.mean(values)) if values else None
            out[f"own_{k}"] = float(np.mean(own_values)) if own_values else None
        out["collision_rate"] = out["collision"]
        out["l2_4.0s_ci95"] = mean_ci95([r["l2_4.0s"] for r in scored])
        out["ade_ci95"] = mean_ci95([r["ade"] for r in scored])
        mean_fw = [r["forwards"] for r in rs if r["forwards"]]
        out["mean_forwards"] = float(np.mean(mean_fw)) if mean_fw else None
        return out

    families = sorted({r["family"] for r in rows})
    known = [r for r in rows if r["ego_accel"] is not None]  # a WAM-Diff2 sample's ego state is in its prompt text only
    braking = [r["ego_accel"] < HARD_BRAKING_MS2 for r in known]
    result = {"version": OPENLOOP_VERSION, "overall": summary(rows),
              "per_family": {f: summary([r for r in rows if r["family"] == f]) for f in families},
              "per_condition": {"hard_braking": summary([r for r, b in zip(known, braking) if b]),
                                "other": summary([r for r, b in zip(known, braking) if not b])} if known else {}}
    if reference is not None:
        result["relative_to_reference"] = relative_change(result["overall"], reference.get("overall", reference))
    return result


def relative_change(values: dict, reference: dict) -> dict:
    """(value - ref) / |ref| for every numeric metric both carry (negative = lower than the reference)."""
    out = {}
    for k, v in values.items():
        r = reference.get(k)
        numeric = isinstance(v, (int, float)) and isinstance(r, (int, float)) and not isinstance(v, bool)
        if numeric and r != 0 and not k.startswith("n_") and k != "n":
            out[k] = (v - r) / abs(r)
    return out
