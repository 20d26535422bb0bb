"""Vectorised convex-polygon tests (separating axis theorem) for boxes and segments.

Shapely would need one Python object per box and time step; boxes are convex quadrilaterals, so an exact
SAT test over numpy arrays gives the same `intersects` answer (touching counts as intersecting) for every
(proposal, time, agent) pair at once.
"""

from __future__ import annotations

import numpy as np


def _edge_normals(poly: np.ndarray) -> np.ndarray:
    """(..., K, 2) polygon -> (..., K, 2) edge normals (not normalised; SAT only needs directions)."""
    edges = np.roll(poly, -1, axis=-2) - poly
    return np.stack([-edges[..., 1], edges[..., 0]], axis=-1)


def convex_intersect(a: np.ndarray, b: np.ndarray, eps: float = 1e-9) -> np.ndarray:
    """True where convex polygons a (..., Ka, 2) and b (..., Kb, 2) overlap or touch; batch dims broadcast.

    A two-vertex "polygon" is a segment (its two edges give the same normal, which is all SAT needs).
    Pairs whose bounding circles are apart are rejected first, so only near pairs pay for the SAT test.
    """
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    ca, cb = a.mean(-2), b.mean(-2)
    ra = np.linalg.norm(a - ca[..., None, :], axis=-1).max(-1)
    rb = np.linalg.norm(b - cb[..., None, :], axis=-1).max(-1)
    gap = np.linalg.norm(ca - cb, axis=-1) - ra - rb
    near = np.broadcast_to(gap <= eps, batch)
    out = np.zeros(batch, bool)
    if near.any():
        idx = np.nonzero(near)
        out[idx] = _sat(np.broadcast_to(a, batch + a.shape[-2:])[idx], np.broadcast_to(b, batch + b.shape[-2:])[idx], eps)
    return out


def _sat(a: np.ndarray, b: np.ndarray, eps: float) -> np.ndarray:
    axes = np.concatenate([_edge_normals(a), _edge_normals(b)], axis=-2)  # (..., Ka+Kb, 2)
    pa = np.einsum("...nd,...kd->...nk", axes, a)
    pb = np.einsum("...nd,...kd->...nk", axes, b)
    separated = (pa.max(-1) < pb.min(-1) - eps) | (pb.max(-1) < pa.min(-1) - eps)
    return ~separated.any(-1)


def relative_angle(origin_xy: np.ndarray, origin_heading: np.ndarray, target_xy: np.ndarray) -> np.ndarray:
    """Angle in [0, pi] between a heading and the vector to a target point (nuPlan `get_agent_relative_angle`)."""
    d = target_xy - origin_xy
    norm = np.hypot(d[..., 0], d[..., 1])
    cos = (np.cos(origin_heading) * d[..., 0] + np.sin(origin_heading) * d[..., 1]) / np.maximum(norm, 1e-12)
    return np.arccos(np.clip(cos, -1.0, 1.0))


def wrap_angle(a):
    return (np.asarray(a) + np.pi) % (2 * np.pi) - np.pi
