"""A checkpoint records what its world data looked like (camera, answer format), so the closed loop renders what
the model saw and a planner spec needs no fmt=."""

import json

from test_training_fixtures import one_thread, tiny_recipe

from wamdiff.driving.dataset import generate_dataset
from wamdiff.driving.render import LEGACY_CAMERA, CameraConfig
from wamdiff.eval.planners import make_planner
from wamdiff.eval.specs import parse_specs
from wamdiff.training.trainer import train


def test_trained_model_records_camera_and_format(tmp_path):
    data = tmp_path / "world"
    camera = {"look_ahead": 5.0, "route": True}
    generate_dataset(data, families=["highway"], split="train", n=2, workers=1, fmt="delta", camera=camera,
                     progress=False)
    recipe = tiny_recipe({"train": data / "train.json"}, tmp_path / "run", kind="ar_sft",
                         optim={"steps": 1, "batch_size": 2}, eval={"at_start": False, "at_end": False})
    with one_thread():
        final = train(recipe).final_model
    config = json.loads((final / "config.json").read_text())
    assert config["wamdiff_answer_format"] == "delta"
    assert CameraConfig.from_dict(config["wamdiff_camera"]) == CameraConfig(look_ahead=5.0, route=True)
    text = f"model:{final}"
    spec = parse_specs([text])[text]
    assert spec.fmt == "delta"  # from the checkpoint: no fmt= in the spec
    assert spec.decode.mode == "ar"  # an AR SFT checkpoint saved no diffusion settings: no mode=ar needed
    assert make_planner(spec).camera == CameraConfig(look_ahead=5.0, route=True)


def test_checkpoint_without_records_uses_the_legacy_camera_and_text2(tmp_path):
    from wamdiff.models import build_model, build_tokenizer, save_model

    tok = build_tokenizer()
    path = save_model(build_model("tiny", tok, seed=0), tok, tmp_path / "old")  # as saved before either was recorded
    config = json.loads((path / "config.json").read_text())
    assert "wamdiff_camera" not in config and "wamdiff_answer_format" not in config
    text = f"model:{path}"
    spec = parse_specs([text])[text]
    assert spec.fmt == "text2"
    assert make_planner(spec).camera == LEGACY_CAMERA


def test_decoding_mode_follows_the_checkpoints_diffusion_settings(tmp_path):
    from wamdiff.models import build_model, build_tokenizer, save_model

    tok = build_tokenizer()
    ar = save_model(build_model("tiny", tok, seed=0), tok, tmp_path / "ar")
    student = save_model(build_model("tiny", tok, seed=0), tok, tmp_path / "student")
    config = json.loads((student / "config.json").read_text())
    config["diffusion"] = {"block_size": 8, "mask_token_id": tok.mask_token_id}
    (student / "config.json").write_text(json.dumps(config))
    specs = parse_specs([f"model:{ar}", f"model:{student}", f"model:{ar},block=4", f"model:{student},mode=ar"])
    assert [s.decode.mode for s in specs.values()] == ["ar", "block", "block", "ar"]  # asked-for options win


def test_is_vision_reads_the_vision_tower_from_a_folder_a_model_or_a_config(tmp_path):
    from wamdiff.models import build_model, build_tokenizer, save_model
    from wamdiff.models.recorded import is_vision

    tok = build_tokenizer()
    for vision in (True, False):
        model = build_model("tiny", tok, vision=vision, seed=0)
        save_model(model, tok, tmp_path / str(vision))
        assert is_vision(tmp_path / str(vision)) is is_vision(model) is is_vision(model.config) is vision
    assert is_vision(tmp_path / "missing") is False
