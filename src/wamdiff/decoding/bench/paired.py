"""The pipeline's benchmark: the AR checkpoint (AR decoding) against the diffusion checkpoint (block decoding)
on the same prompts, with the grid given as a settings dict (the pipeline YAML's `bench:` section)."""

from __future__ import annotations

from pathlib import Path

import torch

from wamdiff.decoding.bench.confirm import REPEATS as CONFIRM_REPEATS
from wamdiff.decoding.bench.confirm import confirm_headline
from wamdiff.decoding.bench.grid import BenchGrid, run_bench
from wamdiff.decoding.bench.journal import JOURNAL
from wamdiff.decoding.bench.judge import Judge
from wamdiff.decoding.bench.outputs import write_outputs
from wamdiff.decoding.bench.prompts import load_wamdiff2_json, synthetic_prompts
from wamdiff.decoding.bench.quality import guess_format


def _as_list(v) -> list:
    return list(v) if isinstance(v, (list, tuple)) else [v]


def grid_from_settings(st: dict) -> BenchGrid:
    """A `BenchGrid` from the pipeline's `bench:` keys (missing keys take the grid's defaults)."""
    d = BenchGrid()
    return BenchGrid(
        batch_sizes=list(st.get("batch_sizes", d.batch_sizes)), block_sizes=list(st.get("block_sizes", d.block_sizes)),
        thresholds=list(st.get("thresholds", d.thresholds)), dtypes=list(st.get("dtypes", d.dtypes)),
        max_new_tokens=int(st.get("max_new_tokens", d.max_new_tokens)),
        max_steps_per_block=[int(x) for x in _as_list(st.get("max_steps_per_block", d.max_steps_per_block))],
        repeats=int(st.get("repeats", d.repeats)), compile=[bool(c) for c in _as_list(st.get("compile", d.compile))],
        step_cost=bool(st.get("step_cost", d.step_cost)), caches=list(st.get("caches", d.caches)),
        device=str(st.get("device", d.device)), attention=str(st.get("attention", d.attention)),
        lean=str(st.get("lean", d.lean)), prefill_cache=bool(st.get("prefill_cache", d.prefill_cache)),
        ordinal_window=int(st.get("ordinal", d.ordinal_window)), threads=[int(t) for t in _as_list(st.get("threads", 0))],
    )


def paired_bench(*, ar_checkpoint, diffusion_checkpoint, data=None, out, settings: dict | None = None,
                 judge: Judge | None = None) -> dict:
    """Prompts from a WAM-Diff2 JSON (else synthetic). Writes bench.json / bench.png / bench.md under `out`;
    returns the result with `plot` (PNG path) and `markdown` (tables) added. `judge` (`bench.judge`, over the
    samples of `data` in order): PDMS and comfort join the quality bound; synthetic prompts have no scenes to
    judge on, so it is not used for them."""
    from wamdiff.models import image_processor_for, is_vision_model, load_model

    st = dict(settings or {})
    grid = grid_from_settings(st)  # bad settings fail before any model loads
    if grid.threads[0]:  # the process's count: the curve and whatever runs outside the grid
        torch.set_num_threads(grid.threads[0])
    model, tok = load_model(diffusion_checkpoint)
    ar_model, ar_tok = load_model(ar_checkpoint)
    vision = is_vision_model(model)
    n = int(st.get("prompts", 8))
    expert = None
    if data is not None and Path(data).exists():
        prompts, expert = load_wamdiff2_json(Path(data), tok, vision=vision, limit=n, image_processor=image_processor_for(model))
    else:
        prompts = synthetic_prompts(tok, n, vision=vision, image_processor=image_processor_for(model))
        judge = None
    fmt = st.get("format") or guess_format(expert[0] if expert else None)
    try:
        grid = grid.resolved(tok, fmt)
    except ValueError as err:
        raise ValueError(f"bench.block_sizes: {err}") from None
    journal = Path(out) / JOURNAL
    result = run_bench(model, tok, prompts, grid, expert=expert, fmt=fmt, ar_model=ar_model, ar_tokenizer=ar_tok,
                       journal=journal, judge=judge)
    repeats = int(st.get("confirm_repeats", CONFIRM_REPEATS))
    if repeats:
        result["confirmed"] = confirm_headline(result, model, tok, prompts, grid, fmt=fmt, ar_model=ar_model,
                                               ar_tokenizer=ar_tok, repeats=repeats)
    result.update(ar_checkpoint=str(ar_checkpoint), diffusion_checkpoint=str(diffusion_checkpoint), format=fmt)
    written = write_outputs(result, Path(out))
    journal.unlink(missing_ok=True)  # complete: the next run measures afresh
    return written
