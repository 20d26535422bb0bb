"""Frames and road geometry shared by the world, the scenes and the renderer.

Three frames:
- highway-env frame ("hw"): what `road.network` and vehicles use. Its y axis points DOWN on screen, so read as
  a math frame it is mirrored (left-hand traffic, clockwise roundabouts).
- world frame: the hw frame with y negated and headings negated. Right-handed, x east, y north, heading
  counter-clockwise; traffic drives on the right. Everything this package exports in "world" coordinates
  uses it (`World.ego_pose`, `World.route_centerline_world`, `Scene.ego_pose_world`).
- ego frame: origin at the ego's rear axle, x forward, y left (NAVSIM). highway-env positions a vehicle by its
  box centre; the rear axle is `REAR_AXLE_TO_CENTER` behind it.
"""

from __future__ import annotations

import numpy as np

REAR_AXLE_TO_CENTER = 1.461  # m, NAVSIM's Pacifica value: box centre = rear axle + 1.461 m forward


def wrap_angle(a):
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi


def hw_to_world_xy(xy) -> np.ndarray:
    xy = np.array(xy, dtype=np.float64)
    xy[..., 1] *= -1
    return xy


world_to_hw_xy = hw_to_world_xy  # the flip is its own inverse


def hw_to_world_heading(h):
    return -np.asarray(h, dtype=np.float64)


def center_to_rear_axle(center_xy, heading) -> np.ndarray:
    """World-frame box centre + heading -> rear-axle position."""
    c = np.asarray(center_xy, np.float64)
    return c - REAR_AXLE_TO_CENTER * np.stack([np.cos(heading), np.sin(heading)], -1)


def rear_axle_to_center(rear_xy, heading) -> np.ndarray:
    r = np.asarray(rear_xy, np.float64)
    return r + REAR_AXLE_TO_CENTER * np.stack([np.cos(heading), np.sin(heading)], -1)


def world_to_ego(xy, pose) -> np.ndarray:
    """Points (..., 2) in the world frame -> the frame of `pose` = (x, y, heading)."""
    c, s = np.cos(pose[2]), np.sin(pose[2])
    d = np.asarray(xy, np.float64) - np.asarray(pose[:2], np.float64)
    return np.stack([c * d[..., 0] + s * d[..., 1], -s * d[..., 0] + c * d[..., 1]], -1)


def ego_to_world(xy, pose) -> np.ndarray:
    c, s = np.cos(pose[2]), np.sin(pose[2])
    p = np.asarray(xy, np.float64)
    return np.stack([c * p[..., 0] - s * p[..., 1] + pose[0], s * p[..., 0] + c * p[..., 1] + pose[1]], -1)


def poses_world_to_ego(poses, pose) -> np.ndarray:
    """(..., 3) world poses -> ego-frame poses (heading wrapped to [-pi, pi))."""
    poses = np.asarray(poses, np.float64)
    out = np.empty(poses.shape, np.float64)
    out[..., :2] = world_to_ego(poses[..., :2], pose)
    out[..., 2] = wrap_angle(poses[..., 2] - pose[2])
    return out


def poses_ego_to_world(poses, pose) -> np.ndarray:
    poses = np.asarray(poses, np.float64)
    out = np.empty(poses.shape, np.float64)
    out[..., :2] = ego_to_world(poses[..., :2], pose)
    out[..., 2] = wrap_angle(poses[..., 2] + pose[2])
    return out


def rotate_vectors(v, angle) -> np.ndarray:
    """Rotate vectors (..., 2) by `angle` (use -heading to express world vectors in a body frame)."""
    c, s = np.cos(angle), np.sin(angle)
    v = np.asarray(v, np.float64)
    return np.stack([c * v[..., 0] - s * v[..., 1], s * v[..., 0] + c * v[..., 1]], -1)


def box_corners(x, y, heading, length, width) -> np.ndarray:
    """(4, 2) corners of a box centred at (x, y): front-left, front-right, rear-right, rear-left."""
    c, s = np.cos(heading), np.sin(heading)
    fwd, left = np.array([c, s]) * length / 2, np.array([-s, c]) * width / 2
    ctr = np.array([x, y])
    return np.stack([ctr + fwd + left, ctr + fwd - left, ctr - fwd - left, ctr - fwd + left])


# -- lanes ---------------------------------------------------------------------------------------------------
MAX_LANE_LENGTH = 2500.0  # m: highway-env's straight highways are 10 km; nothing drives further than this


def lane_samples(lane, step: float = 2.0) -> dict[str, np.ndarray]:
    """Sample a highway-env lane in the WORLD frame: s, centre, left and right borders (left = driver's left)."""
    length = min(float(lane.length), MAX_LANE_LENGTH)
    n = max(2, int(np.ceil(length / step)) + 1)
    s = np.linspace(0.0, length, n)
    centre = np.array([lane.position(si, 0.0) for si in s])
    width = np.array([lane.width_at(si) for si in s])
    # hw lateral +r is the driver's right (hw y points down); after the flip it is still the driver's right.
    left = np.array([lane.position(si, -w / 2) for si, w in zip(s, width)])
    right = np.array([lane.position(si, w / 2) for si, w in zip(s, width)])
    heading = np.array([lane.heading_at(si) for si in s])
    return {
        "s": s,
        "centre": hw_to_world_xy(centre),
        "left": hw_to_world_xy(left),
        "right": hw_to_world_xy(right),
        "heading": hw_to_world_heading(heading),
        "width": width,
    }


def polyline_arclength(xy: np.ndarray) -> np.ndarray:
    if len(xy) == 0:
        return np.zeros(0)
    return np.concatenate([[0.0], np.cumsum(np.linalg.norm(np.diff(xy, axis=0), axis=1))])


def project_on_polyline(xy: np.ndarray, point) -> tuple[float, float, int]:
    """Arc length of the closest point of `xy` to `point`, the signed lateral offset (left +) and segment index."""
    p = np.asarray(point, np.float64)
    a, b = xy[:-1], xy[1:]
    ab = b - a
    denom = np.maximum((ab**2).sum(1), 1e-12)
    t = np.clip(((p - a) * ab).sum(1) / denom, 0.0, 1.0)
    proj = a + t[:, None] * ab
    d = np.linalg.norm(proj - p, axis=1)
    i = int(np.argmin(d))
    s = polyline_arclength(xy)[i] + t[i] * np.sqrt(denom[i])
    cross = ab[i, 0] * (p[1] - a[i, 1]) - ab[i, 1] * (p[0] - a[i, 0])
    return float(s), float(np.sign(cross) * d[i]), i


def resample_polyline(xy: np.ndarray, step: float) -> np.ndarray:
    s = polyline_arclength(xy)
    if len(xy) < 2 or s[-1] <= 0:
        return np.asarray(xy, np.float64)
    keep = np.concatenate([[True], np.diff(s) > 1e-9])
    xy, s = xy[keep], s[keep]
    t = np.linspace(0.0, s[-1], max(2, int(np.ceil(s[-1] / step)) + 1))
    return np.stack([np.interp(t, s, xy[:, 0]), np.interp(t, s, xy[:, 1])], -1)


def polyline_headings(xy: np.ndarray) -> np.ndarray:
    d = np.diff(xy, axis=0)
    h = np.arctan2(d[:, 1], d[:, 0])
    return np.concatenate([h, h[-1:]]) if len(h) else np.zeros(len(xy))
