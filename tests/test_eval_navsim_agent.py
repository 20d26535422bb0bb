"""The NAVSIM agent's conversions on arrays (NAVSIM itself is not installed): AgentInput fields -> the prompt's
inputs, waypoints -> NAVSIM poses with headings; and the agent class against a stand-in of NAVSIM's interface."""

from __future__ import annotations

import math
import sys
import types
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from wamdiff.eval.navsim_agent import command_name, plan_input, square_image, trajectory_poses

ROOT = Path(__file__).resolve().parents[1]


def _agent_input(command=(0, 0, 1, 0), velocity=(8.0, 0.5), acceleration=(0.25, -0.125), image=None):
    """NAVSIM's AgentInput layout: per history frame an EgoStatus and a Cameras; the last frame is the current one."""
    past = SimpleNamespace(ego_velocity=np.zeros(2, np.float32), ego_acceleration=np.zeros(2, np.float32),
                           driving_command=np.array([1, 0, 0, 0]), ego_pose=np.zeros(3))
    now = SimpleNamespace(ego_velocity=np.array(velocity, np.float32), ego_acceleration=np.array(acceleration, np.float32),
                          driving_command=np.array(command), ego_pose=np.zeros(3))
    if image is None:
        image = np.zeros((90, 160, 3), np.uint8)
    cams = SimpleNamespace(cam_f0=SimpleNamespace(image=image))
    return SimpleNamespace(ego_statuses=[past, past, past, now], cameras=[SimpleNamespace(cam_f0=None)] * 3 + [cams],
                           lidars=[None] * 4)


@pytest.mark.parametrize("command, word", [((1, 0, 0, 0), "left"), ((0, 1, 0, 0), "straight"), ((0, 0, 1, 0), "right"),
                                           ((0, 0, 0, 1), "unknown"), ((0, 0, 0, 0), "unknown"), (2, "right")])
def test_navsim_driving_command_to_the_prompt_word(command, word):
    assert command_name(command) == word


def test_a_malformed_driving_command_is_named():
    with pytest.raises(ValueError, match="driving_command"):
        command_name([1, 0, 0])
    with pytest.raises(ValueError, match="driving_command"):
        command_name(7)


def test_agent_input_current_frame_becomes_the_plan_input():
    image = np.full((100, 200, 3), 255, np.uint8)
    image[:, 50:150] = 40  # the centre square is dark, what lies left and right of it bright
    got = plan_input(_agent_input(image=image), 64)
    assert got.command == "right" and got.velocity == (8.0, 0.5) and got.acceleration == (0.25, -0.125)
    assert got.image.shape == (64, 64, 3) and got.image.dtype == np.uint8 and (got.image == 40).all()
    hist = got.ego_history  # what the prompt reads: vx, vy, ax, ay of the last row
    assert hist[-1, 3:7].tolist() == [8.0, 0.5, 0.25, -0.125]


def test_float_images_in_0_1_are_scaled_and_a_missing_camera_is_named():
    assert (square_image(np.full((8, 8, 3), 0.5, np.float32), 4) == 127).all()
    bare = _agent_input()
    bare.cameras[-1].cam_f0 = SimpleNamespace(image=None)
    with pytest.raises(ValueError, match="cam_f0"):
        plan_input(bare, 64)


def test_waypoints_become_poses_with_headings_in_the_local_frame():
    t = 0.5 * np.arange(1, 9)
    straight = trajectory_poses(np.column_stack([3 * t, 4 * t]))
    assert straight.shape == (8, 3) and straight.dtype == np.float32
    np.testing.assert_allclose(straight[:, 2], math.atan2(4, 3), rtol=1e-6)
    # a quarter circle of radius 10 m to the left: the heading at each point is the chord's direction from the last
    ang = np.linspace(np.pi / 16, np.pi / 2, 8)
    arc = np.column_stack([10 * np.sin(ang), 10 * (1 - np.cos(ang))])
    prev = np.vstack([[0, 0], arc[:-1]])
    want = np.arctan2(arc[:, 1] - prev[:, 1], arc[:, 0] - prev[:, 0])
    np.testing.assert_allclose(trajectory_poses(arc)[:, 2], want, rtol=1e-5)
    assert trajectory_poses(arc)[-1, 2] > 1.3  # nearly pi/2 at the end of the turn
    with pytest.raises(ValueError, match="waypoints"):
        trajectory_poses(np.zeros((6, 2)))


@pytest.fixture
def fake_navsim(monkeypatch):
    """NAVSIM's AbstractAgent / SensorConfig / Trajectory, reduced to what the agent touches."""

    class AbstractAgent:
        def __init__(self, requires_scene=False):
            self.requires_scene = requires_scene

    @dataclass
    class SensorConfig:
        cam_f0: object
        cam_l0: object
        cam_l1: object
        cam_l2: object
        cam_r0: object
        cam_r1: object
        cam_r2: object
        cam_b0: object
        lidar_pc: object

    @dataclass
    class Trajectory:
        poses: np.ndarray

        def __post_init__(self):
            assert self.poses.shape == (8, 3)

    mods = {"navsim": types.ModuleType("navsim"), "navsim.agents": types.ModuleType("navsim.agents"),
            "navsim.agents.abstract_agent": types.ModuleType("navsim.agents.abstract_agent"),
            "navsim.common": types.ModuleType("navsim.common"),
            "navsim.common.dataclasses": types.ModuleType("navsim.common.dataclasses")}
    mods["navsim.agents.abstract_agent"].AbstractAgent = AbstractAgent
    mods["navsim.common.dataclasses"].SensorConfig = SensorConfig
    mods["navsim.common.dataclasses"].Trajectory = Trajectory
    for name, mod in mods.items():
        monkeypatch.setitem(sys.modules, name, mod)
    from wamdiff.eval import navsim_agent

    monkeypatch.delitem(navsim_agent.__dict__, "WamdiffAgent", raising=False)
    return navsim_agent


def test_the_agent_plans_through_a_planner_spec(fake_navsim):
    agent = fake_navsim.WamdiffAgent(planner="cv", image_size=32)
    assert agent.name() == "wamdiff" and agent.get_sensor_config().cam_f0 is True
    assert agent.get_sensor_config().lidar_pc is False
    traj = agent.compute_trajectory(_agent_input(velocity=(6.0, 2.0)))
    t = 0.5 * np.arange(1, 9)
    np.testing.assert_allclose(traj.poses[:, :2], np.column_stack([6 * t, 2 * t]), rtol=1e-6)
    np.testing.assert_allclose(traj.poses[:, 2], math.atan2(2, 6), rtol=1e-6)


def test_the_agent_decodes_a_shipped_checkpoint_in_process(fake_navsim):
    agent = fake_navsim.WamdiffAgent(planner=f"model:{ROOT / 'checkpoints' / 'distill_block'}")
    traj = agent.compute_trajectory(_agent_input(command=(0, 1, 0, 0), velocity=(10.0, 0.0)))
    assert agent.image_size == agent._planner.camera.size  # the model's own camera size
    assert traj.poses.shape == (8, 3) and np.isfinite(traj.poses).all()
