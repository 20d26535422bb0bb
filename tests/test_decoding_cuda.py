"""GPU-only checks (skipped without CUDA): CUDA-graph steps and FlashInfer attention give the eager SDPA path's tokens."""

from __future__ import annotations

import gc
import importlib.util

import pytest
import torch

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_qwen3_vl, tiny_tokenizer

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")

MODES = [("ar", False), ("block", False), ("block", True)]  # (mode, delayed_cache)


@pytest.mark.parametrize("vl, dtype", [(False, torch.float32), (True, torch.float32), (True, torch.bfloat16)])
@pytest.mark.parametrize("mode, delayed", MODES)
def test_cuda_graphs_match_eager(mode, delayed, vl, dtype):
    """Replayed graphs run the eager step's kernels on the same inputs: the same tokens, bit for bit."""
    tok = tiny_tokenizer()
    model = (tiny_qwen3_vl(tok, peaky=6.0, seed=2) if vl else tiny_qwen3(tok, peaky=6.0, seed=3)).cuda().to(dtype)
    prompts = [synthetic_prompt(tok, n, seed=n, image=vl) for n in (4, 11)]
    base = dict(mode=mode, block_size=8, max_new_tokens=24, delayed_cache=delayed)
    eager = generate(model, tok, prompts, DecodeConfig(cuda_graphs=False, **base))
    graphs = generate(model, tok, prompts, DecodeConfig(cuda_graphs=True, **base))
    assert [g.token_ids for g in graphs] == [g.token_ids for g in eager]
    assert [g.forwards for g in graphs] == [g.forwards for g in eager]


def test_released_graphs_are_replayed_by_the_next_decode_of_that_shape():
    """A finished decode's cache and graphs serve the next decode of the same shape (other prompts, same batch and
    prompt bucket): no capture after the first decode, and every answer still the eager one."""
    from wamdiff.decoding import cuda_graphs

    tok = tiny_tokenizer()
    model = tiny_qwen3_vl(tok, peaky=6.0, seed=2).cuda()
    batches = [[synthetic_prompt(tok, n, seed=n, image=True) for n in lengths] for lengths in ((4, 11), (5, 9), (4, 11))]
    base = dict(mode="block", block_size=8, max_new_tokens=24)
    eager = [generate(model, tok, b, DecodeConfig(cuda_graphs=False, **base)) for b in batches]
    graphs, captured = [], []
    for b in batches:
        graphs.append(generate(model, tok, b, DecodeConfig(cuda_graphs=True, **base)))
        (entry,) = cuda_graphs._POOL[model].values()
        captured.append((id(entry[1]), len(entry[1].graphs)))
    assert [[g.token_ids for g in gs] for gs in graphs] == [[g.token_ids for g in gs] for gs in eager]
    assert captured[1:] == captured[:1] * 2  # the same step object and not one new graph


def test_cuda_graphs_survive_a_collection_during_capture(monkeypatch):
    """A runner that is never released (the bench's step-cost loops build such) leaves its graphs to the garbage
    collector, which, run as often as it can be, must not free them in the middle of another runner's capture (that
    invalidates the capture)."""
    from wamdiff.decoding.runner import StepRunner

    monkeypatch.setattr(StepRunner, "release", lambda self: None)  # every decode captures anew, as before pooling
    tok = tiny_tokenizer()
    model = tiny_qwen3_vl(tok, peaky=6.0, seed=2).cuda()
    prompts = [synthetic_prompt(tok, 6, seed=1, image=True)]
    config = DecodeConfig(mode="block", block_size=8, max_new_tokens=16, cuda_graphs=True)
    threshold = gc.get_threshold()
    gc.set_threshold(1)
    try:
        outs = [generate(model, tok, prompts, config)[0].token_ids for _ in range(4)]
    finally:
        gc.set_threshold(*threshold)
    assert outs[1:] == outs[:1] * 3


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs the flashinfer package")
@pytest.mark.parametrize("vl", [False, True])
@pytest.mark.parametrize("mode, delayed", MODES)
def test_flashinfer_decodes_like_sdpa(vl, mode, delayed):
    """The whole decode loop through FlashInfer. Its kernels round differently from SDPA's, and a random model has
    near-ties, so a flipped token can change the rest of an answer: the exact check is the step-logits test below.
    Here fp16 (finer than bf16) keeps flips rare; a layout or mask error agrees on almost no token."""
    tok = tiny_tokenizer()
    # head_dim 64 (hidden 256 over 4 heads), as the shipped checkpoints: FlashInfer's prefill kernels take 64/128/256
    model = (tiny_qwen3_vl(tok, hidden=256, peaky=6.0, seed=2) if vl
             else tiny_qwen3(tok, hidden=256, peaky=6.0, seed=3)).cuda().half()
    prompts = [synthetic_prompt(tok, n, seed=n, image=vl) for n in (4, 11)]
    base = dict(mode=mode, block_size=8, max_new_tokens=24, delayed_cache=delayed, cuda_graphs=False)
    sdpa = generate(model, tok, prompts, DecodeConfig(**base))
    fi = generate(model, tok, prompts, DecodeConfig(attention="flashinfer", **base))
    same = sum(a == b for f, s in zip(fi, sdpa) for a, b in zip(f.token_ids, s.token_ids))
    total = sum(max(len(f.token_ids), len(s.token_ids)) for f, s in zip(fi, sdpa))
    assert same / total >= 0.5, (same, total)


@pytest.mark.skipif(importlib.util.find_spec("flashinfer") is None, reason="needs the flashinfer package")
@pytest.mark.parametrize("vl", [False, True])
@pytest.mark.parametrize("rows", [1, 8])
def test_flashinfer_step_logits_match_sdpa(rows, vl):
    """One decode step (1 row: AR; 8 rows: a block) through FlashInfer vs SDPA on the same cache state. Tolerance:
    four bf16 steps at the largest logit (each layer's two kernels round independently; a wrong layout or mask is off
    by the logits' own size); a row's top token may differ only where SDPA's top two are that close."""
    from wamdiff.decoding.engine import model_block_settings
    from wamdiff.decoding.runner import StepRunner, collate_prompts
    from wamdiff.models.tokens import PAD, token_id

    tok = tiny_tokenizer()
    model = (tiny_qwen3_vl(tok, hidden=256, peaky=6.0, seed=2) if vl
             else tiny_qwen3(tok, hidden=256, peaky=6.0, seed=3)).cuda().bfloat16()
    prompts = [synthetic_prompt(tok, n, seed=n, image=vl) for n in (4, 11)]
    batch = collate_prompts(prompts, token_id(tok, PAD), "cuda")
    if batch.pixel_values is not None:
        batch.pixel_values = batch.pixel_values.bfloat16()
    mask_id = model_block_settings(model, tok)[1]
    out = {}
    for attn in ("sdpa", "flashinfer"):
        r = StepRunner(model, batch, rows, 16, attention=attn)
        with torch.inference_mode():
            r.prefill(None, keep=1)
            out[attn] = r.forward(torch.full((2, rows), mask_id, device="cuda"), r.P, keep=rows).float()
    ref, got = out["sdpa"], out["flashinfer"]
    atol = 4 * 2 ** -8 * ref.abs().max().item()
    torch.testing.assert_close(got, ref, atol=atol, rtol=0)
    flipped = got.argmax(-1) != ref.argmax(-1)
    top2 = ref.topk(2, dim=-1).values
    assert ((top2[..., 0] - top2[..., 1])[flipped] <= 2 * atol).all()  # a top token may differ only at a near-tie
