"""Multi-task questions with exact answers, computed from a scene (same images as the planning samples).

Definitions (ego frame at t0: x forward, y left, origin at the rear axle; agents = vehicles valid at t0):
- ego-lane corridor: |y| <= 2.0 m (half a 4 m lane) around the ego's heading line.
- "ahead within 30 m": an agent's box centre has 0 < x <= 30 m.
  * `vehicles_ahead_lane`: count of vehicles ahead within 30 m inside the ego-lane corridor;
  * `vehicles_ahead_all`: count of vehicles ahead within 30 m whatever their y (|y| <= 30 m).
- `ego_lane`: asked on multi-lane roads only: "lane k of n, counted from the left" (highway-env lane id + 1).
- `meta_action` from the expert's future: lateral = "turn left/right" when its heading at 4 s differs from t0
  by > 35 deg; else "change lane left/right" when the ego is on another lane of the same road at 4 s (left =
  smaller id); else "keep lane". Longitudinal from speeds v0 (t0) and v4 (mean over 3.5-4.0 s): "stop" when
  v4 < 0.5 m/s, "accelerate" when v4 - v0 > 1.0 m/s, "decelerate" when < -1.0 m/s, else "keep speed".
  Answer: "<lateral>, <longitudinal>".
- `lead_braking`: the lead = the closest vehicle ahead (0 < x <= 60 m) in the ego-lane corridor; braking =
  its logged speed drops by more than 1.0 m/s over 0..1 s. Answers "yes" / "no" / "no lead vehicle".
`score_qa(pred, gold)` = 1.0 on an exact match after normalising case, whitespace and a trailing period.
"""

from __future__ import annotations

import numpy as np

from wamdiff.driving.scene import Scene

CORRIDOR = 2.0
AHEAD = 30.0
LEAD_RANGE = 60.0
PREAMBLE = "Here is a front-view images from a driving vehicle: <image>\n"

QUESTIONS = {
    "vehicles_ahead_lane": "How many vehicles are ahead of the ego vehicle within 30 m in its lane? Answer with a number.",
    "vehicles_ahead_all": "How many vehicles are ahead of the ego vehicle within 30 m in any lane? Answer with a number.",
    "ego_lane": "Which lane is the ego vehicle in, counted from the left?",
    "meta_action": "What will the ego vehicle do in the next 4 seconds (lateral, longitudinal)?",
    "lead_braking": "Is the vehicle directly ahead in the ego lane braking?",
}


def _t0_vehicles(scene: Scene) -> np.ndarray:
    ok = scene.agent_valid[:, 0] & scene.agent_is_vehicle if len(scene.agent_valid) else np.zeros(0, bool)
    return np.flatnonzero(ok)


def vehicles_ahead(scene: Scene, in_lane: bool) -> int:
    idx = _t0_vehicles(scene)
    if len(idx) == 0:
        return 0
    xy = scene.agent_boxes[idx, 0, :2]
    ahead = (xy[:, 0] > 0) & (xy[:, 0] <= AHEAD)
    lateral = np.abs(xy[:, 1]) <= (CORRIDOR if in_lane else AHEAD)
    return int(np.sum(ahead & lateral))


def ego_lane(scene: Scene) -> str | None:
    n = int(scene.meta.get("ego_road_lanes", 1))
    if n < 2 or "ego_lane_id" not in scene.meta:
        return None
    return f"lane {int(scene.meta['ego_lane_id']) + 1} of {n}"


def meta_action(scene: Scene) -> str:
    fut = np.asarray(scene.future, np.float64)
    turn = float(np.arctan2(np.sin(fut[-1, 2]), np.cos(fut[-1, 2])))
    lane0, lane4 = scene.meta.get("ego_lane_index"), scene.meta.get("ego_lane_index_4s")
    if abs(turn) > np.deg2rad(35):
        lateral = "turn left" if turn > 0 else "turn right"
    elif lane0 and lane4 and lane0[:2] == lane4[:2] and lane0[2] != lane4[2]:
        lateral = "change lane left" if int(lane4[2]) < int(lane0[2]) else "change lane right"
    else:
        lateral = "keep lane"
    v0 = float(np.hypot(*scene.ego_history[-1, 3:5]))
    v4 = float(np.linalg.norm(fut[-1, :2] - fut[-2, :2]) / 0.5)
    if v4 < 0.5:
        longitudinal = "stop"
    elif v4 - v0 > 1.0:
        longitudinal = "accelerate"
    elif v4 - v0 < -1.0:
        longitudinal = "decelerate"
    else:
        longitudinal = "keep speed"
    return f"{lateral}, {longitudinal}"


def lead_braking(scene: Scene) -> str:
    idx = _t0_vehicles(scene)
    if len(idx) == 0:
        return "no lead vehicle"
    xy = scene.agent_boxes[idx, 0, :2]
    cand = idx[(xy[:, 0] > 0) & (xy[:, 0] <= LEAD_RANGE) & (np.abs(xy[:, 1]) <= CORRIDOR)]
    if len(cand) == 0:
        return "no lead vehicle"
    lead = cand[np.argmin(scene.agent_boxes[cand, 0, 0])]
    steps = min(10, scene.agent_valid.shape[1] - 1)
    if not scene.agent_valid[lead, steps]:
        return "no"
    v0 = float(np.hypot(*scene.agent_velocity[lead, 0]))
    v1 = float(np.hypot(*scene.agent_velocity[lead, steps]))
    return "yes" if v0 - v1 > 1.0 else "no"


def scene_questions(scene: Scene) -> list[tuple[str, str, str]]:
    """(kind, question, answer) for every question that applies to the scene."""
    out = [
        ("vehicles_ahead_lane", QUESTIONS["vehicles_ahead_lane"], str(vehicles_ahead(scene, True))),
        ("vehicles_ahead_all", QUESTIONS["vehicles_ahead_all"], str(vehicles_ahead(scene, False))),
    ]
    lane = ego_lane(scene)
    if lane is not None:
        out.append(("ego_lane", QUESTIONS["ego_lane"], lane))
    if np.any(scene.future):
        out.append(("meta_action", QUESTIONS["meta_action"], meta_action(scene)))
        out.append(("lead_braking", QUESTIONS["lead_braking"], lead_braking(scene)))
    return out


def qa_samples(scene: Scene, image_path: str):
    """ConversationSamples for a scene's questions (the image is the scene's camera PNG)."""
    from wamdiff.driving.wamdiff2_json import ConversationSample

    return [
        ConversationSample(id=f"{scene.scene_id}_qa_{kind}", image_paths=[image_path], human=PREAMBLE + q, answer=a,
                           meta={"task": "qa", "qa_kind": kind, "family": scene.family})
        for kind, q, a in scene_questions(scene)
    ]


def _normalise(text: str) -> str:
    return " ".join(str(text).strip().lower().replace("<|im_end|>", "").split()).rstrip(".")


def score_qa(pred: str, gold: str) -> float:
    return 1.0 if _normalise(pred) == _normalise(gold) else 0.0
