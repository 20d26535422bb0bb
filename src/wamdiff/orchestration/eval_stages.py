"""The evaluation half of the pipeline: every planner of the report judged the same way, once, through the same
entry as `wamdiff eval` (`eval.run`).

Stages (each resumable through the pipeline's stage files; the open- and closed-loop stages are one per report row,
`eval_open.<row>` / `eval_closed.<row>`, whose settings hold the row's spec, how it decodes and its checkpoint's
weights file, so a row added to a config, retrained or decoded otherwise is evaluated alone and every other row is
reused; `evaluate.decode` reaches only the rows that decode with it, the students):
  eval_open    - each planner plans the test scenes once; those plans are scored by PDMS and open-loop L2
  eval_speed   - the model planners timed on the same scenes at batch 1/8/32, interleaved (`evaluate.speed`,
                 `eval.plan_timing`): rerun whenever a model row is
  eval_closed  - closed-loop dev routes in lockstep (model planners on the first `model_routes` routes)
  eval_qa      - multi-task retention: exact match on the test split's question-answer pairs (Wilson 95 %)
  eval_map     - the robustness map over a grid of world settings (a `map:` section; `eval.robustness_map`)
  overlap      - teacher-student top-5 token overlap: diffusion teacher vs AR teacher, same student
  bench        - AR VLA vs diffusion student decoding speed, side by side on the same prompts
(overlap and bench are keyed by their models' weights too: retraining the student or a teacher reruns them)
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

# Part of every evaluation stage's settings: results written by an older evaluation (e.g. with silent fallbacks)
# are recomputed, not reused.
EVAL_VERSION = "eval-run/2 (failures score as failures)"
# Part of the bench stage's settings: a bench whose "at AR quality" checked L2 only is measured again.
BENCH_QUALITY_CHECK = "L2, parses, PDMS and comfort on the test scenes"


def weights_key(checkpoint) -> list:
    """A checkpoint's weights file, its size and time: what makes a retrained stage's results be computed again."""
    f = Path(checkpoint) / "model.safetensors"
    return [str(f), *((f.stat().st_size, f.stat().st_mtime_ns) if f.exists() else ())]


def planned_settings(p) -> dict:
    """What every row's plans depend on besides the row itself (`row_settings`)."""
    return {"test_limit": p.evaluate.test_limit, "version": EVAL_VERSION}


def row_settings(p, name: str, spec) -> dict:
    """What a report row's evaluation depends on besides the evaluation settings: its name, spec and, for a model,
    how it decodes (`evaluate.decode` under the spec's own options, as resolved; the grammar follows the format)
    and its weights (`weights_key`)."""
    decoding = None
    if spec.decode is not None:
        decoding = {**{k: v for k, v in asdict(spec.decode).items() if k != "grammar"}, "fmt": spec.fmt,
                    "batch": spec.batch}
    return {"row": name, "spec": spec.text, "decoding": decoding,
            "weights": weights_key(spec.checkpoint) if spec.kind == "model" else None}


def model_stage_settings(p, stage: str) -> dict:
    """The `overlap` / `bench` stage's settings: its config section as written and the weights of the models it reads."""
    if stage == "overlap":
        section, models = p.cfg["evaluate"]["top5_overlap"], p.evaluate.top5_overlap.stages  # hashed as written
    else:
        section, models = p.cfg["bench"], {"ar": p.bench.ar, "diffusion": p.bench.diffusion}
    settings = {stage: section, "checkpoints": p.cfg.get("checkpoints"),
                "weights": {k: weights_key(p.checkpoint(name)) for k, name in models.items()}}
    return {**settings, "quality_check": BENCH_QUALITY_CHECK} if stage == "bench" else settings


def per_row(p, run_stage, stage: str, settings: dict, fn) -> dict:
    """{row name: result} of `fn({name: spec})` run as one stage per report row (`<stage>.<row file>`)."""
    from wamdiff.eval.report import planner_files

    specs = p.planners()
    files = planner_files(list(specs))  # the row's result files and its stage are named alike
    out = {}
    for name, spec in specs.items():
        done = run_stage(p, f"{stage}.{files[name]}", lambda name=name, spec=spec: fn({name: spec}),
                         settings={**settings, **row_settings(p, name, spec)})
        out[name] = done["planners"][name]
    return out


def _test_scenes(p, variant: str | None):
    from wamdiff.eval.data import load_scenes

    data = p.data_dir if variant is None else p.variant_dir(variant)
    scenes, problems = load_scenes(data / "scenes", split="test", limit=p.evaluate.test_limit)
    if not scenes:
        raise ValueError(f"{data / 'scenes'}: no test scenes to evaluate")
    return scenes, problems


def eval_dir(p, variant: str | None = None):
    return p.out / ("eval" if variant is None else f"eval_variant_{variant}")


def stage_open(p, rows: dict, variant: str | None = None) -> dict:
    """PDMS + open-loop metrics of `rows` ({name: spec}) from one set of plans per planner (`eval.run.evaluate_open`),
    on the test split, or on the test scenes of an unseen traffic variant (`data.variants`)."""
    from wamdiff.eval.pdms import PDMSConfig
    from wamdiff.eval.run import OpenLoopSettings, evaluate_open

    scenes, problems = _test_scenes(p, variant)
    out = eval_dir(p, variant)
    settings = OpenLoopSettings(pdms=PDMSConfig(reference_cache=str(out / "reference_cache")), executor=_executor(p))
    return {"planners": evaluate_open(rows, scenes, out, settings, unreadable=problems),
            "unreadable_scene_files": problems}


def stage_speed(p) -> dict:
    """The model rows timed on the test split at batch 1/8/32, interleaved (the tables' speed columns)."""
    from wamdiff.eval.plan_timing import SpeedProbe, time_planners
    from wamdiff.eval.planners import make_planner

    scenes, _ = _test_scenes(p, None)
    model_rows = {n: make_planner(s) for n, s in p.planners().items() if s.kind == "model"}
    if not model_rows:
        return {"planners": {}}
    return {"planners": time_planners(model_rows, scenes, SpeedProbe.from_dict(p.evaluate.speed))}


def stage_closed(p, rows: dict) -> dict:
    """Closed-loop dev routes of `rows` ({name: spec}) in lockstep (model planners on the first `model_routes`)."""
    from wamdiff.eval.closedloop import route_set
    from wamdiff.eval.run import evaluate_closed

    cl = p.evaluate.closedloop
    routes = route_set(cl.routes, per_family=cl.per_family)[: cl.limit]
    n_model = len(routes) if cl.model_routes is None else cl.model_routes
    return {"planners": evaluate_closed(rows, routes, p.out / "eval", model_routes=n_model,
                                        route_set=cl.routes, executor=_executor(p))}


def _executor(p):
    """`evaluate.workers` > 1: PDMS scoring and closed-loop route shards in that many processes (the results equal
    one process's, `eval.fanout`); model planning of the open-loop scenes stays batched in this process."""
    from wamdiff.executors import ExecutorConfig

    workers = p.evaluate.workers
    return ExecutorConfig(workers=workers) if workers > 1 else None


def stage_qa(p) -> dict:
    """Multi-task retention: exact match on the test split's question-answer pairs (the first `evaluate.qa_samples`,
    default 64), each model decoded as its planner row is, with `evaluate.text_decode` over `evaluate.decode`
    (`eval.qa_retention`), with its Wilson 95 % interval and,
    against the first model row, the paired difference on the same questions."""
    from wamdiff.eval.qa_retention import accuracy, answer_questions, qa_summary

    limit = p.evaluate.qa_samples
    rows_by = {name: answer_questions(spec, p.data_dir / "test_qa.json", limit)
               for name, spec in p.planners(free_text=True).items()
               if spec.kind == "model" and spec.text.startswith("stage:")}
    summary = qa_summary(rows_by, next(iter(rows_by), None))
    res = {}
    for name, rows in rows_by.items():
        acc = accuracy(rows)
        res[name] = {"qa_exact_match": acc["accuracy"] or 0.0, "n": acc["n"], "ci95": acc["ci95"],
                     "vs_first": summary[name].get("vs_ref")}
    return {"planners": res}


def stage_overlap(p) -> dict:
    """Top-5 overlap of the student with a diffusion teacher and with an AR teacher on the same masked positions."""
    from wamdiff.training.evaluation import teacher_student_overlap

    o = p.evaluate.top5_overlap
    student = p.checkpoint(o.student)
    res = {}
    for kind, teacher in (("diffusion", o.diffusion_teacher), ("ar", o.ar_teacher)):
        res[kind] = teacher_student_overlap(student, p.checkpoint(teacher), teacher_kind=kind, data=p.data_dir / "val.json",
                                            samples=o.samples, seed=int(p.cfg.get("seed", 0)))
    return res


def stage_bench(p) -> dict:
    """AR VLA (AR decoding) vs diffusion student (block decoding), paired, on the same test prompts; "at AR quality"
    judged on the prompts' test scenes too (PDMS and comfort, `eval.bench_judge`, its reference plans shared with the
    open-loop evaluation's cache)."""
    from wamdiff.decoding.bench import paired_bench
    from wamdiff.driving.bench_inputs import bench_inputs
    from wamdiff.eval.bench_judge import judge_for_data

    b = p.bench
    settings = b.settings(p.data.fmt)
    data = p.data_dir / "test.json"
    judge = None
    if data.exists():
        judge = judge_for_data(data, b.prompts, settings["format"], required=True,
                               reference_cache=eval_dir(p) / "reference_cache")

    def inputs(tokenizer, **kw):  # the test split's prompts (else synthetic ones), in the configured answer format
        return bench_inputs(tokenizer, data=data if data.exists() else None, fmt=settings["format"], **kw)

    return paired_bench(ar_checkpoint=p.checkpoint(b.ar), diffusion_checkpoint=p.checkpoint(b.diffusion),
                        inputs=inputs, out=p.out / "bench", settings=settings, judge=judge)


def run_evaluation(p, run_stage) -> dict:
    """Every evaluation stage; open and closed loop one stage per report row (see the module docstring)."""
    from wamdiff.eval.run import combine_closed, combine_open

    cfg, ev = p.cfg.get("evaluate") or {}, p.evaluate  # stage settings hash the section as written (`sections`)
    planned = planned_settings(p)
    plots = ev.bev_plots
    opened = per_row(p, run_stage, "eval_open", planned, lambda rows: stage_open(p, rows))
    model_rows = {n: row_settings(p, n, s) for n, s in p.planners().items() if s.kind == "model"}
    speed = run_stage(p, "eval_speed", lambda: stage_speed(p),
                      settings={**planned, "rows": model_rows, "speed": cfg.get("speed", {})})
    for name, timings in speed["planners"].items():
        opened[name] = {**opened[name], "speed": timings}
    combine_open(eval_dir(p), opened, _test_scenes(p, None)[0], plots)
    results = {"open": {"planners": opened}}
    if ev.variants and p.data.variants:
        results["open_variants"] = {}
        for name in p.data.variants:  # the stage's settings hold the variant as written (`sections`)
            got = per_row(p, run_stage, f"eval_open_{name}", {**planned, "variant": p.cfg["data"]["variants"][name]},
                          lambda rows, name=name: stage_open(p, rows, name))
            combine_open(eval_dir(p, name), got, _test_scenes(p, name)[0])
            results["open_variants"][name] = {"planners": got}
    if ev.closedloop is not None:
        closed = per_row(p, run_stage, "eval_closed", {**planned, "closedloop": cfg["closedloop"]},
                         lambda rows: stage_closed(p, rows))
        combine_closed(p.out / "eval", closed)
        results["closed"] = {"planners": closed}
    if p.cfg.get("map"):  # the robustness map (`eval.robustness_map`): resumable cell by cell on its own
        from wamdiff.eval.robustness_map import pipeline_map, pipeline_map_settings

        specs, ref, grid = pipeline_map_settings(p)
        results["map"] = run_stage(p, "eval_map", lambda: pipeline_map(p), settings={
            **planned, "map": p.cfg["map"], "rows": {n: row_settings(p, n, s) for n, s in specs.items()}})
    text_rows = {n: row_settings(p, n, s) for n, s in p.planners(free_text=True).items() if s.kind == "model"}
    results["qa"] = run_stage(p, "eval_qa", lambda: stage_qa(p), settings={**planned, "rows": text_rows,
                                                                         "qa_samples": cfg.get("qa_samples")})
    if ev.top5_overlap is not None:
        results["overlap"] = run_stage(p, "overlap", lambda: stage_overlap(p), settings=model_stage_settings(p, "overlap"))
    if p.bench is not None:
        results["bench"] = run_stage(p, "bench", lambda: stage_bench(p), settings=model_stage_settings(p, "bench"))
    results["training"] = {s["name"]: json.loads(p.stage_file(s["name"]).read_text())
                           for s in p.cfg.get("train") or [] if p.stage_file(s["name"]).exists()}
    return results
