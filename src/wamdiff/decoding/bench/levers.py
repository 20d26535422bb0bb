"""The cheaper-step levers, each measured against the reference path on the same prompts, A and B interleaved.

Levers (all exact, `DecodeConfig` fields): the LM head only at still-masked rows (`lean="head"`), also the last
layer's MLP only there (`lean="last_layer"`), the vision tower's grid tables cached (`prefill_cache`), the prompt
head every prompt shares prefilled once (`shared_prefix`), and all of them. Two levels:
- whole decodes (`decode_levers`): ms per plan of AR and of one diffusion setting at each batch size; every
  repeat times the reference and each lever back to back (order rotated per repeat), the ratio is taken within
  the repeat and the median over repeats reported, with a check that the lever decoded the same tokens;
- single forwards (`step_levers`): a B-row step with 4 still-masked rows, a fused commit and the prefill.
On a shared machine only ratios mean something; the figures carry the thread count and the host.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch

from wamdiff.decoding.bench.prompts import chunks, cycled
from wamdiff.decoding.config import DecodeConfig
from wamdiff.decoding.engine import generate
from wamdiff.decoding.runner import StepRunner, collate_prompts

REFERENCE = {"lean": "off", "prefill_cache": False, "shared_prefix": False}
LEVERS = {
    "LM head only at still-masked rows": {**REFERENCE, "lean": "head"},
    "+ last layer's MLP only there": {**REFERENCE, "lean": "last_layer"},
    "cached vision-tower tables": {**REFERENCE, "prefill_cache": True},
    "shared prompt head prefilled once": {**REFERENCE, "shared_prefix": True},
    "all of them": {"lean": "last_layer", "prefill_cache": True, "shared_prefix": True},
}


def paired_walls(fns: dict, repeats: int) -> dict[str, list[float]]:
    """Wall seconds of each callable per repeat, interleaved (the order rotates every repeat)."""
    names = list(fns)
    for f in fns.values():  # warm-up
        f()
    walls = {k: [] for k in names}
    for r in range(repeats):
        for name in names[r % len(names):] + names[:r % len(names)]:
            t0 = time.perf_counter()
            fns[name]()
            walls[name].append(time.perf_counter() - t0)
    return walls


def _ratios(walls: dict, ref: str = "reference") -> dict[str, float]:
    return {k: statistics.median(a / b for a, b in zip(v, walls[ref])) for k, v in walls.items() if k != ref}


@torch.inference_mode()
def decode_levers(model, tokenizer, prompts, configs: dict[str, DecodeConfig], *, batches=(1, 8), repeats: int = 5,
                  ar_model=None, ar_tokenizer=None) -> list[dict]:
    """`configs`: {"ar": AR config, "block": a diffusion config} decoded with each lever vs the reference path."""
    out = []
    for mode, base in configs.items():
        m, tok = (ar_model or model, ar_tokenizer or tokenizer) if mode == "ar" else (model, tokenizer)
        variants = {"reference": replace(base, **REFERENCE), **{k: replace(base, **v) for k, v in LEVERS.items()}}
        for n in batches:
            batches_n = chunks(cycled(prompts, n), n)
            tokens = {}

            def run(cfg, name):
                gens = [g for c in batches_n for g in generate(m, tok, c, cfg)]
                tokens[name] = [g.token_ids for g in gens]

            walls = paired_walls({k: (lambda c=c, k=k: run(c, k)) for k, c in variants.items()}, repeats)
            plans = sum(len(c) for c in batches_n)
            ratios = _ratios(walls)
            ref_ms = 1e3 * statistics.median(walls["reference"]) / plans
            for name in LEVERS:
                out.append({"level": "decode", "mode": mode, "batch": n, "lever": name, "reference_ms_per_plan": ref_ms,
                            "lever_ms_per_plan": 1e3 * statistics.median(walls[name]) / plans, "ratio": ratios[name],
                            "same_tokens": tokens[name] == tokens["reference"], "repeats": repeats})
    return out


@torch.inference_mode()
def step_levers(model, prompt, *, pad_id: int, block_size: int = 32, batches=(1, 8), repeats: int = 9,
                config: DecodeConfig | None = None) -> list[dict]:
    """Single forwards inside the runner, reference vs lever, interleaved: a B-row denoising step whose 4
    still-masked rows get logits, a fused commit (2B rows, B with logits) and the prompt prefill."""
    config = config or DecodeConfig()
    dev = next(model.parameters()).device
    kw = dict(compile=config.compile, cuda_graphs=config.cuda_graphs and config.attention == "sdpa",
              attention=config.attention)
    out = []
    b = block_size
    for n in batches:
        batch = collate_prompts([prompt] * n, pad_id, dev)
        if batch.pixel_values is not None:
            batch.pixel_values = batch.pixel_values.to(next(model.parameters()).dtype)
        runners = {name: StepRunner(model, batch, b, 2 * b, **v, **kw) for name, v in {"reference": REFERENCE, **LEVERS}.items()}
        for r in runners.values():
            r.prefill(None, keep=1)
        x = torch.full((n, b), pad_id, dtype=torch.long, device=dev)
        order = torch.arange(b, device=dev).expand(n, b)

        def step(name, r):
            if name == "reference" or r.lean == "off":
                return lambda: r.forward(x, r.P, keep=b)
            return lambda: r.forward_slots(x, r.P + order, keep=4)

        cases = {
            f"B{b} step, 4 still-masked rows": {k: step(k, r) for k, r in runners.items()},
            f"B{b} fused commit + step": {k: (lambda r=r: r.forward(torch.cat([x, x], 1), r.P, keep=b))
                                          for k, r in runners.items()},
            "prompt prefill (AR)": {k: (lambda r=r: r.prefill(None, keep=1)) for k, r in runners.items()},
        }
        for case, fns in cases.items():
            walls = paired_walls(fns, repeats)
            ratios = _ratios(walls)
            ref_ms = 1e3 * min(walls["reference"])
            for name in LEVERS:
                out.append({"level": "step", "mode": case, "batch": n, "lever": name, "reference_ms": ref_ms,
                            "lever_ms": 1e3 * min(walls[name]), "ratio": ratios[name], "repeats": repeats})
    return out
