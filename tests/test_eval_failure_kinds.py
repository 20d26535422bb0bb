"""Failure kinds per family and planner (`eval.failure_kinds`): counted by hand from closed-loop CSVs, the routes
only one planner completes, and the last replans a route keeps for its failure strip."""

from __future__ import annotations

import csv

import numpy as np
import pytest

from wamdiff.eval.failure_kinds import KINDS, failure_kind, failure_table, markdown, plot_last_replans


def _csv(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["route", "family", "status", "success", "route_completion"])
        w.writeheader()
        for route, fam, status, ok in rows:
            w.writerow({"route": route, "family": fam, "status": status, "success": ok, "route_completion": 50})


def test_kinds_per_family_on_the_common_routes(tmp_path):
    _csv(tmp_path / "closedloop_ar.csv", [("i_0", "intersection", "Completed", True),
                                          ("i_1", "intersection", "Completed", True),
                                          ("h_0", "highway", "Failed - timeout", False),
                                          ("h_1", "highway", "Completed", True)])
    _csv(tmp_path / "closedloop_student.csv", [("i_0", "intersection", "Failed - collision", False),
                                               ("i_1", "intersection", "Failed - agent blocked", False),
                                               ("h_0", "highway", "Completed", True),
                                               ("h_1", "highway", "Completed", False),  # off the drivable area
                                               ("h_2", "highway", "Failed - route deviation", False)])  # not driven by ar
    t = failure_table([tmp_path], ref="ar")
    assert t["n_common_routes"] == 4 and t["dropped_routes"] == {"ar": 0, "student": 1}
    row = {(r["planner"], r["family"]): r for r in t["rows"]}
    assert {k: row["student", "intersection"][k] for k in KINDS if row["student", "intersection"][k]} == \
        {"collision": 1, "stop": 1}
    assert row["student", "highway"]["success"] == 1 and row["student", "highway"]["off drivable"] == 1
    assert row["ar", "all"]["success"] == 3 and row["ar", "all"]["timeout"] == 1 and row["ar", "all"]["n"] == 4
    assert [x["route"] for x in t["vs_ref"]["student"]["lost"]] == ["h_1", "i_0", "i_1"]
    assert [x["route"] for x in t["vs_ref"]["student"]["won"]] == ["h_0"]
    assert "| student | intersection | 2 | 0 | 1 |" in markdown(t)


def test_failure_kind_of_every_status():
    assert failure_kind("Completed", True) == "success"
    assert failure_kind("Failed - agent blocked", False) == "stop"
    assert failure_kind("Failed - planner error", False) == "planner error"
    assert failure_kind("Something new", False) == "error"


def test_no_closed_loop_results_is_a_named_error(tmp_path):
    with pytest.raises(ValueError, match="no closedloop_"):
        failure_table([tmp_path])
    with pytest.raises(ValueError, match="not a folder"):
        failure_table([tmp_path / "missing"])


def test_a_route_keeps_its_last_replans_for_the_strip(tmp_path):
    pytest.importorskip("wamdiff.driving.capture", reason="the world's observe() is not available")
    from wamdiff.eval.closedloop import REPLANS_KEPT, Route, run_route
    from wamdiff.eval.planners import Plan

    class Still:  # plans to stand still: the route ends blocked or timed out, never a success
        name = "still"

        def plan(self, scenes):
            return [Plan(np.zeros((8, 2))) for _ in scenes]

    r = run_route(Still(), Route("highway_000", "highway", 7_000_000, timeout_s=3.0))
    assert not r.success and len(r.last_replans) == REPLANS_KEPT
    times = [t for t, *_ in r.last_replans]
    assert times == sorted(times) and times[-1] == pytest.approx(r.n_plans * 0.5 - 0.5, abs=1e-6)
    *_, image, xy = r.last_replans[-1]
    assert image.ndim == 3 and xy.shape == (41, 2)
    assert plot_last_replans(r, tmp_path / "strip.png").stat().st_size > 0
