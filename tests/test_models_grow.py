"""A grown model computes exactly what it was grown from, keeps its size through save / load, and trains."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from wamdiff.diffusion.forward import diffusion_forward
from wamdiff.models import build_model, build_tokenizer, encode_answer, encode_prompt, grow_depth, load_model, save_model
from wamdiff.models.convert import to_diffusion
from wamdiff.models.grow import text_decoder
from wamdiff.models.image_geometry import image_processor_for

TOK = build_tokenizer()


@pytest.mark.parametrize("vision", [False, True])
@torch.no_grad()
def test_grown_model_gives_the_same_logits(vision):
    model = build_model("tiny", TOK, vision=vision, seed=3).eval()
    with torch.no_grad():  # a trained-looking model: no all-zero projections to hide a wrong copy
        for p in model.parameters():
            p.add_(0.02 * torch.randn_like(p))
    grown = grow_depth(copy.deepcopy(model), 3)
    n = len(text_decoder(model).layers)
    assert len(text_decoder(grown).layers) == 3 * n == grown.config.get_text_config().num_hidden_layers
    assert [layer.self_attn.layer_idx for layer in text_decoder(grown).layers] == list(range(3 * n))
    image = [(np.random.RandomState(0).rand(64, 64, 3) * 255).astype(np.uint8)] if vision else []
    ep = encode_prompt(TOK, "The navigation information is: left <image>" if vision else "left", image, vision=vision,
                       image_processor=image_processor_for(model))
    x0 = encode_answer(TOK, "1.25,-3.50")[None]
    kw = dict(prompt_ids=ep.input_ids[None], prompt_mask=torch.ones(1, ep.input_ids.numel(), dtype=torch.bool),
              x0=x0, xt=x0.masked_fill(torch.rand(x0.shape) < 0.5, TOK.convert_tokens_to_ids("<|mask|>")),
              answer_mask=torch.ones_like(x0, dtype=torch.bool), block_size=4)
    if vision:
        kw.update(pixel_values=ep.pixel_values, image_grid_thw=ep.image_grid_thw, mm_token_type_ids=ep.mm_token_type_ids[None])
    a = diffusion_forward(to_diffusion(model, 4, tokenizer=TOK), **kw)
    b = diffusion_forward(to_diffusion(grown, 4, tokenizer=TOK), **kw)
    torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_grown_model_saves_loads_and_its_copies_learn(tmp_path):
    model = build_model("tiny", TOK, vision=False, seed=4)
    grown = grow_depth(model, 2)
    save_model(grown, TOK, tmp_path / "g")
    back, _ = load_model(tmp_path / "g")
    assert len(text_decoder(back).layers) == 2 * 2
    ids = torch.tensor([TOK.encode("left 1.25")])
    torch.testing.assert_close(back(input_ids=ids).logits, grown(input_ids=ids).logits)
    top = text_decoder(back).layers[-1]
    opt = torch.optim.SGD(back.parameters(), lr=0.1)
    back(input_ids=ids, labels=ids).loss.backward()
    opt.step()
    assert top.self_attn.o_proj.weight.abs().sum() > 0 and top.mlp.down_proj.weight.abs().sum() > 0


def test_grow_needs_a_positive_integer():
    with pytest.raises(ValueError, match="positive integer"):
        grow_depth(build_model("tiny", TOK, vision=False), 0)


def test_recipe_grow_is_checked():
    from wamdiff.training.config import load_recipe

    base = {"name": "t", "kind": "block", "data": {"train": ["x.json"]}, "model": {"block_size": 4}}
    with pytest.raises(ValueError, match="model.grow"):
        load_recipe({**base, "model": {"init": "ckpt", "grow": 0, "block_size": 4}})
    with pytest.raises(ValueError, match="give model.init"):
        load_recipe({**base, "model": {"preset": "tiny", "grow": 2, "block_size": 4}})
