"""The robustness map (`eval.robustness_map`): grid checks, per-cell values and paired differences against an
independent computation from the per-scene CSVs, resuming without re-evaluating, and never shrinking."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest

from wamdiff.eval import robustness_map as rm
from wamdiff.eval.specs import parse_specs
from wamdiff.eval.synthetic import random_scenes


def _scenes_for(cell, folder):
    # each cell its own few synthetic scenes (the real command simulates them with the cell's world settings)
    seed = int(cell.density * 10) + 100 * int(cell.speed_scale * 10)
    return random_scenes(4, seed=seed), []


def _column(path, field):
    with open(path) as fh:
        return {r["scene_id"]: float(r[field]) for r in csv.DictReader(fh) if r.get("valid", "True") == "True"}


@pytest.mark.parametrize("bad, msg", [({"density": [0.5, -1]}, "map.density"), ({"speed_scale": "fast"}, "map.speed_scale"),
                                      ({"phase": [0, 0]}, "map.phase"), ({"per_family": 0}, "map.per_family"),
                                      ({"grid": 1}, "unknown field"), ({"families": ["moon"]}, "map.families")])
def test_bad_grid_names_the_field(bad, msg):
    with pytest.raises(ValueError, match=msg):
        rm.MapGrid.from_dict(bad)


def test_default_grid_spans_wider_than_training():
    g = rm.MapGrid()
    assert min(g.density) < 1.0 and max(g.density) > 1.3  # training: density 1.0-1.3
    assert min(g.speed_scale) < 1.0 and max(g.speed_scale) > 1.5  # training: 1.0-1.25, the main student's last stage 1.5
    assert len(g.cells()) == len(g.density) * len(g.speed_scale) * len(g.phase)


def test_map_cells_match_a_hand_computation_and_resume(tmp_path, monkeypatch):
    specs = parse_specs(["expert", "cv"])
    grid = rm.MapGrid.from_dict({"density": [0.5, 2.0], "speed_scale": [1.0], "phase": [0.0]})
    out = tmp_path / "map"
    summary = rm.run_map(specs, grid, out, ref="expert", scenes_for=_scenes_for, say=lambda *_: None)
    assert len(summary["rows"]) == 2 * 2 * 3  # cells x planners x metrics
    cell = out / "cells" / "d2_s1_p0"
    cv, ex = _column(cell / "pdms_cv.csv", "pdms"), _column(cell / "pdms_expert.csv", "pdms")
    diffs = np.array([cv[k] - ex[k] for k in cv if k in ex])
    half = 1.959964 * diffs.std(ddof=1) / math.sqrt(len(diffs))
    row = next(r for r in summary["rows"] if r["cell"] == "d2_s1_p0" and r["planner"] == "cv" and r["metric"] == "PDMS")
    assert row["mean"] == pytest.approx(100 * np.mean(list(cv.values())))
    assert row["delta"] == pytest.approx(100 * diffs.mean())
    assert (row["low"], row["high"]) == pytest.approx((100 * (diffs.mean() - half), 100 * (diffs.mean() + half)))
    l2 = _column(cell / "openloop_cv.csv", "l2_4.0s")
    dens, speeds, m = rm.heat_grid(summary["rows"], "cv", "L2@4s", 0.0)
    assert dens == [0.5, 2.0] and speeds == [1.0] and m[1, 0] == pytest.approx(np.mean(list(l2.values())))
    assert (out / "heatmaps" / "delta_PDMS_cv.png").stat().st_size > 0 and (out / "map.md").exists()
    assert len(json.loads((out / "map.json").read_text())["rows"]) == 12

    calls = []
    monkeypatch.setattr("wamdiff.eval.run.evaluate_open", lambda *a, **k: calls.append(a) or {})
    again = rm.run_map(specs, grid, out, ref="expert", scenes_for=_scenes_for, say=lambda *_: None)
    assert not calls and again["rows"] == summary["rows"]  # every cell done: nothing evaluated again
    # a smaller run (one planner, one cell) keeps what the folder holds: the map never shrinks
    small = rm.MapGrid.from_dict({"density": [0.5], "speed_scale": [1.0], "phase": [0.0]})
    kept = rm.run_map({"expert": specs["expert"]}, small, out, ref="expert", scenes_for=_scenes_for, say=lambda *_: None)
    assert not calls and len(kept["rows"]) == 12

    # a cell made by an older map version (other scenes) is refused, not mixed with new ones
    record = json.loads((cell / "cell.json").read_text())
    (cell / "cell.json").write_text(json.dumps({**record, "version": "wamdiff-map/1"}))
    with pytest.raises(ValueError, match="d2_s1_p0/cell.json: made by wamdiff-map/1"):
        rm.run_map(specs, grid, out, ref="expert", scenes_for=_scenes_for, say=lambda *_: None)
    assert not calls


def test_map_cli_bad_grid_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "wamdiff.cli", "eval", "map", "-p", "cv", "--density", "0.5,x",
                        "--out", str(tmp_path / "m")], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--density" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "m").exists()


def test_pipeline_map_section_resolves_in_every_config_that_has_one(tmp_path):
    from wamdiff.orchestration.pipeline import Pipeline

    root = Path(__file__).resolve().parents[1]
    for config in ("default.yaml", "small.yaml"):  # small.yaml inherits default's map
        specs, ref, grid = rm.pipeline_map_settings(Pipeline.load(root / "configs" / config))
        assert ref == "AR VLA" and specs[ref].kind == "model" and len(grid.cells()) == 9
        assert max(grid.density) > 1.3 and max(grid.speed_scale) > 1.25  # past training's traffic
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"base: {root / 'configs' / 'default.yaml'}\nmap: {{ref: nobody}}\n")
    with pytest.raises(ValueError, match=r"map.ref: 'nobody'"):
        rm.pipeline_map_settings(Pipeline.load(bad))
