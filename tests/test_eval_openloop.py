"""Open-loop metrics, planner interface and the CLI on hand-built scenes."""

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from wamdiff.eval.openloop import aggregate_openloop, openloop_row, relative_change
from wamdiff.eval.planners import ModelPlanner, Plan, make_planner, parse_spec, plan_all, with_fallback
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


def test_fallback_counts_parse_failures_and_keeps_raw_count():
    scenes = [straight_road_scene(speed=8.0, scene_id=f"s{i}") for i in range(3)]
    plans = [Plan(scenes[0].future[:, :2]), Plan(None, text="1,2,3", parse_ok=False, reason="too few numbers"),
             Plan(np.full((8, 2), 1e6))]
    fixed = with_fallback(scenes, plans)
    assert [p.fallback for p in fixed] == ["", "cv", "cv"]
    assert np.allclose(fixed[1].xy[:, 0], 8.0 * 0.5 * np.arange(1, 9))
    agg = aggregate_openloop([openloop_row(s, p) for s, p in zip(scenes, fixed)])["overall"]
    assert agg["n_parse_fail"] == 2 and agg["n_fallback"] == 2 and agg["parse_failure_rate"] == pytest.approx(2 / 3)
    assert agg["parsed_ade"] == pytest.approx(0.0)


def test_relative_change():
    assert relative_change({"ade": 0.9, "n": 3}, {"ade": 1.0, "n": 5}) == {"ade": pytest.approx(-0.1)}


def test_planner_specs(tmp_path):
    (tmp_path / "config.json").write_text("{}")
    p = make_planner(f"model:{tmp_path},mode=ar,threshold=0.8,block=16")
    assert isinstance(p, ModelPlanner) and p.settings.threshold == 0.8 and p.settings.block == 16
    assert not p.decode_config().delayed_cache
    assert make_planner(f"model:{tmp_path},delayed=true").decode_config().delayed_cache
    assert parse_spec("model:/ck/pt,mode=block,threshold=0.9,block=32") == ("model", "/ck/pt", {"mode": "block", "threshold": "0.9", "block": "32"})
    for bad in ("model:", "model:/x,foo=1", "nope", "cv:3", "model:/x,threshold=abc", "model:/no/such/checkpoint",
                f"model:{tmp_path},delayed=maybe"):
        with pytest.raises(ValueError):
            make_planner(bad)
    scene = straight_road_scene(speed=5.0)
    for spec in ("expert", "cv", "reference"):
        plans = plan_all(make_planner(spec), [scene])
        assert plans[0].xy.shape == (8, 2) and plans[0].parse_ok and not plans[0].fallback


def test_cli_pdms_and_openloop_write_results(tmp_path):
    from wamdiff.eval.cli import app

    data = tmp_path / "scenes"
    for i, agents in enumerate([[], [AgentSpec(x=30.0, y=0.0, vx=5.0)]]):
        straight_road_scene(speed=10.0, agents=agents, scene_id=f"syn_{i}").save(data / f"syn_{i}")
    runner = CliRunner()
    res = runner.invoke(app, ["pdms", "--data", str(data), "--out", str(tmp_path / "pdms"), "-p", "expert", "-p", "cv", "--plots", "1", "--epdms"])
    assert res.exit_code == 0, res.output
    agg = json.loads((tmp_path / "pdms" / "pdms_expert.json").read_text())
    assert agg["version"].startswith("wamdiff-pdms-navsim-v1.1") and agg["overall"]["n_valid"] == 2
    assert (tmp_path / "pdms" / "pdms_cv.csv").read_text().count("\n") == 3
    assert (tmp_path / "pdms" / "pdms_subscores.png").exists() and list((tmp_path / "pdms" / "bev").glob("*.png"))
    res = runner.invoke(app, ["openloop", "--data", str(data), "--out", str(tmp_path / "ol"), "-p", "cv", "--reference-planner", "expert"])
    assert res.exit_code == 0, res.output
    ol = json.loads((tmp_path / "ol" / "openloop_cv.json").read_text())
    assert "relative_to_reference" in ol and ol["overall"]["n_valid"] == 2
