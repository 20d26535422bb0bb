"""Attention masks and position ids for block-causal masked diffusion (docs/concepts/masks.md).

Training layout, per sample: ``[prefix | x0 | xt]`` with the prompt LEFT-padded to width P and the answer
(x0 clean, xt noisy) of width A (right-padded). One pure rule (`layout_rule`) says who may attend to whom;
every encoding (SDPA bool, eager additive float, flex `BlockMask`) is produced from the same dense bool mask,
so the three paths cannot drift apart.

Decode time: the prompt and committed blocks live in a KV cache; `decode_block_mask_dense` gives the mask for one
(or a few consecutive) block(s) of queries on top of it, `decode_position_ids` their positions; the decoder makes
its whole slot mask once per batch from these (`decode_slot_mask_dense`) and slices it per step.

Conventions: True = may attend. Padding keys are never attended; every query row also attends to itself so
no row is fully masked (a pad query's output is garbage but finite, and ignored).
"""

from __future__ import annotations

import operator
from typing import Literal

import torch

Encoding = Literal["sdpa", "eager", "flex"]
PREFIX, X0, XT = 0, 1, 2


def check_block_size(block_size: int) -> int:
    try:
        b = operator.index(block_size)  # ints, numpy / torch integer scalars; not floats or bools
    except TypeError:
        b = None
    if b is None or isinstance(block_size, bool) or b <= 0:
        raise ValueError(f"block_size must be a positive int, got {block_size!r}")
    return b


def block_ids(n_tokens: int, block_size: int, device=None) -> torch.LongTensor:
    """Block index of each answer column: ``arange(n) // B``."""
    return torch.arange(n_tokens, device=device) // check_block_size(block_size)


def layout_rule(q_seg, q_blk, q_idx, k_seg, k_blk, k_idx):
    """The [prefix | x0 | xt] rule, elementwise (broadcast tensors, or scalars in a flex ``mask_mod``). Five parts:

    1. prefix causal:          prefix query sees prefix keys at or before it (token-causal, independent of B);
    2. answer sees prefix:     x0 and xt queries see the whole prefix;
    3. x0 block-causal:        x0 block b sees x0 blocks <= b (bidirectional inside its block), never xt;
    4. xt offset block-causal: xt block b sees clean x0 blocks < b;
    5. xt block diagonal:      xt block b sees its own noisy block (bidirectional).
    """
    q_pre, k_pre = q_seg == PREFIX, k_seg == PREFIX
    prefix_causal = q_pre & k_pre & (k_idx <= q_idx)
    answer_sees_prefix = ~q_pre & k_pre
    x0_block_causal = (q_seg == X0) & (k_seg == X0) & (k_blk <= q_blk)
    xt_offset = (q_seg == XT) & (k_seg == X0) & (k_blk < q_blk)
    xt_diagonal = (q_seg == XT) & (k_seg == XT) & (k_blk == q_blk)
    return prefix_causal | answer_sees_prefix | x0_block_causal | xt_offset | xt_diagonal


def _check_masks(prompt_mask: torch.Tensor, answer_mask: torch.Tensor) -> None:
    if prompt_mask.ndim != 2 or answer_mask.ndim != 2 or prompt_mask.shape[0] != answer_mask.shape[0]:
        raise ValueError(
            f"prompt_mask [N,P] and answer_mask [N,A] must be 2-D with the same N, got "
            f"{tuple(prompt_mask.shape)} and {tuple(answer_mask.shape)}"
        )
    if answer_mask.shape[1] == 0:
        raise ValueError("answer is missing: answer width A is 0")


def training_mask_dense(prompt_mask: torch.Tensor, answer_mask: torch.Tensor, block_size: int) -> torch.BoolTensor:
    """Dense bool mask [N, L, L], L = P + 2A, for the [prefix | x0 | xt] layout with padding folded in."""
    _check_masks(prompt_mask, answer_mask)
    n, p = prompt_mask.shape
    a = answer_mask.shape[1]
    dev = prompt_mask.device
    blk = block_ids(a, block_size, dev)
    seg = torch.cat([torch.full((p,), PREFIX, device=dev), torch.full((a,), X0, device=dev), torch.full((a,), XT, device=dev)])
    bid = torch.cat([torch.full((p,), -1, device=dev), blk, blk])
    idx = torch.arange(p + 2 * a, device=dev)
    rule = layout_rule(seg[:, None], bid[:, None], idx[:, None], seg[None, :], bid[None, :], idx[None, :])
    valid = torch.cat([prompt_mask.bool(), answer_mask.bool(), answer_mask.bool()], dim=1)  # [N, L] real keys
    return (rule[None] & valid[:, None, :]) | torch.eye(p + 2 * a, dtype=torch.bool, device=dev)[None]


def prefill_mask_dense(prompt_mask: torch.Tensor) -> torch.BoolTensor:
    """Dense bool mask [N, P, P] for the prompt alone: token-causal over real keys (+ self). Prefill with this."""
    p = prompt_mask.shape[1]
    eye = torch.eye(p, dtype=torch.bool, device=prompt_mask.device)
    causal = torch.ones(p, p, dtype=torch.bool, device=prompt_mask.device).tril()
    return (causal[None] & prompt_mask.bool()[:, None, :]) | eye[None]


def decode_block_mask_dense(cache_valid: torch.Tensor, block_len: int, n_blocks: int = 1) -> torch.BoolTensor:
    """Dense bool mask [N, Q, C+Q], Q = n_blocks*block_len, for queries appended after a KV cache of C entries.

    Query block j sees every valid cache entry, query blocks < j and its own block (bidirectional). With
    n_blocks=1 it is one block-step (denoise or commit); n_blocks=2 fuses the commit of a clean block with the
    first denoising step of the next (block-causal between them, as x0/xt in training). block_len=1 is causal.
    """
    if cache_valid.ndim != 2:
        raise ValueError(f"cache_valid must be [N, C] bool, got shape {tuple(cache_valid.shape)}")
    check_block_size(block_len)
    n, c = cache_valid.shape
    q = block_len * n_blocks
    dev = cache_valid.device
    qb = torch.arange(q, device=dev) // block_len
    in_block = qb[None, :] <= qb[:, None]  # [Q, Q] block-causal
    return torch.cat([cache_valid.bool()[:, None, :].expand(n, q, c), in_block[None].expand(n, q, q)], dim=2)


def decode_slot_mask_dense(prompt_valid: torch.Tensor, block_size: int, answer_len: int) -> torch.BoolTensor:
    """Dense bool mask [N, S, S], S = P + answer_len, over every decode slot [left-padded prompt | answer blocks]:
    prompt rows as `prefill_mask_dense`, answer rows as `decode_block_mask_dense` over the prompt and all
    answer_len / block_size blocks. Slots not written yet are later blocks, hidden by the same rule; a step's mask
    is a row slice of it (`decoding.runner.StepRunner`)."""
    n, p = prompt_valid.shape
    if answer_len % check_block_size(block_size):
        raise ValueError(f"answer_len {answer_len} is not a whole number of blocks of {block_size}")
    hidden = torch.zeros(n, p, answer_len, dtype=torch.bool, device=prompt_valid.device)  # the prompt sees no answer
    prompt_rows = torch.cat([prefill_mask_dense(prompt_valid), hidden], dim=2)
    return torch.cat([prompt_rows, decode_block_mask_dense(prompt_valid, block_size, answer_len // block_size)], dim=1)


def encode_mask(dense: torch.Tensor, encoding: Encoding = "sdpa", dtype: torch.dtype = torch.float32):
    """Turn a dense bool mask [N, Q, K] into what the attention kernel takes.

    sdpa: bool [N,1,Q,K] (True=attend); eager: additive float [N,1,Q,K] with 0 / -inf (eager ADDS the mask,
    so a bool there would be silently wrong); flex: a `BlockMask` whose mask_mod reads the dense mask
    (a tensor turned into a score_mod aborts on CPU). Flex is inference-only on CPU (no backward).
    """
    if encoding == "sdpa":
        return dense[:, None]
    if encoding == "eager":
        out = torch.zeros(dense.shape, dtype=dtype, device=dense.device).masked_fill_(~dense, float("-inf"))
        return out[:, None]
    if encoding == "flex":
        from torch.nn.attention.flex_attention import create_block_mask

        n, q, k = dense.shape

        def mask_mod(b, h, q_idx, kv_idx):
            return dense[b, q_idx, kv_idx]

        return create_block_mask(mask_mod, B=n, H=None, Q_LEN=q, KV_LEN=k, device=dense.device)
    raise ValueError(f"unknown mask encoding {encoding!r}; expected 'sdpa', 'eager' or 'flex'")


def training_mask(prompt_mask, answer_mask, block_size: int, encoding: Encoding = "sdpa", dtype=torch.float32):
    """[prefix | x0 | xt] mask in the given encoding (see `training_mask_dense`, `encode_mask`)."""
    return encode_mask(training_mask_dense(prompt_mask, answer_mask, block_size), encoding, dtype)


# ----------------------------------------------------------------------------------------------------- positions


def uses_mrope(model) -> bool:
    """True for Qwen3-VL (3-row M-RoPE position ids), False for plain Qwen3 (1-D ids)."""
    return hasattr(getattr(model, "model", None), "get_rope_index")


def prefix_position_ids(model, prompt_ids, prompt_mask, *, image_grid_thw=None, mm_token_type_ids=None):
    """Position ids of the left-padded prompt and the first answer position of each sample.

    Returns ``(pos, next_pos)``: pos is [N, P] (Qwen3) or [3, N, P] (Qwen3-VL, from the model's
    `get_rope_index`, images take 2-D grid positions); pad slots get 0 and never shift real positions;
    next_pos [N] is where the answer starts (= number of real prompt tokens for Qwen3).
    """
    mask = prompt_mask.bool()
    if not uses_mrope(model):
        pos = (mask.long().cumsum(1) - 1).clamp_min(0)
        return pos, mask.sum(1)
    if mm_token_type_ids is None:
        mm_token_type_ids = (prompt_ids == model.config.image_token_id).long()
    model.model.rope_deltas = None  # never let a stale cached delta leak into another sample
    pos, _ = model.model.get_rope_index(
        prompt_ids, mm_token_type_ids=mm_token_type_ids, image_grid_thw=image_grid_thw, attention_mask=mask.long()
    )
    pos = pos.masked_fill(~mask[None], 0)
    return pos, pos.amax(dim=(0, 2)) + 1


def decode_position_ids(next_pos: torch.Tensor, offset: int, length: int, *, mrope: bool) -> torch.LongTensor:
    """Positions of `length` answer tokens starting `offset` tokens into the answer: next_pos + offset + arange.

    Shape [N, length] (Qwen3) or [3, N, length] (Qwen3-VL: text tokens share one id on all three rows).
    """
    pos = next_pos[:, None] + offset + torch.arange(length, device=next_pos.device)[None]
    return pos[None].expand(3, -1, -1) if mrope else pos


def training_position_ids(model, prompt_ids, prompt_mask, answer_len: int, *, image_grid_thw=None, mm_token_type_ids=None):
    """Position ids for [prefix | x0 | xt]: xt reuses x0's ids. [N, P+2A] or [3, N, P+2A]."""
    pos, next_pos = prefix_position_ids(
        model, prompt_ids, prompt_mask, image_grid_thw=image_grid_thw, mm_token_type_ids=mm_token_type_ids
    )
    ans = decode_position_ids(next_pos, 0, answer_len, mrope=pos.ndim == 3)
    return torch.cat([pos, ans, ans], dim=-1)
