"""Backbones (Qwen3-VL / Qwen3 presets, local checkpoints), tokenizer, prompt encoding, diffusion settings."""

from wamdiff._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "build": ["PRESETS", "Preset", "build_config", "build_model", "count_parameters", "is_vision_model", "load_model",
              "model_info", "save_model"],
    "grow": ["grow_depth"],
    "image_geometry": ["image_processor_for", "image_tokens"],
    "convert": ["DiffusionSettings", "diffusion_settings", "set_block_size", "to_diffusion"],
    "processor": ["EncodedPrompt", "encode_answer", "encode_prompt"],
    "recorded": ["is_diffusion", "is_model_dir", "recorded_answer_format", "recorded_decode", "recorded_diffusion"],
    "tokenizer": ["build_tokenizer"],
    "tokens": ["token_id"],
})
from wamdiff.models import tokens as tokens  # noqa: E402  (light: strings only; re-exported)
