"""One attention entry point that picks the kernel from the mask it is given.

Registered in transformers' `AttentionInterface` under `ATTN_IMPL` (Qwen3-VL refuses `flex_attention` by
name, so a custom name is the way in). A `BlockMask` runs flex attention, a float mask runs eager (the mask is
added), a bool mask or None runs SDPA. So the mask encoding chosen in `masks.py` decides the path, and a model
switched once with `install_attention(model)` serves every encoding without touching its config per call.
Only the text decoder is switched; the vision tower keeps its own attention. Inside `step_attention(fn)`
every text-decoder attention call goes to `fn` instead (the decode fast paths bring their own kernel and
layout; see `wamdiff.decoding.paged_attention`).
"""

from __future__ import annotations

import warnings
from contextlib import contextmanager
from contextvars import ContextVar

import torch
from torch.nn.attention.flex_attention import flex_attention
from transformers import AttentionInterface
from transformers.integrations.flex_attention import flex_attention_forward
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask
from transformers.models.qwen3.modeling_qwen3 import eager_attention_forward

ATTN_IMPL = "wamdiff_mask_dispatch"


def _flex_eager(module, query, key, value, block_mask, scaling=None, **kwargs):
    """Uncompiled flex attention: transformers compiles it on first use (~20 s on CPU, per shape)."""
    with warnings.catch_warnings():  # "called without torch.compile": intended here
        warnings.simplefilter("ignore", UserWarning)
        out = flex_attention(query, key, value, block_mask=block_mask, scale=scaling, enable_gqa=key.shape[1] != query.shape[1])
    return out.transpose(1, 2).contiguous(), None


_STEP_ATTENTION: ContextVar = ContextVar("wamdiff_step_attention", default=None)


@contextmanager
def step_attention(fn):
    """Route the text decoder's attention through `fn(module, query, key, value, scaling)` inside the block."""
    token = _STEP_ATTENTION.set(fn)
    try:
        yield
    finally:
        _STEP_ATTENTION.reset(token)


def mask_dispatch_attention(module, query, key, value, attention_mask, **kwargs):
    # Compiled steps never carry an override (the runner refuses compile with paged attention), and reading a
    # ContextVar would break the compiled graph at every layer: skip the check while tracing.
    if not torch.compiler.is_compiling():
        override = _STEP_ATTENTION.get()
        if override is not None:
            return override(module, query, key, value, kwargs.get("scaling"))
    if attention_mask is not None and not isinstance(attention_mask, torch.Tensor):  # BlockMask
        if query.device.type == "cpu":
            return _flex_eager(module, query, key, value, attention_mask, **kwargs)
        return flex_attention_forward(module, query, key, value, attention_mask, **kwargs)
    if attention_mask is not None and attention_mask.is_floating_point():
        return eager_attention_forward(module, query, key, value, attention_mask, **kwargs)
    return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)


AttentionInterface.register(ATTN_IMPL, mask_dispatch_attention)
AttentionMaskInterface.register(ATTN_IMPL, sdpa_mask)  # masks transformers builds itself (mask=None) are bool


def text_config(model):
    """The config the text decoder's attention layers read (`text_config` for Qwen3-VL)."""
    return getattr(model.config, "text_config", model.config)


def install_attention(model):
    """Point the text decoder at the mask-dispatching attention (idempotent). Returns the model."""
    cfg = text_config(model)
    if cfg._attn_implementation != ATTN_IMPL:
        cfg._attn_implementation_internal = ATTN_IMPL
    return model
