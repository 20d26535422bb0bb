"""`wamdiff bench --tune`: measure the speed dial's two inputs and report its picks beside the timed grid.

1. The model's TPF / quality curve (`dial.DialCurve`): every grid point decoded at batch 1 on the bench prompts
   (untimed), with a trace of the masked positions before each step, and the trajectory quality next to AR's.
   Stored in the dial cache (so `DecodeConfig(block_size="auto")` finds it) and as OUT/dial_curve.json.
2. The machine's step-cost model per (threads, compile, dtype) of the grid (`cost_model`), measured afresh and
   cached.
3. The dial's pick per batch size and (threads, compile, dtype), and the predicted ms per plan of every grid point.
After the timed grid, `attach_measurements` puts each pick next to its measured row and the fastest measured
row at AR quality, and records how far the predictions are from the measured latencies.
"""

from __future__ import annotations

import copy
import itertools
import statistics
from dataclasses import asdict
from pathlib import Path

from wamdiff.decoding.answer import AnswerFormat, format_name
from wamdiff.decoding.bench.grid import BenchGrid, cast_copy
from wamdiff.decoding.bench.headline import at_ar_quality, best_vs_best, setting_label
from wamdiff.decoding.bench.judge import Judge, judged_quality
from wamdiff.decoding.bench.prompts import Parser
from wamdiff.decoding.bench.quality import parser_for, quality
from wamdiff.decoding.bench.timing import torch_threads
from wamdiff.decoding.cost_model import Forward, StepCosts, step_costs_for
from wamdiff.decoding.dial import (
    CURVE_FILE, CurvePoint, DialCurve, ar_forwards, batch_forwards, choose, curve_path, judged, meets_quality,
    model_fingerprint, predict_ar_ms_per_plan, predict_ms_per_plan, prefill_share,
)
from wamdiff.decoding.engine import generate, model_block_settings
from wamdiff.models.tokens import PAD, token_id


def measure_curve(model, tokenizer, prompts, expert, grid: BenchGrid, *, fmt: AnswerFormat | None = None,
                  parse: Parser | None = None, ar_model=None, ar_tokenizer=None, progress=None,
                  judge: Judge | None = None) -> DialCurve:
    """Every grid point decoded at batch 1 on `prompts` (untimed): per-sample masked-count traces, tokens, quality
    (with `judge`, `bench.judge`: PDMS and comfort on the prompts' scenes too, AR's and every point's). `fmt`,
    `parse`: as `grid.run_bench`'s."""
    parse = parser_for(fmt, parse)
    mask_id = model_block_settings(model, tokenizer)[1]
    ar_m, ar_tok = ar_model or model, ar_tokenizer or tokenizer
    ar_cfg = grid.config(ar_tok, fmt, mode="ar")
    ar_gens = [generate(ar_m, ar_tok, [p], ar_cfg)[0] for p in prompts]
    points = []
    for point in grid.diffusion_points():
        cfg = grid.block_config(point, tokenizer, fmt)
        gens, masked = [], []
        for p in prompts:
            blocks: list[list[int]] = []

            def record(blk, step, x, logits, blocks=blocks):
                if step == 0:
                    blocks.append([])
                blocks[-1].append(int((x == mask_id).sum()))

            gens.append(generate(model, tokenizer, [p], cfg, trace=record)[0])
            masked.append(blocks)
        q = judged_quality(quality(gens, ar_gens, expert, parse), judge, [g.text for g in gens], len(prompts))
        points.append(CurvePoint(*point, masked=masked, tokens=[len(g.token_ids) for g in gens], quality=q))
        if progress:
            q = points[-1].quality
            progress(f"curve B{point[0]} tau {point[1]} <= {point[2]} steps {point[3]}: TPF {points[-1].tpf:.2f}, "
                     f"L2 {q['l2_vs_expert'] if q['l2_vs_expert'] is None else round(q['l2_vs_expert'], 3)}"
                     + (f", PDMS {q['pdms']:.1f}, C {q['comfort']:.3f}" if judged(q) else ""))
    first = grid.block_config(grid.diffusion_points()[0], tokenizer, fmt)  # the read-outs every point shares
    return DialCurve(model_fingerprint(model), format_name(fmt), round(statistics.fmean(p.input_ids.numel() for p in prompts)),
                     [len(g.token_ids) for g in ar_gens],
                     judged_quality(quality(ar_gens, ar_gens, expert, parse), judge, [g.text for g in ar_gens], len(prompts)),
                     points,
                     notes={"prompts": len(prompts), "max_new_tokens": grid.max_new_tokens},
                     ordinal_window=first.ordinal_window, smoothness=first.smoothness)


def tune(model, tokenizer, prompts, expert, grid: BenchGrid, *, fmt: AnswerFormat | None = None,
         parse: Parser | None = None, ar_model=None, ar_tokenizer=None, out=None, progress=None,
         judge: Judge | None = None) -> dict:
    """Curve, cost models and picks (see the module docstring). Returns a JSON-able dict."""
    base = copy.deepcopy(model).float().eval()
    curve = measure_curve(base, tokenizer, prompts, expert, grid, fmt=fmt, parse=parse, ar_model=ar_model,
                          ar_tokenizer=ar_tokenizer, progress=progress, judge=judge)
    curve.save(curve_path(curve.fingerprint))
    if out is not None:
        curve.save(Path(out) / CURVE_FILE)
    pad = token_id(tokenizer, PAD)
    picks, costs, predictions = [], [], []
    for n_threads, comp, dname in itertools.product(grid.threads, grid.compile, grid.dtypes):
        with torch_threads(n_threads) as threads:
            m = cast_copy(base, dname, grid.device)
            cfg = grid.config(tokenizer, fmt, compile=comp)
            static = cfg.static_shapes(grid.device)
            c = step_costs_for(m, prompts[0], cfg, pad_id=pad, block_sizes=grid.block_sizes,
                               batches=sorted(set(grid.batch_sizes) | {1}), remeasure=True, progress=progress)
            costs.append({"dtype": dname, "compile": comp, "threads": threads, "model": asdict(c)})
            for n in grid.batch_sizes:
                ar_ms = predict_ar_ms_per_plan(curve.ar_tokens, c, n, lean=cfg.lean)
                for p in curve.points:
                    predictions.append({"dtype": dname, "compile": comp, "threads": threads, "batch": n,
                                        **p.setting,
                                        "predicted_ms_per_plan": predict_ms_per_plan(p, c, n, lean=cfg.lean,
                                                                                     static_shapes=static),
                                        "predicted_prefill_share": prefill_share(p, c, n, lean=cfg.lean,
                                                                                 static_shapes=static),
                                        "predicted_ar_ms_per_plan": ar_ms})
                pick = choose(curve, c, n, lean=cfg.lean, static_shapes=static)
                picks.append({"dtype": dname, "compile": comp, "threads": threads, "batch": n, "pick": None if pick is None else {
                    **pick.__dict__}, **({} if pick is None else {k: getattr(pick, k) for k in (
                        "block_size", "threshold", "max_steps", "cache")})})
                if progress:
                    progress(f"speed dial, {setting_label(dname, comp, threads)}, batch {n}: " + (
                        "no setting at AR quality" if pick is None else
                        f"B{pick.block_size} tau {pick.threshold} <= {pick.max_steps} steps {pick.cache} cache, "
                        f"predicted {pick.predicted_ms_per_plan:.1f} ms/plan (AR {pick.predicted_ar_ms_per_plan:.1f})"))
            del m
    return {"curve": _curve_summary(curve), "costs": costs, "picks": picks, "predictions": predictions,
            "curve_file": str(curve_path(curve.fingerprint)), "lean": grid.lean}


def _curve_summary(curve: DialCurve) -> dict:
    return {"fingerprint": curve.fingerprint, "format": curve.fmt, "prompts": len(curve.ar_tokens),
            "ar_tokens_mean": statistics.fmean(curve.ar_tokens), "ar_quality": curve.ar_quality,
            "points": [{**p.setting, "tpf": p.tpf, "tokens_mean": statistics.fmean(p.tokens), "quality": p.quality,
                        "at_ar_quality": meets_quality(p.quality, curve.ar_quality),
                        "steps_per_block": statistics.fmean(len(b) for s in p.masked for b in s)}
                       for p in curve.points]}


def attach_measurements(result: dict) -> None:
    """Judge every grid row's quality on the curve (`at_ar_quality`, and the best-vs-best lines again), put each pick
    next to its measured grid row and the fastest measured row at AR quality (same batch, dtype, compile), and each
    prediction next to its measured latency (in place)."""
    tune_res = result.get("tune")
    if not tune_res:
        return

    def setting(d):  # batch size and machine setting: a pick without a setting at AR quality has only these
        return d["batch"], d["dtype"], d["compile"], d.get("threads")

    def key(d):
        return *setting(d), d["block_size"], d["threshold"], d["max_steps"], d["cache"]

    rows = {key(r): r for r in result["rows"]}
    on_curve = {(c["block_size"], c["threshold"], c["max_steps"], c["cache"]): c["at_ar_quality"]
                for c in tune_res["curve"]["points"]}
    for r in result["rows"]:  # the quality bound as the dial judges it: on the curve's prompts
        r["at_ar_quality"] = on_curve.get(key(r)[4:])
    result["best"] = best_vs_best(result["rows"])
    for p in tune_res["picks"]:
        p["row"] = rows.get(key(p)) if p.get("pick") is not None else None
        good = [r for r in result["rows"] if setting(r) == setting(p) and at_ar_quality(r)]
        best = max(good, key=lambda r: r["diffusion"]["plans_per_s"]) if good else None
        p["best"] = None if best is None else {k: best[k] for k in ("block_size", "threshold", "max_steps", "cache")}
        p["best_plans_per_s"] = None if best is None else best["diffusion"]["plans_per_s"]
        p["pick_plans_per_s"] = None if p["row"] is None else p["row"]["diffusion"]["plans_per_s"]
        p["of_best"] = (p["pick_plans_per_s"] / p["best_plans_per_s"]) if p["pick_plans_per_s"] and best else None
    errors = []
    for pr in tune_res["predictions"]:
        r = rows.get(key(pr))
        if r is not None:
            pr["measured_ms_per_plan"] = 1e3 / r["diffusion"]["plans_per_s"]
            pr["measured_ar_ms_per_plan"] = 1e3 / r["ar"]["plans_per_s"]
            errors.append(abs(pr["predicted_ms_per_plan"] / pr["measured_ms_per_plan"] - 1))
    tune_res["prediction_error"] = statistics.median(errors) if errors else None


def answer_length_effect(tune_res: dict, curve: DialCurve | None = None, lengths=(17, 112)) -> list[dict]:
    """Where the time goes for a short answer (delta: 16 tokens + EOS) and a long one (fixed1: 112), predicted from
    the cost model at batch 1: AR = prefill + one 1-row step per further token; diffusion = each batch-1 pick's
    measured traces cut to the blocks that `n` tokens need (a short answer is its first block)."""
    curve = curve or DialCurve.load(tune_res["curve_file"])
    points = {tuple(p.setting.values()): p for p in curve.points}
    out = []
    for c in tune_res["costs"]:
        costs = StepCosts.from_dict(c["model"])
        lean = tune_res["lean"]
        static = c["model"]["key"]["static_shapes"]
        pick = next((p for p in tune_res["picks"] if p["batch"] == 1 and p.get("pick") is not None
                     and (p["dtype"], p["compile"], p.get("threads")) == (c["dtype"], c["compile"], c.get("threads"))),
                    None)
        if pick is None:
            continue
        point = points[(pick["block_size"], pick["threshold"], pick["max_steps"], pick["cache"])]
        for n_tok in lengths:
            ar = ar_forwards([n_tok], lean)
            n_blocks = -(-n_tok // point.block_size)
            ar_ms = costs.call(1, ar, "ar")
            blk = [costs.call(1, batch_forwards([s[:n_blocks]], point.block_size, point.cache, lean, static), "block")
                   for s in point.masked]
            pre = costs.forward(1, Forward("prefill", point.block_size, point.block_size,
                                           point.block_size if lean == "last_layer" else None))
            d_ms = statistics.fmean(blk)
            out.append({"dtype": c["dtype"], "compile": c["compile"], "threads": c.get("threads"), "answer_tokens": n_tok,
                        **point.setting,
                        "ar_ms": ar_ms, "ar_prefill_share": costs.forward(1, ar[0]) / ar_ms,
                        "diffusion_ms": d_ms, "diffusion_prefill_share": pre / d_ms, "times_ar": ar_ms / d_ms})
    return out
