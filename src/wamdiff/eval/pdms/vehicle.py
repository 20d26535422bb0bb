"""Ego vehicle geometry and the state-array layout shared by the tracker, the bicycle model and the scorer.

NAVSIM v1.1 simulates a Chrysler Pacifica (nuPlan `get_pacifica_parameters`): width 2.297 m, rear axle to
front bumper 4.049 m, rear axle to rear bumper 1.127 m, wheel base 3.089 m, so the box centre sits
1.461 m ahead of the rear axle. Our scenes carry their own ego box (`Scene.ego_length`, `ego_width`; 5 x 2 m
in the highway-env world); the rear-axle-to-centre offset and the wheel base come from `scene.meta`
(`rear_axle_to_center`, `wheel_base`) when the world recorded them, else NAVSIM's 1.461 m and 3.089 m (the
world's `driving.geometry.REAR_AXLE_TO_CENTER` uses the same 1.461 m). `PACIFICA` stays available for
NAVSIM-exact runs (`PDMSConfig(use_pacifica=True)`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# State array columns (NAVSIM `StateIndex`): one row per simulated time step.
X, Y, HEADING, VX, VY, AX, AY, STEER, STEER_RATE, YAW_RATE, YAW_ACC = range(11)
STATE_SIZE = 11


@dataclass(frozen=True)
class VehicleParams:
    width: float
    front_length: float  # rear axle -> front bumper [m]
    rear_length: float  # rear axle -> rear bumper [m]
    wheel_base: float

    @property
    def length(self) -> float:
        return self.front_length + self.rear_length

    @property
    def half_length(self) -> float:
        return self.length / 2.0

    @property
    def half_width(self) -> float:
        return self.width / 2.0

    @property
    def rear_axle_to_center(self) -> float:
        return (self.front_length - self.rear_length) / 2.0

    @classmethod
    def from_box(cls, length: float, width: float, rear_axle_to_center: float | None = None,
                 wheel_base: float | None = None) -> "VehicleParams":
        """A vehicle of the given box; missing axle geometry takes the Pacifica's values (offset 1.461, wheel base 3.089)."""
        if length <= 0 or width <= 0:
            raise ValueError(f"vehicle box must be positive, got length={length}, width={width}")
        offset = PACIFICA.rear_axle_to_center if rear_axle_to_center is None else float(rear_axle_to_center)
        wb = PACIFICA.wheel_base if wheel_base is None else float(wheel_base)
        if not 0 <= offset < length / 2:
            raise ValueError(f"rear axle to centre {offset} m does not fit a {length} m box")
        return cls(width=float(width), front_length=float(length / 2 + offset), rear_length=float(length / 2 - offset),
                   wheel_base=float(wb))


PACIFICA = VehicleParams(width=2.297, front_length=4.049, rear_length=1.127, wheel_base=3.089)


def scene_vehicle(scene, use_pacifica: bool = False) -> VehicleParams:
    """The ego vehicle of a scene (its own box), or NAVSIM's Pacifica when `use_pacifica`."""
    if use_pacifica:
        return PACIFICA
    meta = scene.meta or {}
    return VehicleParams.from_box(scene.ego_length, scene.ego_width, meta.get("rear_axle_to_center"), meta.get("wheel_base"))


def box_corners(x, y, heading, half_length, half_width, center_offset=0.0) -> np.ndarray:
    """Corners (..., 4, 2) in NAVSIM order front-left, rear-left, rear-right, front-right.

    (x, y) is the reference point; the box centre lies `center_offset` ahead of it along `heading`
    (rear axle -> centre for the ego, 0 for agents whose (x, y) is already the centre).
    """
    x, y, heading = np.asarray(x, float), np.asarray(y, float), np.asarray(heading, float)
    c, s = np.cos(heading), np.sin(heading)
    cx, cy = x + center_offset * c, y + center_offset * s
    hl, hw = np.asarray(half_length, float), np.asarray(half_width, float)
    lon = np.array([1.0, -1.0, -1.0, 1.0])
    lat = np.array([1.0, 1.0, -1.0, -1.0])
    dl = hl[..., None] * lon if hl.ndim else hl * lon
    dw = hw[..., None] * lat if hw.ndim else hw * lat
    px = cx[..., None] + c[..., None] * dl - s[..., None] * dw
    py = cy[..., None] + s[..., None] * dl + c[..., None] * dw
    return np.stack([px, py], axis=-1)


def states_to_corners(states: np.ndarray, vehicle: VehicleParams) -> np.ndarray:
    """(..., 11) ego states (rear axle) -> (..., 4, 2) box corners."""
    return box_corners(states[..., X], states[..., Y], states[..., HEADING], vehicle.half_length, vehicle.half_width,
                       vehicle.rear_axle_to_center)


def states_to_centers(states: np.ndarray, vehicle: VehicleParams) -> np.ndarray:
    h = states[..., HEADING]
    off = vehicle.rear_axle_to_center
    return np.stack([states[..., X] + off * np.cos(h), states[..., Y] + off * np.sin(h)], axis=-1)
