"""Cheaper exact steps against the reference path: lean steps (logits and the last layer's MLP only where read) and
the cached vision-tower tables. Exact paths must give the reference's tokens (and its logits where they are read);
the no-cache recomputation checks are in `test_decoding_engine.py` (`test_cached_block_decoding_equals_...`)."""

from __future__ import annotations

import pytest
import torch

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.decoding import block as block_mod
from wamdiff.decoding.engine import model_block_settings
from wamdiff.decoding.lean import TailMLP, install_tail, last_mlp, tail_rows
from wamdiff.decoding.prefill_cache import vision_tables
from wamdiff.decoding.runner import StepRunner, collate_prompts
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_qwen3_vl, tiny_tokenizer
from wamdiff.models.tokens import IM_END, PAD, token_id

TOK = tiny_tokenizer()
EOS, PADID = token_id(TOK, IM_END), token_id(TOK, PAD)


@pytest.fixture(scope="module")
def models():
    """{vision: model}: a text-only and a vision model of their own seeds."""
    return {False: tiny_qwen3(TOK, peaky=6.0, seed=21), True: tiny_qwen3_vl(TOK, peaky=6.0, seed=22)}


def test_tail_mlp_runs_the_mlp_on_the_last_rows_only(models):
    qwen3 = models[False]
    tail = install_tail(qwen3)
    assert install_tail(qwen3) is tail and isinstance(last_mlp(qwen3).forward, TailMLP)  # idempotent
    x = torch.randn(2, 5, qwen3.config.hidden_size)
    full = type(last_mlp(qwen3)).forward(last_mlp(qwen3), x)  # the HF module's own forward
    with torch.no_grad():
        torch.testing.assert_close(last_mlp(qwen3)(x), full, atol=0, rtol=0)  # rows None: untouched
        with tail_rows(tail, 2):
            part = last_mlp(qwen3)(x)
        torch.testing.assert_close(part[:, 3:], full[:, 3:], atol=1e-6, rtol=0)
        assert not part[:, :3].any()
        with tail_rows(tail, 0):
            assert not last_mlp(qwen3)(x).any()
    assert tail.rows is None  # reset after the scope
    assert not any("forward" in k for k in qwen3.state_dict())  # no parameter / state-dict change


def _decode(model, prompts, lean, **kw):
    _, mask_id = model_block_settings(model, TOK)
    runner = StepRunner(model, collate_prompts(prompts, PADID), kw["block_size"], kw["max_new_tokens"], lean=lean)
    logs = []
    out = block_mod.decode_block(runner, DecodeConfig(fused_commit=True, **kw), mask_id=mask_id, eos_id=EOS,
                                 pad_id=PADID, trace=lambda b, s, x, lg: logs.append((x == mask_id, lg.float())))
    return out, logs


@pytest.mark.parametrize("vl", [False, True])
@pytest.mark.parametrize("delayed", [False, True])
def test_lean_steps_give_the_full_steps_tokens_and_logits_in_a_batch(models, vl, delayed):
    """Batch of prompts of different lengths: lean steps (head, last layer) against the reference path, with the
    exact and with the delayed cache; logits compared at every position still masked before the step."""
    model = models[vl]
    prompts = [synthetic_prompt(TOK, n, seed=50 + n, image=vl) for n in (3, 14, 8)]
    kw = dict(block_size=8, max_new_tokens=24, threshold=0.7, max_steps=8, delayed_cache=delayed)
    ref, ref_logs = _decode(model, prompts, "off", **dict(kw))
    for lean in ("head", "last_layer"):
        got, logs = _decode(model, prompts, lean, **dict(kw))
        for a, b in zip(got, ref):
            assert torch.equal(a, b), lean  # tokens, lengths, forwards, finished
        assert len(logs) == len(ref_logs) > 3
        predicted_mask = bool((got[0] == model_block_settings(model, TOK)[1]).any())
        for (masked, lg), (_, rl) in zip(logs, ref_logs):
            # the rows with logits: every still-masked position, unless the (tiny, random) model decoded the mask
            # token itself somewhere, which leaves x == mask at a decided position that no step reads again
            read = ~lg.isnan().all(-1)
            assert predicted_mask or not (masked & ~read).any()
            torch.testing.assert_close(lg[read], rl[read], atol=1e-5, rtol=0)


@pytest.mark.parametrize("mode", ["ar", "block"])
def test_generate_lean_and_prefill_cache_equal_the_reference_path(models, mode):
    qwen3_vl = models[True]
    prompts = [synthetic_prompt(TOK, n, seed=60 + n, image=True) for n in (5, 11)]
    base = dict(mode=mode, block_size=4, threshold=0.6, max_new_tokens=16)
    ref = generate(qwen3_vl, TOK, prompts, DecodeConfig(lean="off", prefill_cache=False, **base))
    new = generate(qwen3_vl, TOK, prompts, DecodeConfig(lean="last_layer", prefill_cache=True, **base))
    assert [g.token_ids for g in new] == [g.token_ids for g in ref]
    assert [g.forwards for g in new] == [g.forwards for g in ref]


def test_cached_vision_tables_give_bitwise_the_same_image_features(models):
    qwen3_vl = models[True]
    prompts = [synthetic_prompt(TOK, 4, seed=s, image=True) for s in (1, 2)]
    batch = collate_prompts(prompts, PADID)
    tables = vision_tables(qwen3_vl, batch.image_grid_thw)
    assert vision_tables(qwen3_vl, batch.image_grid_thw) is tables  # computed once per grid
    with torch.inference_mode():
        plain = qwen3_vl.model.get_image_features(batch.pixel_values, batch.image_grid_thw, return_dict=True)
        cached = qwen3_vl.model.get_image_features(batch.pixel_values, batch.image_grid_thw, return_dict=True, **tables)
    for a, b in zip(plain.pooler_output, cached.pooler_output):
        assert torch.equal(a, b)
    for fa, fb in zip(plain.deepstack_features, cached.deepstack_features):
        assert all(torch.equal(a, b) for a, b in zip(fa, fb))
    assert set(tables) == {"interp_indices", "interp_weights", "position_ids", "cu_seqlens", "max_seqlen"}


@pytest.mark.parametrize("lean", ["off", "last_layer"])
@pytest.mark.parametrize("rows, keep", [(8, 3), (16, 16), (8, 0)])
def test_counted_flops_of_a_step_match_the_roofline_formula(models, lean, rows, keep):
    """torch's FlopCounterMode on a real runner step (the matmuls it runs) against `roofline.text_flops` (attention
    left out: CPU SDPA is not counted): the lean step really skips the last layer's MLP at rows without logits."""
    from torch.utils.flop_counter import FlopCounterMode

    from wamdiff.decoding.bench.roofline import text_flops

    model = models[False]
    runner = StepRunner(model, collate_prompts([synthetic_prompt(TOK, 10, seed=3)], PADID), rows, rows, lean=lean)
    with torch.inference_mode():
        runner.prefill(None, keep=1)
        with FlopCounterMode(display=False) as counter:
            runner.forward(torch.zeros(1, rows, dtype=torch.long), runner.P, keep=keep)
    mlp_rows = keep if lean == "last_layer" else None
    assert counter.get_total_flops() == text_flops(model, rows, 0, keep, mlp_rows)
