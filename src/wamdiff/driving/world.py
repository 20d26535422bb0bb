"""The default world: scenario families on highway-env, and a `World` wrapper for data generation and closed loop.

Families (`FAMILIES`): highway, merge, roundabout, intersection. Each is a highway-env env subclass that builds
the road, places traffic from its own seeded RNG (density, speeds configurable, see `WorldConfig`) and puts an
`ExpertVehicle` (expert.py) on a planned route. `FAMILY_REGISTRY` holds one line per family (its env class,
config defaults, closed-loop dev routes, junction shape): a new family is a new env subclass plus one line there;
data generation, the map layers, closed-loop route sets and the reports pick it up from the registry.
The env's reward code is overridden (highway-env's merge / roundabout `_rewards` compare the action to ints and
two-way / u-turn need `target_speeds`: continuous actions crashed there). The env's `step()` is never used:
`World.step` calls `road.act(); road.step(dt)` at 10 Hz.

Closed-loop use (the evaluation engineer's entry point)::

    world = make_world("roundabout", seed=3, density=1.0)   # warmed up: >= 1.5 s of ego history exists
    scene = observe(world)                                   # capture.py: the t0 Scene from the live state
    world.set_ego_state(x, y, heading, speed)                # world frame (geometry.py); or
    world.ego_control(accel, steer)                          # highway-env bicycle integrates it in step()
    world.step(0.1)                                          # traffic reacts with IDM/MOBIL; time += 0.1
    route_progress(world), route_completed(world), world.ego.crashed

Until `set_ego_state` / `ego_control` is called the expert drives the ego itself (`world.autopilot()` hands
it back). `world.road` / `world.ego` are the raw highway-env objects (hw frame, y down); every other pose this
module returns is in the right-handed world frame of geometry.py, the ego's pose at its REAR AXLE.
"""

from __future__ import annotations

import functools
from dataclasses import asdict, dataclass, field, fields

import gymnasium as gym
import numpy as np
from highway_env.envs.common.action import action_factory
from highway_env.envs.highway_env import HighwayEnv
from highway_env.envs.intersection_env import IntersectionEnv
from highway_env.envs.merge_env import MergeEnv
from highway_env.envs.roundabout_env import RoundaboutEnv
from highway_env.envs.two_way_env import TwoWayEnv
from highway_env.envs.u_turn_env import UTurnEnv
from highway_env.road.road import Road, RoadNetwork

from wamdiff.driving import geometry as geo
from wamdiff.names import FAMILIES as FAMILY_NAMES
from wamdiff.driving.expert import ExpertVehicle, IntersectionTrafficVehicle, TrafficVehicle, speed_cap_from_curvature

SIM_DT = 0.1


@dataclass
class WorldConfig:
    """Knobs of a family. `None` means the family's default (`FAMILY_REGISTRY`)."""

    density: float = 1.0  # traffic density multiplier (1 = the family's nominal traffic)
    speed_scale: float = 1.0  # multiplies every desired speed (traffic and ego)
    lanes: int | None = None  # highway lane count
    ego_speed: tuple[float, float] | None = None  # range of the ego's desired speed [m/s]
    traffic_speed: tuple[float, float] | None = None  # range of traffic desired speeds [m/s]
    lane_change_prob: float | None = None  # chance the route asks for a lane change (highway, merge)
    warmup_s: float = 2.0  # simulated before t0 (>= 1.5 s so the ego history exists)
    # data: t0 drawn per seed in [warmup_s, warmup_s + t0_spread_s] (the expert drives until then), so scenes
    # cover every phase of a route (inside the ring, through the turn, after it), not only its approach
    t0_spread_s: float = 0.0
    # m of route ahead of the ego's start (closed loop ends there); a t0 spread adds the distance the ego drives in
    # it, so a scene later on the route still has its route ahead (as far as the road network reaches)
    route_length: float = 250.0
    cull_distance: float = 160.0  # traffic further than this from the ego is removed (speed)

    @classmethod
    def for_family(cls, family: str, **overrides) -> "WorldConfig":
        defaults = family_spec(family).defaults
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise ValueError(f"unknown world option(s) {sorted(unknown)}")
        cfg = cls(**{**defaults, **{k: v for k, v in overrides.items() if v is not None}})
        return cfg


class _NullObservation:
    def space(self):
        return gym.spaces.Box(0.0, 1.0, (1,), np.float32)

    def observe(self):
        return np.zeros(1, np.float32)


# -- env subclasses ----------------------------------------------------------------------------------------------
class _NoRewardMixin:
    """Continuous actions broke highway-env's reward code (action compared to ints / target_speeds): neutralise."""

    FAMILY = "highway"

    @staticmethod
    def is_junction_lane(lane_index) -> bool:
        """Lanes inside a junction (intersection box, roundabout ring): the command is the turn taken through them."""
        return False

    def _rewards(self, action) -> dict[str, float]:
        return {"collision_reward": float(self.vehicle.crashed) if self.vehicle else 0.0}

    def _reward(self, action) -> float:
        return 0.0

    @classmethod
    def default_config(cls) -> dict:
        cfg = super().default_config()
        cfg.update({
            "action": {"type": "ContinuousAction"},
            "observation": {"type": "Kinematics", "vehicles_count": 2},
            "offscreen_rendering": True,
            "simulation_frequency": 10,
            "policy_frequency": 10,
            "other_vehicles_type": "wamdiff.driving.expert.TrafficVehicle",
            "wamdiff": asdict(WorldConfig.for_family(cls.FAMILY)),
        })
        return cfg

    def define_spaces(self) -> None:
        """The Kinematics observation (pandas) cost ~25 ms per reset and nothing here reads it."""
        self.observation_type = _NullObservation()
        self.action_type = action_factory(self, self.config["action"])
        self.observation_space = self.observation_type.space()
        self.action_space = self.action_type.space()

    # -- shared placement helpers --------------------------------------------------------------------------
    @property
    def wcfg(self) -> WorldConfig:
        return WorldConfig(**self.config["wamdiff"])

    def _traffic(self, lane_index, s: float, speed: float, cls=TrafficVehicle, destination: str | None = None):
        v = cls.make_on_lane(self.road, lane_index, longitudinal=s, speed=speed)
        v.target_speed = speed
        v.check_collisions = False  # traffic-traffic pairs are not checked (speed); the ego checks all
        if destination is not None:
            v.plan_route_to(destination)
        v.randomize_behavior()
        self.road.vehicles.append(v)
        return v

    def _fill_lane(self, lane_index, s_min: float, s_max: float, keep_clear: list[float], speed_range, spacing: float):
        """Place vehicles along one lane with random gaps around a mean `spacing` (m), keeping [k - 15, k + 35] m
        free around every `keep_clear` s (the ego) so no run starts with an emergency brake."""
        rng = self.np_random
        s = s_min + rng.uniform(0, spacing)
        while s < s_max:
            if all(not (k - 15.0 < s < k + 35.0) for k in keep_clear):
                self._traffic(lane_index, s, rng.uniform(*speed_range))
            s += spacing * rng.uniform(0.6, 1.4)

    def _settle_ego(self) -> None:
        """Start no faster than a close leader: an emergency brake in the first seconds is a spawn artefact."""
        ego = self.vehicle
        front, _ = self.road.neighbour_vehicles(ego, ego.lane_index)
        if front is not None:
            gap = ego.lane_distance_to(front)
            if gap < 3.0 * ego.speed + 10.0:
                ego.speed = float(min(ego.speed, max(front.speed - 1.0, 0.5 * ego.speed)))

    def _make_ego(self, lane_index, s: float, speed_range) -> ExpertVehicle:
        rng = self.np_random
        desired = float(rng.uniform(*speed_range)) * self.wcfg.speed_scale
        lane = self.road.network.get_lane(lane_index)
        ego = ExpertVehicle(self.road, lane.position(s, 0.0), lane.heading_at(s), speed=desired * rng.uniform(0.85, 1.0))
        ego.target_speed = ego.desired_speed = desired
        ego.target_lane_index = lane_index
        ego.timer = 0.0
        self.road.vehicles.insert(0, ego)
        self.vehicle = ego
        return ego


class HighwayFamily(_NoRewardMixin, HighwayEnv):
    def _create_road(self) -> None:
        self.road = Road(network=RoadNetwork.straight_road_network(self.wcfg.lanes, speed_limit=30), np_random=self.np_random)

    def _create_vehicles(self) -> None:
        cfg, rng = self.wcfg, self.np_random
        ego_id = int(rng.integers(cfg.lanes))
        s0 = 400.0
        self._make_ego(("0", "1", ego_id), s0, np.array(cfg.ego_speed))
        traffic_speed = np.array(cfg.traffic_speed) * cfg.speed_scale
        spacing = (12 + traffic_speed.mean()) * 1.6 / max(cfg.density, 0.05)
        for lane in range(cfg.lanes):
            self._fill_lane(("0", "1", lane), s0 - 70, s0 + 150, [s0] if lane == ego_id else [], traffic_speed, spacing)
        self._settle_ego()
        self.route_plan = _highway_route(self, ego_id)


class MergeFamily(_NoRewardMixin, MergeEnv):
    FAMILY = "merge"

    def _make_vehicles(self) -> None:
        cfg, rng = self.wcfg, self.np_random
        start = rng.choice(["ramp", "right", "left"], p=[0.35, 0.4, 0.25])
        if start == "ramp":  # on the converging ramp section, so the merge is within the command's lookahead
            s0 = float(rng.uniform(0, 50))
            ego = self._make_ego(("k", "b", 0), s0, np.array(cfg.ego_speed) * 0.9)
        else:
            ego_id = 1 if start == "right" else 0
            s0 = float(rng.uniform(60, 200))
            ego = self._make_ego(("a", "b", ego_id), s0, np.array(cfg.ego_speed))
        ego_x = ego.position[0]
        traffic_speed = np.array(cfg.traffic_speed) * cfg.speed_scale
        spacing = (12 + traffic_speed.mean()) * 1.8 / max(cfg.density, 0.05)
        for lane in (0, 1):
            self._fill_lane(("a", "b", lane), max(0.0, ego_x - 70), min(229.0, ego_x + 140), [ego_x], traffic_speed, spacing)
            self._fill_lane(("b", "c", lane), 230.0, 310.0, [ego_x], traffic_speed, spacing * 1.5)
        # merging traffic on the ramp
        for s in (rng.uniform(20, 60), rng.uniform(100, 140)):
            if start != "ramp" or s < 110:
                if rng.uniform() < min(1.0, 0.7 * cfg.density):
                    v = self._traffic(("j", "k", 0), s, rng.uniform(15, 22) * cfg.speed_scale)
                    v.target_speed = 26.0 * cfg.speed_scale
        self._settle_ego()
        self.route_plan = _merge_route(self, start)


class RoundaboutFamily(_NoRewardMixin, RoundaboutEnv):
    FAMILY = "roundabout"

    EXITS = ("exr", "nxr", "wxr")  # right (first exit), straight, left
    RING_NODES = frozenset({"se", "ex", "ee", "nx", "ne", "wx", "we", "sx"})

    @staticmethod
    def is_junction_lane(lane_index) -> bool:
        _from, _to, _ = lane_index
        return _from in RoundaboutFamily.RING_NODES and _to in RoundaboutFamily.RING_NODES

    def _make_vehicles(self) -> None:
        cfg, rng = self.wcfg, self.np_random
        s0 = float(rng.uniform(85, 115))
        self._make_ego(("ser", "ses", 0), s0, np.array(cfg.ego_speed))
        destination = str(rng.choice(self.EXITS))
        speed = np.array(cfg.traffic_speed) * cfg.speed_scale
        ring = [("se", "ex"), ("ex", "ee"), ("ee", "nx"), ("nx", "ne"), ("ne", "wx"), ("wx", "we"), ("we", "sx"), ("sx", "se")]
        n_ring = rng.poisson(3.0 * cfg.density)
        for _ in range(min(n_ring, 8)):
            road = ring[int(rng.integers(len(ring)))]
            if road == ("sx", "se"):
                continue
            lane = (road[0], road[1], int(rng.integers(2)))
            length = self.road.network.get_lane(lane).length
            v = self._traffic(lane, rng.uniform(0, length), rng.uniform(*speed), destination=str(rng.choice(["exr", "nxr", "wxr", "sxr"])))
            if any(np.linalg.norm(v.position - o.position) < 10 for o in self.road.vehicles if o is not v):
                self.road.vehicles.remove(v)
        for entry in (("eer", "ees", 0), ("ner", "nes", 0), ("wer", "wes", 0)):
            if rng.uniform() < min(1.0, 0.6 * cfg.density):
                self._traffic(entry, rng.uniform(30, 110), rng.uniform(*speed), destination=str(rng.choice(["exr", "nxr", "wxr", "sxr"])))
        if rng.uniform() < min(1.0, 0.4 * cfg.density):  # a follower behind the ego
            self._traffic(("ser", "ses", 0), max(0.0, s0 - rng.uniform(20, 35)), rng.uniform(*speed),
                          destination=str(rng.choice(["exr", "nxr", "wxr"])))
        self._settle_ego()
        self.route_plan = _junction_route(self, destination)


class IntersectionFamily(_NoRewardMixin, IntersectionEnv):
    FAMILY = "intersection"

    @staticmethod
    def is_junction_lane(lane_index) -> bool:
        return lane_index[0].startswith("ir")

    @classmethod
    def default_config(cls) -> dict:
        cfg = super().default_config()
        cfg["other_vehicles_type"] = "wamdiff.driving.expert.IntersectionTrafficVehicle"
        return cfg

    def _make_vehicles(self, n_vehicles: int = 10) -> None:
        cfg, rng = self.wcfg, self.np_random
        s0 = float(rng.uniform(55, 75))
        self._make_ego(("o0", "ir0", 0), s0, np.array(cfg.ego_speed))
        destination = "o" + str(int(rng.integers(1, 4)))
        speed = np.array(cfg.traffic_speed) * cfg.speed_scale
        n = rng.poisson(6.0 * cfg.density)
        for _ in range(min(n, 12)):
            origin, dest = rng.choice(4, size=2, replace=False)
            lane = (f"o{origin}", f"ir{origin}", 0)
            s = rng.uniform(30, 100)
            v = self._traffic(lane, s, rng.uniform(*speed), cls=IntersectionTrafficVehicle, destination=f"o{dest}")
            if any(np.linalg.norm(v.position - o.position) < 12 for o in self.road.vehicles if o is not v):
                self.road.vehicles.remove(v)
        self._settle_ego()
        self.route_plan = _junction_route(self, destination)


class TwoWayFamily(_NoRewardMixin, TwoWayEnv):
    """Not a default family; kept runnable with continuous actions (upstream `_rewards` needs target_speeds)."""


class UTurnFamily(_NoRewardMixin, UTurnEnv):
    """Not a default family; kept runnable with continuous actions (upstream `_rewards` needs target_speeds)."""


@dataclass(frozen=True)
class Family:
    """What the rest of the code knows about a scenario family."""

    env: type  # the highway-env subclass that builds its road, traffic and the ego's route
    defaults: dict  # its `WorldConfig` values
    dev_routes: int  # its routes in the closed-loop "dev" set (seeded; the "full" set has 25 per family)
    junction: str | None = None  # how its junction area is drawn on the map: "box" (convex hull) or "ring"


# The registry: one line per family. Order matters: it fixes closed-loop route seeds and report order.
FAMILY_REGISTRY = {
    "highway": Family(HighwayFamily, dict(lanes=3, ego_speed=(21.0, 29.0), traffic_speed=(19.0, 29.0),
                                          lane_change_prob=0.35), dev_routes=3),
    "merge": Family(MergeFamily, dict(lanes=2, ego_speed=(21.0, 27.0), traffic_speed=(20.0, 28.0),
                                      lane_change_prob=0.3), dev_routes=2),
    "roundabout": Family(RoundaboutFamily, dict(lanes=2, ego_speed=(8.0, 11.0), traffic_speed=(7.0, 11.0),
                                                lane_change_prob=0.0), dev_routes=3, junction="ring"),
    "intersection": Family(IntersectionFamily, dict(lanes=1, ego_speed=(7.0, 9.0), traffic_speed=(6.0, 9.0),
                                                    lane_change_prob=0.0), dev_routes=2, junction="box"),
}
FAMILIES = tuple(FAMILY_REGISTRY)
assert FAMILIES == FAMILY_NAMES, "driving.names.FAMILIES must list the registry's families, in order"


def family_spec(family: str) -> Family:
    if family not in FAMILY_REGISTRY:
        raise ValueError(f"unknown family {family!r}; expected one of {FAMILIES}")
    return FAMILY_REGISTRY[family]


def is_junction_lane(family: str, lane_index) -> bool:
    """Lanes inside a junction (intersection box, roundabout ring): the command is the turn taken through them."""
    return family_spec(family).env.is_junction_lane(lane_index)


# -- routes ------------------------------------------------------------------------------------------------------
@dataclass
class RoutePlan:
    """The ego's planned route: lane indices in order (hw), where a lane change is allowed to start, the goal."""

    lanes: list[tuple]
    changes: list[tuple[tuple, int, float]] = field(default_factory=list)  # (road, target id, lane s)
    destination: str = ""


def _highway_route(env, ego_id: int) -> RoutePlan:
    cfg, rng = env.wcfg, env.np_random
    lanes = [("0", "1", ego_id)]
    changes = []
    if rng.uniform() < cfg.lane_change_prob:
        options = [i for i in (ego_id - 1, ego_id + 1) if 0 <= i < cfg.lanes]
        target = int(rng.choice(options))
        s_ego = env.vehicle.lane.local_coordinates(env.vehicle.position)[0]
        changes.append((("0", "1"), target, float(s_ego + rng.uniform(20.0, 70.0))))
        lanes.append(("0", "1", target))
    return RoutePlan(lanes, changes, destination="1")


def _merge_route(env, start: str) -> RoutePlan:
    rng = env.np_random
    if start == "ramp":
        lanes = [("k", "b", 0), ("b", "c", 2), ("b", "c", 1), ("c", "d", 1)]
        return RoutePlan(lanes, [(("b", "c"), 1, float(rng.uniform(5.0, 30.0)))], destination="d")
    ego_id = 1 if start == "right" else 0
    if rng.uniform() < env.wcfg.lane_change_prob:
        target = 1 - ego_id
        s_ego = env.vehicle.lane.local_coordinates(env.vehicle.position)[0]
        s_change = float(s_ego + rng.uniform(20.0, 70.0))
        if s_change < 220:
            lanes = [("a", "b", ego_id), ("a", "b", target), ("b", "c", target), ("c", "d", target)]
            return RoutePlan(lanes, [(("a", "b"), target, s_change)], destination="d")
    return RoutePlan([("a", "b", ego_id), ("b", "c", ego_id), ("c", "d", ego_id)], destination="d")


def _junction_route(env, destination: str) -> RoutePlan:
    """Follow the road graph to `destination`, choosing each next lane as highway-env's `next_lane` will."""
    net = env.road.network
    ego = env.vehicle
    lanes = [ego.lane_index]
    path = net.shortest_path(ego.lane_index[1], destination)
    for a, b in zip(path[:-1], path[1:]):
        prev = lanes[-1]
        end = net.get_lane(prev).position(net.get_lane(prev).length, 0.0)
        next_id, _ = net.next_lane_given_next_road(prev[0], prev[1], prev[2], b, None, end)
        lanes.append((a, b, next_id))
    return RoutePlan(lanes, destination=destination)


def build_route_centerline(network, plan: RoutePlan, start_s: float, length: float,
                           step: float = 1.0) -> tuple[np.ndarray, np.ndarray, list]:
    """The route as a world-frame polyline from `start_s` on its first lane, `length` m long.

    Returns (xy (N,2), lane speed limit per point, the lane index of every point). A lane change becomes a 30 m
    linear blend from the old to the new lane.
    """
    pts, limits, owner = [], [], []
    change_at = {(road, tid): s for road, tid, s in plan.changes}
    i, s_cursor, total = 0, start_s, 0.0
    lanes = plan.lanes
    while i < len(lanes) and total < length + 1.0:
        li = lanes[i]
        lane = network.get_lane(li)
        lane_len = min(float(lane.length), geo.MAX_LANE_LENGTH)
        nxt = lanes[i + 1] if i + 1 < len(lanes) else None
        if nxt is not None and nxt[:2] == li[:2]:  # lane change on this road
            s_change = max(change_at.get((li[:2], nxt[2]), s_cursor), s_cursor)
            new_lane = network.get_lane(nxt)
            for s in np.arange(s_cursor, s_change, step):
                pts.append(lane.position(s, 0.0))
                limits.append(lane.speed_limit or 30.0)
                owner.append(li)
            blend = 30.0
            for s in np.arange(s_change, min(s_change + blend, lane_len), step):
                w = (s - s_change) / blend
                pts.append((1 - w) * lane.position(s, 0.0) + w * new_lane.position(s, 0.0))
                limits.append(lane.speed_limit or 30.0)
                owner.append(nxt)
            s_cursor = min(s_change + blend, lane_len)
            i += 1
            total = float(geo.polyline_arclength(np.array(pts)).max()) if len(pts) > 1 else 0.0
            continue
        for s in np.arange(s_cursor, min(lane_len, s_cursor + length - total + 2.0), step):
            pts.append(lane.position(s, 0.0))
            limits.append(lane.speed_limit or 30.0)
            owner.append(li)
        total = float(geo.polyline_arclength(np.array(pts))[-1]) if len(pts) > 1 else 0.0
        s_cursor = 0.0
        i += 1
    xy = geo.hw_to_world_xy(np.array(pts))
    distinct = np.concatenate([[True], np.linalg.norm(np.diff(xy, axis=0), axis=1) > 1e-3])  # lane joints repeat
    xy, limits, owner = xy[distinct], np.array(limits)[distinct], [o for o, k in zip(owner, distinct) if k]
    arc = geo.polyline_arclength(xy)
    keep = arc <= length
    keep[: min(2, len(keep))] = True
    return xy[keep], limits[keep], [o for o, k in zip(owner, keep) if k]


def route_curvature(xy: np.ndarray) -> np.ndarray:
    h = np.unwrap(geo.polyline_headings(xy))
    s = geo.polyline_arclength(xy)
    k = np.gradient(h, s, edge_order=1) if len(xy) > 2 else np.zeros(len(xy))
    # smooth over ~5 m so sampling noise does not look like a sharp curve
    w = 5
    return np.convolve(np.pad(k, (w // 2, w // 2), mode="edge"), np.ones(w) / w, mode="valid")


# -- the World ---------------------------------------------------------------------------------------------------
class World:
    """A live family instance: traffic reacts (IDM/MOBIL), the ego is the expert or driven from outside."""

    def __init__(self, family: str, seed: int, config: WorldConfig):
        self.family, self.seed, self.config = family, int(seed), config
        self.env = _env_for(family)
        self.env.configure({"wamdiff": asdict(config)})
        self.env.reset(seed=self.seed)
        self.road = self.env.road
        self.ego: ExpertVehicle = self.env.vehicle
        self.plan: RoutePlan = self.env.route_plan
        self.time = 0.0
        self.ticks = 0
        self._log: list[np.ndarray] = []  # per tick: t, x, y, heading, vx, vy (world, rear axle), speed
        self._build_route()
        # highway-env follows roads, not lane changes: give it one entry per road (the lane it should end on)
        lanes = self.plan.lanes
        self.ego.route = [li for k, li in enumerate(lanes) if k + 1 == len(lanes) or lanes[k + 1][:2] != li[:2]]
        self.ego.lane_changes = list(self.plan.changes)
        self.ego.is_junction_lane = functools.partial(is_junction_lane, family)
        self._cull()
        self._record()

    # -- route -------------------------------------------------------------------------------------------------
    def _build_route(self) -> None:
        lane = self.road.network.get_lane(self.ego.lane_index)
        s_ego = lane.local_coordinates(self.ego.position)[0]
        start = max(0.0, s_ego - 15.0)
        ahead = self.config.route_length + self.ego.desired_speed * (start_time(self.config, self.seed) - self.config.warmup_s)
        xy, limits, owners = build_route_centerline(self.road.network, self.plan, start, ahead + (s_ego - start))
        self.route_centerline_world = xy
        self.route_lanes_per_point = owners
        self.route_junction = np.array([is_junction_lane(self.family, o) for o in owners], bool)
        self.route_speed_limit = limits
        kappa = route_curvature(xy)
        cap = speed_cap_from_curvature(kappa, limits)
        self.route_arclength = geo.polyline_arclength(xy)
        self.route_heading = geo.polyline_headings(xy)
        self.ego.route_profile = (self.route_arclength, geo.world_to_hw_xy(xy), cap)
        self.route_start_s = geo.project_on_polyline(xy, self.ego_pose()[:2])[0]
        self._route_s = None

    # -- ego state -----------------------------------------------------------------------------------------------
    def ego_pose(self) -> np.ndarray:
        """(x, y, heading) of the ego's rear axle in the world frame."""
        h = float(geo.hw_to_world_heading(self.ego.heading))
        c = geo.center_to_rear_axle(geo.hw_to_world_xy(self.ego.position), h)
        return np.array([c[0], c[1], h])

    def set_ego_state(self, x: float, y: float, heading: float, speed: float) -> None:
        """Place the ego (world frame, rear axle) for this tick; `step()` then moves only the traffic."""
        centre = geo.rear_axle_to_center([x, y], heading)
        self.ego.external, self.ego.hold_state = True, True
        self.ego.position = geo.world_to_hw_xy(centre).astype(np.float64)
        self.ego.heading = float(-heading)
        self.ego.speed = float(speed)
        self.ego.on_state_update()

    def ego_control(self, accel: float, steer: float) -> None:
        """Drive the ego with highway-env's bicycle model: acceleration [m/s^2], front-wheel angle [rad, left +]."""
        self.ego.external, self.ego.hold_state = True, False
        self.ego.action = {"acceleration": float(accel), "steering": float(-steer)}

    def autopilot(self, accel: float | None = None, steer: float | None = None) -> None:
        """Hand the ego back to the expert, from wherever it is now.

        While driven from outside the ego never acted, so its route, target lane and pending lane changes still
        describe where it started: they are re-aligned to its current lane (else highway-env warns that the route
        does not start after the current road and picks the next lanes at random). An ego that drifted onto a road
        off its route (an exit it should not take, the ring beside it) is sent back to the route's lane level with
        it: the expert's lateral loop then steers towards that lane. `accel` / `steer` (front-wheel angle, left +)
        seed the expert's rate limits so it continues smoothly from the current command.
        """
        ego = self.ego
        ego.external = ego.hold_state = False
        road = ego.lane_index[:2]
        ego.target_lane_index = ego.lane_index
        roads = [li[:2] for li in ego.route]
        if road not in roads:
            ego.target_lane_index = self.route_lane_here()
            road = ego.target_lane_index[:2]
        if road in roads:
            ego.route = ego.route[roads.index(road):]
        planned = [li[:2] for li in self.plan.lanes]
        if road in planned:  # changes on roads already behind are done; one on this road may still be ahead
            ahead = set(planned[planned.index(road):])
            ego.lane_changes = [c for c in ego.lane_changes if c[0] in ahead]
        if accel is not None:
            ego.prev_accel = float(accel)
        if steer is not None:
            ego.prev_steer = float(-steer)  # highway-env's frame is mirrored (y down)

    def _route_projection(self) -> tuple[float, float, int]:
        """(arc length, signed lateral offset [m, left +], segment) of the ego's box centre on the route centreline."""
        pose = self.ego_pose()
        return geo.project_on_polyline(self.route_centerline_world, geo.rear_axle_to_center(pose[:2], pose[2]))

    def route_offset(self) -> float:
        """Signed lateral distance [m, left +] of the ego's box centre from the route centreline."""
        return self._route_projection()[1]

    def route_lane_here(self) -> tuple:
        """The route's lane level with the ego (the owner of the closest route centreline point)."""
        return tuple(self.route_lanes_per_point[self._route_projection()[2]])

    def is_on_route(self, max_offset_m: float = 2.5) -> bool:
        """The ego still follows its route: on one of the route's roads, its box centre within `max_offset_m` of
        the route centreline. Only such states can be handed back to the expert without rejoining the route."""
        if self.ego.lane_index[:2] not in {li[:2] for li in self.plan.lanes}:
            return False
        return abs(self.route_offset()) <= max_offset_m

    # -- simulation ------------------------------------------------------------------------------------------------
    def step(self, dt: float = SIM_DT) -> None:
        self.road.act()
        self.road.step(dt)
        self.time += dt
        self.ticks += 1
        self._cull()
        self._record()

    def run(self, seconds: float) -> None:
        for _ in range(int(round(seconds / SIM_DT))):
            self.step(SIM_DT)

    def _cull(self) -> None:
        if self.ticks % 10:
            return
        ego_pos = self.ego.position
        limit = self.config.cull_distance
        self.road.vehicles = [v for v in self.road.vehicles if v is self.ego or np.linalg.norm(v.position - ego_pos) < limit]

    def route_s(self) -> float:
        """Arc length of the ego's projection on the route centreline, tracked from tick to tick."""
        self._update_route_s()
        return float(self._route_s)

    def _update_route_s(self) -> None:
        xy, arc = self.route_centerline_world, self.route_arclength
        last = getattr(self, "_route_s", None)
        if last is None:
            window = np.arange(len(arc))
        else:
            window = np.flatnonzero((arc >= last - 20.0) & (arc <= last + 80.0))
            if len(window) < 2:
                window = np.arange(len(arc))
        lo, hi = window[0], window[-1] + 1
        s, _, _ = geo.project_on_polyline(xy[lo:hi], self.ego_pose()[:2])
        self._route_s = float(arc[lo] + s)

    def _record(self) -> None:
        self._update_route_s()
        p = self.ego_pose()
        v = self.ego.speed * np.array([np.cos(p[2]), np.sin(p[2])])
        self._log.append(np.array([self.time, p[0], p[1], p[2], v[0], v[1], self.ego.speed]))

    def ego_log(self) -> np.ndarray:
        """(T, 7) per tick since creation: t, x, y, heading, vx, vy (world frame, rear axle), speed."""
        return np.array(self._log)

    def ego_history(self) -> np.ndarray:
        """(4, 7) at t-1.5, -1.0, -0.5, 0 s: x, y, heading in the CURRENT ego frame; vx, vy, ax, ay in each
        row's own body frame (NAVSIM EgoStatus convention). Before the first tick the earliest state repeats."""
        log = self.ego_log()
        pose = log[-1, 1:4]
        rows = []
        for back in (15, 10, 5, 0):
            i = max(0, len(log) - 1 - back)
            j = max(0, i - 1)
            p = geo.poses_world_to_ego(log[i, 1:4], pose)
            v_body = geo.rotate_vectors(log[i, 4:6], -log[i, 3])
            a_world = (log[i, 4:6] - log[j, 4:6]) / SIM_DT if i > j else np.zeros(2)
            a_body = geo.rotate_vectors(a_world, -log[i, 3])
            rows.append([p[0], p[1], p[2], v_body[0], v_body[1], a_body[0], a_body[1]])
        return np.array(rows, np.float64)

    def speed_limit(self) -> float:
        return float(self.ego.lane.speed_limit or 30.0)


@functools.lru_cache(maxsize=None)
def _env_cache(family: str):
    return FAMILY_REGISTRY[family].env()


def _env_for(family: str):
    """One env object per family per process, re-used across seeds (construction is the slow part)."""
    family_spec(family)  # a clear error for an unknown name
    return _env_cache(family)


def make_world(family: str, seed: int, **cfg) -> World:
    """A warmed-up world: built from `seed`, then `warmup_s` simulated with the expert driving."""
    config = WorldConfig.for_family(family, **cfg)
    world = World(family, seed, config)
    warmup = start_time(config, seed)
    world.run(warmup)
    world.time = 0.0  # t0 is now; the log keeps negative times
    world._log = [np.concatenate([[row[0] - warmup], row[1:]]) for row in world._log]
    return world


def start_time(config: WorldConfig, seed: int) -> float:
    """Seconds simulated before t0: `warmup_s`, plus a share of `t0_spread_s` drawn from the seed alone (its own
    generator: the traffic a seed builds does not change with the spread)."""
    if config.t0_spread_s <= 0:
        return config.warmup_s
    return config.warmup_s + config.t0_spread_s * float(np.random.default_rng([seed, 0x7105]).uniform())


def route_progress(world: World) -> float:
    """Metres along the route centreline from where the ego started (its projection, clipped >= 0).

    The projection is tracked every tick inside a window around the previous one (-20 m .. +80 m of arc
    length), so a route that passes near itself (roundabout arms) cannot make progress jump."""
    return max(0.0, world.route_s() - world.route_start_s)


def route_length(world: World) -> float:
    return float(world.route_arclength[-1] - world.route_start_s)


def route_remaining(world: World) -> float:
    """Metres of route left in front of the ego (0 or less once it reached the end)."""
    return route_length(world) - route_progress(world)


def route_completed(world: World, tolerance: float = 5.0) -> bool:
    return route_remaining(world) <= tolerance


__all__ = [
    "FAMILIES", "FAMILY_REGISTRY", "Family", "family_spec", "WorldConfig", "World", "make_world", "route_progress",
    "route_remaining", "route_completed", "route_length",
    "is_junction_lane", "RoutePlan",
]
