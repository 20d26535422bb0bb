"""Cached prefill inputs: what the Qwen3-VL vision tower recomputes from the image grid alone at every call.

The vision tower derives its position-embedding interpolation taps, its rotary position ids and its attention
segment boundaries from `image_grid_thw` with Python loops and `.tolist()` (transformers' `vision_utils`), which
costs a visible share of a small model's prefill. Every camera image here has the same grid, so those tables are
computed once per (model, grid rows, device) and handed to the tower, which takes precomputed values under the
same names (`vision_utils`: "each get_* pops the precomputed tensor from kwargs"). The outputs are bitwise the
same (`tests/test_decoding_lean.py`).
"""

from __future__ import annotations

import torch
from transformers.vision_utils import (
    get_vision_attention_seqlens,
    get_vision_interpolation_indices_and_weights,
    get_vision_position_ids,
)

_CACHE_ATTR = "_wamdiff_vision_tables"


def vision_tables(model, grid_thw: torch.Tensor) -> dict:
    """The grid-only vision-tower inputs for `grid_thw` [n_images, 3], computed once per model and grid."""
    cache = model.__dict__.setdefault(_CACHE_ATTR, {})
    key = (tuple(map(tuple, grid_thw.tolist())), str(grid_thw.device))
    tables = cache.get(key)
    if tables is None:
        vis = model.model.visual
        indices, weights = get_vision_interpolation_indices_and_weights(
            grid_thw, num_grid_per_side=vis.num_grid_per_side, mode=vis.interpolation_mode,
            align_corners=vis.interpolation_align_corners, spatial_merge_size=vis.config.spatial_merge_size)
        cu_seqlens, max_seqlen = get_vision_attention_seqlens(grid_thw, vis.config)
        tables = cache[key] = {"interp_indices": indices, "interp_weights": weights, "cu_seqlens": cu_seqlens,
                               "max_seqlen": max_seqlen,
                               "position_ids": get_vision_position_ids(grid_thw, vis.spatial_merge_size)}
    return tables


def image_features(model, pixel_values: torch.Tensor, grid_thw: torch.Tensor) -> dict:
    """`mm_encoder_outputs` for `Qwen3VLModel.forward`: the vision tower run with the cached tables."""
    return {"image": model.model.get_image_features(pixel_values, grid_thw, return_dict=True,
                                                    **vision_tables(model, grid_thw))}
