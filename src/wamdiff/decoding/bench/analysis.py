"""What `wamdiff bench` reports beyond the timed grid: the roofline estimate beside the measured step costs, the
cheaper-step levers (paired against the reference path) and the measured effect of the answer length (short answers
cut from the long ones). Each part returns JSON-able rows for `tables`."""

from __future__ import annotations

import copy
import statistics
from dataclasses import replace

import torch

from wamdiff.decoding.bench.grid import DTYPES, BenchGrid, cast_copy
from wamdiff.decoding.bench.levers import decode_levers, paired_walls, step_levers
from wamdiff.decoding.bench.roofline import forward_flops, matmul_gflops, roofline, weight_bytes
from wamdiff.decoding.cost_model import StepCosts, load_step_costs, machine_key, step_costs_for
from wamdiff.decoding.dial import DialCurve, ar_forwards, batch_forwards
from wamdiff.decoding.engine import generate
from wamdiff.models.precision import INT8
from wamdiff.models.tokens import PAD, token_id


def cached_step_costs(model, config, block_sizes) -> StepCosts | None:
    """This machine's cost model for `model` as `config` runs it when one is already cached and holds every block
    size asked for; None otherwise. Never measures."""
    got = load_step_costs(machine_key(model, config))
    return got if got is not None and all(str(b) in got.prefill_ms[0] for b in block_sizes) else None


def roofline_section(model, tokenizer, prompts, grid: BenchGrid, *, fmt=None, tune_res: dict | None = None,
                     rows: list[dict] | None = None, progress=None, measure: bool = True) -> dict | None:
    """Roofline rows per dtype of the grid (compile off, the process's thread count), from the tuned cost models or
    a cached / new one. `measure=False` (bench --no-step-cost, --quick): only tuned or cached cost models are used,
    no step cost is measured (only the matmul rate, a few ms); None when there is no cost model to use."""
    roof, per_token = [], []
    tuned = {(c["dtype"], c["compile"], c.get("threads")): StepCosts.from_dict(c["model"])
             for c in (tune_res or {}).get("costs", [])}
    keys = round(statistics.fmean(p.input_ids.numel() for p in prompts)) + grid.max_new_tokens
    peak = None
    for dname in grid.dtypes:
        if DTYPES[dname] == INT8:  # FLOPs and the matmul rate are counted for float weights only
            continue
        m = cast_copy(model, dname, grid.device)
        cfg = grid.config(tokenizer, fmt)
        costs = tuned.get((dname, False, torch.get_num_threads()))
        if costs is None and not measure:
            costs = cached_step_costs(m, cfg, grid.block_sizes)
            if costs is None:
                continue
        if costs is None:
            costs = step_costs_for(m, prompts[0], cfg, pad_id=token_id(tokenizer, PAD), block_sizes=grid.block_sizes,
                                   progress=progress, batches=sorted(set(grid.batch_sizes) | {1}))
        rate = matmul_gflops(DTYPES[dname], grid.device)
        peak = peak or rate
        roof += [{"dtype": dname, **r} for r in roofline(m, costs, block_sizes=grid.block_sizes, peak_gflops=rate,
                                                          keys=keys, lean=grid.lean)]
        if tune_res and dname == grid.dtypes[0]:
            per_token += _flops_per_token(m, tune_res, rows or [], costs.prompt_len, keys, grid.lean)
    if not roof:
        return None
    return {"peak_gflops": peak, "weight_mb": weight_bytes(model) / 2 ** 20, "rows": roof, "per_token": per_token}


def _flops_per_token(model, tune_res: dict, rows: list[dict], prompt_len: int, keys: int, lean: str) -> list[dict]:
    """Counted FLOPs per decoded token at batch 1 (prefill included) of AR, the dial's batch-1 pick and the fastest
    measured batch-1 grid point, from the curve's traces."""
    curve = DialCurve.load(tune_res["curve_file"])
    ar_fl = [sum(forward_flops(model, f, 1, prompt_len, keys) for f in ar_forwards([t], lean)) / t for t in curve.ar_tokens]
    out = [{"who": "AR", "mflop_per_token": statistics.fmean(ar_fl) / 1e6}]
    pick = next((p for p in tune_res["picks"] if p["batch"] == 1 and p.get("pick") is not None), None)
    fastest = max((r for r in rows if r["batch"] == 1), key=lambda r: r["diffusion"]["plans_per_s"], default=None)
    for who, d in (("dial pick", pick), ("fastest grid point", fastest)):
        point = next((p for p in curve.points if d is not None and p.setting == {k: d[k] for k in p.setting}), None)
        if point is None:
            continue
        fl = [sum(forward_flops(model, f, 1, prompt_len, keys)
                  for f in batch_forwards([s], point.block_size, point.cache, lean, False)) / t
              for s, t in zip(point.masked, point.tokens)]
        out.append({"who": f"diffusion, {who} (B{point.block_size}, tau {point.threshold}, <= {point.max_steps} steps, "
                           f"{point.cache}, TPF {point.tpf:.2f})", "mflop_per_token": statistics.fmean(fl) / 1e6})
    return out


def levers_section(model, tokenizer, prompts, grid: BenchGrid, *, fmt=None, ar_model=None, ar_tokenizer=None,
                   repeats: int = 5, n_prompts: int = 8, progress=None) -> list[dict]:
    """Decode-level and step-level ratios of each lever, fp32 eager, at the grid's batch sizes up to 8, for AR and
    the grid's largest B at its tau nearest 0.9 and smallest step cap, exact cache, on the first `n_prompts`."""
    prompts = prompts[:n_prompts]
    m = copy.deepcopy(model).to(grid.device, torch.float32).eval()
    ar_m = copy.deepcopy(ar_model).to(grid.device, torch.float32).eval() if ar_model is not None else m
    b = max(grid.block_sizes)
    tau = min(grid.thresholds, key=lambda t: abs(t - 0.9))
    configs = {"ar": grid.config(ar_tokenizer or tokenizer, fmt, mode="ar"),
               "block": grid.block_config((b, tau, min(grid.max_steps), "exact"), tokenizer, fmt)}
    batches = [n for n in grid.batch_sizes if n <= 8] or [1]
    if progress:
        progress(f"cheaper steps: paired decodes (AR and B{b} tau {tau}) at batch {batches}, {repeats} repeats")
    rows = decode_levers(m, tokenizer, prompts, configs, batches=batches, repeats=repeats, ar_model=ar_m,
                         ar_tokenizer=ar_tokenizer)
    rows += step_levers(m, prompts[0], pad_id=token_id(tokenizer, PAD), block_size=b, batches=batches)
    return rows


def answer_length_section(model, tokenizer, prompts, grid: BenchGrid, *, fmt=None, ar_model=None, ar_tokenizer=None,
                          lengths=(17, None), repeats: int = 5, n_prompts: int = 8) -> list[dict]:
    """Measured effect of the answer length at batch 1: AR and the grid's largest B (tau nearest 0.9, smallest step
    cap, exact cache) decoding the first `n` tokens only (17 = a delta answer's 16 tokens + EOS; None = the whole
    answer), paired and interleaved on the same prompts."""
    m = copy.deepcopy(model).to(grid.device, torch.float32).eval()
    ar_m = copy.deepcopy(ar_model).to(grid.device, torch.float32).eval() if ar_model is not None else m
    ar_tok = ar_tokenizer or tokenizer
    b = max(grid.block_sizes)
    tau = min(grid.thresholds, key=lambda t: abs(t - 0.9))
    point = (b, tau, min(grid.max_steps), "exact")
    prompts = prompts[:n_prompts]
    out = []
    for n_tok in lengths:
        budget = {} if n_tok is None else {"max_new_tokens": n_tok}
        ar_cfg = replace(grid.config(ar_tok, fmt, mode="ar"), **budget)
        d_cfg = replace(grid.block_config(point, tokenizer, fmt), **budget)
        walls = paired_walls({"ar": lambda: [generate(ar_m, ar_tok, [p], ar_cfg) for p in prompts],
                         "diffusion": lambda: [generate(m, tokenizer, [p], d_cfg) for p in prompts]}, repeats)
        ratio = statistics.median(a / d for a, d in zip(walls["ar"], walls["diffusion"]))
        out.append({"answer_tokens": n_tok or grid.max_new_tokens, "block_size": b, "threshold": tau,
                    "max_steps": point[2], "ar_ms_per_plan": 1e3 * statistics.median(walls["ar"]) / len(prompts),
                    "diffusion_ms_per_plan": 1e3 * statistics.median(walls["diffusion"]) / len(prompts),
                    "times_ar": ratio, "repeats": repeats, "truncated": n_tok is not None})
    return out
