"""The decode-time slot layout (one precomputed mask matrix, sliced per forward) against the core mask helpers,
and the engine on the project's own models / tokenizer / processor."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.decoding.runner import StepRunner, collate_prompts
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_tokenizer
from wamdiff.diffusion.masks import decode_block_mask_dense, prefill_mask_dense

TOK = tiny_tokenizer()


@pytest.mark.parametrize("block", [1, 4])
def test_slot_mask_rows_match_core_decode_masks(block):
    model = tiny_qwen3(TOK, block_size=block)
    prompts = [synthetic_prompt(TOK, n, seed=n) for n in (2, 9, 5)]
    batch = collate_prompts(prompts, pad_id=0)
    r = StepRunner(model, batch, block, 3 * block)
    P = r.P
    allow = r.allow[:, 0]
    # prefill rows == core prefill mask over the prompt columns, nothing beyond
    torch.testing.assert_close(allow[:, :P, :P], prefill_mask_dense(batch.valid))
    assert not allow[:, :P, P:].any()
    for b in range(3):
        s0 = P + b * block
        cache_valid = torch.cat([batch.valid, torch.ones(3, b * block, dtype=torch.bool)], 1)
        # one block step over a cache of the prompt + b committed blocks
        core = decode_block_mask_dense(cache_valid, block, 1)
        torch.testing.assert_close(allow[:, s0:s0 + block, :s0 + block], core)
        assert not allow[:, s0:s0 + block, s0 + block:].any()  # later slots hidden
        if b >= 1:  # fused commit of block b-1 + first step of block b
            core2 = decode_block_mask_dense(cache_valid[:, :s0 - block], block, 2)
            torch.testing.assert_close(allow[:, s0 - block:s0 + block, :s0 + block], core2)


def test_generate_on_project_models_with_image():
    from wamdiff.models import build_model, build_tokenizer, encode_prompt, image_processor_for, to_diffusion

    tok = build_tokenizer()
    model = to_diffusion(build_model("tiny", tok, vision=True, seed=0), 4, tokenizer=tok)
    rng = np.random.default_rng(0)
    prompts = [encode_prompt(tok, f"front view <image>\nnavigation: {c}", [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)],
                             image_processor=image_processor_for(model))
               for c in ("left", "straight right now")]
    for mode in ("ar", "block"):
        together = generate(model, tok, prompts, DecodeConfig(mode=mode, max_new_tokens=12))
        alone = [generate(model, tok, [p], DecodeConfig(mode=mode, max_new_tokens=12))[0] for p in prompts]
        assert [g.token_ids for g in together] == [g.token_ids for g in alone]
        assert all(len(g.token_ids) == 12 for g in together)
