"""A stand-in for a user's Qwen3-VL checkpoint, built here with no download: the published Qwen3-VL-2B config
sizes (depth optionally cut), random weights, its own Qwen2-style tokenizer (trained locally, Qwen's chat and
vision special tokens, none of wamdiff's) and a `preprocessor_config.json` shaped like the published one.

It is laid out as a Hugging Face checkpoint directory, exactly what `wamdiff model convert` gets from a real
download, so tests and memory measurements exercise the bring-your-own-checkpoint path at real width.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import torch
from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

from wamdiff.models import tokens as T
from wamdiff.models.image_geometry import PREPROCESSOR_FILE


@dataclass(frozen=True)
class PublishedSize:
    """Sizes from a published Qwen3-VL config.json (text_config / vision_config)."""

    text: dict = field(default_factory=dict)
    vision: dict = field(default_factory=dict)
    tie_word_embeddings: bool = True


QWEN3_VL_2B = PublishedSize(
    text=dict(hidden_size=2048, intermediate_size=6144, num_hidden_layers=28, num_attention_heads=16,
              num_key_value_heads=8, head_dim=128, vocab_size=151936, max_position_embeddings=262144,
              rms_norm_eps=1e-6, hidden_act="silu",
              rope_parameters={"rope_type": "default", "rope_theta": 5000000.0, "mrope_section": [24, 20, 20],
                               "mrope_interleaved": True}),
    vision=dict(depth=24, hidden_size=1024, intermediate_size=4096, num_heads=16, patch_size=16, temporal_patch_size=2,
                spatial_merge_size=2, out_hidden_size=2048, num_position_embeddings=2304, deepstack_visual_indexes=[5, 11, 17],
                hidden_act="gelu_pytorch_tanh"),
)
SIZES = {"qwen3-vl-2b": QWEN3_VL_2B}

# Qwen2-VL-Instruct's published chat template (a default system turn, image items as
# <|vision_start|><|image_pad|><|vision_end|>): the stand-in's tokenizer carries it, as a real Qwen checkpoint does,
# so its prompts are built through a real Qwen template and not wamdiff's default layout.
QWEN_CHAT_TEMPLATE = (
    "{% set image_count = namespace(value=0) %}{% set video_count = namespace(value=0) %}{% for message in messages %}"
    "{% if loop.first and message['role'] != 'system' %}<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"
    "{% endif %}<|im_start|>{{ message['role'] }}\n{% if message['content'] is string %}{{ message['content'] }}"
    "<|im_end|>\n{% else %}{% for content in message['content'] %}{% if content['type'] == 'image' or 'image' in "
    "content or 'image_url' in content %}{% set image_count.value = image_count.value + 1 %}{% if add_vision_id %}"
    "Picture {{ image_count.value }}: {% endif %}<|vision_start|><|image_pad|><|vision_end|>{% elif content['type'] "
    "== 'video' or 'video' in content %}{% set video_count.value = video_count.value + 1 %}{% if add_vision_id %}"
    "Video {{ video_count.value }}: {% endif %}<|vision_start|><|video_pad|><|vision_end|>{% elif 'text' in content "
    "%}{{ content['text'] }}{% endif %}{% endfor %}<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}"
    "<|im_start|>assistant\n{% endif %}"
)

# The published processor: 16-px patches, pixels normalised to [-1, 1], images resized to 256x256 .. 4096x4096
# pixels in total (a 64x64 render -> 256x256 -> 64 image tokens). Its type names the torchvision processor;
# wamdiff reads the file with the Pillow one (no torchvision).
PUBLISHED_PROCESSOR = {
    "image_processor_type": "Qwen2VLImageProcessorFast", "processor_class": "Qwen3VLProcessor",
    "patch_size": 16, "temporal_patch_size": 2, "merge_size": 2, "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5], "size": {"shortest_edge": 65536, "longest_edge": 16777216},
}


def _deepstack(indexes: list[int], full_depth: int, depth: int, text_layers: int) -> list[int]:
    """The published deepstack taps scaled to a cut vision tower (indexes < depth, at most one per text layer)."""
    scaled = sorted({min(depth - 1, i * depth // full_depth) for i in indexes})
    return scaled[:text_layers]


def standin_corpus() -> list[str]:
    """What the stand-in tokenizer learns its merges from: the world's prompts and waypoint-like number lists
    (comma-separated, two decimals, as the text2 answers; models sit below the driving layer, so not its formatter)."""
    import numpy as np

    from wamdiff.models.tokenizer import training_corpus

    rng = np.random.default_rng(0)
    answers = [",".join(f"{v:.2f}" for v in np.stack([np.sort(rng.uniform(0, 80, 8)), rng.uniform(-6, 6, 8)], 1).reshape(-1))
               for _ in range(200)]
    return training_corpus() + answers


def standin_config(size: str = "qwen3-vl-2b", *, text_layers: int | None = None, vision_layers: int | None = None,
                   tokenizer) -> Qwen3VLConfig:
    if size not in SIZES:
        raise ValueError(f"unknown stand-in size {size!r}; choose one of {sorted(SIZES)}")
    s = SIZES[size]
    text = dict(s.text)
    vision = dict(s.vision)
    full_depth = vision["depth"]
    if text_layers is not None:
        text["num_hidden_layers"] = int(text_layers)
    if vision_layers is not None:
        vision["depth"] = int(vision_layers)
    for name, n in (("text_layers", text["num_hidden_layers"]), ("vision_layers", vision["depth"])):
        if n < 1:
            raise ValueError(f"stand-in {name} must be >= 1, got {n}")
    vision["deepstack_visual_indexes"] = _deepstack(vision["deepstack_visual_indexes"], full_depth, vision["depth"],
                                                    text["num_hidden_layers"])
    ids = {t: tokenizer.convert_tokens_to_ids(t) for t in (T.PAD, T.IM_END, T.IMAGE_PAD, T.VIDEO_PAD, T.VISION_START, T.VISION_END)}
    text.update(pad_token_id=ids[T.PAD], eos_token_id=ids[T.IM_END])
    return Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=s.tie_word_embeddings,
                         image_token_id=ids[T.IMAGE_PAD], video_token_id=ids[T.VIDEO_PAD],
                         vision_start_token_id=ids[T.VISION_START], vision_end_token_id=ids[T.VISION_END])


def build_standin(out, size: str = "qwen3-vl-2b", *, text_layers: int | None = None, vision_layers: int | None = None,
                  dtype: torch.dtype = torch.bfloat16, processor_file: bool = True, seed: int = 0,
                  chat_template: bool = True) -> Path:
    """Write a random-weight Qwen3-VL checkpoint directory of published sizes to `out`; returns `out`.
    chat_template: its tokenizer carries Qwen's chat template (`QWEN_CHAT_TEMPLATE`), else none."""
    from wamdiff.models.tokenizer import build_qwen2_style_tokenizer

    out = Path(out)
    tokenizer = build_qwen2_style_tokenizer(standin_corpus())
    if chat_template:
        tokenizer.chat_template = QWEN_CHAT_TEMPLATE
    config = standin_config(size, text_layers=text_layers, vision_layers=vision_layers, tokenizer=tokenizer)
    torch.manual_seed(seed)
    model = Qwen3VLForConditionalGeneration._from_config(config, dtype=dtype)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if processor_file:
        (out / PREPROCESSOR_FILE).write_text(json.dumps(PUBLISHED_PROCESSOR, indent=2))
    return out
