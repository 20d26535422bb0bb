"""Closed loop on the real highway-env World: failures are recorded, never raised."""

from dataclasses import replace

import numpy as np
import pytest

from wamdiff.eval.closedloop import PLANNER_ERROR, Route, aggregate_routes, route_set, run_route, run_routes
from wamdiff.eval.planners import ConstantVelocityPlanner, Plan

pytest.importorskip("wamdiff.driving.capture", reason="the world's observe() is not available")


class StopPlanner:
    """Stands still forever: must end as a timeout / blocked failure."""

    name = "stop"

    def plan(self, scenes):
        return [Plan(np.zeros((8, 2)), heading=np.zeros(8)) for _ in scenes]


class RamPlanner:
    """Floors it straight down its lane at 40 m/s, ignoring traffic: must end in a collision."""

    name = "ram"

    def plan(self, scenes):
        return [Plan(np.stack([np.arange(1, 9) * 20.0, np.zeros(8)], 1)) for _ in scenes]


class RaisingPlanner:
    name = "raises"

    def plan(self, scenes):
        raise RuntimeError("decoder exploded")


def test_route_sets_are_fixed():
    dev = route_set("dev")
    assert len(dev) == 10 and dev == route_set("dev")
    assert {r.family for r in dev} == {"highway", "merge", "roundabout", "intersection"}
    assert len(route_set("full")) == 100


def test_standing_still_times_out_and_is_not_a_success():
    res = run_route(StopPlanner(), Route("t_stop", "intersection", 7_000_000, timeout_s=6.0), blocked_s=4.0)
    assert res.status in ("Failed - timeout", "Failed - agent blocked"), res.error
    assert not res.success and res.completion < 10.0
    assert res.n_plans > 0


def test_ramming_planner_crashes_and_is_not_a_success():
    res = run_route(RamPlanner(), Route("t_ram", "highway", 7_000_001, timeout_s=20.0))
    assert res.status == "Failed - collision", (res.status, res.error)
    assert not res.success and res.infractions.get("collision_vehicle") == 1
    assert res.driving_score <= 0.6 * res.completion + 1e-9


def test_raising_planner_never_aborts_and_fails_the_route():
    res = run_route(RaisingPlanner(), Route("t_raise", "highway", 7_000_002, timeout_s=3.0))
    assert res.status == PLANNER_ERROR and not res.success and "decoder exploded" in res.error
    assert res.n_plans == res.n_failed_plans == 1 and res.n_fallback == 0
    agg = aggregate_routes([res])
    assert agg["overall"]["n_planner_error"] == 1 and agg["overall"]["success_rate"] == 0.0
    res = run_route(RaisingPlanner(), Route("t_raise", "highway", 7_000_002, timeout_s=3.0),
                    fallback=ConstantVelocityPlanner())  # opted in: the fallback drives, counted
    assert res.status != PLANNER_ERROR and res.n_plans > 1 and res.n_fallback == res.n_failed_plans == res.n_plans
    assert aggregate_routes([res])["overall"]["n_fallback"] == res.n_plans


def test_world_error_is_recorded_as_failed_route():
    res = run_route(ConstantVelocityPlanner(), Route("t_bad", "no_such_family", 1))
    assert res.status == "Failed - error" and not res.success and res.error


def test_routes_are_reproducible():
    route = Route("t_rep", "roundabout", 7_002_000, timeout_s=4.0)
    a, b = (run_route(ConstantVelocityPlanner(), route) for _ in range(2))
    assert (a.status, a.completion, a.n_plans, a.comfort) == (b.status, b.completion, b.n_plans, b.comfort)


class CountingPlanner:
    """Constant velocity that records the size of every plan() batch."""

    name = "counting"

    def __init__(self):
        self.inner, self.sizes = ConstantVelocityPlanner(), []

    def plan(self, scenes):
        self.sizes.append(len(scenes))
        return self.inner.plan(scenes)


def _short_dev_routes():
    picks = {r.name: r for r in route_set("dev")}
    # different timeouts: routes end at different times, so the lockstep batch shrinks / refills
    return [replace(picks[n], timeout_s=t) for n, t in (("highway_000", 4.0), ("roundabout_000", 6.0),
                                                        ("intersection_000", 8.0))]


def _comparable(res):
    row = res.row()
    row.pop("wall_s")
    return row, len(res.frames)


@pytest.mark.parametrize("batch", [None, 2])
def test_lockstep_equals_sequential_and_batches_plans(batch):
    routes = _short_dev_routes()
    sequential = [run_route(ConstantVelocityPlanner(), r, record_frames=i < 1) for i, r in enumerate(routes)]
    planner, seen = CountingPlanner(), []
    lockstep = run_routes(planner, routes, record_frames=1, batch=batch, progress=lambda: seen.append(1))
    assert [r.route for r in lockstep] == routes and len(seen) == len(routes)
    assert [_comparable(r) for r in lockstep] == [_comparable(r) for r in sequential]
    assert all(r.n_plans > 0 for r in lockstep)
    # one plan() call per lockstep step, serving every route in flight (never more than the cap)
    assert sum(planner.sizes) == sum(r.n_plans for r in lockstep)
    assert max(planner.sizes) == (batch or len(routes)) and len(planner.sizes) < sum(planner.sizes)


def test_lockstep_failures_stay_per_route():
    routes = [Route("t_bad", "no_such_family", 1), *_short_dev_routes()[:2]]
    res = run_routes(RaisingPlanner(), routes)
    assert res[0].status == "Failed - error" and res[0].error
    for r in res[1:]:  # a raising batch fails every route in it, each on its own, never aborting the run
        assert r.status == PLANNER_ERROR and r.n_plans == r.n_failed_plans == 1


def test_lockstep_expert_needs_no_plans():
    class Expert(RaisingPlanner):
        name = "expert"

    res = run_routes(Expert(), _short_dev_routes()[:2])
    assert all(r.n_plans == 0 and r.status != "Failed - error" for r in res), [r.error for r in res]


def test_lockstep_equals_sequential_reference_planner():
    from wamdiff.eval.planners import ReferencePlanner

    routes, planner = _short_dev_routes()[:2], ReferencePlanner()
    sequential = [run_route(planner, r) for r in routes]
    assert [_comparable(r) for r in run_routes(planner, routes)] == [_comparable(r) for r in sequential]


def test_intervals_match_published_values():
    from wamdiff.eval.intervals import mean_ci95, wilson_ci95

    lo, hi = wilson_ci95(0, 10)  # Wilson score interval, z = 1.96 (e.g. Newcombe 1998, table I)
    assert lo == 0.0 and abs(hi - 0.2775) < 5e-4
    lo, hi = wilson_ci95(5, 10)
    assert abs(lo - 0.2366) < 5e-4 and abs(hi - 0.7634) < 5e-4
    lo, hi = mean_ci95([1.0, 2.0, 3.0, 4.0])  # mean 2.5, sd 1.291, se 0.6455
    assert abs((hi - lo) / 2 - 1.959964 * 1.2909944 / 2) < 1e-6


def test_balanced_route_subset():
    from wamdiff.eval.closedloop import route_set

    sub = route_set("full", per_family=10)
    assert len(sub) == 40 and {r.family for r in sub} == {"highway", "merge", "roundabout", "intersection"}
    assert all(sum(r.family == f for r in sub) == 10 for f in {r.family for r in sub})
    full = route_set("full")
    assert all(r in full for r in sub)  # the first 10 of each family of the full set
