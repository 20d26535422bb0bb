"""Chat formatting and encoding of one prompt (text + images) and one answer.

prompt = ``<|im_start|>user\\n{human text, each <image> -> <|vision_start|><|image_pad|>*n<|vision_end|>}<|im_end|>\\n
<|im_start|>assistant\\n``; answer = ``{answer}<|im_end|>``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from PIL import Image

from wamdiff.models import tokens as T


@dataclass
class EncodedPrompt:
    input_ids: torch.LongTensor  # [L] chat-formatted prompt ending with the assistant header
    pixel_values: torch.Tensor | None = None  # [sum of patches, C*tp*p*p]
    image_grid_thw: torch.LongTensor | None = None  # [n_images, 3]
    mm_token_type_ids: torch.LongTensor | None = None  # [L]: 1 at image tokens, 0 elsewhere


def chat_prompt(human_text: str) -> str:
    return f"{T.IM_START}user\n{human_text}{T.IM_END}\n{T.IM_START}assistant\n"


def _to_pil(image) -> Image.Image:
    if isinstance(image, Image.Image):
        return image.convert("RGB")
    arr = np.asarray(image)
    if arr.ndim != 3 or arr.shape[2] != 3 or arr.dtype != np.uint8:
        raise ValueError(f"image must be a PIL image or an HxWx3 uint8 array, got {arr.dtype} {arr.shape}")
    return Image.fromarray(arr)


def encode_prompt(tokenizer, human_text: str, images=(), *, vision: bool = True, image_processor=None) -> EncodedPrompt:
    """Encode a human turn with `<image>` placeholders into prompt ids (+ pixels for a vision model).

    image_processor: required with images — the model's own, `wamdiff.models.image_processor_for(model)`
    (never a default: pixels in another model's geometry crash the vision tower or silently mean nothing).
    vision=False (text-only model): placeholders are dropped and images ignored.
    """
    images = list(images or [])
    n_placeholders = human_text.count(T.IMAGE_PLACEHOLDER)
    if not vision:
        ids = tokenizer.encode(chat_prompt(human_text.replace(T.IMAGE_PLACEHOLDER, "")), add_special_tokens=False)
        return EncodedPrompt(torch.tensor(ids, dtype=torch.long))
    if n_placeholders != len(images):
        raise ValueError(
            f"prompt has {n_placeholders} '{T.IMAGE_PLACEHOLDER}' placeholder(s) but {len(images)} image(s) were given"
        )
    if not images:
        ids = tokenizer.encode(chat_prompt(human_text), add_special_tokens=False)
        return EncodedPrompt(torch.tensor(ids, dtype=torch.long), mm_token_type_ids=torch.zeros(len(ids), dtype=torch.long))
    if image_processor is None:
        raise ValueError("encode_prompt: images were given but no image_processor; pass the model's own "
                         "(wamdiff.models.image_processor_for(model_or_checkpoint))")
    px = image_processor(images=[_to_pil(im) for im in images], return_tensors="pt")
    grid = px["image_grid_thw"]
    n_tokens = (grid.prod(-1) // image_processor.merge_size**2).tolist()
    pieces = human_text.split(T.IMAGE_PLACEHOLDER)
    text = pieces[0] + "".join(
        f"{T.VISION_START}{T.IMAGE_PAD * n}{T.VISION_END}{piece}" for n, piece in zip(n_tokens, pieces[1:])
    )
    ids = torch.tensor(tokenizer.encode(chat_prompt(text), add_special_tokens=False), dtype=torch.long)
    image_id = T.token_id(tokenizer, T.IMAGE_PAD)
    return EncodedPrompt(ids, px["pixel_values"], grid.long(), (ids == image_id).long())


def encode_answer(tokenizer, answer_text: str) -> torch.LongTensor:
    """Answer ids ending with IM_END (the end-of-turn token the model must learn to emit)."""
    if not answer_text:
        raise ValueError("answer is missing: empty answer text")
    return torch.tensor(tokenizer.encode(answer_text + T.IM_END, add_special_tokens=False), dtype=torch.long)
