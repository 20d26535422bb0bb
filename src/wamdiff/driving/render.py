"""The camera image: a top-down view, ego-centred and heading-up, drawn from the road geometry with PIL.

Own drawing instead of highway-env's pygame renderer: it needs no display, never comes out black, and is far
cheaper. Layout: image up = ego forward (+x), image left = ego left (+y); the ego's box centre sits at the
image centre or `look_ahead` m below it. Default 64x64 at 1.5 px/m with the ego 10 m below the centre: 31 m
ahead, 11 m behind, 21 m to each side.

The planned route ahead is drawn as a thin `ROUTE` line, like the route on a navigation display. Measured on the
full closed-loop route set, a single frame plus the left/straight/right command cannot tell a roundabout's exits
apart (the command stays "left" all the way round to the third exit, and nothing in one frame says how many exits
were passed): the AR VLA took none of 25 roundabouts. `route=False` draws the plain scene.

Colours: off-road `OFFROAD`, drivable area `ROAD`, lane borders `MARKING`, intersection areas `JUNCTION`, the route
`ROUTE`, other vehicles `VEHICLE`, static objects `OBSTACLE`, the ego `EGO` (pure green: tests look for it).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np
from PIL import Image, ImageDraw

from wamdiff.driving import geometry as geo

OFFROAD = (34, 64, 34)
ROAD = (96, 96, 96)
JUNCTION = (110, 104, 96)
MARKING = (235, 235, 235)
EGO = (0, 255, 0)
VEHICLE = (40, 120, 255)
OBSTACLE = (230, 40, 40)
ROUTE = (255, 190, 0)


@dataclass(frozen=True)
class CameraConfig:
    size: int = 64  # pixels, square
    pixels_per_meter: float = 1.5
    supersample: int = 2  # draw at 2x then downscale: cheap anti-aliasing keeps thin markings visible
    look_ahead: float = 10.0  # m the image centre lies ahead of the ego's box centre (0 = ego-centred)
    route: bool = True  # draw the planned route ahead (layer "route": one ego-frame polyline)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict | None) -> "CameraConfig":
        """A recorded camera; None (a checkpoint or dataset from before cameras were recorded) = `LEGACY_CAMERA`."""
        if d is None:
            return LEGACY_CAMERA
        unknown = set(d) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise ValueError(f"camera settings: unknown field(s) {sorted(unknown)}")
        return cls(**d)

    @property
    def view_radius(self) -> float:
        """Metres from the centre to a corner: what must be drawn."""
        return self.size / self.pixels_per_meter / 2 * np.sqrt(2) + abs(self.look_ahead) + 6.0


# What every dataset and checkpoint used before the camera was recorded with them (ego-centred, no route line).
LEGACY_CAMERA = CameraConfig(look_ahead=0.0, route=False)


def _to_px(xy_ego: np.ndarray, cfg: CameraConfig, scale: int) -> np.ndarray:
    """Ego-frame metres -> pixel (col, row) at `scale` x resolution. The image centre is the ego's box centre
    (moved `look_ahead` m forward)."""
    c = cfg.size * scale / 2
    k = cfg.pixels_per_meter * scale
    x = xy_ego[..., 0] - geo.REAR_AXLE_TO_CENTER - cfg.look_ahead
    return np.stack([c - xy_ego[..., 1] * k, c - x * k], -1)


def render_camera(layers: dict, boxes: list[tuple], ego_size: tuple[float, float], cfg: CameraConfig = CameraConfig()) -> np.ndarray:
    """Draw one frame.

    `layers`: ego-frame "drivable_polygons", "intersection_polygons", "lane_polygons" (lists of (K, 2) arrays)
    and optionally "route" (the route ahead, a list with one (K, 2) polyline);
    `boxes`: (x, y, heading, length, width, is_vehicle) of other objects in the ego frame (box centres);
    `ego_size`: (length, width). Returns (size, size, 3) uint8.
    """
    s = cfg.supersample
    img = Image.new("RGB", (cfg.size * s, cfg.size * s), OFFROAD)
    draw = ImageDraw.Draw(img)
    for poly in layers.get("drivable_polygons", []):
        if len(poly) >= 3:
            draw.polygon([tuple(p) for p in _to_px(poly, cfg, s)], fill=ROAD)
    for poly in layers.get("intersection_polygons", []):
        if len(poly) >= 3:
            draw.polygon([tuple(p) for p in _to_px(poly, cfg, s)], fill=JUNCTION)
    for poly in layers.get("lane_polygons", []):
        if len(poly) >= 4:
            n = len(poly) // 2
            for border in (poly[:n], poly[n:]):
                draw.line([tuple(p) for p in _to_px(border, cfg, s)], fill=MARKING, width=1)
    if cfg.route:
        for line in layers.get("route", []):
            if len(line) >= 2:
                draw.line([tuple(p) for p in _to_px(line, cfg, s)], fill=ROUTE, width=2 * s)  # 2 px: survives the downscale
    for x, y, h, length, width, is_vehicle in boxes:
        corners = geo.box_corners(x, y, h, length, width)
        draw.polygon([tuple(p) for p in _to_px(corners, cfg, s)], fill=VEHICLE if is_vehicle else OBSTACLE)
    ego = geo.box_corners(geo.REAR_AXLE_TO_CENTER, 0.0, 0.0, *ego_size)
    draw.polygon([tuple(p) for p in _to_px(ego, cfg, s)], fill=EGO)
    if s > 1:
        img = img.resize((cfg.size, cfg.size), Image.BILINEAR)
    return np.asarray(img).copy()


def render_env_frame(world) -> np.ndarray:
    """highway-env's own pygame rendering of a World (debugging / videos), headless.

    Needs `SDL_VIDEODRIVER=offscreen` (the `dummy` driver gives black frames); the families set
    `offscreen_rendering=True`. Returns (H, W, 3) uint8 at the env's screen size (600x150 highway, 600x600 junctions).
    """
    import os

    os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
    env = world.env
    env.render_mode = "rgb_array"
    env.config["offscreen_rendering"] = True
    return np.asarray(env.render())
