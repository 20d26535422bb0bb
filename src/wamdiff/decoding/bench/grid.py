"""The benchmark grid and its run: every (threads, compile, dtype, batch, B, tau, step cap, cache) point timed
paired with AR on the same prompts.

Honesty rules (docs/concepts/decoding.md, "Measuring speed fairly"): same model object, dtype, cache class, compile setting
and prompts for both decoders; a warm-up run before every timed configuration; only generated tokens (up to EOS) are counted;
forwards per sample include the prefill and commits; the thread count is a grid dimension like dtype (AR and
diffusion alike at each count; the headline takes the best of each side over all of them). Absolute tok/s drifts
between sessions on a shared CPU, the paired ratio much less: each diffusion run is timed right after its
own AR run (interleaved), and the ratio is taken within the pair.

Also measured (`step_cost`): the cost of one block forward of B tokens over the cache relative to one AR
step, both inside their real decode loops (one token per forward, no EOS) — the denominator of the speedup:
speedup = TPF / step-cost ratio.
"""

from __future__ import annotations

import copy
import itertools
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

import torch

from wamdiff.decoding.answer import FIXED_WIDTH_LAYOUTS, AnswerFormat, fixed_width, format_name, ordinal
from wamdiff.decoding.bench.headline import best_vs_best, mark_reference_quality
from wamdiff.decoding.bench.journal import Journal, fingerprint
from wamdiff.decoding.bench.judge import Judge, judged_quality
from wamdiff.decoding.bench.prompts import Parser, chunks, cycled
from wamdiff.decoding.bench.quality import parser_for, quality
from wamdiff.decoding.bench.timing import step_cost, summarize, timed_generate, torch_threads
from wamdiff.decoding.speed import times_ar
from wamdiff.decoding.config import ATTENTIONS, DTYPE_NAMES, DecodeConfig
from wamdiff.decoding.dial import quality_bound_text
from wamdiff.decoding.grammar import Grammar
from wamdiff.models.precision import cast_model
from wamdiff.decoding.lean import LEAN_MODES
from wamdiff.names import CACHES, GRID_DTYPES

DTYPES = {name: DTYPE_NAMES[name] for name in GRID_DTYPES}  # the grid's dtypes (int8: CPU only)


def cast_copy(model, dtype: str, device):
    """A copy of `model` on `device` in the grid dtype `dtype`, in eval mode; the model itself is not touched."""
    return cast_model(copy.deepcopy(model).float().to(device), DTYPES[dtype]).eval()


# A block size keyword: one block that holds exactly the answer of a fixed-width format (its tokens + end of turn).
# A short answer (delta: 17 tokens) in a B32 block pays for 15 PAD rows in every forward, and in a B16 block for
# a second block that holds only the end of turn.
FIT = "fit"


@dataclass
class BenchGrid:
    """The configurations timed. `max_steps`: step caps per block (`DecodeConfig.max_steps`, one grid point each;
    a cap decides the masks left at the last step in parallel); `caches`: "exact" (every denoising step recomputes
    the block) and/or "delayed" (`DecodeConfig.delayed_cache`); `compile`: torch.compile off and/or on; `threads`:
    torch thread counts (0 = the process's count). Each setting applies to AR and diffusion alike; the headline
    compares the best of each, so a setting that only helps one side counts."""

    batch_sizes: list[int] = field(default_factory=lambda: [1, 8])
    block_sizes: list[int] = field(default_factory=lambda: [4, 8, 16, 32])
    thresholds: list[float] = field(default_factory=lambda: [0.7, 0.8, 0.9, 0.95])
    dtypes: list[str] = field(default_factory=lambda: ["fp32", "bf16"])
    max_new_tokens: int = 160
    max_steps: list[int] = field(default_factory=lambda: [32])
    repeats: int = 1
    compile: list[bool] = field(default_factory=lambda: [False])
    step_cost: bool = True
    step_cost_tokens: int = 64
    step_cost_repeats: int = 3
    caches: list[str] = field(default_factory=lambda: ["exact", "delayed"])
    threads: list[int] = field(default_factory=lambda: [0])
    device: str = "cpu"
    attention: str = "sdpa"  # DecodeConfig.attention, for AR and diffusion alike
    cuda_graphs: bool = DecodeConfig.cuda_graphs  # DecodeConfig.cuda_graphs (CUDA, SDPA steps only), both sides
    lean: str = DecodeConfig.lean  # DecodeConfig.lean and prefill_cache, for AR and diffusion alike
    prefill_cache: bool = DecodeConfig.prefill_cache
    ordinal_window: int = 0  # DecodeConfig.ordinal_window of every diffusion point (AR decodes greedily)
    smoothness: float = 0.0  # DecodeConfig.smoothness of every diffusion point (the joint read-out; AR has none)

    def __post_init__(self) -> None:
        bad = [b for b in self.block_sizes if b != FIT and not (isinstance(b, int) and b >= 1)]
        if bad:
            raise ValueError(f"BenchGrid.block_sizes: {bad} are not block sizes (positive integers or {FIT!r})")
        if isinstance(self.compile, bool):
            self.compile = [self.compile]
        if isinstance(self.max_steps, int):
            self.max_steps = [self.max_steps]
        if isinstance(self.threads, int):
            self.threads = [self.threads]
        if not self.threads or any(not isinstance(t, int) or t < 0 for t in self.threads):
            raise ValueError(f"BenchGrid.threads: {self.threads} (use thread counts >= 1, or 0 = the process's count)")
        bad = [c for c in self.caches if c not in CACHES]
        if bad:
            raise ValueError(f"BenchGrid.caches: unknown {bad} (use exact and/or delayed)")
        bad = [d for d in self.dtypes if d not in DTYPES]
        if bad:
            raise ValueError(f"BenchGrid.dtypes: unknown {bad} (use {sorted(DTYPES)})")
        if self.attention not in ATTENTIONS:
            raise ValueError(f"BenchGrid.attention: unknown {self.attention!r} (use one of {ATTENTIONS})")
        if self.lean not in LEAN_MODES:
            raise ValueError(f"BenchGrid.lean: unknown {self.lean!r} (use one of {LEAN_MODES})")
        if self.ordinal_window < 0:
            raise ValueError(f"BenchGrid.ordinal_window: must be >= 0, got {self.ordinal_window}")
        if not self.smoothness >= 0.0:
            raise ValueError(f"BenchGrid.smoothness: must be >= 0, got {self.smoothness}")
        if "int8" in self.dtypes and torch.device(self.device).type != "cpu":
            raise ValueError(f"BenchGrid.dtypes: int8 runs on the CPU only, not on {self.device!r}")
        if torch.device(self.device).type == "cuda" and not torch.cuda.is_available():
            raise ValueError(f"BenchGrid.device {self.device!r}: no CUDA device is visible on this machine")

    def resolved(self, tokenizer, fmt: AnswerFormat | None) -> "BenchGrid":
        """This grid with `FIT` replaced by the answer length of `fmt` under `tokenizer` (`Grammar.answer_tokens`)."""
        if FIT not in self.block_sizes:
            return self
        if not fixed_width(fmt):
            raise ValueError(f"block size {FIT!r} needs a fixed-width answer format (layout "
                             f"{' or '.join(FIXED_WIDTH_LAYOUTS)}: fixed1, fixed2, bins, delta), got {format_name(fmt)!r}")
        fit = Grammar.for_format(tokenizer, fmt).answer_tokens
        sizes = [fit if b == FIT else b for b in self.block_sizes]
        return replace(self, block_sizes=list(dict.fromkeys(sizes)))

    def diffusion_points(self) -> list[tuple]:
        """(B, tau, step cap, cache) of every distinct diffusion configuration, in run order. A cap of one step
        decides every position at the first forward, so tau never enters: one point (the first tau) stands for
        all, rather than timing the same decode twice and letting the headline pick the luckier timing."""
        points = itertools.product(self.block_sizes, self.thresholds, self.max_steps, self.caches)
        return [pt for pt in points if pt[2] != 1 or pt[1] == self.thresholds[0]]

    def config(self, tokenizer=None, fmt: AnswerFormat | None = None, **kw) -> DecodeConfig:
        """A `DecodeConfig` with the grid's shared settings (and the answer format's grammar, as planners decode)."""
        grammar = Grammar.for_format(tokenizer, fmt) if tokenizer is not None and fixed_width(fmt) else None
        return DecodeConfig(max_new_tokens=self.max_new_tokens, attention=self.attention, lean=self.lean,
                            prefill_cache=self.prefill_cache, cuda_graphs=self.cuda_graphs, grammar=grammar, **kw)

    def block_config(self, point: tuple, tokenizer=None, fmt: AnswerFormat | None = None,
                     compile: bool = False) -> DecodeConfig:
        b, tau, steps, cache = point
        # both read-outs need the grid values of an ordinal format
        window, smooth = (self.ordinal_window, self.smoothness) if ordinal(fmt) else (0, 0.0)
        return self.config(tokenizer, fmt, mode="block", block_size=b, threshold=tau, max_steps=steps,
                           delayed_cache=cache == "delayed", compile=compile, ordinal_window=window,
                           smoothness=smooth)


def run_bench(model, tokenizer, prompts, grid: BenchGrid, *, expert=None, fmt: AnswerFormat | None = None,
              parse: Parser | None = None, progress=None, ar_model=None, ar_tokenizer=None, journal: Path | None = None,
              judge: Judge | None = None) -> dict:
    """The whole grid. Returns a JSON-able dict with `rows` (one per configuration) and `step_cost`.

    `fmt`: the answer format (`decoding.answer.AnswerFormat`: its grammar and ordinal read-out; None: neither);
    `parse`: the trajectory parser of the L2 figures (`quality.parser_for`; default: `fmt.parse`). The caller builds
    both (`wamdiff.driving.bench_inputs`).

    `ar_model`: the AR baseline's own checkpoint (same class and tokenizer); default: `model` decoded AR.
    `judge`: scores answer texts on the prompts' scenes (`bench.judge`); its PDMS and comfort join every row's
    `quality` and `ar_quality`, so the bound "at AR quality" covers them too.
    `journal`: a JSON-lines file each finished row is appended to; a run with the same grid, models and
    prompts reuses the rows found there (an interrupted benchmark resumes where it stopped).
    The caller's models are never modified (each dtype runs on a cast copy)."""
    rows, costs = [], []
    parse = parser_for(fmt, parse)
    log = (Journal(journal, fingerprint(grid, prompts, model, ar_model, format_name(fmt), judged=judge is not None))
           if journal else None)
    if log and log.rows and progress:
        progress(f"resuming: {len(log.rows)} rows and {len(log.costs)} step costs from {journal}")
    base = copy.deepcopy(model).float()
    ar_base = copy.deepcopy(ar_model).float() if ar_model is not None else None
    ar_tok = ar_tokenizer or tokenizer
    # every batch size decodes the same prompts (at least one full batch): batch n runs them in chunks of n
    n_prompts = max(len(prompts), *grid.batch_sizes)
    pool = cycled(prompts, n_prompts)
    expert_pool = cycled(expert, n_prompts) if expert else None

    def timed_chunks(model_, tok_, cfg, n, warmup=True):
        # compiled steps: every chunk may have a new prompt width (a new graph), so each chunk warms up
        gens, wall = [], 0.0
        for i, chunk in enumerate(chunks(pool, n)):
            g, w = timed_generate(model_, tok_, chunk, cfg, grid.repeats, warmup=warmup and (i == 0 or cfg.compile))
            gens, wall = gens + g, wall + w
        return gens, wall

    for n_threads, comp, dname in itertools.product(grid.threads, grid.compile, grid.dtypes):
        with torch_threads(n_threads) as threads:
            keys = {n: [(threads, comp, dname, n, *k) for k in grid.diffusion_points()] for n in grid.batch_sizes}
            if log and all(k in log.rows for ks in keys.values() for k in ks) and (
                    not grid.step_cost or (comp, dname, threads) in log.costs):
                costs += [log.costs[(comp, dname, threads)]] if grid.step_cost else []
                rows += [log.rows[k] for ks in keys.values() for k in ks]
                continue
            # fresh copies per setting: a compiled step freezes the weights of the model it first saw
            m = cast_copy(base, dname, grid.device)
            ar_m = cast_copy(ar_base, dname, grid.device) if ar_base is not None else m
            if grid.step_cost:
                cost = log.costs.get((comp, dname, threads)) if log else None
                if cost is None:
                    cost = {"dtype": dname, "compile": comp, "threads": threads,
                            **step_cost(m, tokenizer, pool[0], grid.block_sizes, compile=comp, attention=grid.attention,
                                        cuda_graphs=grid.cuda_graphs,
                                        n_tokens=grid.step_cost_tokens, repeats=grid.step_cost_repeats)}
                    if log:
                        log.add("cost", cost)
                costs.append(cost)
                if progress:
                    progress(f"step cost {dname}{' compiled' if comp else ''}, {threads} threads: "
                             + ", ".join(f"B{b} {cost[f'B{b}_ratio']:.2f}x" for b in grid.block_sizes))
            for n in grid.batch_sizes:
                ar_cfg = grid.config(ar_tok, fmt, mode="ar", compile=comp)
                if not log or any(k not in log.rows for k in keys[n]):
                    timed_chunks(ar_m, ar_tok, ar_cfg, n, warmup=True)  # AR warm-up (every prompt width)
                used = n * len(chunks(pool, n))
                for key in keys[n]:
                    b, tau, steps, cache = key[4:]
                    if log and key in log.rows:
                        rows.append(log.rows[key])
                        continue
                    # AR is re-timed next to every diffusion run: the ratio is taken within the pair
                    ar_g, ar_wall = timed_chunks(ar_m, ar_tok, ar_cfg, n, warmup=False)
                    ar = summarize(ar_g, ar_wall, n)
                    cfg = grid.block_config((b, tau, steps, cache), tokenizer, fmt, compile=comp)
                    g, wall = timed_chunks(m, tokenizer, cfg, n)
                    d = summarize(g, wall, n)
                    exp = expert_pool[:used] if expert_pool else None
                    q = judged_quality(quality(g, ar_g, exp, parse), judge, [x.text for x in g], len(prompts))
                    ar_q = judged_quality(quality(ar_g, ar_g, exp, parse), judge, [x.text for x in ar_g], len(prompts))
                    row = {"dtype": dname, "compile": comp, "threads": threads, "batch": n, "block_size": b,
                           "threshold": tau, "max_steps": steps, "cache": cache, "ar": ar, "diffusion": d,
                           "times_ar": times_ar(d, ar), "speedup": d["tok_s"] / ar["tok_s"], "prompts": used,
                           "quality": q, "ar_quality": ar_q}
                    rows.append(row)
                    if log:
                        log.add("row", row)
                    if progress:
                        progress(row)
    mark_reference_quality(rows)
    device = torch.cuda.get_device_name(grid.device) if grid.device.startswith("cuda") else "cpu"
    return {"threads": sorted({r["threads"] for r in rows}), "torch": torch.__version__, "device": device,
            "grid": asdict(grid), "rows": rows, "step_cost": costs, "n_params": sum(p.numel() for p in model.parameters()),
            "ar_baseline": "separate AR checkpoint" if ar_model is not None else "same model, AR decoding",
            "quality_check": quality_bound_text(judged_on_scenes=judge is not None), "best": best_vs_best(rows)}
