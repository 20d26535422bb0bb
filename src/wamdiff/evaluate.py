"""The evaluation half of the pipeline: every planner of the report judged the same way, once, through the same
entry as `wamdiff eval` (`eval.run`).

Stages (each resumable through the pipeline's stage files):
  eval_open    - each planner plans the test scenes once; those plans are scored by PDMS and open-loop L2; the
                 model planners are timed on the same scenes at batch 1/8/32 (`evaluate.speed`, `eval.plan_timing`)
  eval_closed  - closed-loop dev routes in lockstep (model planners on the first `model_routes` routes)
  eval_qa      - multi-task retention: exact match on the test split's question-answer pairs
  overlap      - teacher-student top-5 token overlap: diffusion teacher vs AR teacher, same student
  bench        - AR VLA vs diffusion student decoding speed, side by side on the same prompts
"""

from __future__ import annotations

import json
from dataclasses import replace

# Part of every evaluation stage's settings: results written by an older evaluation (e.g. with silent fallbacks)
# are recomputed, not reused.
EVAL_VERSION = "eval-run/2 (failures score as failures)"


def stage_open(p, variant: str | None = None) -> dict:
    """PDMS + open-loop metrics of every planner from one set of plans per planner (`eval.run.evaluate_open`), on
    the test split, or on the test scenes of an unseen traffic variant (`data.variants`)."""
    from wamdiff.eval.data import load_scenes
    from wamdiff.eval.pdms import PDMSConfig
    from wamdiff.eval.plan_timing import SpeedProbe
    from wamdiff.eval.run import OpenLoopSettings, evaluate_open

    ev_cfg = p.cfg["evaluate"]
    out = p.out / ("eval" if variant is None else f"eval_variant_{variant}")
    data = p.data_dir if variant is None else p.variant_dir(variant)
    scenes, problems = load_scenes(data / "scenes", split="test", limit=ev_cfg.get("test_limit"))
    if not scenes:
        raise ValueError(f"{data / 'scenes'}: no test scenes to evaluate")
    settings = OpenLoopSettings(pdms=PDMSConfig(reference_cache=str(out / "reference_cache")),
                                plots=int(ev_cfg.get("bev_plots", 4)), executor=_executor(p),
                                # the tables' speed columns come from the test split; variants are judged on quality
                                speed=SpeedProbe.from_dict(ev_cfg.get("speed", {})) if variant is None else None)
    return {"planners": evaluate_open(p.planners(), scenes, out, settings, unreadable=problems),
            "unreadable_scene_files": problems}


def stage_closed(p) -> dict:
    """Closed-loop dev routes in lockstep (model planners on the first `model_routes` routes)."""
    from wamdiff.eval.closedloop import route_set
    from wamdiff.eval.run import evaluate_closed

    cl = p.cfg["evaluate"].get("closedloop", {})
    routes = route_set(cl.get("routes", "dev"), per_family=cl.get("per_family"))[: cl.get("limit")]
    n_model = int(cl.get("model_routes", len(routes)))
    return {"planners": evaluate_closed(p.planners(), routes, p.out / "eval", model_routes=n_model,
                                        route_set=cl.get("routes", "dev"), executor=_executor(p))}


def _executor(p):
    """`evaluate.workers` > 1: PDMS scoring and closed-loop route shards in that many processes (the results equal
    one process's, `eval.fanout`); model planning of the open-loop scenes stays batched in this process."""
    from wamdiff.executors import ExecutorConfig

    workers = int(p.cfg["evaluate"].get("workers", 1))
    return ExecutorConfig(workers=workers) if workers > 1 else None


def stage_qa(p) -> dict:
    """Multi-task retention: exact match on the test split's question-answer pairs, each model decoded as its
    planner row is (its own decode settings, a short answer budget)."""
    import torch

    from wamdiff.decoding import generate
    from wamdiff.models import image_processor_for, is_vision_model, load_model
    from wamdiff.training.data import load_examples
    from wamdiff.training.evaluation import normalise_answer

    limit = int(p.cfg["evaluate"].get("qa_samples", 64))
    res = {}
    for name, spec in p.planners().items():
        if spec.kind != "model" or not spec.text.startswith("stage:"):
            continue
        model, tok = load_model(spec.checkpoint)
        vision = bool(is_vision_model(model))
        examples = load_examples(p.data_dir / "test_qa.json", tok, vision=vision, limit=limit,
                                 image_processor=image_processor_for(model))
        config = replace(spec.decode, max_new_tokens=32)
        hits = 0
        with torch.inference_mode():
            for i in range(0, len(examples), 16):
                chunk = examples[i:i + 16]
                for e, g in zip(chunk, generate(model, tok, [e.prompt for e in chunk], config)):
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
    planned = {**ev, "version": EVAL_VERSION}  # stages that score plans
    results = {"open": run_stage(p, "eval_open", lambda: stage_open(p), settings=planned)}
    variants = p.cfg["data"].get("variants") or {}
    if p.cfg["evaluate"].get("variants") and variants:
        results["open_variants"] = {
            name: run_stage(p, f"eval_open_{name}", lambda name=name: stage_open(p, name),
                            settings={**planned, "variant": variants[name]}) for name in variants}
    if p.cfg["evaluate"].get("closedloop"):
        results["closed"] = run_stage(p, "eval_closed", lambda: stage_closed(p), settings=planned)
    results["qa"] = run_stage(p, "eval_qa", lambda: stage_qa(p), settings=planned)
    if p.cfg["evaluate"].get("top5_overlap"):
        results["overlap"] = run_stage(p, "overlap", lambda: stage_overlap(p), settings=ev)
    if p.cfg.get("bench"):
        results["bench"] = run_stage(p, "bench", lambda: stage_bench(p),
                                     settings={"bench": p.cfg["bench"], "checkpoints": p.cfg.get("checkpoints")})
    results["training"] = {s["name"]: json.loads(p.stage_file(s["name"]).read_text())
                           for s in p.cfg.get("train") or [] if p.stage_file(s["name"]).exists()}
    return results
