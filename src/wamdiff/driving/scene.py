"""The NAVSIM-style scene record: everything a planner sees at t=0 and everything scoring needs later.

Frames: every coordinate is in the ego frame at t=0 (origin at the rear axle, x forward, y left, heading in
radians, counter-clockwise). `ego_pose_world` keeps the way back to world coordinates.

Storage: one compressed `.npz` per scene (no pickle: polygons are stored flat with offsets) plus the camera
image as a PNG beside it, so a person can open it and the WAM-Diff2 JSON can point at it.
"""

from __future__ import annotations

import json
import zipfile
import zlib
from dataclasses import asdict, dataclass, field
from fnmatch import fnmatch
from pathlib import Path

import numpy as np

from wamdiff.atomic import write_atomically

HARD_BRAKING_MS2 = -2.0  # an ego whose acceleration at t0 is below this already brakes hard

COMMANDS = ("left", "straight", "right", "unknown")
HISTORY_STEPS = 4  # ego statuses at 2 Hz: t = -1.5, -1.0, -0.5, 0.0 s
FUTURE_STEPS = 8  # poses at 0.5 s .. 4.0 s
FUTURE_DT = 0.5  # s between future poses
AGENT_HZ = 10
AGENT_STEPS = 51  # 0.0 .. 5.0 s at 10 Hz
# temporaries that Scene.save of versions before `wamdiff.atomic` left when killed; they end in .npz/.png
LEGACY_TEMPORARIES = ("*.tmp.npz", "*.tmp.png")


def is_scene_file(name: str) -> bool:
    """A scene's `.npz`, not a half-written temporary of an older version."""
    return name.endswith(".npz") and not any(fnmatch(name, pattern) for pattern in LEGACY_TEMPORARIES)


@dataclass
class SceneMap:
    """Map geometry near the ego, ego frame. Polygons are (K, 2) float arrays, closed implicitly."""

    lane_polygons: list[np.ndarray] = field(default_factory=list)
    lane_centerlines: list[np.ndarray] = field(default_factory=list)
    drivable_polygons: list[np.ndarray] = field(default_factory=list)
    intersection_polygons: list[np.ndarray] = field(default_factory=list)
    route_centerline: np.ndarray = field(default_factory=lambda: np.zeros((0, 2), np.float32))
    speed_limit: float = 30.0  # m/s, along the route


@dataclass
class Scene:
    scene_id: str
    family: str
    seed: int
    split: str
    command: str  # one of COMMANDS, derived from the route
    image: np.ndarray  # (H, W, 3) uint8 camera view, ego-centred, heading-up
    ego_history: np.ndarray  # (4, 7): x, y, heading, vx, vy, ax, ay; last row is t=0 (x=y=heading=0)
    future: np.ndarray  # (8, 3): expert x, y, heading at 0.5 .. 4.0 s; zeros when unknown (live scenes)
    agent_boxes: np.ndarray  # (A, 51, 5): x, y, heading, length, width at 0.0 .. 5.0 s, 10 Hz
    agent_velocity: np.ndarray  # (A, 51, 2): vx, vy in the ego frame at t=0
    agent_valid: np.ndarray  # (A, 51) bool: the object was observed at that time
    agent_is_vehicle: np.ndarray  # (A,) bool: False = static object (scored 0.5 in NC)
    map: SceneMap
    ego_pose_world: np.ndarray  # (3,): x, y, heading of the ego frame in the world
    ego_length: float = 5.0
    ego_width: float = 2.0
    meta: dict = field(default_factory=dict)  # free-form: lane index, expert drop reasons, versions ...

    @property
    def ego_speed(self) -> float:
        return float(np.hypot(*self.ego_history[-1, 3:5]))

    @property
    def ego_accel(self) -> float:
        """Longitudinal acceleration at t0 (m/s^2; negative: braking)."""
        return float(self.ego_history[-1, 5])

    # -- storage ---------------------------------------------------------------------------------
    def save(self, path: str | Path) -> Path:
        """Write `<path>.png` and `<path>.npz`; returns the npz path. Atomic: a crash leaves no half file."""
        from PIL import Image

        path = Path(path).with_suffix("")
        path.parent.mkdir(parents=True, exist_ok=True)
        arrays = {
            "image": self.image,
            "ego_history": self.ego_history.astype(np.float32),
            "future": self.future.astype(np.float32),
            "agent_boxes": self.agent_boxes.astype(np.float32),
            "agent_velocity": self.agent_velocity.astype(np.float32),
            "agent_valid": self.agent_valid.astype(bool),
            "agent_is_vehicle": self.agent_is_vehicle.astype(bool),
            "ego_pose_world": self.ego_pose_world.astype(np.float64),
            "route_centerline": self.map.route_centerline.astype(np.float32),
        }
        for name in ("lane_polygons", "lane_centerlines", "drivable_polygons", "intersection_polygons"):
            flat, offsets = _pack(getattr(self.map, name))
            arrays[f"{name}__flat"], arrays[f"{name}__offsets"] = flat, offsets
        header = {k: v for k, v in asdict(self).items() if not isinstance(v, (np.ndarray, dict)) or k == "meta"}
        header.pop("map", None)
        header["speed_limit"] = self.map.speed_limit
        arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
        # the .png first: a present .npz is what marks the scene complete (dataset resume relies on it)
        write_atomically(path.with_suffix(".png"), lambda f: Image.fromarray(self.image).save(f, format="PNG"))
        return write_atomically(path.with_suffix(".npz"), lambda f: np.savez_compressed(f, **arrays))

    @classmethod
    def load(cls, path: str | Path) -> "Scene":
        path = Path(path).with_suffix(".npz")
        try:
            with np.load(path, allow_pickle=False) as z:
                return cls._from_arrays(z)
        except (OSError, KeyError, ValueError, TypeError, EOFError, zipfile.BadZipFile, zlib.error) as err:
            # a truncated or corrupt file (BadZipFile, zlib.error) is named like any other unreadable one
            raise ValueError(f"{path}: not a readable wamdiff scene ({type(err).__name__}: {err}); "
                             "regenerate it (`wamdiff data generate` re-simulates it) or remove it") from err

    @classmethod
    def _from_arrays(cls, z) -> "Scene":
        header = json.loads(bytes(z["header"]).decode())
        scene_map = SceneMap(
            **{n: _unpack(z[f"{n}__flat"], z[f"{n}__offsets"]) for n in
               ("lane_polygons", "lane_centerlines", "drivable_polygons", "intersection_polygons")},
            route_centerline=z["route_centerline"],
            speed_limit=float(header.pop("speed_limit")),
        )
        return cls(
            **header,
            image=z["image"],
            ego_history=z["ego_history"],
            future=z["future"],
            agent_boxes=z["agent_boxes"],
            agent_velocity=z["agent_velocity"],
            agent_valid=z["agent_valid"],
            agent_is_vehicle=z["agent_is_vehicle"],
            map=scene_map,
            ego_pose_world=z["ego_pose_world"],
        )


def _pack(polygons: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    lengths = [len(p) for p in polygons]
    flat = np.concatenate([np.asarray(p, np.float32).reshape(-1, 2) for p in polygons]) if polygons else np.zeros((0, 2), np.float32)
    return flat, np.cumsum([0, *lengths]).astype(np.int64)


def _unpack(flat: np.ndarray, offsets: np.ndarray) -> list[np.ndarray]:
    return [flat[a:b] for a, b in zip(offsets[:-1], offsets[1:])]
