"""Open-loop metrics, planner interface and the CLI on hand-built scenes."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from wamdiff.eval.openloop import aggregate_openloop, openloop_row, relative_change
from wamdiff.eval.planners import ConstantVelocityPlanner, ModelPlanner, Plan, make_planner, plan_batch, plan_scenes, with_fallback
from wamdiff.eval.synthetic import AgentSpec, straight_road_scene


def test_l2_known_offsets():
    scene = straight_road_scene(speed=10.0)
    xy = scene.future[:, :2] + np.array([0.0, 1.0])  # 1 m to the left everywhere
    row = openloop_row(scene, Plan(xy), "shifted")
    assert row["ade"] == pytest.approx(1.0) and row["fde"] == pytest.approx(1.0)
    assert row["l2_2.0s"] == pytest.approx(1.0) and row["l2avg_3s"] == pytest.approx(1.0)
    xy = scene.future[:, :2].copy()
    xy[:, 0] += np.arange(1, 9)  # error grows 1 m per waypoint
    row = openloop_row(scene, Plan(xy))
    assert row["l2_0.5s"] == pytest.approx(1.0) and row["l2_4.0s"] == pytest.approx(8.0)
    assert row["l2avg_1s"] == pytest.approx(1.5) and row["ade"] == pytest.approx(4.5)


def test_plan_collision_rate():
    clean = straight_road_scene(speed=10.0)
    blocked = straight_road_scene(speed=10.0, agents=[AgentSpec(x=25.0, y=0.0)], scene_id="b")
    straight = np.stack([np.arange(1, 9) * 5.0, np.zeros(8)], 1)
    rows = [openloop_row(clean, Plan(straight)), openloop_row(blocked, Plan(straight))]
    assert rows[0]["collision"] == 0.0 and rows[1]["collision"] == 1.0
    assert aggregate_openloop(rows)["overall"]["collision_rate"] == 0.5


def test_hard_braking_scenes_are_summarised_apart():
    """`per_condition`: the scenes whose ego brakes harder than HARD_BRAKING_MS2 at t0, and the rest, each with the
    overall summary's metrics (here: plans 2 m / 4 m off in the two braking scenes, 1 m off in the steady one)."""
    from wamdiff.driving.scene import HARD_BRAKING_MS2

    scenes = [straight_road_scene(speed=10.0, scene_id=f"s{i}") for i in range(3)]
    for s, a in zip(scenes, (HARD_BRAKING_MS2 - 1.0, HARD_BRAKING_MS2 - 0.5, HARD_BRAKING_MS2 + 0.5)):
        s.ego_history[-1, 5] = a
    rows = [openloop_row(s, Plan(s.future[:, :2] + np.array([0.0, off]))) for s, off in zip(scenes, (2.0, 4.0, 1.0))]
    assert [r["ego_accel"] for r in rows] == pytest.approx([HARD_BRAKING_MS2 - 1.0, HARD_BRAKING_MS2 - 0.5,
                                                            HARD_BRAKING_MS2 + 0.5])
    agg = aggregate_openloop(rows)
    braking, other = agg["per_condition"]["hard_braking"], agg["per_condition"]["other"]
    assert braking["n"] == 2 and braking["l2_4.0s"] == pytest.approx(3.0)
    assert other["n"] == 1 and other["l2_4.0s"] == pytest.approx(1.0)
    assert agg["overall"]["l2_4.0s"] == pytest.approx(7.0 / 3)


class Fixed:
    name = "fixed"

    def __init__(self, plans):
        self.plans = plans

    def plan(self, scenes):
        return self.plans


def test_failed_plans_are_counted_and_not_measured():
    scenes = [straight_road_scene(speed=8.0, future_speed=6.0, scene_id=f"s{i}") for i in range(3)]  # the expert brakes
    plans = plan_batch(Fixed([Plan(scenes[0].future[:, :2]), Plan(None, text="1,2,3", ok=False, reason="too few numbers"),
                              Plan(np.full((8, 2), 1e6))]), scenes)
    assert [p.ok for p in plans] == [True, False, False] and plans[2].xy is None and "beyond" in plans[2].reason
    agg = aggregate_openloop([openloop_row(s, p) for s, p in zip(scenes, plans)])["overall"]
    assert agg["n_failed"] == 2 and agg["n_fallback"] == 0 and agg["failure_rate"] == pytest.approx(2 / 3)
    assert agg["ade"] == pytest.approx(0.0) and agg["collision_rate"] == 0.0  # over the one plan that exists
    fixed = with_fallback(scenes, plans, ConstantVelocityPlanner())  # opted in
    assert [p.fallback for p in fixed] == ["", "cv", "cv"] and [p.ok for p in fixed] == [True, False, False]
    assert np.allclose(fixed[1].xy[:, 0], 8.0 * 0.5 * np.arange(1, 9))
    agg = aggregate_openloop([openloop_row(s, p) for s, p in zip(scenes, fixed)])["overall"]
    assert agg["n_failed"] == 2 and agg["n_fallback"] == 2 and agg["failure_rate"] == pytest.approx(2 / 3)
    assert agg["own_ade"] == pytest.approx(0.0) and agg["ade"] > 0.0


def test_relative_change():
    assert relative_change({"ade": 0.9, "n": 3}, {"ade": 1.0, "n": 5}) == {"ade": pytest.approx(-0.1)}


def test_planner_factory(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    p = make_planner(f"model:{tmp_path},mode=ar,threshold=0.8,block=16")
    assert isinstance(p, ModelPlanner) and p.spec.decode.threshold == 0.8 and p.spec.decode.block_size == 16
    assert not p.spec.decode.delayed_cache
    assert make_planner(f"model:{tmp_path},delayed=true").spec.decode.delayed_cache
    for bad in ("model:", "model:/x,foo=1", "nope", "cv:3", "model:/x,threshold=abc", "model:/no/such/checkpoint",
                f"model:{tmp_path},delayed=maybe"):
        with pytest.raises(ValueError):
            make_planner(bad)
    scene = straight_road_scene(speed=5.0)
    for spec in ("expert", "cv", "reference"):
        plans = plan_scenes(make_planner(spec), [scene])
        assert plans[0].xy.shape == (8, 2) and plans[0].ok and not plans[0].fallback


def test_cli_pdms_and_openloop_write_results(tmp_path):
    from wamdiff.eval.cli import app

    data = tmp_path / "scenes"
    for i, agents in enumerate([[], [AgentSpec(x=30.0, y=0.0, vx=5.0)]]):
        straight_road_scene(speed=10.0, agents=agents, scene_id=f"syn_{i}").save(data / f"syn_{i}")
    runner = CliRunner()
    res = runner.invoke(app, ["pdms", "--data", str(data), "--out", str(tmp_path / "pdms"), "-p", "expert", "-p", "cv",
                              "--plots", "1", "--epdms"])
    assert res.exit_code == 0, res.output
    agg = json.loads((tmp_path / "pdms" / "pdms_expert.json").read_text())
    assert agg["version"].startswith("wamdiff-pdms-navsim-v1.1") and agg["overall"]["n_valid"] == 2
    assert (tmp_path / "pdms" / "pdms_cv.csv").read_text().count("\n") == 3
    assert (tmp_path / "pdms" / "pdms_subscores.png").exists() and list((tmp_path / "pdms" / "bev").glob("*.png"))
    res = runner.invoke(app, ["openloop", "--data", str(data), "--out", str(tmp_path / "ol"), "-p", "cv", "--reference-planner", "expert"])
    assert res.exit_code == 0, res.output
    ol = json.loads((tmp_path / "ol" / "openloop_cv.json").read_text())
    assert "relative_to_reference" in ol and ol["overall"]["n_valid"] == 2


def test_consistency_finds_the_tens_digit_jump():
    """A plan whose 5th x reads +069.7 instead of +059.7: one jump, at waypoint 5, tens digit off."""
    from types import SimpleNamespace

    from wamdiff.eval.consistency import consistency_report, first_differing_place

    t = np.arange(1, 9) * 0.5
    truth = np.stack([24.0 * t, np.zeros(8)], 1)
    bad = truth.copy()
    bad[4, 0] += 10.0
    scene = SimpleNamespace(future=np.concatenate([truth, np.zeros((8, 1))], 1))
    rep = consistency_report([SimpleNamespace(xy=truth), SimpleNamespace(xy=bad)], [scene, scene], "fixed1")
    assert rep["n_plans"] == 2 and rep["jump_share"] == 0.5
    assert rep["jump_at_waypoint"] == {5: 1} and rep["digit_off_at_jump"] == {"tens": 1}
    assert first_differing_place(59.7, 69.7) == "tens" and first_differing_place(59.7, 59.8) == "tenths"
    assert first_differing_place(-1.2, 1.2) == "sign" and first_differing_place(3.0, 3.0) is None
