"""Backbones (Qwen3-VL / Qwen3 presets, local checkpoints), tokenizer, prompt encoding, diffusion settings."""

from wamdiff.models import tokens
from wamdiff.models.build import (
    PRESETS, build_config, build_image_processor, build_model, count_parameters, is_vision_model, load_image_processor,
    load_model, model_info, save_model,
)
from wamdiff.models.convert import DiffusionSettings, diffusion_settings, set_block_size, to_diffusion
from wamdiff.models.processor import EncodedPrompt, encode_answer, encode_prompt
from wamdiff.models.tokenizer import build_tokenizer, token_id

__all__ = [
    "PRESETS", "DiffusionSettings", "EncodedPrompt", "build_config", "build_image_processor", "build_model",
    "build_tokenizer", "count_parameters", "diffusion_settings", "encode_answer", "encode_prompt", "is_vision_model",
    "load_image_processor", "load_model", "model_info", "save_model", "set_block_size", "to_diffusion", "token_id",
    "tokens",
]
