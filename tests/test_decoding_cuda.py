"""GPU-only checks (skipped without CUDA): CUDA-graph steps and FlashInfer attention give the eager SDPA path's tokens."""

from __future__ import annotations

import importlib.util

import pytest
import torch

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_qwen3_vl, tiny_tokenizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MODES = [("ar", False), ("block", False), ("block", True)]  # (mode, delayed_cache)


@pytest.mark.parametrize("mode, delayed", MODES)
def test_cuda_graphs_match_eager(mode, delayed):
    tok = tiny_tokenizer()
    model = tiny_qwen3(tok, peaky=6.0, seed=3).cuda()
    prompts = [synthetic_prompt(tok, n, seed=n) for n in (4, 11)]
    base = dict(mode=mode, block_size=8, max_new_tokens=24, delayed_cache=delayed)
    eager = generate(model, tok, prompts, DecodeConfig(cuda_graphs=False, **base))
    graphs = generate(model, tok, prompts, DecodeConfig(cuda_graphs=True, **base))
    assert [g.token_ids for g in graphs] == [g.token_ids for g in eager]
    assert [g.forwards for g in graphs] == [g.forwards for g in eager]


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs the flashinfer package")
@pytest.mark.parametrize("vl", [False, True])
@pytest.mark.parametrize("mode, delayed", MODES)
def test_flashinfer_matches_sdpa(vl, mode, delayed):
    tok = tiny_tokenizer()
    model = (tiny_qwen3_vl(tok, peaky=6.0, seed=2) if vl else tiny_qwen3(tok, peaky=6.0, seed=3)).cuda().bfloat16()
    prompts = [synthetic_prompt(tok, n, seed=n, image=vl) for n in (4, 11)]
    base = dict(mode=mode, block_size=8, max_new_tokens=24, delayed_cache=delayed, cuda_graphs=False)
    sdpa = generate(model, tok, prompts, DecodeConfig(**base))
    fi = generate(model, tok, prompts, DecodeConfig(attention="flashinfer", **base))
    # bf16 kernels differ in rounding: near-ties may flip a token, so compare agreement, not identity
    same = sum(a == b for f, s in zip(fi, sdpa) for a, b in zip(f.token_ids, s.token_ids))
    total = sum(max(len(f.token_ids), len(s.token_ids)) for f, s in zip(fi, sdpa))
    assert same / total >= 0.9, (same, total)


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs the flashinfer package")
def test_flashinfer_step_logits_match_sdpa():
    """One block step through FlashInfer vs SDPA on the same cache state (bf16 tolerance)."""
    from wamdiff.decoding.engine import model_block_settings
    from wamdiff.models.tokens import token_id
    from wamdiff.decoding.runner import StepRunner, collate_prompts
    from wamdiff.models.tokens import PAD

    tok = tiny_tokenizer()
    model = tiny_qwen3(tok, peaky=6.0, seed=3).cuda().bfloat16()
    prompts = [synthetic_prompt(tok, n, seed=n) for n in (4, 11)]
    batch = collate_prompts(prompts, token_id(tok, PAD), "cuda")
    mask_id = model_block_settings(model, tok)[1]
    out = {}
    for attn in ("sdpa", "flashinfer"):
        r = StepRunner(model, batch, 8, 16, attention=attn)
        with torch.inference_mode():
            r.prefill(None, keep=1)
            out[attn] = r.forward(torch.full((2, 8), mask_id, device="cuda"), r.P, keep=8).float()
    torch.testing.assert_close(out["flashinfer"], out["sdpa"], atol=3e-2, rtol=3e-2)
