"""The pipeline's benchmark: the AR checkpoint (AR decoding) against the diffusion checkpoint (block decoding)
on the same prompts, with the grid given as a settings dict (the pipeline YAML's `bench:` section) and the prompts,
answer format and trajectory parser built by the caller (`prompts.BenchInputs`; the pipeline's bench stage builds
them from its test data with `wamdiff.driving.bench_inputs`)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import torch

from wamdiff.decoding.bench.confirm import REPEATS as CONFIRM_REPEATS
from wamdiff.decoding.bench.confirm import confirm_headline
from wamdiff.decoding.bench.grid import BenchGrid, run_bench
from wamdiff.decoding.bench.journal import JOURNAL
from wamdiff.decoding.bench.judge import Judge
from wamdiff.decoding.bench.outputs import write_outputs
from wamdiff.decoding.answer import format_name
from wamdiff.decoding.bench.prompts import BenchInputs
from wamdiff.decoding.bench_settings import PROMPTS


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def grid_from_settings(st: dict) -> BenchGrid:
    """A `BenchGrid` from the pipeline's `bench:` keys (missing keys take the grid's defaults; the step caps'
    old key `max_steps_per_block` is still read, so an older config loads)."""
    d = BenchGrid()
    steps = st.get("max_steps", st.get("max_steps_per_block", d.max_steps))
    return BenchGrid(
        batch_sizes=list(st.get("batch_sizes", d.batch_sizes)), block_sizes=list(st.get("block_sizes", d.block_sizes)),
        thresholds=list(st.get("thresholds", d.thresholds)), dtypes=list(st.get("dtypes", d.dtypes)),
        max_new_tokens=int(st.get("max_new_tokens", d.max_new_tokens)),
        max_steps=[int(x) for x in _as_list(steps)],
        repeats=int(st.get("repeats", d.repeats)), compile=[bool(c) for c in _as_list(st.get("compile", d.compile))],
        step_cost=bool(st.get("step_cost", d.step_cost)), caches=list(st.get("caches", d.caches)),
        device=str(st.get("device", d.device)), attention=str(st.get("attention", d.attention)),
        cuda_graphs=bool(st.get("cuda_graphs", d.cuda_graphs)),
        lean=str(st.get("lean", d.lean)), prefill_cache=bool(st.get("prefill_cache", d.prefill_cache)),
        ordinal_window=int(st.get("ordinal", d.ordinal_window)), smoothness=float(st.get("smoothness", d.smoothness)),
        threads=[int(t) for t in _as_list(st.get("threads", 0))],
    )


def paired_bench(*, ar_checkpoint, diffusion_checkpoint, inputs: Callable[..., BenchInputs], out,
                 settings: dict | None = None, judge: Judge | None = None) -> dict:
    """`inputs(tokenizer, n=..., vision=..., image_processor=...)`: the caller's `BenchInputs` for the diffusion
    model's tokenizer (n prompts: the settings' `prompts`, default `PROMPTS`). Writes bench.json / bench.png / bench.md under
    `out`; returns the result with `plot` (PNG path) and `markdown` (tables) added. `judge` (`bench.judge`, over the
    prompts in order): PDMS and comfort join the quality bound; prompts without expert answers (synthetic) have no
    scenes to judge on, so it is not used for them."""
    from wamdiff.models import image_processor_for, is_vision_model, load_model

    st = dict(settings or {})
    grid = grid_from_settings(st)  # bad settings fail before any model loads
    if grid.threads[0]:  # the process's count: the curve and whatever runs outside the grid
        torch.set_num_threads(grid.threads[0])
    model, tok = load_model(diffusion_checkpoint)
    ar_model, ar_tok = load_model(ar_checkpoint)
    vision = is_vision_model(model)
    n = int(st.get("prompts", PROMPTS))
    inp = inputs(tok, n=n, vision=vision, image_processor=image_processor_for(model))
    prompts, expert, fmt = inp.prompts, inp.expert, inp.fmt
    if expert is None:
        judge = None
    try:
        grid = grid.resolved(tok, fmt)
    except ValueError as err:
        raise ValueError(f"bench.block_sizes: {err}") from None
    journal = Path(out) / JOURNAL
    result = run_bench(model, tok, prompts, grid, expert=expert, fmt=fmt, parse=inp.parse, ar_model=ar_model,
                       ar_tokenizer=ar_tok, journal=journal, judge=judge)
    repeats = int(st.get("confirm_repeats", CONFIRM_REPEATS))
    if repeats:
        result["confirmed"] = confirm_headline(result, model, tok, prompts, grid, fmt=fmt, ar_model=ar_model,
                                               ar_tokenizer=ar_tok, repeats=repeats)
    result.update(ar_checkpoint=str(ar_checkpoint), diffusion_checkpoint=str(diffusion_checkpoint),
                  format=format_name(fmt))
    written = write_outputs(result, Path(out))
    journal.unlink(missing_ok=True)  # complete: the next run measures afresh
    return written
