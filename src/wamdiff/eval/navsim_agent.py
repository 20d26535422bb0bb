"""A NAVSIM agent that plans with a wamdiff model, so NAVSIM's own tools score it on real logs.

`WamdiffAgent` has NAVSIM's agent interface (`navsim.agents.abstract_agent.AbstractAgent`):
`compute_trajectory(AgentInput) -> Trajectory`, 8 poses at 0.5 s (x, y, heading) in NAVSIM's local frame (the ego's
rear axle at the current frame, x forward, y left: the frame wamdiff's waypoints are in). The prompt's inputs come
from the AgentInput's current frame: the driving command (one-hot [left, straight, right, unknown]), the ego
velocity and acceleration, and the front camera (`cam_f0`) image, resized to the model's camera. It plans in
process (`planner="model:DIR,..."`, any `wamdiff eval` model spec) or through a planner server
(`planner="http://HOST:PORT"`, `wamdiff serve`). A plan that fails is replaced by constant velocity, so NAVSIM
always gets a trajectory.

NAVSIM is not on the package index: it is imported only when the agent class is first used, so the conversions
below (`plan_input`, `trajectory_poses`) run and are tested without it. A NAVSIM user scores a model with:

    python $NAVSIM_DEVKIT_ROOT/navsim/planning/script/run_pdm_score.py train_test_split=navtest \\
        agent=wamdiff_agent experiment_name=wamdiff

with `wamdiff_agent.yaml` (from `wamdiff.eval.navsim_agent.AGENT_YAML`) in NAVSIM's agent config folder.
"""

from __future__ import annotations

import numpy as np

from wamdiff.driving.scene import COMMANDS
from wamdiff.driving.trajectory import headings_from_xy
from wamdiff.eval.wire import PlanInput

NAVSIM_COMMANDS = ("left", "straight", "right", "unknown")  # the order of NAVSIM's one-hot driving_command
NUM_POSES, INTERVAL_S = 8, 0.5
CAMERA = "cam_f0"
AGENT_YAML = """_target_: wamdiff.eval.navsim_agent.WamdiffAgent
_convert_: all
planner: model:/path/to/checkpoint   # or http://127.0.0.1:8000 (wamdiff serve)
image_size: null                    # null: the model's own camera size
"""
assert set(NAVSIM_COMMANDS) == set(COMMANDS)


def command_name(driving_command) -> str:
    """NAVSIM's one-hot (or index) driving command -> wamdiff's command word; all zeros -> unknown."""
    c = np.asarray(driving_command).reshape(-1)
    if c.size == 1:
        i = int(c[0])
    elif c.size == len(NAVSIM_COMMANDS):
        i = int(np.argmax(c)) if c.any() else NAVSIM_COMMANDS.index("unknown")
    else:
        raise ValueError(f"driving_command: expected a one-hot of {len(NAVSIM_COMMANDS)} or an index, got shape {c.shape}")
    if not 0 <= i < len(NAVSIM_COMMANDS):
        raise ValueError(f"driving_command: index {i} outside 0..{len(NAVSIM_COMMANDS) - 1}")
    return NAVSIM_COMMANDS[i]


def square_image(image, size: int) -> np.ndarray:
    """A camera image (H, W, 3) -> (size, size, 3) uint8: the centre square, resized (the model's camera is square)."""
    from PIL import Image

    a = np.asarray(image)
    if a.ndim != 3 or a.shape[2] < 3:
        raise ValueError(f"camera image: expected (H, W, 3), got shape {a.shape}")
    a = a[..., :3]
    if a.dtype != np.uint8:
        a = np.clip(a * (255.0 if a.max() <= 1.0 else 1.0), 0, 255).astype(np.uint8)
    h, w = a.shape[:2]
    s = min(h, w)
    top, left = (h - s) // 2, (w - s) // 2
    return np.asarray(Image.fromarray(a[top: top + s, left: left + s]).resize((size, size), Image.BILINEAR))


def plan_input(agent_input, image_size: int) -> PlanInput:
    """What the planner sees of a NAVSIM AgentInput: its current frame's (the last) command, velocity,
    acceleration and front camera."""
    status = agent_input.ego_statuses[-1]
    camera = getattr(agent_input.cameras[-1], CAMERA)
    if camera is None or getattr(camera, "image", None) is None:
        raise ValueError(f"AgentInput: no {CAMERA} image in the current frame (the agent's sensor config loads it)")
    vx, vy = (float(v) for v in np.asarray(status.ego_velocity, float).reshape(-1)[:2])
    ax, ay = (float(v) for v in np.asarray(status.ego_acceleration, float).reshape(-1)[:2])
    return PlanInput(image=square_image(camera.image, image_size), command=command_name(status.driving_command),
                     velocity=(vx, vy), acceleration=(ax, ay), scene_id="navsim")


def trajectory_poses(xy) -> np.ndarray:
    """wamdiff's 8 waypoints (x, y; ego frame at t0, 0.5 s apart) -> NAVSIM's (8, 3) poses (x, y, heading)."""
    xy = np.asarray(xy, np.float64)[:, :2]
    if xy.shape != (NUM_POSES, 2) or not np.isfinite(xy).all():
        raise ValueError(f"waypoints: expected {NUM_POSES} finite (x, y), got shape {xy.shape}")
    return np.column_stack([xy, headings_from_xy(xy)]).astype(np.float32)


def constant_velocity_poses(plan: PlanInput) -> np.ndarray:
    """The fallback: the current velocity held for 4 s."""
    t = INTERVAL_S * np.arange(1, NUM_POSES + 1)[:, None]
    return trajectory_poses(t * np.asarray(plan.velocity, float)[None, :])


def make_agent_class():
    """NAVSIM's AbstractAgent subclass (imports navsim: call only where it is installed)."""
    try:
        from navsim.agents.abstract_agent import AbstractAgent
        from navsim.common.dataclasses import SensorConfig, Trajectory
    except ImportError as err:
        raise ImportError("WamdiffAgent needs NAVSIM (github.com/autonomousvision/navsim, installed from its "
                          f"repository; it is not on the package index): {err}") from None

    class WamdiffAgent(AbstractAgent):
        """A wamdiff model as a NAVSIM agent (see `wamdiff.eval.navsim_agent`)."""

        def __init__(self, planner: str, image_size: int | None = None, requires_scene: bool = False):
            super().__init__(requires_scene=requires_scene)
            self.planner_spec, self.image_size = planner, image_size
            self._planner = None

        def name(self) -> str:
            return "wamdiff"

        def get_sensor_config(self):
            names = ("cam_f0", "cam_l0", "cam_l1", "cam_l2", "cam_r0", "cam_r1", "cam_r2", "cam_b0", "lidar_pc")
            return SensorConfig(**{n: n == CAMERA for n in names})

        def initialize(self) -> None:
            from wamdiff.eval.planners import make_planner

            self._planner = make_planner(self.planner_spec)
            if hasattr(self._planner, "prepare"):
                self._planner.prepare()
            if self.image_size is None:
                self.image_size = int(self._planner.camera.size)

        def compute_trajectory(self, agent_input):
            if self._planner is None:
                self.initialize()
            inp = plan_input(agent_input, self.image_size)
            plan = self._planner.plan([inp])[0]
            poses = trajectory_poses(plan.xy) if plan.ok and plan.xy is not None else constant_velocity_poses(inp)
            return Trajectory(poses)

    return WamdiffAgent


def __getattr__(name: str):  # `_target_: wamdiff.eval.navsim_agent.WamdiffAgent` (hydra) imports NAVSIM only here
    if name == "WamdiffAgent":
        cls = make_agent_class()
        globals()[name] = cls
        return cls
    raise AttributeError(name)
