"""Decode-step attention as a paged prefill over the slot cache: FlashInfer on CUDA, plain torch as reference.

A decode step's queries (B block tokens, 2B for a fused commit, a few for a delayed-cache step, 1 for AR)
attend to the static slot cache under the runner's slot mask -- non-causal inside the block. One layer's
cache, [N, kv_heads, S, head_dim], is read as N pages of S slots in FlashInfer's HND paged layout (sample i
is page i), so no K/V is copied. Only slots below the end of the step's last block are scanned (`kv_len`),
and the step's slot-mask rows cut to kv_len become the custom mask. One plan per step serves every layer.

`FlashInferAttention` runs FlashInfer's `BatchPrefillWithPagedKVCacheWrapper` (imported on first use, CUDA
only; never imported on a CPU path). `TorchPagedAttention` computes the same contract -- indptr arrays,
pages, last-page lengths, flattened per-request masks -- in plain torch, so the CPU tests check the layout
and the runner's use of it against the SDPA path. `tests/test_decoding_cuda.py` compares the FlashInfer path with
SDPA on CUDA (skipped without it); it passed on an H200 with FlashInfer 0.7.2 (docs/results/gpu.md).
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass

import torch

WORKSPACE_BYTES = 128 * 1024 * 1024  # FlashInfer's scratch buffer (its documented default size)


@dataclass
class PagedStep:
    """One decode step in FlashInfer's paged-prefill terms (int32 index arrays on the cache's device).

    Request i: queries ``qo_indptr[i]:qo_indptr[i+1]`` of the flattened [N * Q] query rows; pages
    ``kv_indices[kv_indptr[i]:kv_indptr[i+1]]`` (here exactly page i); its last page holds ``last_page_len[i]``
    valid slots; ``custom_mask`` holds its [Q, kv_len] "may attend" rows, row-major, requests concatenated."""

    qo_indptr: torch.Tensor
    kv_indptr: torch.Tensor
    kv_indices: torch.Tensor
    last_page_len: torch.Tensor
    custom_mask: torch.Tensor
    q_len: int
    kv_len: int
    page_size: int
    planned: bool = False


def paged_step(allow_rows: torch.Tensor, kv_len: int) -> PagedStep:
    """Layout of a step from its slot-mask rows `allow_rows` [N, 1, Q, S] (bool) and the slots it may read."""
    n, _, q, s = allow_rows.shape
    if not 0 < kv_len <= s:
        raise ValueError(f"paged_step: kv_len {kv_len} outside (0, {s}]")
    dev = allow_rows.device
    i32 = dict(dtype=torch.int32, device=dev)
    return PagedStep(
        qo_indptr=torch.arange(n + 1, **i32) * q,
        kv_indptr=torch.arange(n + 1, **i32),
        kv_indices=torch.arange(n, **i32),
        last_page_len=torch.full((n,), kv_len, **i32),
        custom_mask=allow_rows[:, 0, :, :kv_len].reshape(-1).contiguous(),
        q_len=q, kv_len=kv_len, page_size=s,
    )


class TorchPagedAttention:
    """The paged-prefill contract in plain torch (reference; any device). Loops over requests: tests only."""

    def plan(self, step: PagedStep, *, num_qo_heads: int, num_kv_heads: int, head_dim: int, scale: float, dtype):
        self.step, self.scale, self.group = step, scale, num_qo_heads // num_kv_heads

    def run(self, q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor) -> torch.Tensor:
        st, out, offset = self.step, torch.empty_like(q), 0
        for i in range(st.qo_indptr.numel() - 1):
            q0, q1 = int(st.qo_indptr[i]), int(st.qo_indptr[i + 1])
            pages = st.kv_indices[int(st.kv_indptr[i]):int(st.kv_indptr[i + 1])].long()
            length = (pages.numel() - 1) * st.page_size + int(st.last_page_len[i])
            k = k_pages[pages].permute(1, 0, 2, 3).flatten(1, 2)[:, :length]  # [kv_heads, length, D]
            v = v_pages[pages].permute(1, 0, 2, 3).flatten(1, 2)[:, :length]
            mask = st.custom_mask[offset:offset + (q1 - q0) * length].view(q1 - q0, length)
            offset += (q1 - q0) * length
            k, v = k.repeat_interleave(self.group, 0), v.repeat_interleave(self.group, 0)
            scores = torch.einsum("qhd,hkd->hqk", q[q0:q1].float(), k.float()) * self.scale
            probs = scores.masked_fill(~mask[None], float("-inf")).softmax(-1)
            out[q0:q1] = torch.einsum("hqk,hkd->qhd", probs, v.float()).to(q.dtype)
        return out


class FlashInferAttention:
    """FlashInfer's batch paged prefill with a custom mask (CUDA; fp16 / bf16 models)."""

    def __init__(self, device, dtype=torch.bfloat16):
        if dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"attention='flashinfer' runs fp16/bf16 kernels; the model is {dtype} "
                             "(decode with DecodeConfig(dtype='bf16'))")
        if not flashinfer_available(device):
            raise ValueError(f"attention='flashinfer' needs a CUDA device and the flashinfer package (device {device}, "
                             f"flashinfer importable: {importlib.util.find_spec('flashinfer') is not None})")
        import flashinfer  # noqa: PLC0415  (CUDA-only package)

        workspace = torch.empty(WORKSPACE_BYTES, dtype=torch.uint8, device=device)
        self.wrapper = flashinfer.BatchPrefillWithPagedKVCacheWrapper(workspace, kv_layout="HND")

    def plan(self, step: PagedStep, *, num_qo_heads: int, num_kv_heads: int, head_dim: int, scale: float, dtype):
        self.wrapper.plan(
            step.qo_indptr, step.kv_indptr, step.kv_indices, step.last_page_len, num_qo_heads, num_kv_heads, head_dim,
            step.page_size, custom_mask=step.custom_mask, causal=False, sm_scale=scale, q_data_type=dtype,
            kv_data_type=dtype,
        )

    def run(self, q: torch.Tensor, k_pages: torch.Tensor, v_pages: torch.Tensor) -> torch.Tensor:
        return self.wrapper.run(q, (k_pages, v_pages))


def flashinfer_available(device) -> bool:
    return torch.device(device).type == "cuda" and importlib.util.find_spec("flashinfer") is not None


def make_backend(name: str, device, dtype=torch.bfloat16):
    """"flashinfer" (CUDA, fp16/bf16) or "torch_paged" (the reference contract, any device and dtype)."""
    if name == "flashinfer":
        return FlashInferAttention(device, dtype)
    if name == "torch_paged":
        return TorchPagedAttention()
    raise ValueError(f"unknown paged attention backend {name!r} (use flashinfer or torch_paged)")


def step_hook(backend, step: PagedStep):
    """The per-layer attention of one step: plans on the first layer (heads, scale and dtype are known there),
    then runs the backend on the layer's whole cache. Returns HF's (attn_output [N, Q, H, D], weights=None)."""

    def attend(module, query, key, value, scaling):
        n, hq, q_len, d = query.shape
        if not step.planned:
            backend.plan(step, num_qo_heads=hq, num_kv_heads=key.shape[1], head_dim=d,
                         scale=scaling if scaling is not None else d ** -0.5, dtype=query.dtype)
            step.planned = True
        out = backend.run(query.transpose(1, 2).reshape(n * q_len, hq, d), key, value)
        return out.view(n, q_len, hq, d), None

    return attend
