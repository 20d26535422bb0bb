"""The headline pair timed again, paired: the fastest AR setting against the fastest diffusion setting at AR quality.

The grid times AR next to every diffusion point, and the headline takes the AR setting with the fastest median
timing (`headline.fastest_ar`) and the fastest diffusion point: the latter is the luckiest of many settings timed
once each, so it is biased by noise in diffusion's favour. This step re-times just the two winners, interleaved
for `repeats` rounds on the grid's prompts (AR and diffusion back to back, order rotated every round), and reports
the median of the per-round ratios (`levers.paired_walls`), with its range. The selection still happened on the
grid; the figure of the selected pair no longer carries the selection's luck.
"""

from __future__ import annotations

import statistics

import torch

from wamdiff.decoding.bench.grid import BenchGrid, cast_copy
from wamdiff.decoding.bench.headline import diffusion_label, setting_label
from wamdiff.decoding.bench.levers import paired_walls
from wamdiff.decoding.bench.prompts import chunks, cycled
from wamdiff.decoding.bench.timing import torch_threads
from wamdiff.decoding.engine import generate

REPEATS = 7


def _decoding(model, tokenizer, cfg, batches, threads):
    """One side's decode of every batch, at its own thread count (a grid dimension like dtype; None/0: as is)."""
    def run():
        with torch_threads(threads or 0):
            return [generate(model, tokenizer, x, cfg) for x in batches]
    return run


@torch.inference_mode()
def confirm_headline(result: dict, model, tokenizer, prompts, grid: BenchGrid, *, fmt=None, ar_model=None,
                     ar_tokenizer=None, repeats: int = REPEATS, progress=None) -> list[dict]:
    """One entry per batch size whose headline has a diffusion setting at AR quality (`result["best"]`)."""
    out = []
    ar_tok = ar_tokenizer or tokenizer
    pool = cycled(prompts, max(grid.batch_sizes))
    copies = {}  # one cast copy per (model, dtype), shared by the batch sizes

    def cast(m, dtype: str):
        key = (id(m), dtype)
        if key not in copies:
            copies[key] = cast_copy(m, dtype, grid.device)
        return copies[key]

    for b in result.get("best", []):
        q = b.get("at_quality")
        if not q:
            continue
        n = b["batch"]
        batches = chunks(pool, n)
        d_model, a_model = cast(model, q["diffusion_dtype"]), cast(ar_model or model, q["ar_dtype"])
        ar_cfg = grid.config(ar_tok, fmt, mode="ar", compile=q["ar_compile"])
        d_cfg = grid.block_config((q["block_size"], q["threshold"], q["max_steps"], q["cache"]), tokenizer, fmt,
                                  compile=q["diffusion_compile"])
        walls = paired_walls({
            "ar": _decoding(a_model, ar_tok, ar_cfg, batches, q.get("ar_threads")),
            "diffusion": _decoding(d_model, tokenizer, d_cfg, batches, q.get("diffusion_threads")),
        }, repeats)
        ratios = [a / d for a, d in zip(walls["ar"], walls["diffusion"])]
        plans = n * len(batches)
        entry = {"batch": n, "repeats": repeats, "plans": plans,
                 "ar_setting": setting_label(q["ar_dtype"], q["ar_compile"], q.get("ar_threads")),
                 "diffusion_setting": (f"{setting_label(q['diffusion_dtype'], q['diffusion_compile'], q.get('diffusion_threads'))}"
                                       f", {diffusion_label(q)}"),
                 "ar_ms_per_plan": 1e3 * statistics.median(walls["ar"]) / plans,
                 "diffusion_ms_per_plan": 1e3 * statistics.median(walls["diffusion"]) / plans,
                 "times_ar": statistics.median(ratios), "times_ar_min": min(ratios), "times_ar_max": max(ratios),
                 "grid_times_ar": q["times_ar"]}
        out.append(entry)
        if progress:
            progress(f"confirmed, batch {n}: {entry['diffusion_setting']} {entry['times_ar']:.2f}x AR (median of "
                     f"{repeats} paired rounds, {entry['times_ar_min']:.2f}-{entry['times_ar_max']:.2f}; grid "
                     f"{entry['grid_times_ar']:.2f}x)")
    return out
