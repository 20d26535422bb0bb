"""The camera image: a top-down view, ego-centred and heading-up, drawn from the road geometry with PIL.

Own drawing instead of highway-env's pygame renderer: it needs no display, never comes out black, and is far
cheaper. Layout: image up = ego forward (+x), image left = ego left (+y); the ego's box centre sits at the
image centre (or `look_ahead` m below it). Default 64x64 at 1.5 px/m: about +-21 m around the ego. Colours: off-road `OFFROAD`, drivable area `ROAD`, lane borders `MARKING`, intersection areas
`JUNCTION`, other vehicles `VEHICLE`, static objects `OBSTACLE`, the ego `EGO` (pure green: tests look for it).
"""

from __future__ import annotations

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


@dataclass(frozen=True)
class CameraConfig:
    size: int = 64  # pixels, square
    pixels_per_meter: float = 1.5
    supersample: int = 2  # draw at 2x then downscale: cheap anti-aliasing keeps thin markings visible
    look_ahead: float = 0.0  # m the image centre lies ahead of the ego's box centre (0 = ego-centred)

    @property
    def view_radius(self) -> float:
        """Metres from the centre to a corner: what must be drawn."""
        return self.size / self.pixels_per_meter / 2 * np.sqrt(2) + abs(self.look_ahead) + 6.0


def _to_px(xy_ego: np.ndarray, cfg: CameraConfig, scale: int) -> np.ndarray:
    """Ego-frame metres -> pixel (col, row) at `scale` x resolution. The image centre is the ego's box centre
    (moved `look_ahead` m forward)."""
    c = cfg.size * scale / 2
    k = cfg.pixels_per_meter * scale
    x = xy_ego[..., 0] - geo.REAR_AXLE_TO_CENTER - cfg.look_ahead
    return np.stack([c - xy_ego[..., 1] * k, c - x * k], -1)


def render_camera(layers: dict, boxes: list[tuple], ego_size: tuple[float, float], cfg: CameraConfig = CameraConfig()) -> np.ndarray:
    """Draw one frame.

    `layers`: ego-frame "drivable_polygons", "intersection_polygons", "lane_polygons" (lists of (K, 2) arrays);
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
