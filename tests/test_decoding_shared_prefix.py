"""The shared prompt head prefilled once: the same logits, cache and tokens as a full prefill."""

from __future__ import annotations

import pytest
import torch

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.decoding.runner import StepRunner, collate_prompts
from wamdiff.decoding.shared_prefix import _CACHE_ATTR, MIN_HEAD, head_length
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_qwen3_vl, tiny_tokenizer
from wamdiff.models.tokens import PAD, token_id

TOK = tiny_tokenizer()
PADID = token_id(TOK, PAD)


def test_head_length_stops_at_the_first_difference_or_image_token():
    ids = torch.tensor([[0, 0, 5, 6, 7, 8, 9, 1, 2],
                        [5, 6, 7, 8, 9, 3, 3, 3, 3]])
    valid = ids != 0
    valid[1] = True
    assert head_length(ids, valid, None) == 5
    mm = torch.zeros_like(ids)
    mm[0, 6], mm[1, 4] = 1, 1  # an image token at the head's 5th position: the head ends before it
    assert head_length(ids, valid, mm) == 4
    assert head_length(ids[:, :6], valid[:, :6], None) == 0  # row 0 has 4 tokens: 3 could be shared, < MIN_HEAD
    one = torch.tensor([[5, 6, 7, 8, 9]])
    assert head_length(one, torch.ones_like(one, dtype=torch.bool), None) == 4  # one token always left to prefill
    assert MIN_HEAD == 4


@torch.inference_mode()
def _prefill(model, prompts, shared, extra=None):
    batch = collate_prompts(prompts, PADID)
    runner = StepRunner(model, batch, 4, 8, shared_prefix=shared, prefill_cache=True)
    logits = runner.prefill(extra, keep=1 if extra is None else extra.shape[1])
    return runner, logits


@pytest.mark.parametrize("vl", [False, True])
def test_prefill_with_the_shared_head_equals_the_full_prefill(vl):
    model = tiny_qwen3_vl(TOK, peaky=4.0, seed=3) if vl else tiny_qwen3(TOK, peaky=4.0, seed=3)
    prompts = [synthetic_prompt(TOK, n, seed=n, image=vl) for n in (5, 11, 8)]  # lengths differ: left padding
    extra = torch.full((3, 4), model.config.mask_token_id)  # block 0's first step fused with the prefill
    full, full_logits = _prefill(model, prompts, False, extra)
    model.__dict__.pop(_CACHE_ATTR, None)
    part, part_logits = _prefill(model, prompts, True, extra)
    assert model.__dict__[_CACHE_ATTR]  # the head was cached
    torch.testing.assert_close(part_logits, full_logits, atol=1e-5, rtol=0)
    valid = torch.cat([full.batch.valid, torch.ones(3, 4, dtype=torch.bool)], 1)  # prompt + the fused block's slots
    for a, b in zip(full.cache.layers, part.cache.layers):
        torch.testing.assert_close(b.keys[:, :, : valid.shape[1]].transpose(1, 2)[valid],
                                   a.keys[:, :, : valid.shape[1]].transpose(1, 2)[valid], atol=1e-5, rtol=0)
        torch.testing.assert_close(b.values[:, :, : valid.shape[1]].transpose(1, 2)[valid],
                                   a.values[:, :, : valid.shape[1]].transpose(1, 2)[valid], atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["ar", "block"])
def test_decoding_with_the_shared_head_gives_the_same_tokens_and_follows_weight_changes(mode):
    model = tiny_qwen3_vl(TOK, peaky=6.0, seed=5)
    prompts = [synthetic_prompt(TOK, n, seed=20 + n, image=True) for n in (4, 9)]
    cfg = dict(mode=mode, block_size=4, threshold=0.6, max_new_tokens=12)
    for _ in range(2):  # the second call reads the cached head
        assert [g.token_ids for g in generate(model, TOK, prompts, DecodeConfig(shared_prefix=True, **cfg))] == \
               [g.token_ids for g in generate(model, TOK, prompts, DecodeConfig(shared_prefix=False, **cfg))]
    assert len(model.__dict__[_CACHE_ATTR]) == 1
    with torch.no_grad():  # weights changed in place (a training step): the cached head is stale
        for w in model.model.language_model.layers[0].parameters():
            w.add_(0.5 * torch.randn_like(w))
    torch.testing.assert_close(_prefill(model, prompts, True)[1], _prefill(model, prompts, False)[1], atol=1e-5, rtol=0)
