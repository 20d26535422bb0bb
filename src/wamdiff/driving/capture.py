"""Turn a `World` into `Scene` records: logged scenes for datasets, and live t0 scenes for closed loop.

`generate_scene(family, seed, split, **cfg)`: build the world (`make_world`, which warms up so the ego has 1.5 s
of history), capture t0, then run the simulation 5 s forward with the expert driving the ego. The logged
traffic over 0..5 s at 10 Hz are the scene's non-reactive agents; the expert's poses at 0.5..4 s are its
future. A run is DROPPED (returns `Drop`) when the ego crashed before t0 or within 5 s (`crash`), when its
0..4 s states break a nuPlan comfort bound (`comfort_<metric>`), or when a corner of its box leaves the
drivable area at any 0.1 s state of 0..4 s (`expert_off_drivable`); `generate_scene` also when less route lies
ahead of the ego at t0 than it drives in 4 s at its speed (`route_end`: the ego is past its destination or the
road network's end, the camera shows no route and the command is unknown, yet the expert's label drives on).

`observe(world)`: the t0 scene of a live world (closed loop). `future` is zeros; agents are the CURRENT boxes
forecast at constant velocity (straight line, heading kept) over 0..5 s, with `agent_valid` True only at t=0
(index 0) so a scorer that honours validity sees the present only; `meta["agents"] = "constant_velocity"`.

Agents: every vehicle within `AGENT_RADIUS` of the ego at t0 or at any later logged tick, plus static objects
(merge-ramp end barrier, `agent_is_vehicle=False`) within that radius. `agent_valid` is False at ticks where
the vehicle no longer exists in the simulation (culled far away).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from wamdiff.driving import geometry as geo
from wamdiff.driving.command import command_from_route, lookahead
from wamdiff.driving.expert import comfort_violations
from wamdiff.driving.render import CameraConfig, render_camera
from wamdiff.driving.roadmap import MAP_RADIUS, inside_drivable, road_geometry
from wamdiff.driving.scene import AGENT_STEPS, FUTURE_DT, FUTURE_STEPS, Scene, SceneMap
from wamdiff.driving.world import SIM_DT, World, make_world, route_remaining

AGENT_RADIUS = 80.0  # m


@dataclass
class Drop:
    family: str
    seed: int
    reason: str
    detail: str = ""


def pending_lane_change(world: World) -> int:
    """+1 / -1 when the route asks for a lane change to the left / right that starts within the lookahead and
    the ego is not yet on the target lane; 0 otherwise. Uses the route and the ego's current lane only."""
    ego = world.ego
    L = lookahead(ego.speed)
    for road, target, s_from in world.plan.changes:
        if ego.lane_index[:2] != road or ego.lane_index[2] == target:
            continue
        s_ego = ego.lane.local_coordinates(ego.position)[0]
        if s_from - s_ego <= L:
            return 1 if target < ego.lane_index[2] else -1  # hw lane ids grow to the driver's right
    # a change on a later road of the route (merge ramp): look ahead along the route
    for road, target, s_from in world.plan.changes:
        if road != ego.lane_index[:2]:
            idx = [k for k, li in enumerate(world.route_lanes_per_point) if li[:2] == road]
            if idx:
                s_ego, _, _ = geo.project_on_polyline(world.route_centerline_world, world.ego_pose()[:2])
                if world.route_arclength[idx[0]] + s_from - s_ego <= L and world.route_arclength[idx[0]] > s_ego:
                    current = [li for li in world.plan.lanes if li[:2] == road][0]
                    return 1 if target < current[2] else -1
    return 0


def route_command(world: World) -> str:
    pose = world.ego_pose()
    route_ego = geo.world_to_ego(world.route_centerline_world, pose)
    return command_from_route(route_ego, world.route_junction, world.ego.speed, pending_lane_change(world))


def _vehicle_state(v) -> np.ndarray:
    """World-frame box centre x, y, heading, length, width, vx, vy."""
    h = -float(v.heading)
    c = geo.hw_to_world_xy(v.position)
    return np.array([c[0], c[1], h, v.LENGTH, v.WIDTH, v.speed * np.cos(h), v.speed * np.sin(h)])


def _map_layers(world: World, pose: np.ndarray, radius: float = MAP_RADIUS) -> dict:
    layers = road_geometry(world).crop(pose[:2], radius)
    return {k: ([geo.world_to_ego(p, pose).astype(np.float32) for p in v] if k != "lane_ids" else v) for k, v in layers.items()}


def _t0_snapshot(world: World, camera: CameraConfig):
    pose = world.ego_pose()
    layers = _map_layers(world, pose)
    view = _map_layers(world, pose, camera.view_radius) if camera.view_radius < MAP_RADIUS else layers
    boxes = []
    for v in [*world.road.vehicles, *world.road.objects]:
        if v is world.ego:
            continue
        st = _vehicle_state(v)
        if np.hypot(*(st[:2] - pose[:2])) > camera.view_radius + 6:
            continue
        p = geo.poses_world_to_ego(st[:3], pose)
        boxes.append((p[0], p[1], p[2], st[3], st[4], hasattr(v, "target_speed") or v in world.road.vehicles))
    view = {**view, "route": [route_ahead(world, pose)]}
    image = render_camera(view, boxes, (world.ego.LENGTH, world.ego.WIDTH), camera)
    return pose, layers, image


def route_ahead(world: World, pose: np.ndarray, behind_m: float = 2.0) -> np.ndarray:
    """The route centreline from just behind the ego's projection onto it to its end, in the ego frame."""
    xy = world.route_centerline_world
    keep = world.route_arclength >= world.route_s() - behind_m
    return geo.world_to_ego(xy[keep], pose)


def _scene_map(world: World, pose: np.ndarray, layers: dict) -> SceneMap:
    return SceneMap(
        lane_polygons=layers["lane_polygons"],
        lane_centerlines=layers["lane_centerlines"],
        drivable_polygons=layers["drivable_polygons"],
        intersection_polygons=layers["intersection_polygons"],
        route_centerline=geo.world_to_ego(world.route_centerline_world, pose).astype(np.float32),
        speed_limit=world.speed_limit(),
    )


def _meta(world: World) -> dict:
    import highway_env

    import wamdiff

    return {
        "ego_lane_index": [str(x) for x in world.ego.lane_index],
        "ego_lane_id": int(world.ego.lane_index[2]),
        "ego_road_lanes": len(world.road.network.graph[world.ego.lane_index[0]][world.ego.lane_index[1]]),
        "route_lanes": [[str(x) for x in li] for li in world.plan.lanes],
        "route_destination": world.plan.destination,
        "config": {k: v for k, v in world.config.__dict__.items()},
        "versions": {"wamdiff": getattr(wamdiff, "__version__", "0"), "highway_env": highway_env.__version__},
    }


def generate_scene(family: str, seed: int, split: str = "train", camera: CameraConfig = CameraConfig(), **cfg) -> Scene | Drop:
    """A logged scene of a fresh seeded world: its t0 after the warm-up, labelled by the expert's next 5 s."""
    world = make_world(family, seed, **cfg)
    # a dataset scene is a planning problem with its destination ahead; on-policy rounds (`capture_scene` on
    # closed-loop worlds) still label a route's last stretch, which the closed loop drives to complete it
    ahead, needed = route_remaining(world), FUTURE_STEPS * FUTURE_DT * world.ego.speed
    if ahead < needed:
        return Drop(family, seed, "route_end", f"{ahead:.0f} m of route ahead, {needed:.0f} m driven in 4 s")
    return capture_scene(world, f"{family}_{split}_{seed:08d}", split, camera)


def capture_scene(world: World, scene_id: str, split: str, camera: CameraConfig = CameraConfig()) -> Scene | Drop:
    """The scene of `world` now, labelled by letting the expert drive it 5 s on (the world is consumed).

    Data generation calls it on fresh worlds; on-policy aggregation on copies of closed-loop worlds that a model
    drove until now (handed back to the expert with `World.autopilot`), so the labels show how to recover."""
    family, seed = world.family, world.seed
    if world.ego.crashed:
        return Drop(family, seed, "crash", "before t0")
    command = route_command(world)
    history = world.ego_history()
    pose, layers, image = _t0_snapshot(world, camera)
    lane_change = pending_lane_change(world)
    meta = _meta(world)

    # run 5 s forward with the expert; log every object at 10 Hz
    tracks: dict[int, np.ndarray] = {}
    objects: dict[int, object] = {}
    for k in range(AGENT_STEPS):
        if k:
            world.step(SIM_DT)
        for v in [*world.road.vehicles, *world.road.objects]:
            if v is world.ego:
                continue
            key = id(v)
            if key not in tracks:
                tracks[key] = np.full((AGENT_STEPS, 7), np.nan)
                objects[key] = v
            tracks[key][k] = _vehicle_state(v)
        if world.ego.crashed:
            return Drop(family, seed, "crash", f"at t={world.time:.1f}s")
        if k == 40:
            meta["ego_lane_index_4s"] = [str(x) for x in world.ego.lane_index]
    ego_log = world.ego_log()[-AGENT_STEPS:]  # t0 .. t0 + 5 s
    states = ego_log[:41]
    bad = comfort_violations(states[:, 1:4], states[:, 6])
    if bad:
        worst = sorted(bad)[0]
        return Drop(family, seed, f"comfort_{worst}", ", ".join(f"{k}={v:.2f}" for k, v in bad.items()))
    centres = geo.rear_axle_to_center(states[:, 1:3], states[:, 3])
    corners = np.stack([geo.box_corners(c[0], c[1], h, world.ego.LENGTH, world.ego.WIDTH) for c, h in zip(centres, states[:, 3])])
    if not inside_drivable(road_geometry(world), corners.reshape(-1, 2)).all():
        return Drop(family, seed, "expert_off_drivable")

    future_world = ego_log[5:41:5, 1:4]
    future = geo.poses_world_to_ego(future_world, pose)
    assert len(future) == FUTURE_STEPS

    keys = [k for k, tr in tracks.items() if np.nanmin(np.hypot(tr[:, 0] - ego_log[:, 1], tr[:, 1] - ego_log[:, 2])) <= AGENT_RADIUS]
    boxes, vel, valid, is_vehicle = _agent_arrays([tracks[k] for k in keys], pose)
    is_vehicle = np.array([objects[k] in world.road.vehicles or hasattr(objects[k], "target_speed") for k in keys], bool)
    meta.update({"command_lane_change": lane_change, "agents": "logged", "ego_speed_t0": float(history[-1, 3])})
    return Scene(
        scene_id=scene_id, family=family, seed=int(seed), split=split, command=command,
        image=image, ego_history=history.astype(np.float32), future=future.astype(np.float32),
        agent_boxes=boxes, agent_velocity=vel, agent_valid=valid, agent_is_vehicle=is_vehicle,
        map=_scene_map(world, pose, layers), ego_pose_world=pose, ego_length=float(world.ego.LENGTH),
        ego_width=float(world.ego.WIDTH), meta=meta,
    )


def _agent_arrays(tracks: list[np.ndarray], pose: np.ndarray):
    A = len(tracks)
    boxes = np.zeros((A, AGENT_STEPS, 5), np.float32)
    vel = np.zeros((A, AGENT_STEPS, 2), np.float32)
    valid = np.zeros((A, AGENT_STEPS), bool)
    for a, tr in enumerate(tracks):
        ok = ~np.isnan(tr[:, 0])
        valid[a] = ok
        p = geo.poses_world_to_ego(np.nan_to_num(tr[:, :3]), pose)
        boxes[a, :, :3] = p
        boxes[a, :, 3:5] = np.nan_to_num(tr[:, 3:5])
        vel[a] = geo.rotate_vectors(np.nan_to_num(tr[:, 5:7]), -pose[2])
        boxes[a, ~ok] = 0.0
        vel[a, ~ok] = 0.0
    return boxes, vel, valid, np.ones(A, bool)


def observe(world: World, camera: CameraConfig = CameraConfig(), split: str = "live") -> Scene:
    """The t0 scene of a live world (closed loop): see the module doc for how agents and future are filled."""
    pose, layers, image = _t0_snapshot(world, camera)
    t = np.arange(AGENT_STEPS) * SIM_DT
    tracks, vehicle_flags = [], []
    for v in [*world.road.vehicles, *world.road.objects]:
        if v is world.ego:
            continue
        st = _vehicle_state(v)
        if np.hypot(*(st[:2] - pose[:2])) > AGENT_RADIUS:
            continue
        tr = np.repeat(st[None], AGENT_STEPS, 0)
        tr[:, 0] += st[5] * t
        tr[:, 1] += st[6] * t
        tracks.append(tr)
        vehicle_flags.append(v in world.road.vehicles)
    boxes, vel, valid, _ = _agent_arrays(tracks, pose)
    valid[:, 1:] = False
    meta = _meta(world)
    meta.update({"agents": "constant_velocity", "time": world.time, "command_lane_change": pending_lane_change(world)})
    return Scene(
        scene_id=f"{world.family}_live_{world.seed:08d}_{int(round(world.time * 10)):05d}", family=world.family,
        seed=world.seed, split=split, command=route_command(world), image=image,
        ego_history=world.ego_history().astype(np.float32), future=np.zeros((FUTURE_STEPS, 3), np.float32),
        agent_boxes=boxes, agent_velocity=vel, agent_valid=valid, agent_is_vehicle=np.array(vehicle_flags, bool),
        map=_scene_map(world, pose, layers), ego_pose_world=pose, ego_length=float(world.ego.LENGTH),
        ego_width=float(world.ego.WIDTH), meta=meta,
    )
