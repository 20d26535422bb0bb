"""Build Qwen3-VL / Qwen3 backbones from size presets, and save / load them with tokenizer + image processor.

The presets share one vision geometry: patch 8, temporal patch 2, spatial merge 2, a 64x64 image (an 8x8 patch
grid merged to 16 image tokens); a `Preset` may set its own patch and image side. The image processor of any
model comes from `wamdiff.models.image_geometry.image_processor_for`. Models are the HF classes as they are.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError
from transformers import (
    AutoConfig, AutoTokenizer, PreTrainedModel, Qwen3Config, Qwen3ForCausalLM, Qwen3VLConfig, Qwen3VLForConditionalGeneration,
)

from wamdiff.diffusion.attention import install_attention
from wamdiff.errors import UserError
from wamdiff.models.checksums import forget_checksums, record_checksums, verify_checksums
from wamdiff.models import tokens as T
from wamdiff.models.image_geometry import image_processor_for, image_tokens
from wamdiff.models.recorded import is_model_dir
from wamdiff.models.tokenizer import add_special_tokens
from wamdiff.models.tokens import token_id

PATCH, TEMPORAL_PATCH, MERGE, IMAGE_SIDE = 8, 2, 2, 64


@dataclass(frozen=True)
class Preset:
    layers: int
    hidden: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vision_depth: int
    vision_hidden: int
    vision_heads: int
    max_positions: int = 2048
    patch: int = PATCH
    image_side: int = IMAGE_SIDE  # the vision position table covers (image_side / patch)^2 patches


PRESETS: dict[str, Preset] = {
    "tiny": Preset(2, 64, 4, 2, 16, 128, 1, 32, 2, max_positions=512),
    "student": Preset(4, 256, 4, 2, 64, 512, 2, 128, 2),
    # A quarter of the student's compute per plan (`wamdiff model info`): half the width and depth of the text
    # decoder, half the width and depth of the vision tower, the same image geometry (16 image tokens), so a
    # student-preset teacher and this model see the same pixels and tokens (model-level distillation).
    "small": Preset(2, 128, 2, 1, 64, 384, 1, 64, 1),
    "teacher": Preset(8, 384, 6, 2, 64, 1024, 2, 128, 2),
}


def _preset(name: str | Preset) -> Preset:
    if isinstance(name, Preset):
        return name
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {sorted(PRESETS)}")
    return PRESETS[name]


def _mrope_section(head_dim: int) -> list[int]:
    """Split head_dim/2 rotary frequencies over (t, h, w) like Qwen3-VL's [24, 20, 20] for 128."""
    half = head_dim // 2
    h = w = (half * 5 // 16)
    return [half - h - w, h, w]


def build_config(preset: str | Preset, tokenizer, *, vision: bool = True):
    p = _preset(preset)
    ids = {t: token_id(tokenizer, t) for t in (T.PAD, T.IM_END, T.MASK)}
    text = dict(
        vocab_size=len(tokenizer), hidden_size=p.hidden, intermediate_size=p.intermediate,
        num_hidden_layers=p.layers, num_attention_heads=p.heads, num_key_value_heads=p.kv_heads, head_dim=p.head_dim,
        max_position_embeddings=p.max_positions, pad_token_id=ids[T.PAD], eos_token_id=ids[T.IM_END],
    )
    if not vision:
        cfg = Qwen3Config(**text, tie_word_embeddings=True)
    else:
        text["rope_parameters"] = {"rope_type": "default", "rope_theta": 10000.0, "mrope_section": _mrope_section(p.head_dim)}
        vis = dict(
            depth=p.vision_depth, hidden_size=p.vision_hidden, intermediate_size=4 * p.vision_hidden,
            num_heads=p.vision_heads, patch_size=p.patch, temporal_patch_size=TEMPORAL_PATCH, spatial_merge_size=MERGE,
            out_hidden_size=p.hidden, num_position_embeddings=(p.image_side // p.patch) ** 2,
            deepstack_visual_indexes=list(range(min(p.vision_depth, 1))),
        )
        cfg = Qwen3VLConfig(
            text_config=text, vision_config=vis, tie_word_embeddings=True,
            image_token_id=token_id(tokenizer, T.IMAGE_PAD), video_token_id=token_id(tokenizer, T.VIDEO_PAD),
            vision_start_token_id=token_id(tokenizer, T.VISION_START), vision_end_token_id=token_id(tokenizer, T.VISION_END),
        )
    cfg.mask_token_id = ids[T.MASK]
    cfg.preset = preset if isinstance(preset, str) else "custom"
    return cfg


def build_model(preset: str | Preset, tokenizer, *, vision: bool = True, seed: int | None = None) -> PreTrainedModel:
    """A randomly initialised `Qwen3VLForConditionalGeneration` (vision) or `Qwen3ForCausalLM` from a preset."""
    cfg = build_config(preset, tokenizer, vision=vision)
    if seed is not None:
        torch.manual_seed(seed)
    model = (Qwen3VLForConditionalGeneration if vision else Qwen3ForCausalLM)(cfg)
    return install_attention(model.eval())


def is_vision_model(model) -> bool:
    return hasattr(model.config, "vision_config")


def count_parameters(model) -> dict[str, int]:
    total = sum(p.numel() for p in model.parameters())
    vision = sum(p.numel() for n, p in model.named_parameters() if ".visual." in f".{n}")
    return {"total": total, "vision": vision, "text": total - vision}


def save_model(model, tokenizer, path, image_processor=None) -> Path:
    """save_pretrained (safetensors) of model + tokenizer (+ image processor for vision models: the one given,
    else `image_processor_for(model)`, so every saved vision checkpoint carries its geometry), and the weights'
    sha256 (`models.checksums`), checked when the directory loads."""
    path = Path(path)
    processor = (image_processor or image_processor_for(model)) if is_vision_model(model) else None
    path.mkdir(parents=True, exist_ok=True)
    try:
        forget_checksums(path)
        model.save_pretrained(path)
        record_checksums(path)
        tokenizer.save_pretrained(path)
        if processor is not None:
            processor.save_pretrained(path)
    except (OSError, SafetensorError) as err:  # a full disk: safetensors and transformers name no file
        if isinstance(err, OSError) and err.filename is not None:
            raise
        raise UserError(f"{path}: cannot save the model ({type(err).__name__}: {' '.join(str(err).split())[:200]}); "
                        "free space or choose another folder") from err
    return path


def _model_class(config):
    kinds = {"qwen3_vl": Qwen3VLForConditionalGeneration, "qwen3": Qwen3ForCausalLM}
    if config.model_type not in kinds:
        raise ValueError(f"unsupported model_type {config.model_type!r}; expected one of {sorted(kinds)}")
    return kinds[config.model_type]


def load_model(path, *, dtype=torch.float32):
    """Load a saved wamdiff model or a local HF Qwen3-VL / Qwen3 checkpoint directory -> (model, tokenizer).
    Weights recorded in the directory's `SHA256SUMS` are checked first (a mismatch: a one-line UserError).

    dtype: the weights' dtype (a torch dtype, or "auto" = as stored). Special tokens a foreign checkpoint lacks
    are added to its tokenizer and the embeddings resized when the vocabulary is too small for them.
    """
    path = Path(path)
    if not is_model_dir(path):
        raise ValueError(f"{path}: not a model directory (no config.json)")
    if not any((path / f).is_file() for f in ("tokenizer.json", "tokenizer_config.json", "vocab.json")):
        raise ValueError(f"{path}: no tokenizer files next to the model (save with wamdiff.models.save_model)")
    verify_checksums(path)  # weights changed since they were saved: refused here, not scored PDMS 0 later
    try:
        config = AutoConfig.from_pretrained(path)
        model = _model_class(config).from_pretrained(path, dtype=dtype)
        tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left", clean_up_tokenization_spaces=False)
    except SafetensorError as err:  # a truncated or corrupt weights file: say which one
        raise UserError(f"{unreadable_weights(path) or path}: unreadable model weights ({err}); the file is truncated or corrupt: "
                        "copy or save the checkpoint again") from err
    except OSError as err:  # transformers reports unreadable config / tokenizer files as OSError
        raise UserError(f"{path}: cannot load the checkpoint ({' '.join(str(err).split())})") from err
    add_special_tokens(tokenizer)
    vocab = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > vocab:
        with torch.random.fork_rng(devices=[]):  # the new rows are drawn at random: the same rows at every load
            torch.manual_seed(0)
            model.resize_token_embeddings(len(tokenizer))
    cfg = model.config
    cfg.mask_token_id = token_id(tokenizer, T.MASK)
    if is_vision_model(model):  # keep the model's special ids in step with the (possibly extended) tokenizer
        cfg.image_token_id, cfg.video_token_id = token_id(tokenizer, T.IMAGE_PAD), token_id(tokenizer, T.VIDEO_PAD)
        cfg.vision_start_token_id = token_id(tokenizer, T.VISION_START)
        cfg.vision_end_token_id = token_id(tokenizer, T.VISION_END)
    return install_attention(model.eval()), tokenizer


def unreadable_weights(path: str | Path) -> Path | None:
    """The first *.safetensors file in `path` whose header safetensors refuses (truncated, corrupt), else None."""
    from safetensors import safe_open

    for f in sorted(Path(path).glob("*.safetensors")):
        try:
            with safe_open(f, "pt"):
                pass
        except (SafetensorError, OSError):
            return f
    return None


def model_info(path) -> dict:
    """Summary of a saved model directory: class, preset, sizes, parameters, diffusion settings."""
    model, tokenizer = load_model(path, dtype="auto")  # as stored: a 2B checkpoint stays 4 GB in bf16
    text = getattr(model.config, "text_config", model.config)
    info = {
        "class": type(model).__name__, "preset": getattr(model.config, "preset", None),
        "layers": text.num_hidden_layers, "hidden": text.hidden_size, "vocab": text.vocab_size,
        "tokenizer_size": len(tokenizer), "max_positions": text.max_position_embeddings,
        "diffusion": getattr(model.config, "diffusion", None), **{f"params_{k}": v for k, v in count_parameters(model).items()},
    }
    if is_vision_model(model):
        v = model.config.vision_config
        info.update(vision_depth=v.depth, vision_hidden=v.hidden_size, patch=v.patch_size, merge=v.spatial_merge_size,
                    image_tokens_64px=image_tokens(image_processor_for(model), 64, 64))
    return json.loads(json.dumps(info, default=str))
