"""PDMS on hand-built scenes with known answers (no world code involved)."""

import numpy as np
import pytest

from wamdiff.eval.pdms import PDMSConfig, PDMSEvaluator, aggregate
from wamdiff.eval.pdms.comfort import BOUNDS, comfort_checks
from wamdiff.eval.pdms.tracker import headings_from_xy, interpolate_plan, simulate
from wamdiff.eval.pdms.vehicle import PACIFICA, VehicleParams
from wamdiff.eval.planners import ConstantVelocityPlanner, ExpertPlanner, Plan, plan_scenes
from wamdiff.eval.synthetic import AgentSpec, plan_from_speed_profile, straight_road_scene


def score_one(scene, xy, heading=None, config=PDMSConfig()):
    ev = PDMSEvaluator(config)
    row = ev.score([scene], [Plan(np.asarray(xy, float), heading=heading)], "test")[0]
    assert row["valid"], row["reason"]
    return row


def test_expert_on_clean_scene_scores_about_one():
    # ego already at the speed limit on an empty two-lane road: nobody can make much more progress
    scene = straight_road_scene(speed=15.0, speed_limit=15.0)
    row = score_one(scene, scene.future[:, :2], scene.future[:, 2])
    assert row["nc"] == 1 and row["dac"] == 1 and row["ttc"] == 1 and row["c"] == 1
    assert row["pdms"] > 0.98


def test_driving_into_stopped_lead_car_is_at_fault_collision():
    scene = straight_road_scene(speed=10.0, agents=[AgentSpec(x=25.0, y=0.0)])  # stopped car 25 m ahead
    row = score_one(scene, plan_from_speed_profile(np.full(8, 10.0)))
    assert row["nc"] == 0.0 and row["pdms"] == 0.0
    assert row["collision_time_s"] is not None and 1.0 < row["collision_time_s"] < 2.5


def test_static_object_collision_scores_half():
    scene = straight_road_scene(speed=10.0, agents=[AgentSpec(x=25.0, y=0.0, length=1.0, width=1.0, is_vehicle=False)])
    row = score_one(scene, plan_from_speed_profile(np.full(8, 10.0)))
    assert row["nc"] == 0.5


def test_rear_end_by_faster_car_is_not_at_fault():
    # a car behind at 20 m/s drives into the ego (10 m/s): rear collision, ego not at fault - even while the
    # ego straddles two lanes (lane centres at -2 and +2 m), where a lateral collision would be its fault
    scene = straight_road_scene(speed=10.0, agents=[AgentSpec(x=-12.0, y=0.0, vx=20.0)], lane_shift=-2.0)
    row = score_one(scene, plan_from_speed_profile(np.full(8, 10.0)))
    assert row["nc"] == 1.0
    # the same car coming in from the side (not from behind) while the ego straddles lanes: at fault
    side = straight_road_scene(speed=10.0, agents=[AgentSpec(x=12.0, y=-6.0, vx=0.0, vy=3.0, length=4.0)], lane_shift=-2.0)
    assert score_one(side, plan_from_speed_profile(np.full(8, 10.0)))["nc"] == 0.0
    # mirrored: the ego (10 m/s) runs into a slower car ahead (2 m/s) -> active front collision, at fault
    scene = straight_road_scene(speed=10.0, agents=[AgentSpec(x=12.0, y=0.0, vx=2.0)])
    assert score_one(scene, plan_from_speed_profile(np.full(8, 10.0)))["nc"] == 0.0


def test_leaving_the_road_fails_dac():
    scene = straight_road_scene(speed=10.0, lanes=1)
    y = np.linspace(0.5, 8.0, 8)  # drifts 8 m left of a single 4 m lane
    row = score_one(scene, plan_from_speed_profile(np.full(8, 10.0), y))
    assert row["dac"] == 0.0 and row["pdms"] == 0.0


def test_lane_change_stays_on_the_road():
    scene = straight_road_scene(speed=10.0, lanes=2)
    y = np.array([0.2, 0.8, 1.6, 2.5, 3.3, 3.8, 4.0, 4.0])
    row = score_one(scene, plan_from_speed_profile(np.full(8, 10.0), y))
    assert row["dac"] == 1.0 and row["nc"] == 1.0


def test_zigzag_plan_is_uncomfortable():
    # +-2 m every 0.5 s at 6 m/s; NAVSIM's tracker smooths a lot, so a milder zig-zag can pass
    scene = straight_road_scene(speed=6.0, lanes=3, ego_lane=1)
    y = 2.0 * np.array([1.0, -1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0])
    row = score_one(scene, plan_from_speed_profile(np.full(8, 6.0), y))
    assert row["c"] == 0.0
    assert row["c_yaw_rate"] == 0.0 or row["c_yaw_acc"] == 0.0


def test_harsh_braking_is_uncomfortable_smooth_is_comfortable():
    scene = straight_road_scene(speed=15.0, speed_limit=15.0)
    harsh = score_one(scene, plan_from_speed_profile([10, 3, 0, 0, 0, 0, 0, 0]))
    smooth = score_one(scene, plan_from_speed_profile(np.full(8, 15.0)))
    assert harsh["c_lon_acc"] == 0.0 and harsh["c"] == 0.0
    assert smooth["c"] == 1.0


def test_ep_is_one_when_reference_makes_little_progress():
    # a stopped car 6 m ahead blocks the lane: the reference (IDM) stays put; a standing plan gets EP = 1
    scene = straight_road_scene(speed=0.0, agents=[AgentSpec(x=10.0, y=0.0)], lanes=1)
    row = score_one(scene, np.zeros((8, 2)), np.zeros(8))
    assert row["ref_progress_m"] < 5.0
    assert row["ep"] == 1.0 and row["nc"] == 1.0


def test_ep_normalised_by_better_reference():
    scene = straight_road_scene(speed=10.0, speed_limit=15.0)
    slow = score_one(scene, plan_from_speed_profile(np.full(8, 5.0)))
    assert 0.2 < slow["ep"] < 0.75 and slow["progress_m"] < slow["ref_progress_m"]


def test_ttc_fails_when_closing_fast_on_lead():
    # lead at 2 m/s, 16 m ahead (front gap ~7 m); ego at 12 m/s brakes late: within 0.9 s projection -> TTC 0
    scene = straight_road_scene(speed=12.0, agents=[AgentSpec(x=16.0, y=0.0, vx=2.0)])
    row = score_one(scene, plan_from_speed_profile([10, 6, 3, 2, 2, 2, 2, 2]))
    assert row["ttc"] == 0.0


def test_stopped_plan_is_not_ttc_penalised_and_invalid_scene_is_counted():
    scene = straight_road_scene(speed=0.0)
    bad = straight_road_scene(speed=5.0, scene_id="broken")
    bad.map.route_centerline = np.zeros((0, 2))
    ev = PDMSEvaluator()
    rows = ev.score([scene, bad], [Plan(np.zeros((8, 2)), heading=np.zeros(8)), Plan(np.zeros((8, 2)))], "t")
    assert rows[0]["valid"] and rows[0]["ttc"] == 1.0
    assert not rows[1]["valid"] and "centreline" in rows[1]["reason"]
    agg = aggregate(rows)
    assert agg["overall"]["n_invalid"] == 1 and agg["overall"]["n_valid"] == 1
    assert agg["version"].startswith("wamdiff-pdms-navsim-v1.1")


def test_epdms_terms():
    scene = straight_road_scene(speed=10.0, lanes=2)
    y = np.array([0.5, 1.5, 2.5, 3.5, 4.0, 4.0, 4.0, 4.0])  # leaves the route lane for > 2 s
    row = score_one(scene, plan_from_speed_profile(np.full(8, 10.0), y), config=PDMSConfig(epdms=True))
    assert row["lk"] == 0.0 and row["ddc"] == 1.0 and row["tlc"] == 1.0
    assert 0 <= row["epdms"] <= 1
    # the v2 options (human filter included) never change the v1.1 PDMS
    assert row["pdms"] == score_one(scene, plan_from_speed_profile(np.full(8, 10.0), y))["pdms"]


@pytest.mark.parametrize("vehicle", [PACIFICA, VehicleParams.from_box(4.5, 1.9)])
def test_tracker_follows_straight_and_curved_plans(vehicle):
    # straight at 10 m/s: exact; circle of radius 30 m at 8 m/s: within 0.3 m everywhere (NAVSIM LQR lag)
    t = np.arange(1, 9) * 0.5
    straight = np.stack([10 * t, 0 * t], -1)
    poses = interpolate_plan(np.concatenate([straight, headings_from_xy(straight)[:, None]], 1)[None])
    init = np.zeros((1, 11))
    init[0, 3] = 10.0
    st = simulate(poses, init, vehicle)
    assert np.abs(st[0, :, :2] - poses[0, :, :2]).max() < 1e-6
    radius, v = 30.0, 8.0
    tt = np.arange(41) * 0.1
    th = v * tt / radius
    circle = np.stack([radius * np.sin(th), radius * (1 - np.cos(th)), th], -1)
    init = np.zeros((1, 11))
    init[0, 3] = v
    init[0, 7] = np.arctan(vehicle.wheel_base / radius)
    init[0, 9] = v / radius
    st = simulate(interpolate_plan(circle[5::5][None]), init, vehicle)
    err = np.hypot(*(st[0, :, :2] - circle[:, :2]).T)
    assert err.max() < 0.3
    assert abs(st[0, -1, 2] - circle[-1, 2]) < 0.05


def test_comfort_bounds_are_navsim():
    assert BOUNDS["lon_acc"] == (-4.05, 2.40) and BOUNDS["yaw_rate"] == (-0.95, 0.95)
    states = np.zeros((1, 41, 11))
    states[0, :, 3] = 10.0
    states[0, :, 0] = 10.0 * np.arange(41) * 0.1
    assert all(v[0] for v in comfort_checks(states).values())


def test_expert_planner_on_scene_without_future_fails_unless_a_fallback_is_given():
    scene = straight_road_scene(speed=10.0)
    scene.future = np.zeros((8, 3))
    (plan,) = plan_scenes(ExpertPlanner(), [scene])
    assert plan.xy is None and not plan.ok and not plan.fallback
    row = PDMSEvaluator().score([scene], [plan], "expert")[0]
    assert row["valid"] and row["plan_failed"] and row["pdms"] == 0.0 and row["nc"] == 0.0
    (plan,) = plan_scenes(ExpertPlanner(), [scene], fallback=ConstantVelocityPlanner())
    assert plan.fallback == "cv" and not plan.ok
    row = PDMSEvaluator().score([scene], [plan], "expert")[0]
    assert row["valid"] and not row["plan_ok"] and not row["plan_failed"] and row["pdms"] > 0.9


def test_reference_is_cached_per_scene_on_disk(tmp_path):
    scene = straight_road_scene(speed=10.0, agents=[AgentSpec(x=40.0, y=0.0, vx=6.0)])
    cfg = PDMSConfig(reference_cache=str(tmp_path))
    first = PDMSEvaluator(cfg).reference_poses(scene)
    assert len(list(tmp_path.glob("synthetic.*.npz"))) == 1
    again = PDMSEvaluator(cfg).reference_poses(scene)  # a fresh evaluator reads the file
    assert np.array_equal(first, again) and first.shape == (41, 3)
    scene.agent_boxes[0, :, 0] += 5.0  # same id, different content: not served from the stale file
    PDMSEvaluator(cfg).reference_poses(scene)
    assert len(list(tmp_path.glob("synthetic.*.npz"))) == 2
