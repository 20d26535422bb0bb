"""The one evaluation entry (`eval.run`): specs parsed once and rejected before planning, failed plans scored as
failures (PDMS 0, failed routes), fallbacks only when opted in and then counted in the tables, and the CLI,
the pipeline stage and a direct call giving the same aggregates on the same scenes and planners."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from wamdiff.eval.pdms import METRICS, PDMSConfig
from wamdiff.eval.pdms.score import COMFORT_PARTS
from wamdiff.eval.planners import ConstantVelocityPlanner, Plan, make_planner, plan_batch, plan_scenes
from wamdiff.eval.run import OpenLoopSettings, evaluate_open
from wamdiff.eval.specs import PlannerSpec
from wamdiff.eval.synthetic import AgentSpec, straight_road_scene

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def tiny_checkpoint(tmp_path_factory):
    """An untrained text-only model: its answers never parse, so every one of its plans fails."""
    from wamdiff.models import build_model, build_tokenizer, save_model

    tok = build_tokenizer()
    path = tmp_path_factory.mktemp("ckpt") / "tiny"
    save_model(build_model("tiny", tok, vision=False, seed=0), tok, path)
    return path


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory):
    """Three hand-built test-split scenes on disk (two families), one with a slower car ahead."""
    root = tmp_path_factory.mktemp("data")
    scenes = [straight_road_scene(speed=10.0, scene_id="road_0", family="road"),
              straight_road_scene(speed=8.0, agents=[AgentSpec(x=30.0, y=0.0, vx=5.0)], scene_id="road_1", family="road"),
              straight_road_scene(speed=12.0, scene_id="lane_0", family="lane", lanes=3, ego_lane=1)]
    for s in scenes:
        s.save(root / "scenes" / s.scene_id)
    return root / "scenes"


# -- specs ----------------------------------------------------------------------------------------------------
def test_a_spec_is_parsed_once_into_typed_settings():
    spec = PlannerSpec.parse("model:ck/pt,mode=block,block=16,threshold=0.8,steps=4,delayed=1,fmt=fixed1,batch=4")
    assert spec.kind == "model" and spec.checkpoint == Path("ck/pt") and spec.fmt == "fixed1" and spec.batch == 4
    d = spec.decode
    assert (d.mode, d.block_size, d.threshold, d.max_steps, d.delayed_cache) == ("block", 16, 0.8, 4, True)
    assert spec.fallback is None  # no fallback unless asked for
    assert PlannerSpec.parse("model:x,fallback=cv").fallback == "cv"
    assert PlannerSpec.parse("model:x").decode.threshold == PlannerSpec.parse("model:y").decode.threshold == 0.9
    typed = PlannerSpec.model("ck", {"mode": "block", "block": 32, "threshold": 0.7, "batch": 8})  # pipeline YAML
    assert typed.decode.block_size == 32 and typed.decode.threshold == 0.7 and typed.batch == 8
    assert PlannerSpec.parse("cv") == PlannerSpec("cv", "cv")


@pytest.mark.parametrize("option, field", [
    ("mode=foo", "mode"), ("block=0", "block"), ("threshold=1.5", "threshold"), ("threshold=0", "threshold"),
    ("threshold=-0.2", "threshold"), ("steps=0", "steps"), ("batch=0", "batch"), ("fmt=bogus", "fmt"),
    ("max_new_tokens=0", "max_new_tokens"), ("zap=1", "zap"), ("fallback=expert", "fallback"), ("block=x", "block"),
    ("delayed=maybe", "delayed"), ("steps", "steps"),
])
def test_bad_model_options_name_the_spec_and_the_field(option, field):
    text = f"model:ck/pt,{option}"
    with pytest.raises(ValueError) as err:
        PlannerSpec.parse(text)
    assert text in str(err.value) and field in str(err.value)


@pytest.mark.parametrize("text", ["nope", "cv:3", "model:", "expert,x=1"])
def test_bad_planner_names_are_rejected(text):
    with pytest.raises(ValueError):
        PlannerSpec.parse(text)


def test_cli_rejects_a_bad_option_with_one_line_and_exit_2(scene_dir, tmp_path):
    out = subprocess.run([sys.executable, "-m", "wamdiff.cli", "eval", "pdms", "-p", "model:checkpoints/ar_vla,mode=foo",
                          "--data", str(scene_dir), "--out", str(tmp_path / "o")],
                         capture_output=True, text=True, timeout=300, cwd=REPO)
    lines = (out.stdout + out.stderr).strip().splitlines()
    assert out.returncode == 2 and len(lines) == 1, out.stdout + out.stderr
    assert "mode" in lines[0] and "model:checkpoints/ar_vla,mode=foo" in lines[0]
    assert not (tmp_path / "o").exists()  # nothing was planned or written


# -- failures are failures ------------------------------------------------------------------------------------
class Raising:
    name = "raises"

    def plan(self, scenes):
        raise RuntimeError("decoder exploded")


def test_guarded_planner_calls_turn_every_run_time_fault_into_a_failed_plan():
    scenes = [straight_road_scene(scene_id=f"s{i}") for i in range(2)]
    assert all(not p.ok and p.xy is None and "exploded" in p.reason for p in plan_batch(Raising(), scenes))

    class Short:
        name = "short"

        def plan(self, scenes):
            return [Plan(np.zeros((8, 2)))]

    class BadShape:
        name = "shape"

        def plan(self, scenes):
            return [Plan(np.zeros((7, 2))), Plan(np.full((8, 2), np.nan))]

    assert all("1 plans for 2 scenes" in p.reason for p in plan_batch(Short(), scenes))
    assert [p.ok for p in plan_batch(BadShape(), scenes)] == [False, False]
    assert all(p.xy is None for p in plan_scenes(Raising(), scenes))  # no fallback by default


def test_a_failed_plan_scores_zero_and_every_term_fails():
    from wamdiff.eval.pdms import PDMSEvaluator

    scene = straight_road_scene(speed=10.0)
    ok, bad = PDMSEvaluator().score([scene, scene], [Plan(scene.future[:, :2].copy()), Plan(None, ok=False, reason="x")])
    assert ok["pdms"] > 0.9 and not ok["plan_failed"]
    assert bad["valid"] and bad["plan_failed"] and bad["reason"] == ""
    assert all(bad[k] == 0.0 for k in (*METRICS, *COMFORT_PARTS, "progress_m"))


def _headline(output: str) -> list[str]:
    """The count columns of the first table's header line (after planner and family)."""
    header = next(line for line in output.splitlines() if line.startswith("planner"))
    cells = [c.strip() for c in header.replace("┃", "|").split("|")]
    return [c for c in cells[2:] if c in ("failed", "fallback")]


def test_every_plan_failing_gives_pdms_zero_and_counts_only_with_opt_in(tiny_checkpoint, scene_dir, tmp_path):
    spec = f"model:{tiny_checkpoint},mode=ar,max_new_tokens=8"
    runner = CliRunner()
    from wamdiff.eval.cli import app

    res = runner.invoke(app, ["pdms", "--data", str(scene_dir), "--out", str(tmp_path / "a"), "-p", spec, "--plots", "0"])
    assert res.exit_code == 0, res.output
    overall = json.loads((tmp_path / "a" / "open_summary.json").read_text())[spec]["pdms"]["overall"]
    assert overall["pdms"] == 0.0 and overall["n_failed"] == 3 and overall["n_fallback"] == 0  # not cv's 0.999
    assert _headline(res.output) == ["failed"]
    res = runner.invoke(app, ["pdms", "--data", str(scene_dir), "--out", str(tmp_path / "b"), "-p", f"{spec},fallback=cv",
                              "--plots", "0"])
    assert res.exit_code == 0, res.output
    overall = json.loads((tmp_path / "b" / "open_summary.json").read_text())[f"{spec},fallback=cv"]["pdms"]["overall"]
    assert overall["n_failed"] == 3 and overall["n_fallback"] == 3 and overall["pdms"] > 0.5
    assert overall["pdms_own_plans"] is None  # none of the scored plans is the planner's own
    assert _headline(res.output) == ["failed", "fallback"]  # opted in: the count is a headline column


def test_every_plan_failing_fails_every_closed_loop_route(tiny_checkpoint, tmp_path):
    from wamdiff.eval.cli import app

    spec = f"model:{tiny_checkpoint},mode=ar,max_new_tokens=8"
    res = CliRunner().invoke(app, ["closedloop", "-p", spec, "--families", "intersection", "--out", str(tmp_path),
                                   "--strips", "0"])
    assert res.exit_code == 0, res.output
    overall = json.loads((tmp_path / "closedloop_summary.json").read_text())["planners"][spec]["overall"]
    assert overall["success_rate"] == 0.0 and overall["n_planner_error"] == overall["n"] == 2
    assert overall["n_failed_plans"] == 2 and overall["n_fallback"] == 0  # each route failed at its first plan


def test_closed_loop_fallback_drives_only_when_opted_in():
    from wamdiff.eval.closedloop import PLANNER_ERROR, Route, run_routes

    route = Route("t_raise", "highway", 7_000_002, timeout_s=3.0)
    (failed,) = run_routes(Raising(), [route])
    assert failed.status == PLANNER_ERROR and not failed.success and failed.n_plans == 1 and "exploded" in failed.error
    (driven,) = run_routes(Raising(), [route], fallback=ConstantVelocityPlanner())
    assert driven.status != PLANNER_ERROR and driven.n_plans > 1
    assert driven.n_fallback == driven.n_failed_plans == driven.n_plans


# -- one front door ---------------------------------------------------------------------------------------------
def _figures(result: dict) -> tuple:
    return result["pdms"]["overall"], result["pdms"]["per_family"], result["openloop"]["overall"]


def test_cli_pipeline_stage_and_direct_call_agree(tiny_checkpoint, scene_dir, tmp_path):
    from wamdiff.eval.cli import app
    from wamdiff.orchestration.eval_stages import per_row, stage_open
    from wamdiff.orchestration.pipeline import Pipeline, run_stage

    specs = ["expert", "cv", f"model:{tiny_checkpoint},mode=ar,max_new_tokens=8,fallback=cv"]
    direct = evaluate_open({s: PlannerSpec.parse(s) for s in specs}, _load(scene_dir), tmp_path / "direct",
                           OpenLoopSettings(pdms=PDMSConfig()))
    res = CliRunner().invoke(app, ["pdms", "--data", str(scene_dir), "--out", str(tmp_path / "cli"), "--plots", "0",
                                   *[a for s in specs for a in ("-p", s)]])
    assert res.exit_code == 0, res.output
    cli = json.loads((tmp_path / "cli" / "open_summary.json").read_text())
    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "scenes").symlink_to(scene_dir)
    names = {"the expert": specs[0], "constant velocity": specs[1], "tiny model": specs[2]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"out": str(run), "data": {"fmt": "text2"},
                                                     "evaluate": {"planners": names}}))
    p = Pipeline.load(tmp_path / "p.yaml")
    stage = per_row(p, run_stage, "eval_open", {}, lambda rows: stage_open(p, rows))  # one row at a time
    for name, spec in names.items():
        assert _figures(direct[spec]) == _figures(cli[spec]) == _figures(stage[name]), name
    assert direct[specs[2]]["n_fallback"] == 3 and direct["cv"]["pdms"]["overall"]["n_failed"] == 0


def test_pipeline_rows_are_evaluated_once_each_and_combined(tiny_checkpoint, scene_dir, tmp_path):
    """A report row is its own stage: a row added later is evaluated alone, the others are reused; a model row
    whose weights file changes is evaluated again; the combined summary holds every row."""
    from wamdiff.eval.run import combine_open
    from wamdiff.orchestration.eval_stages import eval_dir, per_row, stage_open
    from wamdiff.orchestration.pipeline import Pipeline, run_stage

    run = tmp_path / "run"
    (run / "data").mkdir(parents=True)
    (run / "data" / "scenes").symlink_to(scene_dir)
    ckpt = tmp_path / "ckpt"
    import shutil

    shutil.copytree(tiny_checkpoint, ckpt)
    rows = {"constant velocity": "cv", "tiny model": f"model:{ckpt},mode=ar,max_new_tokens=8"}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"out": str(run), "data": {"fmt": "text2"},
                                                     "evaluate": {"planners": rows}}))
    evaluated = []

    def evaluate(p):
        def fn(sub):
            evaluated.extend(sub)
            return stage_open(p, sub)
        return per_row(p, run_stage, "eval_open", {}, fn)

    p = Pipeline.load(tmp_path / "p.yaml")
    first = evaluate(p)
    assert evaluated == ["constant velocity", "tiny model"]
    rows["the expert"] = "expert"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump({"out": str(run), "data": {"fmt": "text2"},
                                                     "evaluate": {"planners": rows}}))
    p = Pipeline.load(tmp_path / "p.yaml")
    again = evaluate(p)
    assert evaluated == ["constant velocity", "tiny model", "the expert"]  # only the new row
    assert _figures(again["tiny model"]) == _figures(first["tiny model"])
    (ckpt / "model.safetensors").touch()  # "retrained"
    evaluate(p)
    assert evaluated[-1] == "tiny model" and len(evaluated) == 4
    combine_open(eval_dir(p), again, _load(scene_dir))
    summary = json.loads((eval_dir(p) / "open_summary.json").read_text())
    assert set(summary) == set(rows) and set(json.loads((eval_dir(p) / "plans.json").read_text())["plans"]) == set(rows)


def test_the_students_decode_setting_reaches_only_the_rows_that_decode_with_it(tmp_path):
    """`evaluate.decode` is part of a row's key only through the row's resolved decoding: changing its step cap
    re-evaluates the student rows, not the AR VLA (which decodes greedily whatever it says) nor the expert."""
    from pathlib import Path

    from wamdiff.orchestration.eval_stages import row_settings
    from wamdiff.orchestration.pipeline import Pipeline

    shipped = Path(__file__).resolve().parents[1] / "checkpoints"
    rows = {"AR": "stage:ar_vla", "student": "stage:distill_block", "capped": "stage:distill_block,steps=4",
            "expert": "expert"}

    def keys(decode):
        (tmp_path / "p.yaml").write_text(yaml.safe_dump({
            "out": str(tmp_path / "run"), "data": {"fmt": "delta"},
            "checkpoints": {"ar_vla": str(shipped / "ar_vla"), "distill_block": str(shipped / "distill_block")},
            "evaluate": {"planners": rows, "decode": decode}}))
        p = Pipeline.load(tmp_path / "p.yaml")
        return {n: row_settings(p, n, s) for n, s in p.planners().items()}

    two = keys({"mode": "block", "block": 17, "steps": 2, "threshold": 0.5, "ordinal": 2})
    four = keys({"mode": "block", "block": 17, "steps": 4, "threshold": 0.5, "ordinal": 2})
    assert two["AR"] == four["AR"] and two["expert"] == four["expert"]
    assert two["student"] != four["student"] and two["student"]["decoding"]["max_steps"] == 2
    assert two["capped"] == four["capped"] and four["capped"] == {**four["student"], "row": "capped",
                                                                   "spec": rows["capped"]}
    assert two["AR"]["decoding"]["mode"] == "ar"


def _load(scene_dir):
    from wamdiff.eval.data import load_scenes

    return load_scenes(scene_dir)[0]


def test_pipeline_specs_are_typed_and_checked_at_load(tmp_path):
    from wamdiff.orchestration.pipeline import Pipeline

    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (ckpt / "config.json").write_text(json.dumps({"diffusion": {"block_size": 32}}))
    ar = tmp_path / "ar"
    ar.mkdir()
    (ar / "config.json").write_text("{}")
    cfg = {"out": str(tmp_path / "run"), "data": {"fmt": "fixed1"}, "checkpoints": {"b32": str(ckpt), "ar_vla": str(ar)},
           "evaluate": {"decode": {"mode": "block", "block": 32, "batch": 16, "steps": 2, "ordinal": 2},
                        "planners": {"B32, <= 4 steps": "stage:b32,steps=4,delayed=1", "AR": "stage:ar_vla", "cv": "cv"}}}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    specs = Pipeline.load(tmp_path / "p.yaml").planners()
    capped = specs["B32, <= 4 steps"]
    assert capped.checkpoint == ckpt and capped.fmt == "fixed1" and capped.batch == 16
    assert capped.decode == replace(PlannerSpec.parse("model:x").decode, mode="block", block_size=32, max_steps=4,
                                    delayed_cache=True, ordinal_window=2)
    assert specs["AR"].decode.mode == "ar"  # decided by the checkpoint (no saved diffusion settings), not its name
    assert specs["AR"].decode == replace(PlannerSpec.parse("model:x").decode, mode="ar")  # greedy: no block settings
    assert specs["AR"].batch == 16
    assert make_planner(specs["cv"]).name == "cv"
    cfg["evaluate"]["planners"]["bad"] = "stage:b32,threshold=2"
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    with pytest.raises(ValueError, match=r"p\.yaml: evaluate\.planners: .*threshold"):
        Pipeline.load(tmp_path / "p.yaml")


def test_two_runs_final_checkpoints_get_their_own_result_files():
    """Both planners of `eval closedloop -p model:runs/a/final -p model:runs/b/final` once wrote closedloop_model_final*:
    the second overwrote the first. The run's folder now names the file, and a true clash is refused up front."""
    from wamdiff.errors import UserError
    from wamdiff.eval.report import planner_files

    files = planner_files(["model:runs/d/ckpt/ar_vla/final,mode=ar", "model:runs/d/ckpt/ar_sft/final,mode=ar", "expert"])
    assert files == {"model:runs/d/ckpt/ar_vla/final,mode=ar": "model_ar_vla_final_mode-ar",
                     "model:runs/d/ckpt/ar_sft/final,mode=ar": "model_ar_sft_final_mode-ar", "expert": "expert"}
    with pytest.raises(UserError, match="same result files"):
        planner_files(["model:one/student,mode=ar", "model:two/student,mode=ar"])


def test_scenes_behind_a_symlinked_folder_are_found(tmp_path):
    """`--data runs/default/data` whose scenes/ is a symlink to shared scenes (the pipeline's other answer formats)
    found no scene: Path.rglob does not enter symlinked folders."""
    from wamdiff.eval.data import load_scenes

    shared = tmp_path / "shared"
    shared.mkdir()
    straight_road_scene(scene_id="a").save(shared / "a.npz")
    (tmp_path / "data").mkdir()
    (tmp_path / "data" / "scenes").symlink_to(shared)
    scenes, problems = load_scenes(tmp_path / "data")
    assert [s.scene_id for s in scenes] == ["a"] and not problems


def test_closed_loop_per_family_keeps_the_first_routes_of_each_family(tmp_path):
    from wamdiff.eval.cli import app

    res = CliRunner().invoke(app, ["closedloop", "-p", "cv", "--routes", "full", "--per-family", "1", "--families",
                                   "highway,merge", "--out", str(tmp_path), "--strips", "0"])
    assert res.exit_code == 0, res.output
    routes = json.loads((tmp_path / "closedloop_summary.json").read_text())["planners"]["cv"]
    assert routes["overall"]["n"] == 2 and {f: routes["per_family"][f]["n"] for f in ("highway", "merge")} == {"highway": 1, "merge": 1}
