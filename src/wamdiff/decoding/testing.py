"""Tiny, download-free models and prompts for decoding tests and smoke benchmarks.

Used when no checkpoint is given. `peaky` scales the LM head so an untrained model is confident enough for
the threshold strategy to unmask several tokens per step (exercises parallel unmasking in tests).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wamdiff.models import tokens as T

CHARS = list("0123456789+-.,() abcdefghijklmnopqrstuvwxyz:\n")


@dataclass
class Prompt:
    """Same fields as `wamdiff.models.processor.EncodedPrompt`."""

    input_ids: torch.LongTensor
    pixel_values: torch.Tensor | None = None
    image_grid_thw: torch.LongTensor | None = None
    mm_token_type_ids: torch.LongTensor | None = None


def tiny_tokenizer():
    """A character-level fast tokenizer with the chat and bin tokens (no delta-format tokens: the decoding tests'
    tiny random models, whose greedy outputs those tests pin, keep the vocabulary they were written against)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = T.CHAT_TOKENS + T.BIN_TOKENS
    vocab = {t: i for i, t in enumerate(specials + CHARS + ["<unk>"])}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split("", behavior="isolated")
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>", pad_token=T.PAD, eos_token=T.IM_END)
    fast.add_special_tokens({"additional_special_tokens": [t for t in specials if t not in (T.PAD, T.IM_END)]})
    return fast


def _peaky(model, scale: float):
    if scale != 1.0:
        with torch.no_grad():
            model.lm_head.weight.mul_(scale)
    return model


def _as_diffusion(model, tokenizer, block_size: int):
    """Record diffusion settings as `models.convert.to_diffusion` does, keeping the model's attention as built."""
    from dataclasses import asdict

    from wamdiff.models.convert import DiffusionSettings

    model.config.mask_token_id = tokenizer.convert_tokens_to_ids(T.MASK)
    model.config.diffusion = asdict(DiffusionSettings(block_size, model.config.mask_token_id))
    return model


def tiny_qwen3(tokenizer, *, hidden=64, layers=2, heads=4, kv_heads=2, seed=0, peaky=1.0, block_size=4):
    from transformers import Qwen3Config, Qwen3ForCausalLM

    torch.manual_seed(seed)
    cfg = Qwen3Config(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, head_dim=hidden // heads,
        max_position_embeddings=4096, tie_word_embeddings=False, attn_implementation="sdpa",
    )
    model = Qwen3ForCausalLM(cfg).eval()
    return _peaky(_as_diffusion(model, tokenizer, block_size), peaky)


def tiny_qwen3_vl(tokenizer, *, hidden=64, layers=2, heads=4, seed=0, peaky=1.0, block_size=4):
    from transformers import Qwen3VLConfig, Qwen3VLForConditionalGeneration

    torch.manual_seed(seed)
    hd = hidden // heads
    text = dict(
        vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=hidden * 2, num_hidden_layers=layers,
        num_attention_heads=heads, num_key_value_heads=heads // 2, head_dim=hd, max_position_embeddings=4096,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [hd // 4, hd // 8, hd // 8],
                         "mrope_interleaved": True},
    )
    vision = dict(depth=2, hidden_size=32, intermediate_size=64, num_heads=2, patch_size=8, spatial_merge_size=2,
                  temporal_patch_size=2, out_hidden_size=hidden, num_position_embeddings=64, deepstack_visual_indexes=[0])
    ids = {k: tokenizer.convert_tokens_to_ids(v) for k, v in
           dict(image_token_id=T.IMAGE_PAD, video_token_id=T.VIDEO_PAD, vision_start_token_id=T.VISION_START,
                vision_end_token_id=T.VISION_END).items()}
    cfg = Qwen3VLConfig(text_config=text, vision_config=vision, tie_word_embeddings=False, **ids)
    cfg._attn_implementation = "sdpa"
    model = Qwen3VLForConditionalGeneration(cfg).eval()
    return _peaky(_as_diffusion(model, tokenizer, block_size), peaky)


def synthetic_prompt(tokenizer, length: int, *, seed: int = 0, image: bool = False, grid=(1, 4, 4)) -> Prompt:
    """A chat-shaped prompt of ~`length` text tokens; with `image`, a random image of `grid` patches
    (merge 2 -> h*w/4 image tokens) placed after <|vision_start|>."""
    g = torch.Generator().manual_seed(seed)
    body = [CHARS[i] for i in torch.randint(0, len(CHARS), (max(1, length),), generator=g).tolist()]
    head = [T.IM_START] + list("user\n")
    tail = [T.IM_END, "\n", T.IM_START] + list("assistant\n")
    n_img = grid[0] * grid[1] * grid[2] // 4 if image else 0
    img = [T.VISION_START] + [T.IMAGE_PAD] * n_img + [T.VISION_END] if image else []
    toks = head + img + body + tail
    ids = torch.tensor(tokenizer.convert_tokens_to_ids(toks), dtype=torch.long)
    if not image:
        return Prompt(ids)
    pix = torch.randn(grid[0] * grid[1] * grid[2], 3 * 2 * 8 * 8, generator=g)
    mm = (ids == tokenizer.convert_tokens_to_ids(T.IMAGE_PAD)).long()
    return Prompt(ids, pix, torch.tensor([list(grid)]), mm)
