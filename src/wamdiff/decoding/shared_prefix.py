"""The prompt head every prompt shares, prefilled once (prefix caching, as vLLM's automatic prefix caching).

Every driving prompt starts with the same tokens ("<|im_start|>user\\nHere is a front-view images from a driving
vehicle: <|vision_start|>": 19 of ~129); the prompt is token-causal, so their K/V depend on nothing after them and
are the same in every call. `head_length` finds the head a batch shares (text tokens only: an image token's
embedding comes from its image), `head_kv` computes its K/V once per model state, and the runner writes them into
each row's slots and prefills only the rest. Exact: the K/V of the head are those the full prefill would write
(`tests/test_decoding_shared_prefix.py` compares logits and cache).
"""

from __future__ import annotations

import torch

_CACHE_ATTR = "_wamdiff_shared_prefix"
MIN_HEAD = 4  # a shorter shared head is not worth a cache lookup


def head_length(ids: torch.Tensor, valid: torch.Tensor, mm_token_type_ids: torch.Tensor | None) -> int:
    """Tokens at the start of every (left-padded) prompt that are the same text tokens in every row; at least one
    prompt token is left after it (the prefill must still produce the last prompt row's logits)."""
    lens = valid.sum(1).tolist()
    rows = [ids[i, ids.shape[1] - n:].tolist() for i, n in enumerate(lens)]
    image = [mm_token_type_ids[i, ids.shape[1] - n:].tolist() if mm_token_type_ids is not None else [0] * n
             for i, n in enumerate(lens)]
    limit = min(lens) - 1
    h = 0
    while h < limit and image[0][h] == 0 and all(r[h] == rows[0][h] for r in rows):
        h += 1
    return h if h >= MIN_HEAD else 0


def _state_key(model, head: tuple[int, ...], dtype, device) -> tuple:
    """Identity of the head's K/V: the tokens and the weights as they are now (a model trained between calls, as
    the on-policy refresh does, gets them recomputed)."""
    params = list(model.parameters())  # (inference tensors have no version counter: weights made in inference mode)
    return (head, str(dtype), str(device), sum(p._version for p in params if not p.is_inference()),
            tuple(p.data_ptr() for p in params[:2]))


def head_kv(model, head: list[int], dtype, device, make_runner) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer (K, V) [1, kv_heads, len(head), head_dim] of the prompt head: the prefill of a runner over the head
    alone (`make_runner(ids)`), once per model state and head (a few heads per model are kept)."""
    key = _state_key(model, tuple(head), dtype, device)
    memo = model.__dict__.setdefault(_CACHE_ATTR, {})
    got = memo.get(key)
    if got is None:
        runner = make_runner(torch.tensor([head], device=device))
        runner.prefill(None, keep=1)
        got = [(layer.keys.clone(), layer.values.clone()) for layer in runner.cache.layers]
        if len(memo) >= 4:
            memo.clear()
        memo[key] = got
    return got
