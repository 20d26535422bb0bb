"""Chat formatting and encoding of one prompt (text + images) and one answer.

The prompt is the model's own chat template (the tokenizer's `chat_template`, which Hugging Face loads from the
checkpoint's `chat_template.jinja` or `tokenizer_config.json`) applied to one user turn plus the generation prompt;
a tokenizer without one gets `DEFAULT_CHAT_TEMPLATE`, wamdiff's layout:
``<|im_start|>user\\n{human text, each <image> -> <|vision_start|><|image_pad|>*n<|vision_end|>}<|im_end|>\\n
<|im_start|>assistant\\n``. The answer is ``{answer}<|im_end|>``.

Each ``<image>`` of the human text becomes an image item of the turn (`{"type": "image"}`, in order); the
template renders it as one ``<|image_pad|>``, which is then widened to the image's merged-patch count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from wamdiff.models import tokens as T

# wamdiff's own layout as a template (Qwen's ChatML turns, no system turn): the prompts of every checkpoint whose
# tokenizer has no chat template, token for token what the hand-written layout of earlier versions produced.
DEFAULT_CHAT_TEMPLATE = (
    "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}"
    "{%- if message.content is string %}{{- message.content }}{%- else %}{%- for item in message.content %}"
    "{%- if item.type == 'image' %}{{- '<|vision_start|><|image_pad|><|vision_end|>' }}{%- else %}{{- item.text }}"
    "{%- endif %}{%- endfor %}{%- endif %}{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CHAT_TEMPLATE_FILE = "chat_template.jinja"  # where Hugging Face keeps a checkpoint's template


@dataclass
class EncodedPrompt:
    input_ids: torch.LongTensor  # [L] chat-formatted prompt ending with the assistant header
    pixel_values: torch.Tensor | None = None  # [sum of patches, C*tp*p*p]
    image_grid_thw: torch.LongTensor | None = None  # [n_images, 3]
    mm_token_type_ids: torch.LongTensor | None = None  # [L]: 1 at image tokens, 0 elsewhere


def chat_template(tokenizer) -> str:
    """The template prompts are built with: the tokenizer's own, else `DEFAULT_CHAT_TEMPLATE`."""
    t = getattr(tokenizer, "chat_template", None)
    if isinstance(t, dict):  # named templates: the default one
        t = t.get("default")
    return t or DEFAULT_CHAT_TEMPLATE


def user_turn(human_text: str, n_images: int) -> list[dict]:
    """One user message: plain text, or (with images) text and image items in the order of the placeholders."""
    if not n_images:
        return [{"role": "user", "content": human_text}]
    pieces = human_text.split(T.IMAGE_PLACEHOLDER)
    content = [{"type": "text", "text": pieces[0]}] if pieces[0] else []
    for piece in pieces[1:]:
        content.append({"type": "image"})
        if piece:
            content.append({"type": "text", "text": piece})
    return [{"role": "user", "content": content}]


def chat_prompt(human_text: str, tokenizer=None, *, n_images: int = 0) -> str:
    """The prompt text of one user turn, through the tokenizer's chat template (None: the default template);
    each image is one `<|vision_start|><|image_pad|><|vision_end|>` here (widened by `encode_prompt`)."""
    template = chat_template(tokenizer) if tokenizer is not None else DEFAULT_CHAT_TEMPLATE
    return render_template(template, user_turn(human_text, n_images), tokenizer)


def render_template(template: str, messages: list[dict], tokenizer=None) -> str:
    from transformers.utils.chat_template_utils import render_jinja_template

    try:
        rendered, _ = render_jinja_template(conversations=[messages], chat_template=template, add_generation_prompt=True,
                                            **_template_vars(tokenizer))
    except Exception as err:  # a template's own error (jinja2 syntax, raise_exception): one line naming it
        raise ValueError(f"chat template: {type(err).__name__}: {err}") from None
    return rendered[0]


def _template_vars(tokenizer) -> dict:
    """What Hugging Face passes templates besides the messages (bos/eos/pad token strings)."""
    if tokenizer is None:
        return {}
    return {k: v for k in ("bos_token", "eos_token", "pad_token", "unk_token")
            if isinstance(v := getattr(tokenizer, k, None), str)}


def read_chat_template(path: str | Path) -> str:
    """A template file's text, checked by rendering a one-image turn (ValueError naming the file)."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise ValueError(f"{path}: cannot read the chat template ({err})") from None
    try:
        probe = render_template(text, user_turn(f"{T.IMAGE_PLACEHOLDER}probe", 1))
    except ValueError as err:
        raise ValueError(f"{path}: {err}") from None
    if probe.count(T.IMAGE_PAD) != 1 or "probe" not in probe:
        raise ValueError(f"{path}: the chat template must render a user turn's text and each image item as one "
                         f"{T.IMAGE_PAD} (got {probe!r})")
    return text


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
        text = chat_prompt(human_text.replace(T.IMAGE_PLACEHOLDER, ""), tokenizer)
        return EncodedPrompt(torch.tensor(tokenizer.encode(text, add_special_tokens=False), dtype=torch.long))
    if n_placeholders != len(images):
        raise ValueError(
            f"prompt has {n_placeholders} '{T.IMAGE_PLACEHOLDER}' placeholder(s) but {len(images)} image(s) were given"
        )
    text = chat_prompt(human_text, tokenizer, n_images=len(images))
    if not images:
        ids = tokenizer.encode(text, add_special_tokens=False)
        return EncodedPrompt(torch.tensor(ids, dtype=torch.long), mm_token_type_ids=torch.zeros(len(ids), dtype=torch.long))
    if image_processor is None:
        raise ValueError("encode_prompt: images were given but no image_processor; pass the model's own "
                         "(wamdiff.models.image_processor_for(model_or_checkpoint))")
    pieces = text.split(T.IMAGE_PAD)
    if len(pieces) != len(images) + 1:
        raise ValueError(f"chat template rendered {len(pieces) - 1} {T.IMAGE_PAD} for {len(images)} image(s); it must "
                         "render each image item of a user turn as one")
    px = image_processor(images=[_to_pil(im) for im in images], return_tensors="pt")
    grid = px["image_grid_thw"]
    n_tokens = (grid.prod(-1) // image_processor.merge_size**2).tolist()
    text = pieces[0] + "".join(T.IMAGE_PAD * n + piece for n, piece in zip(n_tokens, pieces[1:]))
    ids = torch.tensor(tokenizer.encode(text, add_special_tokens=False), dtype=torch.long)
    image_id = T.token_id(tokenizer, T.IMAGE_PAD)
    return EncodedPrompt(ids, px["pixel_values"], grid.long(), (ids == image_id).long())


def encode_answer(tokenizer, answer_text: str) -> torch.LongTensor:
    """Answer ids ending with IM_END (the end-of-turn token the model must learn to emit)."""
    if not answer_text:
        raise ValueError("answer is missing: empty answer text")
    return torch.tensor(tokenizer.encode(answer_text + T.IM_END, add_special_tokens=False), dtype=torch.long)
