"""`eval paired`: planners against a reference scene by scene, per result folder and pooled, checked against the
differences computed by hand; a scene id shared by two splits stays two scenes; a bad reference or folder is one
line."""

from __future__ import annotations

import json

import pytest

from wamdiff.eval.intervals import mean_ci95, wilson_ci95
from wamdiff.eval.paired import paired_rows

PDMS = {"test": {"ar": [0.9, 0.8, 1.0, 0.7], "student": [0.95, 0.7, 1.0, 0.9]},
        "variant": {"ar": [0.6, 0.9, 0.8], "student": [0.7, 0.95, 0.9]}}


def _folders(tmp_path):
    for split, planners in PDMS.items():
        d = tmp_path / split
        d.mkdir()
        for name, vals in planners.items():
            rows = [f"s{i},True,{v},1.0" for i, v in enumerate(vals)] + ["bad,False,,"]  # an invalid scene: left out
            (d / f"pdms_model_{name}_mode-x.csv").write_text("scene_id,valid,pdms,c\n" + "\n".join(rows) + "\n")
    cl = tmp_path / "routes"
    cl.mkdir()
    for name, ok in (("ar", "TTFT"), ("student", "TTTT")):
        (cl / f"closedloop_model_{name}_mode-x.csv").write_text(
            "route,success,driving_score\n" + "".join(f"r{i},{'True' if c == 'T' else 'False'},{50 + i}\n" for i, c in enumerate(ok)))
    return [tmp_path / "test", tmp_path / "variant", cl]


def _row(rows, split, planner, metric):
    return next(r for r in rows if r["split"] == split and r["planner"].startswith(f"model_{planner}") and r["metric"] == metric)


def test_paired_differences_per_split_and_pooled_match_the_hand_computation(tmp_path):
    rows = paired_rows(_folders(tmp_path), ["model_ar"])
    for split in ("test", "variant"):
        diffs = [100 * (s - a) for a, s in zip(PDMS[split]["ar"], PDMS[split]["student"])]
        r = _row(rows, split, "student", "PDMS")
        assert r["n"] == len(diffs) and r["delta"] == pytest.approx(sum(diffs) / len(diffs))
        assert [r["low"], r["high"]] == pytest.approx(mean_ci95(diffs))
        assert "delta" not in _row(rows, split, "ar", "PDMS")  # the reference has no difference to itself
    every = [100 * (s - a) for sp in PDMS.values() for a, s in zip(sp["ar"], sp["student"])]
    pooled = _row(rows, "pooled", "student", "PDMS")  # s0..s2 exist in both splits: 7 scenes, not 4
    assert pooled["n"] == 7 and pooled["delta"] == pytest.approx(sum(every) / 7)
    success = _row(rows, "routes", "student", "CL success %")
    assert success["mean"] == 100 and success["delta"] == pytest.approx(25.0)
    ar = _row(rows, "routes", "ar", "CL success %")
    assert [ar["mean_low"], ar["mean_high"]] == pytest.approx([100 * x for x in wilson_ci95(3, 4)])


def test_several_references_are_compared_through_their_per_scene_mean(tmp_path):
    rows = paired_rows(_folders(tmp_path)[:1], ["model_ar", "model_student"])
    ar, student = PDMS["test"]["ar"], PDMS["test"]["student"]
    diffs = [100 * (s - (a + s) / 2) for a, s in zip(ar, student)]
    r = _row(rows, "test", "student", "PDMS")
    assert r["delta"] == pytest.approx(sum(diffs) / 4) and [r["low"], r["high"]] == pytest.approx(mean_ci95(diffs))
    assert any(x["planner"].startswith("mean of model_ar") and "delta" not in x for x in rows)


def test_a_reference_that_is_missing_or_ambiguous_is_refused(tmp_path):
    folders = _folders(tmp_path)
    with pytest.raises(ValueError, match="no planner match"):
        paired_rows(folders, ["teacher"])
    with pytest.raises(ValueError, match="2 planners match"):
        paired_rows(folders, ["model_"])
    with pytest.raises(ValueError, match="not a folder"):
        paired_rows([tmp_path / "nowhere"], ["ar"])


def test_the_command_writes_table_files_and_plot_or_one_line(tmp_path):
    from typer.testing import CliRunner

    from wamdiff.cli import app

    folders = [str(f) for f in _folders(tmp_path)]
    ok = CliRunner().invoke(app, ["eval", "paired", *folders, "--ref", "model_ar", "--out", str(tmp_path / "out")])
    assert ok.exit_code == 0, ok.output
    saved = json.loads((tmp_path / "out" / "paired.json").read_text())
    assert _row(saved, "pooled", "student", "PDMS")["n"] == 7
    assert (tmp_path / "out" / "paired.csv").read_text().startswith("split,planner,metric")
    assert (tmp_path / "out" / "paired.png").stat().st_size > 0
    bad = CliRunner().invoke(app, ["eval", "paired", *folders, "--ref", "teacher", "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "no planner match" in " ".join(bad.output.split()) and "Traceback" not in bad.output
