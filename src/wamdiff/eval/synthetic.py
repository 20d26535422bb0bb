"""Hand-made scenes with known answers (straight multi-lane roads, constant-velocity agents).

Independent of the world code: used by the tests and by `wamdiff eval bench` when no generated data is at
hand. Coordinates are the ego frame (rear axle at the origin, x forward, y left).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wamdiff.driving.scene import AGENT_STEPS, Scene, SceneMap


@dataclass
class AgentSpec:
    x: float
    y: float
    vx: float = 0.0
    vy: float = 0.0
    heading: float | None = None  # default: direction of motion (0 when standing)
    length: float = 5.0
    width: float = 2.0
    is_vehicle: bool = True


def _rect(x0, x1, y0, y1) -> np.ndarray:
    return np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], float)


def straight_road_scene(speed: float = 10.0, agents: list[AgentSpec] = (), lanes: int = 2, lane_width: float = 4.0,
                        ego_lane: int = 0, length: float = 300.0, speed_limit: float = 15.0, future_speed: float | None = None,
                        scene_id: str = "synthetic", family: str = "synthetic", ego_length: float = 5.0,
                        ego_width: float = 2.0, intersection: tuple | None = None, drivable_margin: float = 0.0,
                        lane_shift: float = 0.0) -> Scene:
    """A straight road along +x; lane i's centre at y = (i - ego_lane) * lane_width + lane_shift; ego at `speed`."""
    ys = (np.arange(lanes) - ego_lane) * lane_width + lane_shift
    x0, x1 = -50.0, length
    lane_polys = [_rect(x0, x1, y - lane_width / 2, y + lane_width / 2) for y in ys]
    centers = [np.stack([np.linspace(x0, x1, 60), np.full(60, y)], 1) for y in ys]
    drivable = [_rect(x0, x1, ys.min() - lane_width / 2 - drivable_margin, ys.max() + lane_width / 2 + drivable_margin)]
    route = np.stack([np.linspace(x0, x1, 120), np.zeros(120)], 1)
    inter = [] if intersection is None else [_rect(*intersection)]
    smap = SceneMap(lane_polygons=lane_polys, lane_centerlines=centers, drivable_polygons=drivable,
                    intersection_polygons=inter, route_centerline=route, speed_limit=speed_limit)
    hist = np.zeros((4, 7))
    hist[:, 0] = speed * np.arange(-3, 1) * 0.5
    hist[:, 3] = speed
    fs = speed if future_speed is None else future_speed
    t = np.arange(1, 9) * 0.5
    future = np.stack([fs * t, np.zeros(8), np.zeros(8)], 1)
    return Scene(
        scene_id=scene_id, family=family, seed=0, split="test", command="straight",
        image=np.zeros((8, 8, 3), np.uint8), ego_history=hist, future=future,
        agent_boxes=_agent_boxes(agents)[0], agent_velocity=_agent_boxes(agents)[1],
        agent_valid=np.ones((len(agents), AGENT_STEPS), bool), agent_is_vehicle=np.array([a.is_vehicle for a in agents], bool),
        map=smap, ego_pose_world=np.zeros(3), ego_length=ego_length, ego_width=ego_width,
    )


def _agent_boxes(agents) -> tuple[np.ndarray, np.ndarray]:
    t = np.arange(AGENT_STEPS) * 0.1
    boxes = np.zeros((len(agents), AGENT_STEPS, 5))
    vel = np.zeros((len(agents), AGENT_STEPS, 2))
    for i, a in enumerate(agents):
        h = a.heading if a.heading is not None else (np.arctan2(a.vy, a.vx) if np.hypot(a.vx, a.vy) > 0 else 0.0)
        boxes[i] = np.stack([a.x + a.vx * t, a.y + a.vy * t, np.full_like(t, h), np.full_like(t, a.length), np.full_like(t, a.width)], 1)
        vel[i] = [a.vx, a.vy]
    return boxes, vel


def plan_from_speed_profile(speeds: np.ndarray, y: np.ndarray | None = None) -> np.ndarray:
    """(8, 2) waypoints for per-interval speeds (8,) along +x, optional lateral positions (8,)."""
    x = np.cumsum(np.asarray(speeds, float) * 0.5)
    return np.stack([x, np.zeros(8) if y is None else np.asarray(y, float)], 1)


def random_scenes(n: int, seed: int = 0) -> list[Scene]:
    """Varied synthetic scenes (speeds, lane counts, traffic) for benchmarks."""
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        lanes = int(rng.integers(1, 4))
        speed = float(rng.uniform(3, 20))
        agents = []
        for _ in range(int(rng.integers(0, 12))):
            lane = int(rng.integers(0, lanes))
            agents.append(AgentSpec(x=float(rng.uniform(-40, 120)), y=lane * 4.0, vx=float(rng.uniform(0, 20))))
        out.append(straight_road_scene(speed=speed, agents=agents, lanes=lanes, scene_id=f"rand{seed}_{i}"))
    return out
