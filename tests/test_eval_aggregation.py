"""On-policy aggregation: labelling never disturbs the rollout, labels start where the planner left the ego,
off-route states are skipped, rounds are resumable and merge into agg.json."""

import json

import numpy as np

from wamdiff.driving.scene import Scene
from wamdiff.driving.wamdiff2_json import read_samples
from wamdiff.eval.aggregation import AggregationRound, aggregate_round
from wamdiff.eval.closedloop import Route, run_routes
from wamdiff.eval.planners import make_planner
from wamdiff.eval.specs import parse_specs

SETTINGS = AggregationRound(round=0, routes_per_family=1, label_every=2, families=("highway", "intersection"))


def _spec(text="cv"):
    return parse_specs([text])[text]


def test_labelling_does_not_change_the_rollout():
    routes = SETTINGS.routes()
    plain = run_routes(make_planner(_spec()), routes)
    seen = []
    labelled = run_routes(make_planner(_spec()), routes, on_replan=lambda r, w, s: seen.append((r.name, w.time)))
    assert [r.row() | {"wall_s": 0} for r in plain] == [r.row() | {"wall_s": 0} for r in labelled]
    assert len(seen) == sum(r.n_plans for r in plain)  # called once per replan, before it


def test_round_labels_the_visited_states_and_resumes(tmp_path):
    entry = aggregate_round(_spec(), tmp_path, SETTINGS, "delta")
    samples = read_samples(tmp_path / "agg_r0.json")
    assert entry["labelled"] == len(samples) > 0
    assert read_samples(tmp_path / "agg.json") == samples
    fam = entry["families"]
    assert sum(c.get("visited", 0) for c in fam.values()) >= len(samples)
    # a labelled scene starts exactly from the closed-loop state of its tick (the trace row logged at that time)
    results = run_routes(make_planner(_spec()), SETTINGS.routes())
    traces = {r.route.name: np.array([row[:3] for row in r.trace]) for r in results}
    checked = 0
    for s in samples:
        scene = Scene.load(tmp_path / s.meta["scene"])
        route_name, tick = s.id.rsplit("_t", 1)
        row = traces[route_name][np.abs(traces[route_name][:, 0] - int(tick) / 10) < 1e-6]
        assert scene.future[-1, 0] > 0  # the expert's 4 s label
        if len(row):  # t = 0 precedes the first logged tick
            assert np.allclose(row[0, 1:3], scene.ego_pose_world[:2], atol=1e-6)
            checked += 1
    assert checked >= 1
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert manifest["aggregation"]["0"]["labelled"] == len(samples)
    again = aggregate_round(_spec(), tmp_path, SETTINGS, "delta")  # resumable: the finished round is skipped
    assert again == manifest["aggregation"]["0"]


def test_states_off_the_route_are_not_labelled():
    from wamdiff.driving.world import make_world

    world = make_world("intersection", SETTINGS.routes()[1].seed)
    assert world.is_on_route()
    x, y, h = world.ego_pose()
    world.set_ego_state(x - 6.0 * np.sin(h), y + 6.0 * np.cos(h), h, float(world.ego.speed))  # 6 m to its left
    assert not world.is_on_route()


def test_rounds_use_their_own_route_seeds():
    from wamdiff.eval.closedloop import route_set

    eval_seeds = {r.seed for r in route_set("full")}
    r0, r1 = AggregationRound(0, 25).routes(), AggregationRound(1, 25).routes()
    assert not eval_seeds & {r.seed for r in r0} and not {r.seed for r in r0} & {r.seed for r in r1}
    assert all(isinstance(r, Route) for r in r0)


def test_an_ego_drifted_onto_a_road_off_its_route_is_steered_back_to_the_route():
    """Recovery labels: from 4 m left of its lane (on the oncoming lane, a road the route does not take) the
    expert, handed the ego, rejoins the route's lane instead of following the road the ego drifted onto."""
    from wamdiff.driving.world import make_world

    world = make_world("intersection", SETTINGS.routes()[1].seed)
    x, y, h = world.ego_pose()
    world.set_ego_state(x - 4.0 * np.sin(h), y + 4.0 * np.cos(h), h, float(world.ego.speed))
    world.step()
    route_roads = {li[:2] for li in world.plan.lanes}
    assert world.ego.lane_index[:2] not in route_roads and abs(world.route_offset() - 4.0) < 0.1
    world.autopilot()
    world.run(3.0)
    assert not world.ego.crashed
    assert world.ego.lane_index[:2] in route_roads and abs(world.route_offset()) < 2.0


def test_recovery_labelling_is_bounded_by_its_distance():
    import pytest

    with pytest.raises(ValueError, match="recover_m"):
        AggregationRound(0, recover_m=-1.0).routes()


def test_recovery_labels_the_states_a_drifting_planner_reaches(tmp_path):
    """Constant velocity drifts off a merge route's lane: on-route labelling skips those states, `recover_m`
    labels the ones still within reach of the route (and marks them in the scene's meta)."""
    base = AggregationRound(round=0, routes_per_family=2, label_every=2, families=("merge",))
    plain = aggregate_round(_spec(), tmp_path / "plain", base, "delta")["families"]["merge"]
    wide = AggregationRound(round=0, routes_per_family=2, label_every=2, families=("merge",), recover_m=6.0)
    entry = aggregate_round(_spec(), tmp_path / "wide", wide, "delta")
    rec = entry["families"]["merge"]
    assert plain.get("labelled_recovery", 0) == 0 and plain["off_route"] > 0
    assert rec["labelled_recovery"] > 0 and rec.get("off_route", 0) < plain["off_route"]
    assert rec["labelled"] == plain["labelled"] + rec["labelled_recovery"]  # the same rollouts, more labels
    marked = [Scene.load(tmp_path / "wide" / s.meta["scene"]).meta["aggregation"]["recovery"]
              for s in read_samples(tmp_path / "wide" / "agg_r0.json")]
    assert sum(marked) == rec["labelled_recovery"] and entry["recover_m"] == 6.0
