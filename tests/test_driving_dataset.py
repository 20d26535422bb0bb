"""Dataset generation (deterministic, split-disjoint, resumable), prompts, QA."""

import json

import numpy as np
import pytest

from wamdiff.driving.dataset import SPLIT_SEED_BASE, SPLIT_SEED_SPAN, generate_dataset, quantization_report, split_seed
from wamdiff.driving.prompts import answer_text, scene_prompt
from wamdiff.driving.qa import lead_braking, meta_action, score_qa, vehicles_ahead
from wamdiff.driving.scene import Scene, SceneMap
from wamdiff.driving.trajectory import parse_trajectory
from wamdiff.driving.wamdiff2_json import read_samples


def test_splits_never_share_a_seed():
    seeds = {s: {split_seed(s, i) for i in list(range(2000)) + [SPLIT_SEED_SPAN - 1]} for s in SPLIT_SEED_BASE}
    assert not (seeds["train"] & seeds["val"]) and not (seeds["train"] & seeds["test"]) and not (seeds["val"] & seeds["test"])
    with pytest.raises(ValueError):
        split_seed("train", SPLIT_SEED_SPAN)
    with pytest.raises(ValueError):
        split_seed("dev", 0)


def test_generate_is_resumable_and_writes_training_json(tmp_path):
    out = tmp_path / "ds"
    first = generate_dataset(out, ["merge", "roundabout"], "val", n=3, workers=2, progress=False)
    assert first["generated"] == 6
    files = sorted(p.name for p in (out / "scenes").glob("*.npz"))
    again = generate_dataset(out, ["merge", "roundabout"], "val", n=3, workers=2, progress=False)
    assert again["simulated"] == 0  # nothing redone
    assert sorted(p.name for p in (out / "scenes").glob("*.npz")) == files
    assert all(int(f.split("_")[-1][:-4]) >= SPLIT_SEED_BASE["val"] for f in files)

    samples = read_samples(out / "val.json")
    assert len(samples) == 6 and [s.id for s in read_samples(out / "val.jsonl")] == [s.id for s in samples]
    for s in samples:
        assert s.human.count("<image>") == 1 and "The navigation information is: " in s.human
        assert parse_trajectory(s.answer, "text2").ok
        assert all(p.endswith(".png") for p in s.image_paths)
    raw = json.loads((out / "val.json").read_text())
    assert raw[0]["image"][0].startswith("scenes/")  # relative to the JSON file
    manifest = json.loads((out / "manifest.json").read_text())
    fam = manifest["splits"]["val"]["families"]
    assert fam["merge"]["kept"] == 3 and fam["roundabout"]["kept"] == 3
    assert "highway_env" in manifest["versions"]
    qa = read_samples(out / "val_qa.json")
    assert {s.meta["qa_kind"] for s in qa} >= {"vehicles_ahead_lane", "meta_action"}

    # growing the dataset only simulates the missing seeds
    more = generate_dataset(out, ["merge"], "val", n=4, workers=1, progress=False)
    assert more["generated"] == 1
    rep = quantization_report(out)
    assert rep["text2"] < 0.006 and rep["text1"] < 0.05


def _scene(agents_xy, agent_v0, agent_v1, future, lane_4s="0"):
    A = len(agents_xy)
    boxes = np.zeros((A, 51, 5), np.float32)
    vel = np.zeros((A, 51, 2), np.float32)
    for a, (xy, v0, v1) in enumerate(zip(agents_xy, agent_v0, agent_v1)):
        boxes[a, :, :2] = xy
        boxes[a, :, 3:] = (5, 2)
        vel[a, :10, 0] = v0
        vel[a, 10:, 0] = v1
    hist = np.zeros((4, 7), np.float32)
    hist[:, 3] = 10.0
    return Scene("t", "highway", 0, "test", "straight", np.zeros((64, 64, 3), np.uint8), hist, np.asarray(future, np.float32),
                 boxes, vel, np.ones((A, 51), bool), np.ones(A, bool), SceneMap(), np.zeros(3),
                 meta={"ego_lane_index": ["0", "1", "1"], "ego_lane_index_4s": ["0", "1", lane_4s], "ego_lane_id": 1, "ego_road_lanes": 3})


def test_qa_answers_on_a_hand_built_scene():
    t = np.arange(1, 9) * 0.5
    future = np.stack([10.0 * t, np.linspace(0.4, 4.0, 8), np.zeros(8)], -1)
    s = _scene([(10, 0.5), (20, 4.5), (40, 0), (-5, 0)], [8, 9, 9, 9], [5, 9, 9, 9], future)
    assert vehicles_ahead(s, in_lane=True) == 1
    assert vehicles_ahead(s, in_lane=False) == 2
    assert lead_braking(s) == "yes"
    assert meta_action(s) == "change lane left, keep speed"
    s2 = _scene([(25, 0.0)], [9], [9], np.stack([5.0 * t, np.zeros(8), np.zeros(8)], -1), lane_4s="1")
    assert lead_braking(s2) == "no" and meta_action(s2) == "keep lane, decelerate"
    assert score_qa(" Change lane left, keep speed.", "change lane left, keep speed") == 1.0
    assert score_qa("2", "1") == 0.0


def test_prompt_text():
    t = np.arange(1, 9) * 0.5
    s = _scene([], [], [], np.stack([10.0 * t, np.zeros(8), np.zeros(8)], -1))
    p = scene_prompt(s)
    assert p.startswith("Here is a front-view images from a driving vehicle: <image>\nThe navigation information is: straight\n")
    assert "The current velocity is: (10.00,0.00) and current accelerate is: (0.00,0.00)\n" in p
    assert p.endswith("predict the optimal driving action for the next 4 seconds with 8 new waypoints.")
    assert answer_text(s).startswith("5.00,0.00,10.00,0.00")


def test_expert_comfort_pass_rate_counts_only_runs_the_expert_drove():
    from collections import Counter

    from wamdiff.driving.dataset import _comfort_pass

    # 20 attempted: 2 crashed, 3 never driven (route_end), 1 uncomfortable, 14 kept -> 1 of the 15 driven runs
    reasons = Counter({"crash": 2, "route_end": 3, "comfort_jerk": 1})
    assert _comfort_pass(reasons, 20) == pytest.approx(1 - 1 / 15)
    assert _comfort_pass(Counter({"route_end": 4}), 4) == 1.0  # nothing driven: nothing broke a bound
