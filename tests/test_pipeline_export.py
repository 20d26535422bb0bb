"""`wamdiff pipeline --export`: bf16 copies with provenance, and the pipeline's table only when it describes them."""

import hashlib
import json
import os

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
