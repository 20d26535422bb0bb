"""GPU-only checks (skipped without CUDA): CUDA-graph steps give the eager path's tokens."""

from __future__ import annotations

import pytest
import torch

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_tokenizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")


@pytest.mark.parametrize("mode", ["ar", "block"])
def test_cuda_graphs_match_eager(mode):
    tok = tiny_tokenizer()
    model = tiny_qwen3(tok, peaky=6.0, seed=3).cuda()
    prompts = [synthetic_prompt(tok, n, seed=n) for n in (4, 11)]
    eager = generate(model, tok, prompts, DecodeConfig(mode=mode, block_size=4, max_new_tokens=16, cuda_graphs=False))
    graphs = generate(model, tok, prompts, DecodeConfig(mode=mode, block_size=4, max_new_tokens=16, cuda_graphs=True))
    assert [g.token_ids for g in graphs] == [g.token_ids for g in eager]
    assert [g.forwards for g in graphs] == [g.forwards for g in eager]
