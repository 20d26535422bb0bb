"""`generate`: the one entry point other areas call (AR baseline or block diffusion, same machinery)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import torch

from wamdiff.decoding.ar import decode_ar
from wamdiff.decoding.block import decode_block
from wamdiff.decoding.config import AUTO, DecodeConfig, Generation
from wamdiff.decoding.dial import resolve_auto
from wamdiff.decoding.runner import PROMPT_BUCKET, StepRunner, collate_prompts
from wamdiff.models.convert import diffusion_settings
from wamdiff.models.precision import INT8, cast_model, compute_dtype
from wamdiff.models.recorded import is_diffusion
from wamdiff.models.tokens import IM_END, MASK, PAD, token_id


def model_block_settings(model, tokenizer) -> tuple[int | None, int | None]:
    """(trained block size, mask token id) of a model: a diffusion model's own (`models.convert.diffusion_settings`);
    for an AR model no block size and the tokenizer's MASK token (None when it has none)."""
    if is_diffusion(model):
        trained = diffusion_settings(model)
        return trained.block_size, trained.mask_token_id
    try:
        return None, token_id(tokenizer, MASK)
    except ValueError:
        return None, None


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
    if config.ordinal_window > 0 or (config.smoothness > 0 and config.mode == "block"):
        if config.grammar is None:
            raise ValueError("DecodeConfig.ordinal_window and smoothness need a grammar of an ordinal answer format "
                             "(delta, bins)")
        ordinal = config.grammar.ordinal_table(config.max_new_tokens + 64, device)
    readout = dict(window=config.ordinal_window, table=ordinal)

    if config.mode == "ar":
        runner = _make_runner(model, batch, 1, config)
        decode = partial(decode_ar, max_new_tokens=config.max_new_tokens, eos_id=eos_id, pad_id=pad_id,
                         grammar_table=table, readout=readout)
    else:
        trained, mask_id = model_block_settings(model, tokenizer)
        config = replace(config, block_size=config.block_size or trained)  # None: the block size it was trained at
        if config.block_size is None:
            raise ValueError("block decoding needs a block size: set DecodeConfig.block_size or decode a diffusion model")
        if mask_id is None:
            raise ValueError(f"block decoding needs a mask token: a diffusion model's or a {MASK!r} token")
        answer_slots = -(-config.max_new_tokens // config.block_size) * config.block_size
        if table is not None and table.shape[0] < answer_slots:
            table = config.grammar.table(answer_slots, vocab, pad_id, device)
            if ordinal is not None:
                readout["table"] = config.grammar.ordinal_table(answer_slots, device)
        runner = _make_runner(model, batch, config.block_size, config)
        shifted = is_diffusion(model) and diffusion_settings(model).shifted
        decode = partial(decode_block, config=config, mask_id=mask_id, eos_id=eos_id, pad_id=pad_id,
                         grammar_table=table, trace=trace, readout=readout, shifted=shifted)
    try:
        out, lengths, forwards, finished = decode(runner)
    finally:
        runner.release()  # its CUDA graphs serve the next decode of this shape
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
