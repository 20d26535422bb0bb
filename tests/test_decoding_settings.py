"""Decode settings: one name per setting, one parser, one precedence (`decoding.config.resolve_decode`); what a
checkpoint records (`models.recorded`); and a shipped student decoding exactly as before the settings had one home."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import numpy as np
import pytest

from wamdiff.decoding.config import DecodeConfig, resolve_decode
from wamdiff.models.recorded import is_diffusion, is_model_dir, recorded_decode, recorded_diffusion

SHIPPED_STUDENT = Path(__file__).resolve().parents[1] / "checkpoints" / "distill_block"


def test_the_short_names_are_aliases_of_the_field_names():
    short = resolve_decode({"block": "17", "steps": "4", "ordinal": "2", "delayed": "yes", "threshold": "0.5"})
    named = resolve_decode({"block_size": 17, "max_steps": 4, "ordinal_window": 2, "delayed_cache": True,
                            "threshold": 0.5})
    assert short == named
    assert (named.block_size, named.max_steps, named.ordinal_window, named.delayed_cache) == (17, 4, 2, True)
    with pytest.raises(ValueError, match="spec x: block_size is given twice"):
        resolve_decode({"block": 8, "block_size": 8}, where="spec x")
    with pytest.raises(ValueError, match="spec x: unknown decode setting 'blok'"):
        resolve_decode({"blok": 8}, where="spec x")
    with pytest.raises(ValueError, match="option steps='0': must be >= 1"):
        resolve_decode({"steps": "0"})
    with pytest.raises(dataclasses.FrozenInstanceError):
        named.threshold = 0.9  # parsed once: nobody changes it on the way to the kernel


def test_one_precedence_recorded_then_yaml_then_spec_then_flags():
    recorded = {"block": 17, "threshold": 0.5, "steps": 4, "ordinal": 2}
    yaml_layer, spec_layer = {"threshold": 0.6, "ordinal": 1}, {"steps": "2", "threshold": "0.65"}
    flags = {"threshold": 0.7, "block_size": None}  # a flag left unset is no setting
    got = resolve_decode(yaml_layer, spec_layer, flags, recorded=recorded)
    assert (got.mode, got.block_size, got.threshold, got.max_steps, got.ordinal_window) == ("block", 17, 0.7, 2, 1)
    # the mode: the highest layer's; else block when a block size is given; else the checkpoint's kind
    assert resolve_decode(recorded=recorded, diffusion=False) == DecodeConfig(mode="ar")  # AR: the record is unused
    assert resolve_decode({"mode": "ar"}, recorded=recorded) == DecodeConfig(mode="ar")
    assert resolve_decode({"block": 8}, diffusion=False).mode == "block"
    assert resolve_decode({"mode": "ar"}, {"mode": "block"}, recorded=recorded).block_size == 17


def _checkpoint(tmp_path: Path, **config) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "config.json").write_text(json.dumps(config))
    return tmp_path


def test_a_checkpoint_records_its_trained_block_size_apart_from_its_decode(tmp_path):
    student = _checkpoint(tmp_path / "s", diffusion={"block_size": 32, "mask_token_id": 5},
                          wamdiff_decode={"block": 17, "steps": 4})
    ar = _checkpoint(tmp_path / "a", model_type="qwen3")
    assert is_model_dir(student) and is_model_dir(ar) and not is_model_dir(tmp_path)
    assert is_diffusion(student) and not is_diffusion(ar) and not is_diffusion(tmp_path / "missing")
    assert recorded_diffusion(student)["block_size"] == 32 and recorded_decode(student)["block"] == 17
    assert recorded_decode(ar) == {} and recorded_diffusion(ar) == {}

    from wamdiff.eval.specs import PlannerSpec

    assert PlannerSpec.parse(f"model:{student}").decode.block_size == 17  # the recorded decode, not 32
    assert PlannerSpec.parse(f"model:{student},max_steps=2").decode.max_steps == 2
    assert PlannerSpec.model(student, {"steps": 3}, {"max_steps": 1}).decode.max_steps == 1  # later layers win
    assert PlannerSpec.parse(f"model:{ar}").decode == DecodeConfig(mode="ar")


def _scene(i: int):
    from wamdiff.eval.synthetic import straight_road_scene

    s = straight_road_scene(speed=7.0 + 1.37 * i, scene_id=f"s{i}")
    s.ego_history = s.ego_history.copy()
    s.ego_history[-1, 4:7] = (0.123 * i, -0.456, 0.789 * i)
    s.image = np.random.default_rng(i).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    return s


def _delta_text(numbers: str) -> str:
    return "".join(f"<|{'dx' if i % 2 == 0 else 'dy'}_{n}|>" for i, n in enumerate(numbers.split()))


# (answer's dx / dy tokens, forwards) per scene, decoded by the code before the decode settings had one home
GOLDEN = {  # checkpoints/distill_block, decoded by the code of commit c84d146 (before this home)
    ",batch=2": [("85 80 88 80 92 80 91 79 86 79 83 80 83 80 83 80", 4),  # the recorded decode: B17, <= 4 steps, tau 0.5
                 ("122 80 119 80 93 79 90 79 91 78 91 79 92 79 92 79", 4),
                 ("127 79 122 76 93 76 93 77 90 78 90 77 91 78 91 77", 3)],
    ",block_size=8,max_steps=2,threshold=0.7,ordinal_window=0,batch=3": [  # was spelled block=8,steps=2,ordinal=0
        ("88 80 83 80 92 80 91 79 92 80 87 79 83 79 83 79", 5),
        ("122 80 92 80 93 79 92 79 90 79 89 79 84 79 83 80", 5),
        ("127 79 115 79 115 76 93 77 89 77 87 78 84 78 84 79", 5)],
}


@pytest.mark.parametrize("options", list(GOLDEN))
def test_a_shipped_student_decodes_as_before(options):
    from wamdiff.eval.planners import make_planner, plan_scenes

    plans = plan_scenes(make_planner(f"model:{SHIPPED_STUDENT}{options}"), [_scene(i) for i in range(3)])
    assert [(p.text, p.forwards, p.new_tokens) for p in plans] == [(_delta_text(n), f, 17) for n, f in GOLDEN[options]]
    assert re.fullmatch(r"(<\|dx_\d+\|><\|dy_\d+\|>){8}", plans[0].text)
