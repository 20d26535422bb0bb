"""The evaluation half of the pipeline: every planner of the report judged the same way, once.

Stages (each resumable through the pipeline's stage files):
  eval_open    - each planner plans the test scenes once; those plans are scored by PDMS and open-loop L2
  eval_closed  - closed-loop dev routes in lockstep (model planners on the first `model_routes` routes)
  eval_qa      - multi-task retention: exact match on the test split's question-answer pairs
  overlap      - teacher-student top-5 token overlap: diffusion teacher vs AR teacher, same student
  bench        - AR VLA vs diffusion student decoding speed, side by side on the same prompts
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())


def _write(path: Path, obj) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(obj, indent=2, default=_jsonable))


def _jsonable(o):
    if isinstance(o, np.generic):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    return str(o)


def _planners(p) -> dict[str, str]:
    return {name: p.planner_spec(spec) for name, spec in p.cfg["evaluate"]["planners"].items()}


def stage_open(p) -> dict:
    """PDMS + open-loop metrics of every planner from one set of plans per planner."""
    from wamdiff.eval.data import load_scenes
    from wamdiff.eval.openloop import aggregate_openloop, openloop_row
    from wamdiff.eval.pdms import PDMSConfig, PDMSEvaluator, aggregate
    from wamdiff.eval.planners import make_planner, plan_all
    from wamdiff.eval.report import write_csv

    ev_cfg = p.cfg["evaluate"]
    out = p.out / "eval"
    scenes, problems = load_scenes(p.data_dir / "scenes", split="test", limit=ev_cfg.get("test_limit"))
    if not scenes:
        raise ValueError(f"{p.data_dir / 'scenes'}: no test scenes to evaluate")
    ev = PDMSEvaluator(PDMSConfig(reference_cache=str(out / "reference_cache")))
    results, plans_by = {}, {}
    with _progress() as prog:
        for name, spec in _planners(p).items():
            planner = make_planner(spec, ev)
            task = prog.add_task(f"{name}: plan + score", total=len(scenes))
            t0 = time.perf_counter()
            plans = plan_all(planner, scenes, batch=int(ev_cfg.get("decode", {}).get("batch", 16)),
                             progress=lambda n: prog.advance(task, n))
            plan_s = time.perf_counter() - t0
            rows = ev.score(scenes, plans, name)
            ol_rows = [openloop_row(s, pl, name) for s, pl in zip(scenes, plans)]
            safe = name.replace(" ", "_").replace("/", "_").replace("(", "").replace(")", "").replace("+", "plus")
            write_csv(rows, out / f"pdms_{safe}.csv")
            write_csv(ol_rows, out / f"openloop_{safe}.csv")
            tokens, forwards = sum(pl.new_tokens for pl in plans), sum(pl.forwards for pl in plans)
            results[name] = {"spec": spec, "pdms": aggregate(rows), "openloop": aggregate_openloop(ol_rows),
                             "plan_seconds": plan_s, "n_scenes": len(scenes),
                             "decode": {"tokens": tokens, "forwards": forwards, "tok_s": tokens / plan_s if tokens else None,
                                        "tpf": tokens / forwards if forwards else None,
                                        "ms_per_token": 1e3 * plan_s / tokens if tokens else None}}
            plans_by[name] = [pl.xy.tolist() if pl.xy is not None else None for pl in plans]
    _write(out / "open_summary.json", results)
    _write(out / "plans.json", {"scene_ids": [s.scene_id for s in scenes], "plans": plans_by})
    return {"planners": results, "unreadable_scene_files": problems}


def stage_closed(p) -> dict:
    from wamdiff.eval.closedloop import aggregate_routes, route_set, run_routes
    from wamdiff.eval.planners import make_planner

    cl = p.cfg["evaluate"].get("closedloop", {})
    routes = route_set(cl.get("routes", "dev"))[: cl.get("limit")]
    n_model = int(cl.get("model_routes", len(routes)))
    results = {}
    with _progress() as prog:
        for name, spec in _planners(p).items():
            rs = routes if not spec.startswith("model:") else routes[:n_model]
            task = prog.add_task(f"{name}: closed loop", total=len(rs))
            res = run_routes(make_planner(spec), rs, progress=lambda: prog.advance(task))
            results[name] = {"spec": spec, **aggregate_routes(res),
                             "routes": [{"name": r.route.name, "status": r.status, "success": r.success,
                                         "completion": r.completion, "driving_score": r.driving_score} for r in res]}
    _write(p.out / "eval" / "closed_summary.json", results)
    return {"planners": results}


def stage_qa(p) -> dict:
    """Multi-task retention: exact match on the test split's question-answer pairs, each model in its own mode."""
    import torch

    from wamdiff.decoding import DecodeConfig, generate
    from wamdiff.eval.planners import parse_flag
    from wamdiff.models import image_processor_for, is_vision_model, load_model
    from wamdiff.training.data import load_examples
    from wamdiff.training.evaluation import normalise_answer

    limit = int(p.cfg["evaluate"].get("qa_samples", 64))
    res = {}
    for name, spec in p.cfg["evaluate"]["planners"].items():
        if not spec.startswith("stage:"):
            continue
        stage, dec = p.stage_decode(spec)
        model, tok = load_model(p.checkpoint(stage))
        vision = bool(is_vision_model(model))
        examples = load_examples(p.data_dir / "test_qa.json", tok, vision=vision, limit=limit,
                                 image_processor=image_processor_for(model))
        cfg = (DecodeConfig(mode="ar", max_new_tokens=32) if dec.get("mode") == "ar" else
               DecodeConfig(mode="block", block_size=int(dec.get("block", 32)), threshold=float(dec.get("threshold", 0.9)),
                            max_steps_per_block=int(dec.get("steps", 32)), max_new_tokens=32,
                            delayed_cache=parse_flag(str(dec.get("delayed", False)))))
        hits = 0
        with torch.inference_mode():
            for i in range(0, len(examples), 16):
                chunk = examples[i:i + 16]
                for e, g in zip(chunk, generate(model, tok, [e.prompt for e in chunk], cfg)):
                    hits += normalise_answer(g.text) == normalise_answer(e.answer_text)
        res[name] = {"qa_exact_match": hits / max(1, len(examples)), "n": len(examples)}
    return {"planners": res}


def stage_overlap(p) -> dict:
    """Top-5 overlap of the student with a diffusion teacher and with an AR teacher on the same masked positions."""
    from wamdiff.training.evaluation import teacher_student_overlap

    o = p.cfg["evaluate"]["top5_overlap"]
    student = p.checkpoint(o["student"])
    res = {}
    for kind in ("diffusion", "ar"):
        teacher = p.checkpoint(o[f"{kind}_teacher"])
        res[kind] = teacher_student_overlap(student, teacher, teacher_kind=kind, data=p.data_dir / "val.json",
                                            samples=int(o.get("samples", 64)), seed=int(p.cfg.get("seed", 0)))
    return res


def stage_bench(p) -> dict:
    """AR VLA (AR decoding) vs diffusion student (block decoding), paired, on the same test prompts."""
    from wamdiff.decoding.bench import paired_bench

    b = dict(p.cfg["bench"])
    b.setdefault("format", p.cfg["data"].get("fmt"))
    return paired_bench(ar_checkpoint=p.checkpoint(b["ar"]), diffusion_checkpoint=p.checkpoint(b["diffusion"]),
                        data=p.data_dir / "test.json", out=p.out / "bench", settings=b)


def run_evaluation(p, run_stage) -> dict:
    ev = {"evaluate": p.cfg["evaluate"], "checkpoints": p.cfg.get("checkpoints")}  # what the results depend on
    results = {"open": run_stage(p, "eval_open", lambda: stage_open(p), settings=ev)}
    if p.cfg["evaluate"].get("closedloop"):
        results["closed"] = run_stage(p, "eval_closed", lambda: stage_closed(p), settings=ev)
    results["qa"] = run_stage(p, "eval_qa", lambda: stage_qa(p), settings=ev)
    if p.cfg["evaluate"].get("top5_overlap"):
        results["overlap"] = run_stage(p, "overlap", lambda: stage_overlap(p), settings=ev)
    if p.cfg.get("bench"):
        results["bench"] = run_stage(p, "bench", lambda: stage_bench(p),
                                     settings={"bench": p.cfg["bench"], "checkpoints": p.cfg.get("checkpoints")})
    results["training"] = {s["name"]: json.loads(p.stage_file(s["name"]).read_text())
                           for s in p.cfg.get("train") or [] if p.stage_file(s["name"]).exists()}
    return results
