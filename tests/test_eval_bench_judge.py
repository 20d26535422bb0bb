"""The speed bench's scene judge (`eval.bench_judge`): answer texts scored by PDMS and comfort on their samples' scenes
give what `wamdiff eval pdms` (`eval.run.evaluate_open`) gives for the same plans on the same scenes; a text that
does not parse scores 0; samples without scenes get no judge (or a one-line error when one is required)."""

from __future__ import annotations

import csv
import json
import statistics

import numpy as np
import pytest

from wamdiff.driving.trajectory import format_trajectory
from wamdiff.eval.bench_judge import judge_for_data
from wamdiff.eval.data import load_scenes
from wamdiff.eval.planners import constant_velocity_xy
from wamdiff.eval.run import OpenLoopSettings, evaluate_open
from wamdiff.eval.specs import PlannerSpec
from wamdiff.eval.synthetic import AgentSpec, straight_road_scene

FMT = "text2"


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    """Three test scenes in a dataset's layout (`scenes/<name>.npz|png`, `test.json` with ids = scene names): a free
    road, a slower car ahead (constant velocity runs into it), and an expert who brakes hard (uncomfortable)."""
    root = tmp_path_factory.mktemp("data")
    scenes = [straight_road_scene(speed=10.0, scene_id="road_0", family="road"),
              straight_road_scene(speed=8.0, agents=[AgentSpec(x=20.0, y=0.0, vx=2.0)], scene_id="road_1", family="road"),
              straight_road_scene(speed=12.0, future_speed=3.0, scene_id="lane_0", family="lane", lanes=3, ego_lane=1)]
    recs = []
    for s in scenes:
        s.save(root / "scenes" / s.scene_id)
        recs.append({"id": s.scene_id, "image": f"scenes/{s.scene_id}.png", "conversations": [
            {"from": "human", "value": "<image>\nplan"}, {"from": "gpt", "value": format_trajectory(s.future[:, :2], FMT)}]})
    (root / "test.json").write_text(json.dumps(recs))
    return root


def _per_scene(dataset, tmp_path) -> dict:
    """{planner: {scene id: (PDMS 0-1, C)}} from `evaluate_open`'s per-scene PDMS CSVs (cv and expert planners)."""
    scenes, _ = load_scenes(dataset / "scenes")
    evaluate_open({"cv": PlannerSpec.parse("cv"), "expert": PlannerSpec.parse("expert")}, scenes, tmp_path,
                  OpenLoopSettings())
    out = {}
    for name in ("cv", "expert"):
        with open(tmp_path / f"pdms_{name}.csv") as fh:
            out[name] = {r["scene_id"]: (float(r["pdms"]), float(r["c"])) for r in csv.DictReader(fh)}
    return out


def test_the_judge_gives_the_pdms_and_comfort_that_eval_gives_for_the_same_plans(dataset, tmp_path):
    want = _per_scene(dataset, tmp_path)
    ids = [r["id"] for r in json.loads((dataset / "test.json").read_text())]
    scenes = {s.scene_id: s for s in load_scenes(dataset / "scenes")[0]}
    texts = {"cv": [format_trajectory(constant_velocity_xy(scenes[i]), FMT) for i in ids],
             "expert": [format_trajectory(scenes[i].future[:, :2], FMT) for i in ids]}
    judge = judge_for_data(dataset / "test.json", 3, FMT)
    for name in ("cv", "expert"):
        got = judge(texts[name])
        assert got["pdms"] == pytest.approx(100 * statistics.fmean(want[name][i][0] for i in ids))
        assert got["comfort"] == pytest.approx(statistics.fmean(want[name][i][1] for i in ids))
    # the scenes tell the plans apart: otherwise equal means would prove nothing
    assert want["cv"]["road_1"][0] < want["cv"]["road_0"][0]  # constant velocity runs into the slower car
    assert want["cv"]["lane_0"][0] != want["expert"]["lane_0"][0]  # the braking expert makes less progress
    # text i is scored on scene i; a text that does not parse is a failed plan: PDMS 0 and comfort 0, counted
    mixed = judge([texts["cv"][0], "no trajectory here", texts["expert"][2]])
    assert mixed["pdms"] == pytest.approx(100 * (want["cv"][ids[0]][0] + want["expert"][ids[2]][0]) / 3)
    assert mixed["comfort"] == pytest.approx((want["cv"][ids[0]][1] + want["expert"][ids[2]][1]) / 3)
    assert judge(texts["cv"][:1])["pdms"] == pytest.approx(100 * want["cv"][ids[0]][0])  # a prefix of the prompts


def test_each_scene_and_text_is_scored_once(dataset, monkeypatch):
    judge = judge_for_data(dataset / "test.json", 3, FMT)
    calls = []
    score = judge.evaluator.score

    def counted(scenes, plans, name=""):
        calls.append(len(plans))
        return score(scenes, plans, name)

    monkeypatch.setattr(judge.evaluator, "score", counted)
    a = [format_trajectory(np.stack([np.arange(1, 9) * 5.0, np.zeros(8)], 1), FMT)] * 3
    first = judge(a)
    assert judge(a) == first and calls == [3]  # AR's answers again: nothing new to score
    judge([a[0], "x", a[2]])
    assert calls == [3, 1]
    with pytest.raises(ValueError, match="4 answers but only 3 scenes"):
        judge(a + a[:1])


def test_samples_without_scenes_get_no_judge_or_a_one_line_error(dataset, tmp_path):
    recs = json.loads((dataset / "test.json").read_text())
    recs[1]["id"] = "gone"  # no scenes/gone.npz
    data = tmp_path / "test.json"
    data.write_text(json.dumps(recs).replace('"scenes/', f'"{dataset}/scenes/'))
    assert judge_for_data(data, 3, FMT) is None
    assert judge_for_data(data, 1, FMT) is not None  # the first sample's scene is there
    with pytest.raises(ValueError, match=r"test\.json: sample 'gone'.*gone\.npz"):
        judge_for_data(data, 3, FMT, required=True)
