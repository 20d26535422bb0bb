"""Which stages a pipeline runs (the stage graph) and the lanes that run them side by side."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pytest

from wamdiff.orchestration.schedule import run_lanes, stage_needs, stages_to_run

ROOT = Path(__file__).resolve().parents[1]


def _cfg():
    return {"train": [
        {"name": "ar_sft", "recipe": "r"},
        {"name": "agg_r0", "aggregate": {"planner": "ar_sft", "round": 0}},
        {"name": "ar_vla", "recipe": "r", "init": "ar_sft", "agg": 0.5, "agg_rounds": [0]},
        {"name": "agg_r6", "aggregate": {"planner": "ar_vla,mode=ar", "round": 6}},
        {"name": "block32", "recipe": "r", "init": "ar_vla", "agg": 0.5, "agg_rounds": [6]},
        {"name": "teacher", "recipe": "r"},
        {"name": "student", "recipe": "r", "init": "block32", "teacher": "teacher"},
        {"name": "student_s1", "recipe": "r", "init": "block32", "teacher": "teacher"},
        {"name": "soup", "average": ["student", "student_s1"]},
        {"name": "unused_arm", "recipe": "r", "init": "ar_sft", "agg": 0.5},  # bare agg: every round before it
    ], "evaluate": {"planners": {"AR": "stage:ar_vla", "B32": "stage:block32,steps=2"}}}


def test_needs_follow_init_teacher_planner_and_rounds():
    cfg = _cfg()
    need = {s["name"]: stage_needs(s, cfg["train"]) for s in cfg["train"]}
    assert need["ar_vla"] == ["ar_sft", "agg_r0"]
    assert need["agg_r6"] == ["ar_vla"]
    assert need["block32"] == ["ar_vla", "agg_r6"]
    assert need["student"] == ["block32", "teacher"]
    assert need["soup"] == ["student", "student_s1"]
    assert need["unused_arm"] == ["ar_sft", "agg_r0", "agg_r6"]


def test_a_given_checkpoint_cuts_what_only_leads_to_it():
    cfg = _cfg()
    names = lambda given: [s["name"] for s in stages_to_run(cfg, given)]  # noqa: E731
    every = [s["name"] for s in cfg["train"]]
    assert names(set()) == every  # nothing given: every stage (the arm is a last stage)
    del cfg["train"][-1]
    assert names({"ar_vla"}) == ["agg_r6", "block32", "teacher", "student", "student_s1", "soup"]  # no AR chain
    cfg["evaluate"]["planners"]["SFT"] = "stage:ar_sft"  # a report row needs it: it runs, its chain does not
    assert names({"ar_vla"}) == ["ar_sft", "agg_r6", "block32", "teacher", "student", "student_s1", "soup"]


def test_the_default_converts_the_given_ar_vla_and_from_scratch_trains_it():
    from wamdiff.orchestration.pipeline import Pipeline

    given = Pipeline.load(ROOT / "configs" / "default.yaml")
    run = [s["name"] for s in stages_to_run(given.cfg, set(given.checkpoints))]
    assert "ar_vla" not in run and "ar_sft" not in run and run[0] == "agg_r6_ar"
    assert given.checkpoint("ar_vla") == Path("checkpoints/ar_vla")
    scratch = Pipeline.load(ROOT / "configs" / "default.yaml", from_scratch=True)
    full = [s["name"] for s in stages_to_run(scratch.cfg, set(scratch.checkpoints))]
    assert full[: full.index("ar_vla") + 1][0] == "ar_sft" and set(run) < set(full)
    assert scratch.checkpoint("ar_vla") == scratch.out / "ckpt" / "ar_vla" / "final"


def _job(tmp: Path, seconds: float, fail: bool = False):
    """A stage process: records its start and end times, sleeps, exits 0 or 1."""
    def command(name):
        code = (f"import time, sys; open({str(tmp / name)!r} + '.start', 'w').write(repr(time.time())); "
                f"time.sleep({seconds}); open({str(tmp / name)!r} + '.end', 'w').write(repr(time.time())); "
                f"sys.exit({1 if fail and name == 'b' else 0})")
        return [sys.executable, "-c", code]
    return command


def _times(tmp, name):
    return float((tmp / f"{name}.start").read_text()), float((tmp / f"{name}.end").read_text())


def test_lanes_run_independent_stages_together_and_dependent_ones_after(tmp_path):
    stages = [{"name": "a"}, {"name": "b", "init": "a"}, {"name": "t"}, {"name": "done_before", "init": "t0"}]
    run_lanes(stages, 2, lambda s: s["name"] == "done_before", _job(tmp_path, 1.0), tmp_path / "logs")
    a, b, t = (_times(tmp_path, n) for n in "abt")
    assert t[0] < a[1] and a[0] < t[1]  # a and t overlapped
    assert b[0] >= a[1]  # b started after a ended
    assert not (tmp_path / "done_before.start").exists()
    assert (tmp_path / "logs" / "a.log").exists()


def test_a_stage_done_before_runs_again_after_a_stage_it_needs_runs_again(tmp_path):
    """Done-ness is decided when the lanes start, before anything re-runs: a finished round driven by a student that
    trains again (and the stage mixing that round in) must wait for it and run again, not be skipped."""
    stages = [{"name": "s"}, {"name": "r7", "aggregate": {"planner": "s,steps=2", "round": 7}},
              {"name": "d", "init": "s", "agg": 0.5, "agg_rounds": [7]}, {"name": "u"}]
    run_lanes(stages, 2, lambda s: s["name"] in ("r7", "d", "u"), _job(tmp_path, 0.3), tmp_path / "logs")
    s_, r7, d = (_times(tmp_path, n) for n in ("s", "r7", "d"))
    assert s_[1] <= r7[0] and r7[1] <= d[0]
    assert not (tmp_path / "u.start").exists()  # needs nothing that ran: still done


def test_a_failed_stage_stops_new_starts_and_names_its_log(tmp_path):
    stages = [{"name": "b"}, {"name": "c", "init": "b"}, {"name": "d"}]
    t0 = time.time()
    with pytest.raises(ValueError, match=r"stage b failed; its output is in .*b\.log"):
        run_lanes(stages, 1, lambda s: False, _job(tmp_path, 0.2, fail=True), tmp_path / "logs")
    assert not (tmp_path / "c.start").exists() and not (tmp_path / "d.start").exists()
    assert time.time() - t0 < 30
