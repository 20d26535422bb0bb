"""Which stages a pipeline runs (the stage graph) and the lanes that run them side by side."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from wamdiff.orchestration.schedule import run_lanes, stage_needs, stages_to_run
from wamdiff.orchestration.sections import EvaluateSection

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
    names = lambda given: [s["name"] for s in stages_to_run(cfg, given, EvaluateSection(**cfg["evaluate"]), None)]  # noqa: E731
    every = [s["name"] for s in cfg["train"]]
    assert names(set()) == every  # nothing given: every stage (the arm is a last stage)
    del cfg["train"][-1]
    assert names({"ar_vla"}) == ["agg_r6", "block32", "teacher", "student", "student_s1", "soup"]  # no AR chain
    cfg["evaluate"]["planners"]["SFT"] = "stage:ar_sft"  # a report row needs it: it runs, its chain does not
    assert names({"ar_vla"}) == ["ar_sft", "agg_r6", "block32", "teacher", "student", "student_s1", "soup"]


def test_the_default_converts_the_given_ar_vla_and_from_scratch_trains_it():
    from wamdiff.orchestration.pipeline import Pipeline

    given = Pipeline.load(ROOT / "configs" / "default.yaml")
    run = [s["name"] for s in stages_to_run(given.cfg, set(given.checkpoints), given.evaluate, given.bench)]
    assert "ar_vla" not in run and "ar_sft" not in run and run[0] == "agg_r6_ar"
    assert given.checkpoint("ar_vla") == Path("checkpoints/ar_vla")
    scratch = Pipeline.load(ROOT / "configs" / "default.yaml", from_scratch=True)
    full = [s["name"] for s in stages_to_run(scratch.cfg, set(scratch.checkpoints), scratch.evaluate, scratch.bench)]
    assert full[: full.index("ar_vla") + 1][0] == "ar_sft" and set(run) < set(full)
    assert scratch.checkpoint("ar_vla") == scratch.out / "ckpt" / "ar_vla" / "final"


_STAGE = """
import json, sys, time
from pathlib import Path
tmp, name, partners, fail = Path(sys.argv[1]), sys.argv[2], sys.argv[3].split(",") if sys.argv[3] else [], sys.argv[4] == "1"
ended = sorted(p.stem for p in tmp.glob("*.end"))  # the stages that had finished when this one started
(tmp / (name + ".start")).write_text(json.dumps(ended))
t0 = time.monotonic()
while not all((tmp / (p + ".start")).exists() for p in partners):  # a hang detector only: the partner is started
    if time.monotonic() - t0 > 120:  # by run_lanes at once, or never
        sys.exit(3)
    time.sleep(0.01)
(tmp / (name + ".end")).write_text("")
sys.exit(1 if fail else 0)
"""


def _job(tmp: Path, together: dict[str, str] | None = None, fail: str = ""):
    """A stage process: records which stages had ended when it started (`NAME.start`), waits until the stages
    `together[NAME]` have started too (so it can only finish if they ran at the same time), writes `NAME.end`,
    exits 1 if it is `fail`. Events, not clocks: the result is the same on a loaded machine."""
    def command(name):
        return [sys.executable, "-c", _STAGE, str(tmp), name, (together or {}).get(name, ""), "1" if name == fail else "0"]
    return command


def _ended_before(tmp: Path, name: str) -> list[str]:
    """The stages that had ended when `name` started (it did start)."""
    return json.loads((tmp / f"{name}.start").read_text())


def test_lanes_run_independent_stages_together_and_dependent_ones_after(tmp_path):
    stages = [{"name": "a"}, {"name": "b", "init": "a"}, {"name": "t"}, {"name": "done_before", "init": "t0"}]
    run_lanes(stages, 2, lambda s: s["name"] == "done_before", _job(tmp_path, {"a": "t", "t": "a"}), tmp_path / "logs",
              poll_s=0.05)  # a and t each end only once the other has started: they ran together
    assert _ended_before(tmp_path, "a") == _ended_before(tmp_path, "t") == []
    assert "a" in _ended_before(tmp_path, "b")  # b started after a ended
    assert not (tmp_path / "done_before.start").exists()
    assert (tmp_path / "logs" / "a.log").exists()


def test_one_lane_runs_one_stage_at_a_time(tmp_path):
    stages = [{"name": "a"}, {"name": "t"}, {"name": "u"}]
    run_lanes(stages, 1, lambda s: False, _job(tmp_path), tmp_path / "logs", poll_s=0.05)
    assert [_ended_before(tmp_path, n) for n in ("a", "t", "u")] == [[], ["a"], ["a", "t"]]


def test_a_stage_done_before_runs_again_after_a_stage_it_needs_runs_again(tmp_path):
    """Done-ness is decided when the lanes start, before anything re-runs: a finished round driven by a student that
    trains again (and the stage mixing that round in) must wait for it and run again, not be skipped."""
    stages = [{"name": "s"}, {"name": "r7", "aggregate": {"planner": "s,steps=2", "round": 7}},
              {"name": "d", "init": "s", "agg": 0.5, "agg_rounds": [7]}, {"name": "u"}]
    run_lanes(stages, 2, lambda s: s["name"] in ("r7", "d", "u"), _job(tmp_path), tmp_path / "logs", poll_s=0.05)
    assert _ended_before(tmp_path, "s") == [] and "s" in _ended_before(tmp_path, "r7")
    assert "r7" in _ended_before(tmp_path, "d")
    assert not (tmp_path / "u.start").exists()  # needs nothing that ran: still done


def test_a_failed_stage_stops_new_starts_and_names_its_log(tmp_path):
    stages = [{"name": "b"}, {"name": "c", "init": "b"}, {"name": "d"}]
    with pytest.raises(ValueError, match=r"stage b failed; its output is in .*b\.log"):
        run_lanes(stages, 1, lambda s: False, _job(tmp_path, fail="b"), tmp_path / "logs", poll_s=0.05)
    assert (tmp_path / "b.end").exists()  # it ran to its end (exit 1)
    assert not (tmp_path / "c.start").exists() and not (tmp_path / "d.start").exists()
