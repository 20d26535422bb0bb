"""One source of image geometry: a patch-16 and a patch-8 model both run through every prompt-encoding path
(training data + QA, model convert, eval planner, bench, pipeline QA) with their own processor."""

from __future__ import annotations

import json
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest
from transformers import Qwen2VLImageProcessorPil, Qwen3VLConfig
from typer.testing import CliRunner

from wamdiff.models import PRESETS, build_model, build_tokenizer, encode_prompt, image_processor_for, save_model
from wamdiff.models.image_geometry import PREPROCESSOR_FILE, image_side, image_tokens
from wamdiff.orchestration.sections import EvaluateSection
from wamdiff.models.tokens import IMAGE_PAD as T_IMAGE_PAD

# (patch, image side): patch 8 at 64 px is the presets' geometry; patch 16 at 128 px a Qwen3-VL-like one.
# Both are 8x8 patch grids -> 16 image tokens, whatever size the input image has.
GEOMETRIES = [(8, 64), (16, 128)]


def _tiny(patch, side):
    return replace(PRESETS["tiny"], patch=patch, image_side=side)


def test_geometry_of_the_published_qwen3_vl_2b_config():
    """Qwen3-VL-2B's vision_config (patch 16, merge 2, 2304 position embeddings = 48x48 patches) -> 768 px,
    576 image tokens, computed by hand: 768 / 16 = 48 patches a side, merged 2x2 -> 24 x 24."""
    def vision(n):
        return Qwen3VLConfig(vision_config=dict(patch_size=16, spatial_merge_size=2, temporal_patch_size=2,
                                                num_position_embeddings=n, depth=1, hidden_size=32, out_hidden_size=32))

    cfg = vision(2304)
    assert image_side(cfg.vision_config) == 768
    proc = image_processor_for(SimpleNamespace(config=cfg, name_or_path=""))
    assert (proc.patch_size, proc.merge_size, proc.temporal_patch_size) == (16, 2, 2)
    assert image_tokens(proc, 64, 64) == 24 * 24 and image_tokens(proc, 1080, 1920) == 24 * 24
    with pytest.raises(ValueError, match="num_position_embeddings=2000"):
        image_side(vision(2000).vision_config)


def test_saved_processor_wins_and_must_match_the_vision_tower(tmp_path):
    tok = build_tokenizer()
    model = build_model(_tiny(16, 128), tok, seed=0)
    save_model(model, tok, tmp_path, image_processor=Qwen2VLImageProcessorPil(
        patch_size=16, temporal_patch_size=2, merge_size=2, min_pixels=256 * 256, max_pixels=256 * 256))
    assert image_tokens(image_processor_for(tmp_path), 64, 64) == 64  # the file's 256 px, not the config's 128
    bad = json.loads((tmp_path / PREPROCESSOR_FILE).read_text()) | {"patch_size": 14}
    (tmp_path / PREPROCESSOR_FILE).write_text(json.dumps(bad))
    with pytest.raises(ValueError, match=r"preprocessor_config.json: patch_size=14 does not match .*patch_size=16"):
        image_processor_for(tmp_path)
    text_only = build_model("tiny", tok, vision=False)
    assert image_processor_for(text_only) is None


@pytest.fixture(scope="module", params=GEOMETRIES, ids=lambda g: f"patch{g[0]}")
def world(request, tmp_path_factory):
    """A tiny AR checkpoint of that geometry saved WITHOUT preprocessor_config.json (the issue's crash case),
    plus a small WAM-Diff2 dataset."""
    from wamdiff.training.synthetic import write_dataset

    patch, side = request.param
    root = tmp_path_factory.mktemp(f"geo{patch}")
    tok = build_tokenizer()
    ckpt = save_model(build_model(_tiny(patch, side), tok, seed=0), tok, root / "ar")
    (ckpt / PREPROCESSOR_FILE).unlink()
    data = write_dataset(root / "data", n_train=2, n_val=1, n_qa=2)
    return SimpleNamespace(patch=patch, side=side, root=root, ckpt=ckpt, data=data)


def _expect_geometry(w, prompt):
    """Hand computation: side/patch patches a side, temporal patch 2, merged 2x2."""
    grid = w.side // w.patch
    assert prompt.image_grid_thw.tolist() == [[1, grid, grid]]
    assert prompt.pixel_values.shape == (grid * grid, 3 * 2 * w.patch * w.patch)
    assert int(prompt.mm_token_type_ids.sum()) == grid * grid // 4


def test_every_prompt_path_uses_the_models_geometry(world):
    from wamdiff.driving.bench_inputs import load_wamdiff2_json, synthetic_prompts
    from wamdiff.eval.bench_cli import app as bench_app
    from wamdiff.eval.planners import make_planner, plan_scenes
    from wamdiff.eval.specs import parse_specs
    from wamdiff.eval.synthetic import straight_road_scene
    from wamdiff.orchestration.eval_stages import stage_qa
    from wamdiff.models import load_model
    from wamdiff.models.cli import app as model_app
    from wamdiff.training.data import load_examples
    from wamdiff.training.trainer import train

    w = world
    # the processor derived from vision_config, for the directory and for the loaded model alike
    model, tok = load_model(w.ckpt)
    for proc in (image_processor_for(w.ckpt), image_processor_for(model)):
        assert proc.patch_size == w.patch and image_tokens(proc, 64, 64) == (w.side // w.patch) ** 2 // 4

    # training data (driving + QA) through the trainer: 1 AR step, validation and QA exact match at the end
    result = train({"name": "geo", "kind": "ar_sft", "output_dir": str(w.root / "sft"), "model": {"init": str(w.ckpt)},
                    "data": {"train": [str(w.data["train"])], "val": str(w.data["val"])},
                    "optim": {"steps": 1, "batch_size": 2, "mixed_precision": "no"},
                    "eval": {"qa": {"path": str(w.data["val_qa"]), "at_start": False, "max_new_tokens": 4}},
                    "log": {"tensorboard": False, "progress": False}})
    assert "qa_exact_match_end" in result.metrics and np.isfinite(result.metrics["val_loss"])
    examples = load_examples(w.data["train"], tok, vision=True, image_processor=image_processor_for(w.ckpt))
    _expect_geometry(w, examples[0].prompt)

    # model convert keeps the geometry (a preprocessor file derived from the model is written)
    conv = w.root / "b4"
    res = CliRunner().invoke(model_app, ["convert", str(result.final_model), "--block-size", "4", "--out", str(conv)])
    assert res.exit_code == 0, res.output
    assert json.loads((conv / PREPROCESSOR_FILE).read_text())["patch_size"] == w.patch

    # eval planner: decodes (no crash, no 'planner raised' fallback)
    scenes = [straight_road_scene(speed=8.0, scene_id=f"g{i}") for i in range(2)]
    for s in scenes:
        s.image = np.zeros((64, 64, 3), np.uint8)
    text = f"model:{conv},mode=block,block=4,steps=2,max_new_tokens=8"
    plans = plan_scenes(make_planner(parse_specs([text])[text]), scenes)
    assert all(p.forwards > 0 and "raised" not in p.reason for p in plans), [p.reason for p in plans]

    # bench: both prompt builders, and the CLI end to end
    converted, ctok = load_model(conv)
    proc = image_processor_for(converted)
    prompts, _, _ = load_wamdiff2_json(w.data["train"], ctok, vision=True, limit=1, image_processor=proc)
    _expect_geometry(w, prompts[0])
    _expect_geometry(w, synthetic_prompts(ctok, 1, vision=True, image_processor=proc)[0])
    res = CliRunner().invoke(bench_app, ["--checkpoint", str(conv), "--data", str(w.data["train"]), "--n-prompts", "1",
                                         "--batch", "1", "--blocks", "4", "--taus", "0.9", "--dtypes", "fp32",
                                         "--max-new-tokens", "8", "--max-steps", "2", "--caches", "exact",
                                         "--no-step-cost", "--out", str(w.root / "bench")])
    assert res.exit_code == 0, res.output

    # the pipeline's QA evaluation
    (w.root / "data" / "test_qa.json").write_text(w.data["val_qa"].read_text())
    spec_text = f"model:{conv},mode=block,block=4,steps=2"
    qa_spec = parse_specs([spec_text])[spec_text]
    # a student row decodes with the ordinal read-out, which free-text QA answers have no grid for
    qa_spec = replace(qa_spec, text="stage:m", decode=replace(qa_spec.decode, ordinal_window=2))
    p = SimpleNamespace(evaluate=EvaluateSection(qa_samples=2), data_dir=w.root / "data", planners=lambda free_text=False: {"m": qa_spec})
    assert stage_qa(p)["planners"]["m"]["n"] == 2


def test_encoding_with_another_models_processor_is_what_crashed():
    """The bug: pixels in the patch-8 student geometry fed to a patch-16 tower. Every path now asks the model;
    this shows the mismatch is real (the vision tower rejects it)."""
    import torch

    tok = build_tokenizer()
    model = build_model(_tiny(16, 128), tok, seed=0)
    student = image_processor_for(build_model("tiny", tok))  # patch 8
    ep = encode_prompt(tok, "<image>\nhi", [np.zeros((64, 64, 3), np.uint8)], image_processor=student)
    with pytest.raises(RuntimeError), torch.no_grad():
        model(input_ids=ep.input_ids[None], pixel_values=ep.pixel_values, image_grid_thw=ep.image_grid_thw,
              mm_token_type_ids=ep.mm_token_type_ids[None])


def test_standin_has_the_published_qwen3_vl_2b_shape():
    """Full depth on the meta device (no memory): ~2.1 B parameters as published, tied embeddings, the
    published processor geometry; cut depths keep the deepstack taps inside the cut vision tower."""
    import torch
    from transformers import Qwen3VLForConditionalGeneration

    from wamdiff.models.standin import PUBLISHED_PROCESSOR, standin_config, standin_corpus
    from wamdiff.models.tokenizer import build_qwen2_style_tokenizer

    tok = build_qwen2_style_tokenizer(standin_corpus())
    cfg = standin_config(tokenizer=tok)
    with torch.device("meta"):
        n = sum(p.numel() for p in Qwen3VLForConditionalGeneration(cfg).parameters())
    assert 2.0e9 < n < 2.2e9 and cfg.tie_word_embeddings
    assert (cfg.text_config.num_hidden_layers, cfg.vision_config.depth) == (28, 24)
    assert cfg.vision_config.deepstack_visual_indexes == [5, 11, 17]
    assert cfg.image_token_id == tok.convert_tokens_to_ids(T_IMAGE_PAD)
    cut = standin_config(tokenizer=tok, text_layers=2, vision_layers=2)
    assert cut.vision_config.deepstack_visual_indexes == [0, 1] and cut.text_config.hidden_size == 2048
    proc = Qwen2VLImageProcessorPil(**{k: v for k, v in PUBLISHED_PROCESSOR.items() if "_type" not in k and k != "processor_class"})
    assert image_tokens(proc, 64, 64) == 64  # a 64x64 render is resized to 256x256: 16x16 patches merged 2x2
