"""Presets, prompt encoding, conversion settings and save/load round-trips."""

import json

import numpy as np
import pytest
import torch
from PIL import Image
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM
from typer.testing import CliRunner

from wamdiff.diffusion.forward import diffusion_forward
from wamdiff.models import (
    build_model, build_tokenizer, count_parameters, diffusion_settings, encode_answer, encode_prompt,
    image_processor_for, load_model, save_model, set_block_size, to_diffusion,
)
from wamdiff.models import tokens as T
from wamdiff.models.cli import app


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _image(seed=0):
    return (np.random.RandomState(seed).rand(64, 64, 3) * 255).astype(np.uint8)


def test_presets(tok):
    student = count_parameters(build_model("student", tok))["total"]
    teacher = build_model("teacher", tok)
    assert 3e6 < student < 5e6 and count_parameters(teacher)["total"] > 2 * student
    assert teacher.config.vision_config.patch_size == 8 and teacher.config.vision_config.spatial_merge_size == 2
    text = build_model("tiny", tok, vision=False)
    assert type(text).__name__ == "Qwen3ForCausalLM" and text.config.vocab_size == len(tok)
    with pytest.raises(ValueError, match="preset"):
        build_model("huge", tok)


@pytest.fixture(scope="module")
def proc(tok):
    return image_processor_for(build_model("tiny", tok))


def test_encode_prompt_chat_format_and_images(tok, proc):
    human = "Here is a front-view images from a driving vehicle: <image>\nHow many vehicles are ahead within 30 m?"
    ep = encode_prompt(tok, human, [Image.fromarray(_image())], image_processor=proc)
    expect = "<|im_start|>user\n" + human.replace("<image>", T.VISION_START + T.IMAGE_PAD * 16 + T.VISION_END) + \
        "<|im_end|>\n<|im_start|>assistant\n"
    assert tok.decode(ep.input_ids) == expect and expect.endswith("<|im_start|>assistant\n")
    assert ep.image_grid_thw.tolist() == [[1, 8, 8]] and ep.pixel_values.shape == (64, 3 * 2 * 8 * 8)
    assert int(ep.mm_token_type_ids.sum()) == 16
    same = encode_prompt(tok, human, [_image()], image_processor=proc)  # an HxWx3 uint8 array gives the same pixels
    assert torch.equal(same.pixel_values, ep.pixel_values)
    two = encode_prompt(tok, "<image> and <image>", [_image(0), _image(1)], image_processor=proc)
    assert int(two.mm_token_type_ids.sum()) == 32 and two.image_grid_thw.shape == (2, 3)
    text_only = encode_prompt(tok, human, [], vision=False)
    assert T.IMAGE_PAD not in tok.decode(text_only.input_ids) and text_only.pixel_values is None
    assert tok.decode(encode_answer(tok, "keep lane")) == "keep lane" + T.IM_END


def test_encode_errors(tok, proc):
    with pytest.raises(ValueError, match="1 '<image>' placeholder.*2 image"):
        encode_prompt(tok, "look <image>", [_image(), _image()], image_processor=proc)
    with pytest.raises(ValueError, match="0 image"):
        encode_prompt(tok, "look <image>", [], image_processor=proc)
    with pytest.raises(ValueError, match="HxWx3 uint8"):
        encode_prompt(tok, "<image>", [np.zeros((64, 64), dtype=np.uint8)], image_processor=proc)
    with pytest.raises(ValueError, match="no image_processor"):
        encode_prompt(tok, "<image>", [_image()])  # never a silent default geometry
    with pytest.raises(ValueError, match="answer is missing"):
        encode_answer(tok, "")


def test_conversion_settings_and_errors(tok):
    model = build_model("tiny", tok, vision=False)
    with pytest.raises(ValueError, match="not a diffusion model"):
        diffusion_settings(model)
    assert to_diffusion(model, 4) is model
    s = diffusion_settings(set_block_size(model, 16))
    assert (s.block_size, s.mask_token_id) == (16, tok.mask_token_id)
    for bad in (0, -1):
        with pytest.raises(ValueError, match="block_size"):
            set_block_size(model, bad)
    plain = Qwen3ForCausalLM(Qwen3Config(vocab_size=50, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=1, head_dim=16))
    with pytest.raises(ValueError, match="mask token absent from the vocabulary"):
        to_diffusion(plain, 4)  # no tokenizer, no recorded mask id
    with pytest.raises(ValueError, match="mask token absent from the vocabulary"):
        to_diffusion(plain, 4, tokenizer=tok)  # mask id 480 >= vocab 50


def test_prediction_is_recorded_kept_and_checked(tok, tmp_path):
    """An AR model converts to "same" unless told "shifted"; a diffusion model keeps its own through a new block size,
    a re-conversion and a save/load, and refuses the other kind (its weights were trained for theirs)."""
    assert diffusion_settings(to_diffusion(build_model("tiny", tok, seed=0), 4, tokenizer=tok)).prediction == "same"
    model = to_diffusion(build_model("tiny", tok, seed=0), 4, tokenizer=tok, prediction="shifted")
    assert diffusion_settings(set_block_size(model, 16)).shifted
    assert diffusion_settings(to_diffusion(model, 8)).prediction == "shifted"
    save_model(model, tok, tmp_path / "m")
    loaded, _ = load_model(tmp_path / "m")
    assert diffusion_settings(loaded) == diffusion_settings(model)
    with pytest.raises(ValueError, match="'shifted'.*'same'"):
        to_diffusion(loaded, 8, prediction="same")
    with pytest.raises(ValueError, match="prediction must be one of same, shifted"):
        to_diffusion(build_model("tiny", tok, seed=0), 4, tokenizer=tok, prediction="next")


@pytest.mark.parametrize("vision", [False, True])
def test_save_load_round_trip_identical_logits(tok, tmp_path, vision):
    model = to_diffusion(build_model("tiny", tok, vision=vision, seed=1), 8, tokenizer=tok)
    save_model(model, tok, tmp_path)
    loaded, tok2 = load_model(tmp_path)
    assert diffusion_settings(loaded) == diffusion_settings(model)
    assert tok2.backend_tokenizer.to_str() == tok.backend_tokenizer.to_str() and tok2.mask_token == T.MASK
    text = "Is the lead vehicle braking?" + (" <image>" if vision else "")
    images = [_image()] if vision else []
    ep = encode_prompt(tok, text, images, vision=vision, image_processor=image_processor_for(model))
    ep2 = encode_prompt(tok2, text, images, vision=vision, image_processor=image_processor_for(tmp_path))
    assert torch.equal(ep.input_ids, ep2.input_ids)
    x0 = encode_answer(tok, "yes, 12.50,-0.25")[None]
    x0 = torch.nn.functional.pad(x0, (0, -x0.shape[1] % 8), value=tok.pad_token_id)
    xt = x0.masked_fill(torch.arange(x0.shape[1]) % 3 == 0, tok.mask_token_id)

    def run(m, e):
        kw = dict(pixel_values=e.pixel_values, image_grid_thw=e.image_grid_thw,
                  mm_token_type_ids=None if e.mm_token_type_ids is None else e.mm_token_type_ids[None])
        return diffusion_forward(m, prompt_ids=e.input_ids[None], prompt_mask=torch.ones(1, e.input_ids.numel(), dtype=torch.bool),
                                 x0=x0, xt=xt, answer_mask=torch.ones_like(x0, dtype=torch.bool),
                                 block_size=diffusion_settings(m).block_size, **kw)

    with torch.no_grad():
        assert torch.equal(run(model, ep), run(loaded, ep2))


def test_foreign_checkpoint_gets_special_tokens_and_resized_embeddings(tmp_path):
    """A Qwen3 checkpoint whose tokenizer lacks our specials: they are added and the embeddings resized."""
    bpe = Tokenizer(models.BPE(vocab={chr(c): i for i, c in enumerate(range(32, 127))}, merges=[]))
    bpe.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    foreign_tok = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="~")
    cfg = Qwen3Config(vocab_size=len(foreign_tok), hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1, head_dim=16)
    Qwen3ForCausalLM(cfg).save_pretrained(tmp_path)
    foreign_tok.save_pretrained(tmp_path)
    model, tok = load_model(tmp_path)
    assert model.get_input_embeddings().weight.shape[0] >= len(tok) > 95
    assert model.config.mask_token_id == tok.convert_tokens_to_ids(T.MASK)
    assert tok.convert_ids_to_tokens(tok.encode(T.bin_token(7) + T.IM_END, add_special_tokens=False)) == [T.bin_token(7), T.IM_END]
    assert diffusion_settings(to_diffusion(tmp_path, 4)).block_size == 4
    torch.manual_seed(123)  # whatever the caller's RNG state: the added rows are the same at every load
    again, _ = load_model(tmp_path)
    assert torch.equal(again.get_input_embeddings().weight, model.get_input_embeddings().weight)


def test_cli_build_convert_info(tmp_path):
    runner = CliRunner()
    src, dst = tmp_path / "ar", tmp_path / "b4"
    r = runner.invoke(app, ["build", "--preset", "tiny", "--out", str(src), "--text-only"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["convert", str(src), "--block-size", "4", "--out", str(dst)])
    assert r.exit_code == 0, r.output
    r = runner.invoke(app, ["info", str(dst)])
    assert r.exit_code == 0 and "Qwen3ForCausalLM" in r.output and "'block_size': 4" in r.output
    assert json.loads((dst / "config.json").read_text())["diffusion"]["block_size"] == 4
    shifted = tmp_path / "b4s"
    r = runner.invoke(app, ["convert", str(src), "--block-size", "4", "--prediction", "shifted", "--out", str(shifted)])
    assert r.exit_code == 0, r.output
    assert json.loads((shifted / "config.json").read_text())["diffusion"]["prediction"] == "shifted"
    assert "| prediction | shifted |" in (shifted / "README.md").read_text()
    from test_reliability_errors import assert_user_error, cli

    assert_user_error(cli("model", "build", "--preset", "nope", "--out", tmp_path / "x"), "unknown model preset 'nope'", "tiny")
    assert_user_error(cli("model", "info", tmp_path / "missing"), f"{tmp_path / 'missing'}: not a model directory")
    assert_user_error(cli("model", "convert", shifted, "--prediction", "same", "--out", tmp_path / "y"),
                      "--prediction", "the model predicts with 'shifted' positions")
