"""`wamdiff pipeline --export`: bf16 copies with provenance, and the pipeline's table only when it describes them."""

import hashlib
import json
import os

import pytest
import yaml

from wamdiff.models import build_model, build_tokenizer, save_model
from wamdiff.orchestration.pipeline import export_checkpoints


def test_export_ships_the_report_table_only_if_written_after_every_exported_stage(tmp_path):
    tok = build_tokenizer()
    ckpt = save_model(build_model("tiny", tok, seed=0), tok, tmp_path / "student")
    out = tmp_path / "run"
    (out / "stages").mkdir(parents=True)
    (out / "report").mkdir()
    stage_file, summary = out / "stages" / "student.json", out / "report" / "summary.csv"
    stage_file.write_text(json.dumps({"steps": 3}))
    summary.write_text("planner,pdms\nstudent,90.0\n")
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({"out": str(out), "data": {"fmt": "delta"}, "checkpoints": {"student": str(ckpt)}}))

    os.utime(summary, (1e9, 2e9))  # the table is newer than the stage: it is the table of these checkpoints
    os.utime(stage_file, (1e9, 1e9))
    dest = export_checkpoints(config, tmp_path / "ship", ["student"])
    stage = json.loads((dest / "PROVENANCE.json").read_text())["stages"]["student"]
    shipped = hashlib.sha256((dest / "student" / "model.safetensors").read_bytes()).hexdigest()
    assert stage.pop("weights_sha256") == {"model.safetensors": shipped} and stage == {"steps": 3}
    assert (dest / "pipeline_summary.csv").read_text() == summary.read_text()
    assert json.loads((dest / "student" / "config.json").read_text())["dtype"] == "bfloat16"

    os.utime(stage_file, (1e9, 3e9))  # the stage was replaced after the report: that table is of other weights
    export_checkpoints(config, dest, ["student"])
    assert not (dest / "pipeline_summary.csv").exists()


def test_an_exported_student_decodes_as_the_pipeline_evaluated_it(tmp_path):
    """A diffusion checkpoint ships the pipeline's `evaluate.decode` (`wamdiff_decode`), so `model:DIR` decodes that
    way; the spec's own options still win, and an AR checkpoint ships none."""
    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.models import to_diffusion

    tok = build_tokenizer()
    student = save_model(to_diffusion(build_model("tiny", tok, seed=0), 32, tokenizer=tok), tok, tmp_path / "student")
    ar = save_model(build_model("tiny", tok, seed=1), tok, tmp_path / "ar")
    out = tmp_path / "run"
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({
        "out": str(out), "data": {"fmt": "delta"}, "checkpoints": {"student": str(student), "ar": str(ar)},
        "evaluate": {"decode": {"mode": "block", "block": 17, "steps": 2, "threshold": 0.5, "ordinal": 2, "batch": 8}}}))
    dest = export_checkpoints(config, tmp_path / "ship", ["student", "ar"])
    assert json.loads((dest / "student" / "config.json").read_text())["wamdiff_decode"] == {
        "block": 17, "steps": 2, "threshold": 0.5, "ordinal": 2}
    assert "wamdiff_decode" not in json.loads((dest / "ar" / "config.json").read_text())
    d = PlannerSpec.parse(f"model:{dest / 'student'}").decode
    assert (d.mode, d.block_size, d.max_steps, d.threshold, d.ordinal_window) == ("block", 17, 2, 0.5, 2)
    assert PlannerSpec.parse(f"model:{dest / 'student'},steps=4,ordinal=0").decode.max_steps == 4
    assert PlannerSpec.parse(f"model:{dest / 'student'},mode=ar").decode.ordinal_window == 0  # AR: none of it
    assert PlannerSpec.parse(f"model:{dest / 'ar'}").decode.mode == "ar"


def test_an_exported_student_answers_questions_in_the_pipelines_free_text_decode(tmp_path):
    """`evaluate.text_decode` ships as `wamdiff_text_decode`: a spec parsed for free text (`wamdiff eval qa`) decodes
    with it over the planning decode, a planning spec without it; the spec's own options still win; an AR checkpoint
    ships none and decodes as AR either way; the model card shows it."""
    from wamdiff.eval.specs import PlannerSpec
    from wamdiff.models import to_diffusion

    tok = build_tokenizer()
    student = save_model(to_diffusion(build_model("tiny", tok, seed=0), 32, tokenizer=tok), tok, tmp_path / "student")
    ar = save_model(build_model("tiny", tok, seed=1), tok, tmp_path / "ar")
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({
        "out": str(tmp_path / "run"), "data": {"fmt": "delta"}, "checkpoints": {"student": str(student), "ar": str(ar)},
        "evaluate": {"decode": {"mode": "block", "block": 17, "steps": 4, "threshold": 0.5, "ordinal": 2, "batch": 8},
                     "text_decode": {"block": 4, "steps": 32, "threshold": 0.9, "batch": 4}}}))
    dest = export_checkpoints(config, tmp_path / "ship", ["student", "ar"])
    shipped = json.loads((dest / "student" / "config.json").read_text())
    assert shipped["wamdiff_text_decode"] == {"block": 4, "steps": 32, "threshold": 0.9}  # no planner option (batch)
    assert "wamdiff_text_decode" not in json.loads((dest / "ar" / "config.json").read_text())
    plan = PlannerSpec.parse(f"model:{dest / 'student'}").decode
    text = PlannerSpec.parse(f"model:{dest / 'student'}", free_text=True).decode
    assert (plan.block_size, plan.max_steps, plan.threshold) == (17, 4, 0.5)
    assert (text.block_size, text.max_steps, text.threshold, text.ordinal_window) == (4, 32, 0.9, 2)
    assert PlannerSpec.parse(f"model:{dest / 'student'},block=8", free_text=True).decode.block_size == 8
    assert PlannerSpec.parse(f"model:{dest / 'ar'}", free_text=True).decode.mode == "ar"
    card = (dest / "student" / "README.md").read_text()
    assert "| free-text decode, over it (`wamdiff_text_decode`) | block=4, steps=32, threshold=0.9 |" in card
    assert "wamdiff_text_decode" not in (dest / "ar" / "README.md").read_text()


def test_the_pipelines_question_rows_take_the_free_text_decode(tmp_path):
    """`Pipeline.planner(free_text=True)`: `evaluate.text_decode` over `evaluate.decode`, under the row's own options;
    an AR row stays greedy AR; without `text_decode` the question rows decode as the plans do."""
    from wamdiff.models import to_diffusion
    from wamdiff.orchestration.pipeline import Pipeline

    tok = build_tokenizer()
    student = save_model(to_diffusion(build_model("tiny", tok, seed=0), 32, tokenizer=tok), tok, tmp_path / "student")
    ar = save_model(build_model("tiny", tok, seed=1), tok, tmp_path / "ar")
    evaluate = {"decode": {"mode": "block", "block": 17, "steps": 4, "threshold": 0.5},
                "planners": {"s": "stage:student", "s8": "stage:student,block=8", "ar": "stage:ar"}}
    for text_decode in ({"block": 4, "steps": 32, "threshold": 0.9}, None):
        config = tmp_path / "p.yaml"
        config.write_text(yaml.safe_dump({
            "out": str(tmp_path / "run"), "data": {"fmt": "delta"}, "checkpoints": {"student": str(student), "ar": str(ar)},
            "evaluate": {**evaluate, **({"text_decode": text_decode} if text_decode else {})}}))
        p = Pipeline.load(config)
        plans, texts = p.planners(), p.planners(free_text=True)
        got = {n: (s.decode.mode, s.decode.block_size, s.decode.max_steps, s.decode.threshold) for n, s in texts.items()}
        if text_decode:
            assert got["s"] == ("block", 4, 32, 0.9) and got["s8"] == ("block", 8, 32, 0.9)
        else:
            assert texts == plans
        assert plans["s"].decode.block_size == 17 and got["ar"][0] == "ar"
    config.write_text(yaml.safe_dump({  # a bad free-text decode is refused when the config loads, naming the option
        "out": str(tmp_path / "run"), "data": {"fmt": "delta"}, "checkpoints": {"student": str(student), "ar": str(ar)},
        "evaluate": {**evaluate, "text_decode": {"steps": 0}}}))
    with pytest.raises(ValueError, match=r"evaluate.planners: .*steps"):
        Pipeline.load(config)


def test_a_given_checkpoint_exported_onto_itself_is_left_untouched(tmp_path):
    """The default config is given `checkpoints/ar_vla` and exports into `checkpoints/`: rewriting that file would
    change its time and so re-run every evaluation keyed by it, for the same weights."""
    tok = build_tokenizer()
    ship = tmp_path / "ship"
    ckpt = save_model(build_model("tiny", tok, seed=0), tok, ship / "ar")
    weights = ckpt / "model.safetensors"
    os.utime(weights, (1e9, 1e9))
    before = weights.read_bytes()
    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({"out": str(tmp_path / "run"), "data": {"fmt": "delta"},
                                      "checkpoints": {"ar": str(ckpt)}}))
    export_checkpoints(config, ship, ["ar"])
    assert weights.stat().st_mtime == 1e9 and weights.read_bytes() == before
    stage = json.loads((ship / "PROVENANCE.json").read_text())["stages"]["ar"]
    assert stage["weights_sha256"] == {"model.safetensors": hashlib.sha256(before).hexdigest()}


def test_stage_names_that_would_leave_the_export_folder_are_refused_before_anything_is_written(tmp_path):
    from test_reliability_errors import assert_user_error, cli

    config = tmp_path / "p.yaml"
    config.write_text(yaml.safe_dump({"out": str(tmp_path / "run"), "data": {"fmt": "delta"}}))
    ship = tmp_path / "ship" / "inner"
    for bad in ("../x", "..", "a/b", "/abs"):
        assert_user_error(cli("pipeline", "--config", config, "--export", ship, "--stages", bad), "--stages", repr(bad))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["p.yaml"]  # nothing written, not even the export folder


def test_names_in_a_config_that_become_paths_are_checked_when_it_loads(tmp_path):
    import pytest

    from wamdiff.errors import UserError
    from wamdiff.orchestration.pipeline import Pipeline

    base = {"out": str(tmp_path / "run"), "data": {"fmt": "delta"}}
    for override, where in [({"train": [{"name": "../evil", "recipe": "r.yaml"}]}, "train: stage name"),
                            ({"checkpoints": {"a/b": str(tmp_path)}}, "checkpoints"),
                            ({"data": {"fmt": "delta", "variants": {"..": {"density": 1.0}}}}, "data.variants"),
                            ({"data": {"fmt": "delta", "train_variants": {"x\ty": {}}}}, "data.train_variants")]:
        config = tmp_path / "p.yaml"
        config.write_text(yaml.safe_dump({**base, **override}))
        with pytest.raises(UserError, match=where):
            Pipeline.load(config)
