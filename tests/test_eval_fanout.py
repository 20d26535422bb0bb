"""Evaluation fanned out (`eval.fanout`): PDMS and the closed loop give the same rows on the process pool, on Ray
and in this process."""

from __future__ import annotations

from dataclasses import replace

import pytest

from wamdiff.driving.dataset import generate_dataset
from wamdiff.eval.closedloop import route_set
from wamdiff.eval.data import load_scenes
from wamdiff.eval.pdms import PDMSConfig
from wamdiff.eval.run import OpenLoopSettings, evaluate_closed, evaluate_open
from wamdiff.eval.specs import parse_specs
from wamdiff.executors import ExecutorConfig

INLINE, POOL, RAY = ExecutorConfig("process", 1), ExecutorConfig("process", 2), ExecutorConfig("ray", 2)


@pytest.fixture(scope="module")
def scenes(tmp_path_factory):
    out = tmp_path_factory.mktemp("fanout") / "ds"
    generate_dataset(out, ["highway", "intersection"], "val", n=3, workers=2, progress=False)
    return load_scenes(out)[0]


def _open(scenes, out, executor, cache=True):
    cfg = PDMSConfig(reference_cache=str(out / "reference_cache") if cache else None)
    evaluate_open(parse_specs(["cv", "reference", "expert"]), scenes, out,
                  OpenLoopSettings(pdms=cfg, batch=2, executor=executor))  # batch 2: several jobs per stage
    return {p.name: p.read_bytes() for p in sorted(out.glob("*.csv"))}


def test_pdms_rows_are_the_same_on_every_executor(scenes, tmp_path, local_ray):
    inline = _open(scenes, tmp_path / "inline", INLINE)
    assert len(inline) == 6  # pdms + openloop for each planner
    assert _open(scenes, tmp_path / "pool", POOL) == inline
    assert _open(scenes, tmp_path / "ray", RAY) == inline
    assert _open(scenes, tmp_path / "ray_nocache", RAY, cache=False) == inline
    # the workers' reference plans were cached here: the same cache files as computed inline
    names = sorted(p.name for p in (tmp_path / "inline" / "reference_cache").iterdir())
    assert names and names == sorted(p.name for p in (tmp_path / "ray" / "reference_cache").iterdir())


def _closed(out, executor):
    picks = {r.name: r for r in route_set("dev")}
    routes = [replace(picks[n], timeout_s=t) for n, t in (("highway_000", 4.0), ("roundabout_000", 6.0),
                                                          ("intersection_000", 5.0))]
    evaluate_closed(parse_specs(["cv"]), routes, out, record_frames=1, executor=executor)
    import csv

    with open(out / "closedloop_cv.csv") as f:
        rows = list(csv.DictReader(f))
    for r in rows:
        r.pop("wall_s")
    return rows, sorted(p.name for p in (out / "strips").iterdir())


def test_closed_loop_rows_are_the_same_on_every_executor(tmp_path, local_ray):
    inline = _closed(tmp_path / "inline", INLINE)
    assert [r["route"] for r in inline[0]] == ["highway_000", "roundabout_000", "intersection_000"] and inline[1]
    assert _closed(tmp_path / "pool", POOL) == inline
    assert _closed(tmp_path / "ray", RAY) == inline
