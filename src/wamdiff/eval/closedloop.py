"""Closed-loop evaluation (Bench2Drive conventions) on the live highway-env world.

Each route is a seeded world (`make_world(family, seed)`) whose route centreline the ego must follow to
its end. Every 0.5 s the planner sees `observe(world)` (a live Scene with the rendered camera) and returns 8
waypoints; the same LQR tracker + kinematic bicycle as PDMS drives the ego at 10 Hz (`world.set_ego_state`),
while traffic reacts (IDM/MOBIL). The "expert" planner is the world's own expert driving the ego (upper bound).

Per route (Bench2Drive / CARLA leaderboard): route completion RC in [0, 100]; infraction penalties multiply
(pedestrian 0.5, vehicle 0.6, static object 0.65; red light, stop sign, scenario timeout and yielding do
not occur in this world); driving score DS = RC x penalty x (1 - % of distance outside the drivable area);
success = status Completed (RC >= 100 %) with no infraction except min-speed. A collision ends the route
here (highway-env freezes crashed cars, so continuing would only replay the crash); a timeout, a blocked
ego (no progress for `blocked_s`), a route deviation (centre > `max_deviation_m` from the route centreline,
CARLA's "agent deviated from the route"), a failed plan ("Failed - planner error": no trajectory to drive,
unless the spec opted in to a fallback planner, whose plans are then driven and counted) or any exception
ends it as a failure with what it reached - never abort. Driving outside the drivable area is recorded as
`outside_route_lanes` (an infraction: no success).
Efficiency = mean over ticks of ego speed / mean speed of traffic within 50 m (ticks with moving traffic);
comfort = share of non-overlapping 2 s windows whose states keep all six nuPlan comfort bounds.

`run_routes` drives the routes in lockstep (`RouteRunner`, a resumable route): at each replan step ONE
`planner.plan(scenes)` call serves every route in flight (`batch` caps them), which is what makes model planners
affordable; each route's result equals driving it alone (`run_route`), since a route only sees its own world.
"""

from __future__ import annotations

import time
import traceback
from dataclasses import dataclass, field

import numpy as np

from wamdiff.names import ROUTE_SETS

from .intervals import mean_ci95, wilson_ci95
from .pdms.comfort import comfort_checks
from .pdms.geometry import convex_intersect
from .pdms.tracker import NUM_STATES, BatchLQRTracker, headings_from_xy, interpolate_plan, propagate
from .pdms.vehicle import AX, HEADING, STATE_SIZE, VX, X, Y, YAW_RATE, VehicleParams, box_corners
from .planners import Plan, plan_batch, with_fallback

CLOSEDLOOP_VERSION = "wamdiff-closedloop-b2d/0.1"
PENALTIES = {"collision_pedestrian": 0.5, "collision_vehicle": 0.6, "collision_static": 0.65, "red_light": 0.7,
             "stop_sign": 0.8, "scenario_timeout": 0.7, "yield_emergency": 0.7}
FULL_PER_FAMILY = 25  # the "dev" set takes each family's `dev_routes` (driving.world.FAMILY_REGISTRY)
SEED_BASE = 7_000_000  # far from data-generation seeds
REPLAN_EVERY = 5  # ticks (0.5 s at 10 Hz)
TRACE_FIELDS = ("t", "x", "y", "heading", "speed", "progress_m", "lateral_m", "in_junction", "command")
DT = 0.1
PLANNER_ERROR = "Failed - planner error"  # a replan without a usable plan (and no fallback opted in)
REPLANS_KEPT = 4  # the last replans of a route (camera, plan) kept for the failure strips (`route_diagnostics`)


@dataclass(frozen=True)
class Route:
    name: str
    family: str
    seed: int
    world_cfg: tuple = ()  # (key, value) pairs for make_world
    timeout_s: float | None = None  # None: from the route length


def route_set(name: str = "dev", families: list[str] | None = None, per_family: int | None = None) -> list[Route]:
    """The fixed, seeded route sets: "dev" = each family's `dev_routes` (10 over the four default families, for CI),
    "full" = 25 per family. A family's seeds follow its place in the registry. `per_family` keeps the first that
    many routes of each family (a balanced subset: e.g. 10 per family = 40 routes)."""
    from wamdiff.driving.world import FAMILIES, FAMILY_REGISTRY

    fams = [f for f in FAMILIES if not families or f in families]
    if families and set(families) - set(FAMILIES):
        raise ValueError(f"unknown families {sorted(set(families) - set(FAMILIES))}; expected {FAMILIES}")
    if name == "dev":
        counts = {f: FAMILY_REGISTRY[f].dev_routes for f in fams}
    elif name == "full":
        counts = {f: FULL_PER_FAMILY for f in fams}
    else:
        raise ValueError(f"unknown route set {name!r}: use one of {', '.join(ROUTE_SETS)}")
    if per_family is not None:
        if per_family < 1:
            raise ValueError(f"per_family must be at least 1, got {per_family}")
        counts = {f: min(c, per_family) for f, c in counts.items()}
    return [Route(f"{f}_{i:03d}", f, SEED_BASE + 1000 * FAMILIES.index(f) + i) for f in fams for i in range(counts[f])]


@dataclass
class RouteResult:
    route: Route
    status: str = "Started"
    completion: float = 0.0  # percent
    infractions: dict = field(default_factory=dict)
    outside_pct: float = 0.0
    efficiency: float | None = None
    comfort: float | None = None
    duration_s: float = 0.0
    wall_s: float = 0.0
    route_length_m: float = 0.0
    n_plans: int = 0
    n_failed_plans: int = 0  # replans whose plan failed (each either ended the route or was driven by the fallback)
    n_fallback: int = 0
    error: str = ""
    frames: list = field(default_factory=list)  # (caption, image) pairs
    collision_kind: str = ""  # front | rear | lateral | stopped_ego (NAVSIM's collision types), when one ended the route
    collision_at_fault: bool | None = None  # NAVSIM's rule: front, or lateral while the ego straddles lanes
    trace: list = field(default_factory=list)  # per tick: TRACE_FIELDS (failure timelines, BEV of the driven path)
    route_xy: np.ndarray | None = None  # world-frame route centreline, for those plots
    # the last REPLANS_KEPT replans: (t, speed, command, camera image, world-frame plan xy [41, 2]); what the planner
    # saw and planned just before the route ended (`route_diagnostics.plot_last_replans`)
    last_replans: list = field(default_factory=list)

    @property
    def penalty(self) -> float:
        p = 1.0
        for k, n in self.infractions.items():
            p *= PENALTIES.get(k, 1.0) ** n
        return p

    @property
    def driving_score(self) -> float:
        return self.completion * self.penalty * (1.0 - self.outside_pct / 100.0)

    @property
    def success(self) -> bool:
        others = {k: n for k, n in self.infractions.items() if k != "min_speed" and n}
        return self.status == "Completed" and self.completion >= 100.0 - 1e-6 and not others

    def row(self) -> dict:
        return {"route": self.route.name, "family": self.route.family, "seed": self.route.seed, "status": self.status,
                "success": self.success, "route_completion": self.completion, "driving_score": self.driving_score,
                "penalty": self.penalty, "outside_pct": self.outside_pct, "efficiency": self.efficiency,
                "comfort": self.comfort, "duration_s": self.duration_s, "wall_s": self.wall_s,
                "route_length_m": self.route_length_m, "n_plans": self.n_plans, "n_failed_plans": self.n_failed_plans,
                "n_fallback": self.n_fallback, "collision_kind": self.collision_kind,
                "collision_at_fault": self.collision_at_fault,
                "infractions": ";".join(f"{k}={v}" for k, v in sorted(self.infractions.items()) if v),
                "error": self.error, "version": CLOSEDLOOP_VERSION}


# -- world glue -----------------------------------------------------------------------------------------------
def _world_api():
    from wamdiff.driving import geometry as geo
    from wamdiff.driving.capture import observe
    from wamdiff.driving.world import make_world, route_completed, route_length, route_progress

    return make_world, observe, route_progress, route_length, route_completed, geo


def _others(world):
    """World-frame boxes (x, y, heading, length, width), speeds and is-vehicle flags of everything but the ego."""
    from wamdiff.driving import geometry as geo

    objs = [v for v in [*world.road.vehicles, *world.road.objects] if v is not world.ego]
    if not objs:
        return np.zeros((0, 5)), np.zeros(0), np.zeros(0, bool), objs
    c = geo.hw_to_world_xy(np.array([o.position for o in objs], float))
    h = -np.array([float(o.heading) for o in objs])
    boxes = np.column_stack([c, h, [o.LENGTH for o in objs], [o.WIDTH for o in objs]])
    speeds = np.array([float(getattr(o, "speed", 0.0)) for o in objs])
    is_vehicle = np.array([o in world.road.vehicles for o in objs], bool)
    return boxes, speeds, is_vehicle, objs


def _plan_to_world(plan: Plan, pose: np.ndarray) -> np.ndarray:
    """Plan (ego frame at `pose`) -> 41 world-frame reference poses at 0.1 s, current pose first."""
    xy = np.asarray(plan.xy, float)
    h = np.asarray(plan.heading, float) if plan.heading is not None else headings_from_xy(xy)
    local = interpolate_plan(np.concatenate([xy, h[:, None]], 1)[None])[0]
    c, s = np.cos(pose[2]), np.sin(pose[2])
    out = np.empty_like(local)
    out[:, 0] = pose[0] + c * local[:, 0] - s * local[:, 1]
    out[:, 1] = pose[1] + s * local[:, 0] + c * local[:, 1]
    out[:, 2] = np.unwrap(local[:, 2] + pose[2])
    return out


class RouteRunner:
    """One route as a resumable unit: it drives until it needs a plan (`needs_plan`, `scene`), takes the checked
    planner output (`give_plan`, from `planners.plan_batch`) and drives on, until `done`. Every failure mode ends
    in `result`, nothing raises. `fallback`: the planner that stands in for failed plans (opt-in), else None.

    `run_route` drives one runner alone; `run_routes` drives many in lockstep so that one `planner.plan(scenes)`
    call serves every route that needs a plan at the same time. A route's trajectory only depends on its own world
    and the plans it is given, so both give identical results for a deterministic planner.
    """

    def __init__(self, route: Route, expert_mode: bool = False, record_frames: bool = False, blocked_s: float = 20.0,
                 frame_every_s: float = 2.0, max_frames: int = 8, max_deviation_m: float = 12.0, fallback=None,
                 camera=None, on_replan=None):
        self.result = RouteResult(route)
        self.scene = None  # the Scene awaiting a plan while `needs_plan`
        self.done = False
        self._gen = _drive(route, self.result, expert_mode, record_frames, blocked_s, frame_every_s, max_frames,
                           max_deviation_m, fallback, camera, on_replan)
        self._started = False

    @property
    def needs_plan(self) -> bool:
        return not self.done and self.scene is not None

    def advance(self) -> "RouteRunner":
        """Start the route: drive until the first plan is needed or the route ends."""
        if not self._started:
            self._started = True
            self._resume(None)
        return self

    def give_plan(self, raw: Plan, planner_s: float = 0.0) -> "RouteRunner":
        """Hand over the planner's checked Plan for `scene` (`planner_s`: this route's share of the planner time)."""
        if not self.needs_plan:
            raise RuntimeError(f"route {self.result.route.name} does not need a plan")
        self.result.wall_s += planner_s
        self._resume(raw)
        return self

    def _resume(self, raw) -> None:
        t0 = time.perf_counter()
        self.scene = None
        try:
            self.scene = self._gen.send(raw)  # send(None) starts the generator
        except StopIteration:
            self.done = True
        except Exception as err:  # noqa: BLE001 - a crashing route is a failed route, never an aborted run
            res = self.result
            res.status = "Failed - error"
            res.error = f"{type(err).__name__}: {err} | {traceback.format_exc(limit=3).splitlines()[-2].strip()}"
            self.done = True
        self.result.wall_s += time.perf_counter() - t0


def run_route(planner, route: Route, record_frames: bool = False, blocked_s: float = 20.0, frame_every_s: float = 2.0,
              max_frames: int = 8, max_deviation_m: float = 12.0, fallback=None) -> RouteResult:
    """Drive one route; every failure mode is recorded in the result, nothing raises."""
    runner = RouteRunner(route, _is_expert(planner), record_frames, blocked_s, frame_every_s, max_frames,
                         max_deviation_m, fallback, planner_camera(planner)).advance()
    while not runner.done:
        t0 = time.perf_counter()
        raw = plan_batch(planner, [runner.scene])[0]
        runner.give_plan(raw, time.perf_counter() - t0)
    return runner.result


def _is_expert(planner) -> bool:
    return getattr(planner, "name", "") == "expert"


def planner_camera(planner):
    """The camera a planner was trained with (a model records it), else the world's default camera."""
    from wamdiff.driving.render import CameraConfig

    camera = getattr(planner, "camera", None)
    return camera if camera is not None else CameraConfig()


def _drive(route: Route, res: RouteResult, expert_mode: bool, record_frames: bool, blocked_s: float,
           frame_every_s: float, max_frames: int, max_deviation_m: float, fallback=None, camera=None, on_replan=None):
    """Generator: drives `route` into `res`; yields the Scene whenever it needs a plan and expects the planner's
    checked Plan via `.send()`. The expert (world autopilot) never yields."""
    make_world, observe_world, route_progress, route_length, route_completed, geo = _world_api()
    from wamdiff.driving.render import CameraConfig

    camera = camera or CameraConfig()

    def observe(w):
        return observe_world(w, camera)

    from wamdiff.driving.roadmap import inside_drivable, road_geometry

    world = make_world(route.family, route.seed, **dict(route.world_cfg))
    p0 = float(route_progress(world))  # the warm-up already drove a little: completion counts from t0
    res.route_length_m = length = float(route_length(world)) - p0
    nominal = float(np.mean(world.config.ego_speed)) if world.config.ego_speed else 10.0
    timeout = route.timeout_s or (2.0 * length / max(nominal, 1.0) + 10.0)
    ego = world.ego
    vehicle = VehicleParams.from_box(float(ego.LENGTH), float(ego.WIDTH), geo.REAR_AXLE_TO_CENTER)
    road = road_geometry(world)

    pose = world.ego_pose()
    state = np.zeros(STATE_SIZE)
    state[[X, Y, HEADING]] = pose
    state[VX] = float(ego.speed)
    hist = world.ego_history()
    state[YAW_RATE] = float(geo.wrap_angle(hist[-1, 2] - hist[-2, 2])) / 0.5
    states, eff, outside_m, driven_m = [state.copy()], [], 0.0, 0.0
    res.route_xy = np.asarray(world.route_centerline_world, float)
    command = ""
    tracker, k_plan = None, 0
    best_progress, last_gain_t = 0.0, 0.0
    tick = 0
    while True:
        if tick % REPLAN_EVERY == 0 and not expert_mode:
            if on_replan is not None:  # on-policy aggregation: the world as the planner left it, before it plans again
                on_replan(route, world, state)
            scene = observe(world)
            command = scene.command
            raw = yield scene
            res.n_plans += 1
            plan = raw
            if not raw.ok:
                res.n_failed_plans += 1
                plan = with_fallback([scene], [raw], fallback)[0] if fallback is not None else raw
                res.n_fallback += int(bool(plan.fallback))
            if not plan.scored:  # nothing to drive: the route fails here, with what it reached
                res.status, res.error = PLANNER_ERROR, f"t={world.time:.1f}s: {raw.reason}"
                break
            ref = _plan_to_world(plan, state[[X, Y, HEADING]])
            res.last_replans = [*res.last_replans[1 - REPLANS_KEPT:],
                                (float(world.time), float(state[VX]), command, scene.image, ref[:, :2].copy())]
            tracker, k_plan = BatchLQRTracker(ref[None], vehicle), 0
            on_frame_time = abs(world.time / frame_every_s - round(world.time / frame_every_s)) < 1e-6
            if record_frames and len(res.frames) < max_frames and on_frame_time:
                res.frames.append((f"t={world.time:.0f}s v={state[VX]:.1f}", scene.image))
        elif expert_mode and record_frames and tick % int(frame_every_s / DT) == 0 and len(res.frames) < max_frames:
            res.frames.append((f"t={world.time:.0f}s v={ego.speed:.1f}", observe(world).image))
        if expert_mode:
            world.step(DT)
            p = world.ego_pose()
            new = np.zeros(STATE_SIZE)
            new[[X, Y, HEADING]] = p
            new[VX] = float(ego.speed)
            new[AX] = (new[VX] - state[VX]) / DT
            new[YAW_RATE] = float(geo.wrap_angle(p[2] - state[HEADING])) / DT
        else:
            accel, steer_rate = tracker.command(min(k_plan, NUM_STATES - 2), state[None])
            new = propagate(state[None], accel, steer_rate, vehicle)[0]
            new[VX] = max(new[VX], 0.0)  # no reversing in the world
            k_plan += 1
            world.set_ego_state(float(new[X]), float(new[Y]), float(new[HEADING]), float(new[VX]))
            world.step(DT)
        step_len = float(np.hypot(new[X] - state[X], new[Y] - state[Y]))
        state = new
        states.append(state.copy())
        tick += 1
        # infractions and bookkeeping
        boxes, speeds, is_vehicle, _ = _others(world)
        centre = geo.rear_axle_to_center(state[[X, Y]], state[HEADING])
        driven_m += step_len
        if not inside_drivable(road, np.asarray(centre, float)[None])[0]:
            outside_m += step_len
        near = np.hypot(*(boxes[:, :2] - centre).T) < 50.0 if len(boxes) else np.zeros(0, bool)
        moving = near & is_vehicle & (speeds > 0.5)
        if moving.any():
            eff.append(state[VX] / speeds[moving].mean())
        hit = _collision(state, vehicle, boxes)
        progress = route_progress(world) - p0
        s_route, lateral, _ = geo.project_on_polyline(world.route_centerline_world, centre)
        k_route = min(int(np.searchsorted(world.route_arclength, s_route)), len(world.route_junction) - 1)
        res.trace.append((world.time, state[X], state[Y], state[HEADING], state[VX], progress, lateral,
                          bool(world.route_junction[k_route]), command))
        if hit is not None or ego.crashed:
            kind = "collision_vehicle" if hit is None or is_vehicle[hit] else "collision_static"
            res.infractions[kind] = res.infractions.get(kind, 0) + 1
            res.status = "Failed - collision"
            if hit is not None:
                res.collision_kind, res.collision_at_fault = _collision_type(state, vehicle, boxes[hit], bool(is_vehicle[hit]),
                                                                             speeds[hit], ego)
            break
        if abs(lateral) > max_deviation_m:
            res.status = "Failed - route deviation"
            break
        if progress > best_progress + 0.5:
            best_progress, last_gain_t = progress, world.time
        if route_completed(world):
            res.status = "Completed"
            best_progress = length
            break
        if world.time - last_gain_t > blocked_s:
            res.status = "Failed - agent blocked"
            break
        if world.time >= timeout:
            res.status = "Failed - timeout"
            break
    res.duration_s = float(world.time)
    res.completion = float(np.clip(100.0 * best_progress / max(length, 1e-6), 0.0, 100.0))
    if res.status == "Completed":
        res.completion = 100.0
    res.outside_pct = 100.0 * outside_m / driven_m if driven_m > 0 else 0.0
    if outside_m > 0:
        res.infractions["outside_route_lanes"] = 1
    res.efficiency = float(np.mean(eff)) if eff else None
    res.comfort = _window_comfort(np.array(states))


def _collision_type(state: np.ndarray, vehicle: VehicleParams, box: np.ndarray, is_vehicle: bool, other_speed: float,
                    ego) -> tuple[str, bool]:
    """NAVSIM's collision typing for the closed loop: stopped ego, stopped track, rear (the other's centre > 150 deg
    behind the ego's heading), front (the ego's front edge touches it), else lateral; at fault for front, a
    stopped track, or lateral while the ego straddles lanes (a box corner past its lane's border)."""
    from .pdms.geometry import relative_angle

    if state[VX] <= 0.05:
        return "stopped_ego", False
    if not is_vehicle or other_speed <= 0.05:
        return "stopped_track", True
    if relative_angle(state[[X, Y]], state[HEADING], box[:2]) > np.deg2rad(150.0):
        return "rear", False
    corners = box_corners(state[X], state[Y], state[HEADING], vehicle.half_length, vehicle.half_width, vehicle.rear_axle_to_center)
    other = box_corners(box[0], box[1], box[2], box[3] / 2, box[4] / 2)
    if convex_intersect(corners[None, [0, 3]], other[None]).any():
        return "front", True
    lane = ego.lane
    _, r = lane.local_coordinates(ego.position)
    straddles = abs(r) + vehicle.half_width > lane.width_at(0.0) / 2
    return "lateral", bool(straddles)


def _collision(state: np.ndarray, vehicle: VehicleParams, boxes: np.ndarray) -> int | None:
    if not len(boxes):
        return None
    ego = box_corners(state[X], state[Y], state[HEADING], vehicle.half_length, vehicle.half_width, vehicle.rear_axle_to_center)
    other = box_corners(boxes[:, 0], boxes[:, 1], boxes[:, 2], boxes[:, 3] / 2, boxes[:, 4] / 2)
    hit = convex_intersect(ego[None], other)
    return int(np.argmax(hit)) if hit.any() else None


def _window_comfort(states: np.ndarray, window: int = 20) -> float | None:
    n = (len(states) - 1) // window
    if n == 0:
        return None
    w = np.stack([states[i * window: i * window + window + 1] for i in range(n)])
    checks = comfort_checks(w, DT)
    ok = np.logical_and.reduce(list(checks.values()))
    return float(ok.mean())


def run_routes(planner, routes: list[Route], record_frames: int = 0, progress=None, batch: int | None = None,
               fallback=None, **route_kw) -> list[RouteResult]:
    """Drive all routes in lockstep: every route runs until it needs a plan or ends, then ONE guarded
    `planner.plan(scenes)` call serves all routes waiting for a plan, and so on until every route ended.

    `batch` caps the routes in flight (None or <= 0: all); a finished route's slot goes to the next route at once.
    The first `record_frames` routes keep frame strips. `progress()` is called once per finished route. Results come
    back in route order and equal driving each route alone with `run_route` (for a deterministic planner).
    `wall_s` of a route is its own driving time plus its equal share of each planner call it took part in.
    """
    if hasattr(planner, "prepare"):
        planner.prepare()  # a checkpoint that does not load is a configuration error, not a failed route
    expert = _is_expert(planner)
    route_kw.setdefault("camera", planner_camera(planner))
    cap = len(routes) if not batch or batch <= 0 else int(batch)
    out: list[RouteResult | None] = [None] * len(routes)
    pending = list(enumerate(routes))[::-1]  # popped from the end: route order
    active: list[tuple[int, RouteRunner]] = []

    def finish(i: int, runner: RouteRunner) -> None:
        out[i] = runner.result
        if progress is not None:
            progress()

    while pending or active:
        while pending and len(active) < cap:
            i, r = pending.pop()
            runner = RouteRunner(r, expert, record_frames=i < record_frames, fallback=fallback, **route_kw).advance()
            if runner.done:
                finish(i, runner)
            else:
                active.append((i, runner))
        if not active:
            continue
        t0 = time.perf_counter()
        raws = plan_batch(planner, [runner.scene for _, runner in active])
        share = (time.perf_counter() - t0) / len(active)
        still = []
        for (i, runner), raw in zip(active, raws):
            runner.give_plan(raw, share)
            if runner.done:
                finish(i, runner)
            else:
                still.append((i, runner))
        active = still
    return out


def _success_excluding_not_at_fault(rs: list[RouteResult]) -> float | None:
    kept = [r for r in rs if not (r.status == "Failed - collision" and r.collision_at_fault is False)]
    return float(np.mean([r.success for r in kept])) if kept else None


def aggregate_routes(results: list[RouteResult]) -> dict:
    def summary(rs):
        n = len(rs)
        eff = [r.efficiency for r in rs if r.efficiency is not None]
        com = [r.comfort for r in rs if r.comfort is not None]
        statuses: dict[str, int] = {}
        for r in rs:
            statuses[r.status] = statuses.get(r.status, 0) + 1
        inf: dict[str, int] = {}
        for r in rs:
            for k, v in r.infractions.items():
                inf[k] = inf.get(k, 0) + v
        return {
            "n": n,
            "success_rate": float(np.mean([r.success for r in rs])) if n else None,
            "success_rate_ci95": wilson_ci95(sum(r.success for r in rs), n),
            "driving_score_ci95": mean_ci95([r.driving_score for r in rs]),
            "route_completion": float(np.mean([r.completion for r in rs])) if n else None,
            "driving_score": float(np.sum([r.driving_score for r in rs]) / n) if n else None,  # failed routes count 0+
            "efficiency": float(np.mean(eff)) if eff else None,
            "comfort": float(np.mean(com)) if com else None,
            "n_crashed": sum(r.status == "Failed - collision" for r in rs),
            # Bench2Drive counts every collision; these are the ones NAVSIM's typing holds the other party for
            "n_crashed_not_at_fault": sum(r.status == "Failed - collision" and r.collision_at_fault is False for r in rs),
            # success over the routes that did not end in someone else's collision with the ego
            "success_rate_excl_not_at_fault": _success_excluding_not_at_fault(rs),
            "n_timeout": sum(r.status in ("Failed - timeout", "Failed - agent blocked") for r in rs),
            "n_deviation": sum(r.status == "Failed - route deviation" for r in rs),
            "n_error": sum(r.status == "Failed - error" for r in rs),
            "n_planner_error": sum(r.status == PLANNER_ERROR for r in rs),
            "n_plans": sum(r.n_plans for r in rs), "n_failed_plans": sum(r.n_failed_plans for r in rs),
            "n_fallback": sum(r.n_fallback for r in rs), "statuses": statuses, "infractions": inf,
        }

    fams = sorted({r.route.family for r in results})
    return {"version": CLOSEDLOOP_VERSION, "overall": summary(results),
            "per_family": {f: summary([r for r in results if r.route.family == f]) for f in fams},
            "errors": [{"route": r.route.name, "error": r.error} for r in results if r.error][:10]}
