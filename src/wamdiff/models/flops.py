"""What one plan costs a model in floating-point operations, counted by torch's `FlopCounterMode` on real forwards.

A plan is a prompt forward (the prefill: prompt text + camera image through the vision tower and the decoder) and
then the decode forwards on its KV cache: one query per forward for AR decoding, a block of B queries per forward
for block diffusion. Counted, not modelled: the figures follow whatever the HF model class runs (matmuls and
attention; elementwise work is not counted), so models of any size compare at a glance (`wamdiff model info`).
"""

from __future__ import annotations

import copy
from contextlib import contextmanager

import numpy as np
import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import DynamicCache

from wamdiff.models.build import is_vision_model
from wamdiff.models.image_geometry import image_processor_for
from wamdiff.models.processor import encode_prompt
from wamdiff.models.tokenizer import PROMPT_TEMPLATE
from wamdiff.models.tokens import IMAGE_PLACEHOLDER

# A driving prompt as the world writes it (one camera at the model's image side); the answer length of the
# delta format (16 tokens + end of turn), which the shipped students decode as one block.
PROMPT_TEXT = PROMPT_TEMPLATE.format(cmd="left", vx="12.34", vy="0.00", ax="-0.52", ay="0.00")
ANSWER_TOKENS = 17


@contextmanager
def _eager_attention(model):
    """Attention as plain matmuls while counting: the counter does not see CPU's fused SDPA kernels."""
    configs = [c for c in (model.config, getattr(model.config, "text_config", None),
                           getattr(model.config, "vision_config", None)) if c is not None]
    saved = [c._attn_implementation_internal for c in configs]
    for c in configs:
        c._attn_implementation_internal = "eager"
    try:
        yield
    finally:
        for c, impl in zip(configs, saved):
            c._attn_implementation_internal = impl


def _count(fn) -> int:
    with FlopCounterMode(display=False) as counter:
        fn()
    return int(counter.get_total_flops())


@torch.no_grad()
def plan_flops(model, tokenizer, *, block_size: int = ANSWER_TOKENS, steps: int = 4,
               answer_tokens: int = ANSWER_TOKENS) -> dict[str, int]:
    """FLOPs of the prompt forward, of one AR step and one block step (`block_size` queries) on the prompt's cache,
    and of a whole plan: AR = prompt + (answer_tokens - 1) steps (the prompt forward yields the first token);
    diffusion = prompt + `steps` block steps (one block holding the whole answer; no commit after the last)."""
    vision = is_vision_model(model)
    text = PROMPT_TEXT if vision else PROMPT_TEXT.replace(IMAGE_PLACEHOLDER, "")
    images = [np.full((64, 64, 3), 128, dtype=np.uint8)] if vision else []  # the world's render, resized to the
    p = encode_prompt(tokenizer, text, images, vision=vision,                  # model's own image side
                      image_processor=image_processor_for(model) if vision else None)
    inputs = {"input_ids": p.input_ids[None]}
    if vision:
        inputs.update(pixel_values=p.pixel_values, image_grid_thw=p.image_grid_thw,
                      mm_token_type_ids=p.mm_token_type_ids[None])
    model = model.eval()
    with _eager_attention(model):
        return _plan(model, inputs, int(p.input_ids[-1]), int(p.input_ids.numel()), block_size, steps, answer_tokens)


def _plan(model, inputs: dict, last_id: int, prompt_tokens: int, block_size: int, steps: int, answer_tokens: int) -> dict:
    prompt = _count(lambda: model(**inputs, use_cache=False))
    cache = DynamicCache()  # filled by the prompt forward; every decode forward extends a copy of it
    model(**inputs, cache=cache, use_cache=True)

    def step(width: int) -> int:
        ids = torch.full((1, width), last_id, dtype=torch.long)
        return _count(lambda: model(input_ids=ids, cache=copy.deepcopy(cache), use_cache=True))

    ar_step, block_step = step(1), step(block_size)
    return {"prompt_tokens": prompt_tokens, "prompt": prompt, "ar_step": ar_step,
            f"block_step_B{block_size}": block_step,
            "plan_ar": prompt + (answer_tokens - 1) * ar_step, f"plan_block_B{block_size}_{steps}steps": prompt + steps * block_step}
