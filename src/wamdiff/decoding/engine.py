"""`generate`: the one entry point other areas call (AR baseline or block diffusion, same machinery)."""

from __future__ import annotations

import torch

from wamdiff.decoding.ar import decode_ar
from wamdiff.decoding.block import decode_block
from wamdiff.decoding.config import AUTO, DecodeConfig, Generation
from wamdiff.decoding.dial import resolve_auto
from wamdiff.decoding.runner import PROMPT_BUCKET, StepRunner, collate_prompts
from wamdiff.models.precision import INT8, cast_model, compute_dtype
from wamdiff.models.tokens import IM_END, MASK, PAD, token_id


def model_block_settings(model, tokenizer) -> tuple[int | None, int | None]:
    """(block_size, mask_token_id) of a diffusion model: `wamdiff.models.diffusion_settings` when available,
    else ``model.config.block_size`` / ``mask_token_id``, else the tokenizer's MASK token."""
    try:
        from wamdiff.models import diffusion_settings  # noqa: PLC0415  (core area; may not exist yet)

        s = diffusion_settings(model)
        return s.block_size, s.mask_token_id
    except (ImportError, AttributeError, ValueError, KeyError, TypeError):
        pass
    cfg = model.config
    bs = getattr(cfg, "block_size", None)
    mid = getattr(cfg, "mask_token_id", None)
    if mid is None:
        try:
            mid = token_id(tokenizer, MASK)
        except ValueError:
            mid = None
    return bs, mid


def prepare_model(model, config: DecodeConfig):
    """Cast (in place) to config.dtype and switch to eval mode."""
    if config.dtype == INT8 or (config.dtype is not None and next(model.parameters()).dtype != config.dtype):
        cast_model(model, config.dtype)  # int8: a no-op once quantized
    if any(m.training for m in model.modules()):  # eval() sets every module again: per call, that is ~2 % of a plan
        model.eval()
    return model


@torch.inference_mode()
def generate(model, tokenizer, prompts, config: DecodeConfig | None = None, *, trace=None) -> list[Generation]:
    """Decode one answer per prompt. Prompts of different lengths are batched (left padding); every prompt of
    a batch is decoded together (batch = len(prompts)). Greedy; see `DecodeConfig` for the knobs.

    `trace(block, step, block_tokens_before, logits)`: called after every denoising forward of block decoding
    (`decode_block`'s hook; the speed dial's TPF curve reads the masked counts from it)."""
    config = config or DecodeConfig()
    prepare_model(model, config)
    if config.mode == "block" and config.block_size == AUTO:
        config = resolve_auto(model, tokenizer, prompts, config)
    eos_id, pad_id = token_id(tokenizer, IM_END), token_id(tokenizer, PAD)
    device = next(model.parameters()).device
    batch = collate_prompts(prompts, pad_id, device, pad_to_multiple=PROMPT_BUCKET if config.static_shapes(device) else 1)
    if batch.pixel_values is not None:
        batch.pixel_values = batch.pixel_values.to(compute_dtype(model))
    vocab = model.config.get_text_config().vocab_size  # (lm_head may be wrapped, e.g. by peft while training)
    table = ordinal = None
    if config.grammar is not None:
        table = config.grammar.table(config.max_new_tokens + 64, vocab, pad_id, device)
    if config.ordinal_window > 0:
        if config.grammar is None:
            raise ValueError("DecodeConfig.ordinal_window needs a grammar of an ordinal answer format (delta, bins)")
        ordinal = config.grammar.ordinal_table(config.max_new_tokens + 64, device)
    readout = dict(window=config.ordinal_window, table=ordinal)

    if config.mode == "ar":
        runner = _make_runner(model, batch, 1, config)
        out, lengths, forwards, finished = decode_ar(
            runner, max_new_tokens=config.max_new_tokens, eos_id=eos_id, pad_id=pad_id, grammar_table=table,
            readout=readout,
        )
    else:
        bs, mask_id = model_block_settings(model, tokenizer)
        bs = config.block_size or bs
        if bs is None:
            raise ValueError("block decoding needs a block size: set DecodeConfig.block_size or model.config.block_size")
        if mask_id is None:
            raise ValueError(f"block decoding needs a mask token: model.config.mask_token_id or a {MASK!r} token")
        if table is not None and table.shape[0] < -(-config.max_new_tokens // bs) * bs:
            table = config.grammar.table(-(-config.max_new_tokens // bs) * bs, vocab, pad_id, device)
            if ordinal is not None:
                readout["table"] = config.grammar.ordinal_table(-(-config.max_new_tokens // bs) * bs, device)
        runner = _make_runner(model, batch, bs, config)
        out, lengths, forwards, finished = decode_block(
            runner, max_new_tokens=config.max_new_tokens, mask_id=mask_id, eos_id=eos_id, pad_id=pad_id,
            threshold=config.threshold, max_steps=config.max_steps_per_block, strategy=config.strategy,
            fused_commit=config.fused_commit, grammar_table=table, delayed_cache=config.delayed_cache, trace=trace,
            readout=readout,
        )
    return to_generations(tokenizer, out, lengths, forwards, finished, eos_id)


def _make_runner(model, batch, block_size: int, config: DecodeConfig) -> StepRunner:
    capacity = config.max_new_tokens + (1 if config.mode == "ar" else 0)
    return StepRunner(model, batch, block_size, capacity, compile=config.compile,
                      cuda_graphs=config.cuda_graphs and config.attention == "sdpa", attention=config.attention,
                      lean=config.lean, prefill_cache=config.prefill_cache, shared_prefix=config.shared_prefix)


def to_generations(tokenizer, out, lengths, forwards, finished, eos_id: int) -> list[Generation]:
    rows, lens, fw, fin = out.tolist(), lengths.tolist(), forwards.tolist(), finished.tolist()
    gens = []
    for row, n, f, done in zip(rows, lens, fw, fin):
        ids = row[:n]
        body = ids[:-1] if ids and ids[-1] == eos_id else ids
        gens.append(Generation(ids, tokenizer.decode(body, skip_special_tokens=False), int(f), bool(done)))
    return gens
