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
    model = (tiny_qwen3_vl(tok, peaky=6.0, seed=2) if vl else tiny_qwen3(tok, peaky=6.0, seed=3)).cuda()
    prompts = [synthetic_prompt(tok, n, seed=n, image=vl) for n in (4, 11)]
    base = dict(mode=mode, block_size=8, max_new_tokens=24, delayed_cache=delayed, cuda_graphs=False)
    sdpa = generate(model, tok, prompts, DecodeConfig(**base))
    fi = generate(model, tok, prompts, DecodeConfig(attention="flashinfer", **base))
    assert [g.token_ids for g in fi] == [g.token_ids for g in sdpa]
