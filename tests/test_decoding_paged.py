"""The paged-attention layout of decode steps (the FlashInfer path's contract) against the SDPA path, on CPU."""

from __future__ import annotations

import pytest
import torch

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.decoding import block as block_mod
from wamdiff.decoding.ar import decode_ar
from wamdiff.decoding.engine import model_block_settings
from wamdiff.models.tokens import token_id
from wamdiff.decoding.paged_attention import FlashInferAttention, paged_step
from wamdiff.decoding.runner import StepRunner, collate_prompts
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_qwen3_vl, tiny_tokenizer
from wamdiff.models.tokens import IM_END, PAD

TOK = tiny_tokenizer()
EOS, PADID = token_id(TOK, IM_END), token_id(TOK, PAD)


def test_paged_step_layout_by_hand():
    allow = torch.zeros(2, 1, 3, 10, dtype=torch.bool)
    allow[0, 0, :, 2:6] = True
    allow[1, 0, 1, 0] = True
    st = paged_step(allow, kv_len=6)
    assert st.qo_indptr.tolist() == [0, 3, 6] and st.kv_indptr.tolist() == [0, 1, 2]
    assert st.kv_indices.tolist() == [0, 1] and st.last_page_len.tolist() == [6, 6] and st.page_size == 10
    rows = st.custom_mask.view(2, 3, 6)  # request-major, then query rows of kv_len columns
    assert rows[0].all(dim=0).tolist() == [False, False, True, True, True, True]
    assert rows[1].sum() == 1 and rows[1, 1, 0]
    assert st.qo_indptr.dtype == torch.int32
    with pytest.raises(ValueError, match="kv_len"):
        paged_step(allow, kv_len=11)


def _traced_logits(model, prompts, *, mode, attention, delayed=False, block=4, max_new=12):
    batch = collate_prompts(prompts, PADID)
    logs = []
    if mode == "ar":
        runner = StepRunner(model, batch, 1, max_new + 1, attention=attention)
        fwd = runner.forward
        runner.forward = lambda ids, q0, keep: logs.append(fwd(ids, q0, keep).float()) or logs[-1]
        out = decode_ar(runner, max_new_tokens=max_new, eos_id=EOS, pad_id=PADID)
    else:
        runner = StepRunner(model, batch, block, max_new, attention=attention)
        cfg = DecodeConfig(block_size=block, max_new_tokens=max_new, threshold=0.6, delayed_cache=delayed)
        out = block_mod.decode_block(runner, cfg, mask_id=model_block_settings(model, TOK)[1], eos_id=EOS, pad_id=PADID,
                                     trace=lambda b, s, x, lg: logs.append(lg.float().nan_to_num(0.0, 0.0, 0.0)))
    return out[0], logs


@pytest.mark.parametrize("vl", [False, True])
@pytest.mark.parametrize("mode, delayed", [("ar", False), ("block", False), ("block", True)])
def test_paged_layout_gives_the_sdpa_steps(vl, mode, delayed):
    """Every step through the paged layout (pages = samples, keys cut at the block end, flattened custom masks)
    gives the SDPA path's logits (<= 1e-5) and tokens: prefill, fused commits, delayed-cache steps, AR steps."""
    model = tiny_qwen3_vl(TOK, peaky=6.0, seed=2) if vl else tiny_qwen3(TOK, peaky=6.0, seed=1)
    prompts = [synthetic_prompt(TOK, n, seed=50 + n, image=vl) for n in (3, 10)]
    ref_tokens, ref = _traced_logits(model, prompts, mode=mode, attention="sdpa", delayed=delayed)
    tokens, got = _traced_logits(model, prompts, mode=mode, attention="torch_paged", delayed=delayed)
    assert torch.equal(tokens, ref_tokens)
    assert len(got) == len(ref) > 2
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def test_paged_attention_rejects_compile_and_unknown_names():
    model = tiny_qwen3(TOK, peaky=6.0, seed=1)
    with pytest.raises(ValueError, match="compile"):
        generate(model, TOK, [synthetic_prompt(TOK, 4)], DecodeConfig(attention="torch_paged", compile=True))
    with pytest.raises(ValueError, match="attention"):
        DecodeConfig(attention="flash")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU error")
def test_flashinfer_without_cuda_or_in_fp32_says_why():
    with pytest.raises(ValueError, match="CUDA device and the flashinfer package"):
        FlashInferAttention("cpu")
    with pytest.raises(ValueError, match="bf16"):
        FlashInferAttention("cpu", torch.float32)
