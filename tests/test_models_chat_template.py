"""Prompts through the model's chat template: a tokenizer without one (every shipped checkpoint) keeps wamdiff's
hand-written layout token for token; a Qwen template (the stand-in's) shapes the prompt; `model convert
--chat-template FILE` makes a file the checkpoint's template."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from transformers import AutoTokenizer
from typer.testing import CliRunner

from wamdiff.models import build_model, build_tokenizer, encode_prompt, image_processor_for, save_model
from wamdiff.models import tokens as T
from wamdiff.models.cli import app
from wamdiff.models.processor import DEFAULT_CHAT_TEMPLATE, chat_prompt, read_chat_template
from wamdiff.models.standin import QWEN_CHAT_TEMPLATE

ROOT = Path(__file__).resolve().parents[1]
HUMAN = ("Here is a front-view images from a driving vehicle: <image>\nThe navigation information is: left\n"
         "The current velocity is: (8.25,-0.10)")
VISION = T.VISION_START + "{}" + T.VISION_END


def _image(seed=0):
    return (np.random.RandomState(seed).rand(64, 64, 3) * 255).astype(np.uint8)


def _legacy(human_text: str) -> str:
    """The layout earlier versions wrote by hand (the golden: not built from any template)."""
    return f"<|im_start|>user\n{human_text}<|im_end|>\n<|im_start|>assistant\n"


@pytest.mark.parametrize("checkpoint", ["ar_vla", "distill_block"])
def test_shipped_checkpoints_keep_their_prompts_token_for_token(checkpoint):
    tok = AutoTokenizer.from_pretrained(ROOT / "checkpoints" / checkpoint)
    assert not tok.chat_template  # no template of their own: the default one applies
    proc = image_processor_for(ROOT / "checkpoints" / checkpoint)
    ep = encode_prompt(tok, HUMAN, [_image()], image_processor=proc)
    n = int(ep.mm_token_type_ids.sum())
    want = tok.encode(_legacy(HUMAN.replace("<image>", VISION.format(T.IMAGE_PAD * n))), add_special_tokens=False)
    assert n > 0 and ep.input_ids.tolist() == want
    text_only = encode_prompt(tok, HUMAN, [], vision=False).input_ids.tolist()
    assert text_only == tok.encode(_legacy(HUMAN.replace("<image>", "")), add_special_tokens=False)


def test_qwen_template_shapes_the_prompt_with_two_cameras():
    tok = build_tokenizer()
    proc = image_processor_for(build_model("tiny", tok))
    tok.chat_template = QWEN_CHAT_TEMPLATE
    human = "front: <image> rear: <image>\nWhere next?"
    assert chat_prompt(human, tok, n_images=2) == (
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n"
        "front: <|vision_start|><|image_pad|><|vision_end|> rear: <|vision_start|><|image_pad|><|vision_end|>\n"
        "Where next?<|im_end|>\n<|im_start|>assistant\n")
    ep = encode_prompt(tok, human, [_image(0), _image(1)], image_processor=proc)
    per_image = 16  # 64x64 at patch 8, merge 2
    want = chat_prompt(human, tok, n_images=2).replace(T.IMAGE_PAD, T.IMAGE_PAD * per_image)
    assert tok.decode(ep.input_ids) == want and ep.image_grid_thw.shape == (2, 3)
    assert int(ep.mm_token_type_ids.sum()) == 2 * per_image
    tok.chat_template = None
    assert chat_prompt(human, tok, n_images=2) == _legacy(human.replace("<image>", VISION.format(T.IMAGE_PAD)))


def test_template_file_checked_and_made_the_checkpoints_own(tmp_path):
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% for m in messages %}")
    with pytest.raises(ValueError, match="bad.jinja: chat template: TemplateSyntaxError"):
        read_chat_template(bad)
    no_images = tmp_path / "no_images.jinja"
    no_images.write_text("{{ messages[0].content[-1].text }}")
    with pytest.raises(ValueError, match="no_images.jinja: .*each image item"):
        read_chat_template(no_images)

    tok = build_tokenizer()
    save_model(build_model("tiny", tok), tok, tmp_path / "ar")
    custom = tmp_path / "mine.jinja"
    custom.write_text(DEFAULT_CHAT_TEMPLATE.replace("'<|im_start|>' + message.role", "'<|im_start|>driver'"))
    runner = CliRunner()
    res = runner.invoke(app, ["convert", str(tmp_path / "ar"), "--block-size", "4", "--out", str(tmp_path / "b4"),
                              "--chat-template", str(custom)])
    assert res.exit_code == 0, res.output
    loaded = AutoTokenizer.from_pretrained(tmp_path / "b4")
    assert chat_prompt("hi", loaded) == "<|im_start|>driver\nhi<|im_end|>\n<|im_start|>assistant\n"
    res = runner.invoke(app, ["convert", str(tmp_path / "ar"), "--block-size", "4", "--out", str(tmp_path / "x"),
                              "--chat-template", str(bad)])
    assert res.exit_code == 2 and "bad.jinja" in res.output
