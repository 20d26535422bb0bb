"""What the scorer needs from a `Scene`, prepared once per scene: map layers and agent boxes over time.

Map (ego frame): drivable area = union of the scene's drivable, intersection and lane polygons (NAVSIM's
drivable layers are roadblocks, intersections, drivable area and car parks; a lane lies inside its
roadblock), optionally grown by a documented tolerance; lanes kept separate for the multiple-lanes test;
intersections for TTC and lane keeping; the route centreline for progress.

Agents: the scene's logged boxes at 10 Hz over 0..5 s (51 steps, NAVSIM's observation horizon: 4 s plan
+ 1 s for TTC). An object exists only where `agent_valid`. A track's "stopped" flag follows NAVSIM, which
classifies a track by the object as first observed: static objects always, vehicles when the speed at
their first observation is <= 0.05 m/s.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import shapely

from .vehicle import box_corners

TRACK_STOPPED_SPEED = 5e-2


@dataclass
class AgentTracks:
    corners: np.ndarray  # (A, T, 4, 2)
    centers: np.ndarray  # (A, T, 2)
    heading0: np.ndarray  # (A,) heading at first observation (NAVSIM uses the first-seen object's box)
    valid: np.ndarray  # (A, T)
    is_vehicle: np.ndarray  # (A,)
    stopped: np.ndarray  # (A,)
    speed0: np.ndarray  # (A,)

    @property
    def num(self) -> int:
        return len(self.is_vehicle)

    @classmethod
    def from_scene(cls, scene) -> "AgentTracks":
        boxes = np.asarray(scene.agent_boxes, float).reshape(-1, scene.agent_boxes.shape[1] if scene.agent_boxes.ndim == 3 else 51, 5)
        valid = np.asarray(scene.agent_valid, bool).reshape(boxes.shape[:2])
        vel = np.asarray(scene.agent_velocity, float).reshape(boxes.shape[:2] + (2,))
        is_vehicle = np.asarray(scene.agent_is_vehicle, bool).reshape(-1)
        return cls.from_arrays(boxes, vel, valid, is_vehicle)

    @classmethod
    def from_arrays(cls, boxes, velocity, valid, is_vehicle) -> "AgentTracks":
        a = len(boxes)
        if a == 0:
            t = boxes.shape[1] if boxes.ndim == 3 else 51
            z = np.zeros((0,))
            return cls(np.zeros((0, t, 4, 2)), np.zeros((0, t, 2)), z, np.zeros((0, t), bool), z.astype(bool), z.astype(bool), z)
        boxes = np.where(valid[..., None], boxes, 0.0)
        corners = box_corners(boxes[..., 0], boxes[..., 1], boxes[..., 2], boxes[..., 3] / 2, boxes[..., 4] / 2)
        first = np.argmax(valid, axis=1)
        rows = np.arange(a)
        speed0 = np.hypot(*velocity[rows, first].T)
        stopped = ~is_vehicle | (speed0 <= TRACK_STOPPED_SPEED)
        return cls(corners, boxes[..., :2], boxes[rows, first, 2], valid, is_vehicle, stopped, speed0)

    @classmethod
    def constant_velocity_forecast(cls, scene, steps: int = 51, dt: float = 0.1) -> "AgentTracks":
        """Agents seen at t=0 moved at their t=0 velocity (static objects stay): what PDM-Closed plans against."""
        boxes = np.asarray(scene.agent_boxes, float)
        seen = np.asarray(scene.agent_valid, bool)[:, 0] if len(boxes) else np.zeros(0, bool)
        boxes, vel = boxes[seen, :1], np.asarray(scene.agent_velocity, float)[seen, 0]
        is_vehicle = np.asarray(scene.agent_is_vehicle, bool)[seen]
        vel = np.where(is_vehicle[:, None], vel, 0.0)
        t = np.arange(steps) * dt
        fb = np.repeat(boxes, steps, axis=1)
        fb[..., 0] += vel[:, None, 0] * t
        fb[..., 1] += vel[:, None, 1] * t
        fv = np.repeat(vel[:, None], steps, axis=1)
        return cls.from_arrays(fb, fv, np.ones(fb.shape[:2], bool), is_vehicle)


def _polys(arrays) -> list:
    out = []
    for p in arrays:
        p = np.asarray(p, float)
        if len(p) >= 3:
            g = shapely.make_valid(shapely.polygons(p))
            if not g.is_empty and g.area > 0:
                out.append(g)
    return out


@dataclass
class SceneMapIndex:
    drivable: object  # shapely geometry (prepared)
    lanes: list
    intersection: object | None
    centerline: shapely.LineString | None
    centerline_xy: np.ndarray
    lane_centerlines: list
    speed_limit: float

    @classmethod
    def from_scene(cls, scene, drivable_tolerance: float = 0.0) -> "SceneMapIndex":
        m = scene.map
        lanes = _polys(m.lane_polygons)
        inter = _polys(m.intersection_polygons)
        drivable = shapely.union_all(_polys(m.drivable_polygons) + inter + lanes)
        if drivable_tolerance > 0:
            drivable = drivable.buffer(drivable_tolerance)
        shapely.prepare(drivable)
        for g in lanes:
            shapely.prepare(g)
        intersection = shapely.union_all(inter) if inter else None
        if intersection is not None:
            shapely.prepare(intersection)
        rc = np.asarray(m.route_centerline, float).reshape(-1, 2)
        centerline = shapely.LineString(rc) if len(rc) >= 2 else None
        return cls(drivable, lanes, intersection, centerline, rc, [np.asarray(c, float) for c in m.lane_centerlines],
                   float(m.speed_limit))

    # -- vectorised queries over point arrays (..., 2) -------------------------------------------------
    def in_drivable(self, pts: np.ndarray) -> np.ndarray:
        if self.drivable.is_empty:
            return np.zeros(pts.shape[:-1], bool)
        return shapely.contains_xy(self.drivable, pts[..., 0], pts[..., 1])

    def in_lanes(self, pts: np.ndarray) -> np.ndarray:
        """(..., 2) -> (L, ...) membership in each lane polygon."""
        if not self.lanes:
            return np.zeros((0,) + pts.shape[:-1], bool)
        return np.stack([shapely.contains_xy(g, pts[..., 0], pts[..., 1]) for g in self.lanes])

    def in_intersection(self, pts: np.ndarray) -> np.ndarray:
        if self.intersection is None:
            return np.zeros(pts.shape[:-1], bool)
        return shapely.contains_xy(self.intersection, pts[..., 0], pts[..., 1])

    def progress(self, pts: np.ndarray) -> np.ndarray:
        """Arc-length of the projection of points (..., 2) onto the route centreline."""
        flat = pts.reshape(-1, 2)
        s = shapely.line_locate_point(self.centerline, shapely.points(flat))
        return np.asarray(s).reshape(pts.shape[:-1])

    def lateral_distance(self, pts: np.ndarray) -> np.ndarray:
        flat = pts.reshape(-1, 2)
        return np.asarray(shapely.distance(self.centerline, shapely.points(flat))).reshape(pts.shape[:-1])
