"""One source of image geometry: the image processor that belongs to a model.

A checkpoint's own `preprocessor_config.json` wins (a real Qwen3-VL ships one); its patch, temporal patch and
merge sizes must agree with the model's `vision_config`. Without that file the processor is derived from the
`vision_config` alone: its patch sizes, and a square image side of sqrt(num_position_embeddings) patches —
the grid the vision tower's learned position table was made for — so an image costs
num_position_embeddings / merge^2 tokens (our presets: 64 px -> 16 tokens; Qwen3-VL-2B: 768 px -> 576).

Every prompt-encoding path (training data, planners, bench, QA) asks `image_processor_for(model)`, so the
pixels always match the vision tower that reads them.
"""

from __future__ import annotations

import math
from pathlib import Path

from transformers import AutoConfig, Qwen2VLImageProcessorPil

from wamdiff.models.recorded import is_model_dir

PREPROCESSOR_FILE = "preprocessor_config.json"


def vision_config_of(config):
    """The vision section of a model config, or None for a text-only model."""
    return getattr(config, "vision_config", None)


def image_side(vision_config) -> int:
    """Side in pixels of the square image whose patch grid fills the position table exactly."""
    n = int(vision_config.num_position_embeddings)
    grid = math.isqrt(n)
    merge = int(vision_config.spatial_merge_size)
    if grid * grid != n or grid % merge:
        raise ValueError(
            f"vision_config.num_position_embeddings={n} is not a square grid of patches divisible by "
            f"spatial_merge_size={merge}; add a {PREPROCESSOR_FILE} that fixes the image size"
        )
    return grid * int(vision_config.patch_size)


def processor_from_vision_config(vision_config) -> Qwen2VLImageProcessorPil:
    """Pillow-only Qwen image processor with the model's patch sizes; min = max pixels pins every square image
    to `image_side(vision_config)` (a 64x64 render is resized to it)."""
    side = image_side(vision_config)
    return Qwen2VLImageProcessorPil(
        patch_size=int(vision_config.patch_size), temporal_patch_size=int(vision_config.temporal_patch_size),
        merge_size=int(vision_config.spatial_merge_size), min_pixels=side * side, max_pixels=side * side,
    )


def check_geometry(processor, vision_config, where: str) -> None:
    """ValueError naming the field when a processor's patch sizes differ from the vision tower's."""
    pairs = [("patch_size", "patch_size"), ("temporal_patch_size", "temporal_patch_size"), ("merge_size", "spatial_merge_size")]
    for mine, theirs in pairs:
        a, b = getattr(processor, mine, None), getattr(vision_config, theirs)
        if a != b:
            raise ValueError(f"{where}: {mine}={a} does not match the model's vision_config.{theirs}={b}")


def _saved_processor(directory: Path | None, vision_config):
    if directory is None or not (directory / PREPROCESSOR_FILE).is_file():
        return None
    processor = Qwen2VLImageProcessorPil.from_pretrained(directory)
    check_geometry(processor, vision_config, str(directory / PREPROCESSOR_FILE))
    return processor


def image_processor_for(model_or_path) -> Qwen2VLImageProcessorPil | None:
    """The image processor of a model object or a checkpoint directory (None for a text-only model).

    A model object loaded from a directory (its `name_or_path`) uses that directory's processor file, so a
    loaded model and its directory always give the same processor.
    """
    if isinstance(model_or_path, (str, Path)):
        directory = Path(model_or_path)
        if not is_model_dir(directory):
            raise ValueError(f"{directory}: not a model directory (no config.json)")
        config = AutoConfig.from_pretrained(directory)
    else:
        config = model_or_path.config
        name = getattr(model_or_path, "name_or_path", "") or ""
        directory = Path(name) if name and Path(name).is_dir() else None
    vision = vision_config_of(config)
    if vision is None:
        return None
    return _saved_processor(directory, vision) or processor_from_vision_config(vision)


def image_tokens(processor, height: int, width: int) -> int:
    """Image tokens one HxW image becomes with this processor (after resizing and merging)."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    factor = processor.patch_size * processor.merge_size
    h, w = smart_resize(height, width, factor=factor, min_pixels=processor.size.shortest_edge,
                        max_pixels=processor.size.longest_edge)
    return (h // factor) * (w // factor)
