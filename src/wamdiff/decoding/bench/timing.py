"""Timing one decoding setting: warm-up then median wall time, tok/s counting generated tokens only, and the
cost of one block forward relative to one AR step inside the real decode loops (`step_cost`)."""

from __future__ import annotations

import math
import statistics
import time
from contextlib import contextmanager

import torch

from wamdiff.decoding.ar import decode_ar
from wamdiff.decoding.block import decode_block
from wamdiff.decoding.config import DecodeConfig, Generation
from wamdiff.decoding.engine import generate, model_block_settings
from wamdiff.decoding.runner import PROMPT_BUCKET, StepRunner, collate_prompts
from wamdiff.decoding.speed import speed_of
from wamdiff.models.tokens import PAD, token_id


@contextmanager
def torch_threads(n: int):
    """torch's intra-op thread count set to `n` inside the block (0: left as it is), restored after; yields the
    count in force."""
    before = torch.get_num_threads()
    if n:
        torch.set_num_threads(n)
    try:
        yield torch.get_num_threads()
    finally:
        if torch.get_num_threads() != before:
            torch.set_num_threads(before)


def timed_generate(model, tokenizer, prompts, cfg: DecodeConfig, repeats: int, warmup: bool = True):
    if warmup:
        generate(model, tokenizer, prompts, cfg)  # warm-up (allocations, compile, caches)
    walls = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        gens = generate(model, tokenizer, prompts, cfg)
        walls.append(time.perf_counter() - t0)
    return gens, statistics.median(walls)


def summarize(gens: list[Generation], wall: float, batch: int = 1) -> dict:
    """The one speed definition (`decoding.speed`) of `gens` decoded in batches of `batch` within `wall` seconds."""
    s = speed_of(gens, wall, batch).as_dict()
    return {**s, "forwards_per_sample": s["forwards_per_plan"], "tokens_per_sample": s["tokens_per_plan"],
            "finished": sum(g.finished for g in gens)}


@torch.inference_mode()
def step_cost(model, tokenizer, prompt, block_sizes, *, n_tokens: int = 64, repeats: int = 3, batch: int = 1,
              compile: bool = False, attention: str = "sdpa", cuda_graphs: bool = True) -> dict:
    """ms per forward inside the real decode loops: AR (1 token/forward) vs block-B with 1 token per forward
    (fixed strategy, B steps per block, EOS disabled). Pairs are interleaved; the minimum over repeats is kept."""
    pad = token_id(tokenizer, PAD)
    mask_id = model_block_settings(model, tokenizer)[1]
    batch_p = collate_prompts([prompt] * batch, pad, next(model.parameters()).device,
                              pad_to_multiple=PROMPT_BUCKET if compile else 1)
    # as `generate` builds it; lean off: every step is the full B-row forward (the speedup's denominator)
    kw = dict(compile=compile, cuda_graphs=cuda_graphs and attention == "sdpa", attention=attention, lean="off")

    def per_forward(t0, forwards) -> float:
        n = int(forwards[0])  # reading the count waits for the device
        return (time.perf_counter() - t0) / n

    def ar():  # each runner released, as `generate` does: the warm-up's CUDA graphs are replayed, not re-captured
        r = StepRunner(model, batch_p, 1, n_tokens + 1, **kw)
        t0 = time.perf_counter()
        ms = per_forward(t0, decode_ar(r, max_new_tokens=n_tokens, eos_id=-1, pad_id=pad)[2])
        r.release()
        return ms

    def blk(b):
        r = StepRunner(model, batch_p, b, n_tokens, **kw)
        fixed = DecodeConfig(block_size=b, max_new_tokens=n_tokens, strategy="fixed", max_steps=b, fused_commit=True)
        t0 = time.perf_counter()
        ms = per_forward(t0, decode_block(r, fixed, mask_id=mask_id, eos_id=-1, pad_id=pad)[2])
        r.release()
        return ms

    ar(), [blk(b) for b in block_sizes]  # warm-up
    res = {"ar_ms": math.inf, **{f"B{b}_ms": math.inf for b in block_sizes}}
    for _ in range(repeats):
        res["ar_ms"] = min(res["ar_ms"], 1e3 * ar())
        for b in block_sizes:
            res[f"B{b}_ms"] = min(res[f"B{b}_ms"], 1e3 * blk(b))
    for b in block_sizes:
        res[f"B{b}_ratio"] = res[f"B{b}_ms"] / res["ar_ms"]
    return res
