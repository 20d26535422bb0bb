"""Map layers of a family's road network, built once per road layout and cropped per scene.

How the layers are built (world frame, see geometry.py):
- lane polygon: a lane's left border followed by its right border reversed, sampled every 1 m on curved lanes
  and 5 m on straight ones (`lane_samples`); the centreline is sampled the same way.
- intersection polygons: intersection family = convex hull of every lane inside the junction box (lanes
  leaving an `ir*` node); roundabout = the ring lanes' union buffered by `RING_MARGIN` = 2.0 m (highway-env's
  entry lanes end ~4 m off the outer ring lane, so the ego swings wide when it joins), plus the convex hull of
  each arm's entry and exit lanes within 12 m of the ring (the flared mouths).
- drivable area = union of (every lane polygon buffered by `DRIVABLE_MARGIN` = 1.0 m) and the intersection
  polygons. The margin covers the corners of a 5 m ego box while it follows a curved lane and the shoulder a lane
  change blends across; calibrated so the expert's own future stays inside (generation drops a scene whose
  expert box leaves it: the count is in the manifest, reason `expert_off_drivable`).
- per scene every layer is clipped to a `MAP_RADIUS` square around the ego. Scene polygons carry no holes: a
  holed area (roundabout island) is cut into hole-free pieces by straight cuts through each hole (`hole_free`);
  the pieces' union is the same area.
"""

from __future__ import annotations

import numpy as np
import shapely
from shapely.geometry import LineString, MultiPolygon, Polygon, box
from shapely.ops import split, unary_union

from wamdiff.driving import geometry as geo

DRIVABLE_MARGIN = 1.0  # m
RING_MARGIN = 2.0  # m: highway-env's roundabout entries meet the ring ~4 m off its lane, the ego swings wide there
MAP_RADIUS = 120.0  # m: half side of the square kept around the ego (4 s at 30 m/s)


class RoadGeometry:
    def __init__(self, family: str, network):
        from highway_env.road.lane import StraightLane

        from wamdiff.driving.world import family_spec, is_junction_lane

        self.family = family
        self.lanes = []  # (lane_index, samples dict)
        for _from, to_dict in network.graph.items():
            for _to, lanes in to_dict.items():
                for _id, lane in enumerate(lanes):
                    step = 5.0 if type(lane) is StraightLane else 1.0
                    self.lanes.append(((_from, _to, _id), geo.lane_samples(lane, step)))
        polys = {li: Polygon(np.concatenate([smp["left"], smp["right"][::-1]])).buffer(0) for li, smp in self.lanes}
        junction = [polys[li] for li, _ in self.lanes if is_junction_lane(family, li)]
        self.intersections: list[Polygon] = []
        shape = family_spec(family).junction
        if shape == "box" and junction:
            self.intersections = [unary_union(junction).convex_hull]
        elif shape == "ring" and junction:
            ring = unary_union(junction).buffer(RING_MARGIN)
            mouths = []
            for arm in ("s", "e", "n", "w"):
                near = [polys[li].intersection(ring.buffer(12.0)) for li, _ in self.lanes
                        if not is_junction_lane(family, li) and (li[0].startswith(arm) or li[1].startswith(arm))]
                near = [p for p in near if not p.is_empty]
                if near:
                    mouths.append(unary_union(near).convex_hull)
            self.intersections = [unary_union([ring, *mouths])]
        self.drivable = unary_union([p.buffer(DRIVABLE_MARGIN) for p in polys.values()] + self.intersections)
        shapely.prepare(self.drivable)

    def crop(self, center_xy, radius: float = MAP_RADIUS) -> dict:
        """Layers within a square around `center_xy` (world frame), as lists of (K, 2) arrays."""
        cx, cy = float(center_xy[0]), float(center_xy[1])
        window = box(cx - radius, cy - radius, cx + radius, cy + radius)
        lane_polys, centrelines, lane_ids = [], [], []
        for li, smp in self.lanes:
            inside = (np.abs(smp["centre"][:, 0] - cx) <= radius + 5) & (np.abs(smp["centre"][:, 1] - cy) <= radius + 5)
            if not inside.any():
                continue
            for run in _runs(inside):
                if len(run) < 2:
                    continue
                centrelines.append(smp["centre"][run])
                lane_polys.append(np.concatenate([smp["left"][run], smp["right"][run][::-1]]))
                lane_ids.append(li)
        drivable = _polygons(self.drivable.intersection(window))
        inter = _polygons(unary_union(self.intersections).intersection(window)) if self.intersections else []
        return {"lane_polygons": lane_polys, "lane_centerlines": centrelines, "lane_ids": lane_ids,
                "drivable_polygons": drivable, "intersection_polygons": inter}


def _runs(mask: np.ndarray) -> list[np.ndarray]:
    idx = np.flatnonzero(mask)
    if len(idx) == 0:
        return []
    cuts = np.flatnonzero(np.diff(idx) > 1) + 1
    return np.split(idx, cuts)


def hole_free(poly: Polygon) -> list[Polygon]:
    """Cut a polygon with holes into hole-free pieces (vertical cuts through each hole's centroid)."""
    if poly.is_empty:
        return []
    if not poly.interiors:
        return [poly]
    hole = Polygon(poly.interiors[0])
    x = hole.representative_point().x
    minx, miny, maxx, maxy = poly.bounds
    pieces = split(poly, LineString([(x, miny - 1), (x, maxy + 1)]))
    out = []
    for piece in pieces.geoms:
        if isinstance(piece, Polygon):
            out.extend(hole_free(piece))
    return out


def _polygons(geom) -> list[np.ndarray]:
    if geom.is_empty:
        return []
    parts = list(geom.geoms) if isinstance(geom, MultiPolygon) or hasattr(geom, "geoms") else [geom]
    out = []
    for part in parts:
        if not isinstance(part, Polygon) or part.area < 1.0:
            continue
        for piece in hole_free(part.simplify(0.05)):
            out.append(np.asarray(piece.exterior.coords)[:-1])
    return out


_CACHE: dict = {}


def road_geometry(world) -> RoadGeometry:
    """The map layers of `world`'s road. Road layouts depend only on the family and its lane count: cached."""
    key = (world.family, world.config.lanes)
    if key not in _CACHE:
        _CACHE[key] = RoadGeometry(world.family, world.road.network)
    return _CACHE[key]


def inside_drivable(geom: RoadGeometry, points_world: np.ndarray) -> np.ndarray:
    return shapely.contains_xy(geom.drivable, points_world[..., 0], points_world[..., 1])
