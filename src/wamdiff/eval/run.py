"""The one front door for evaluation: `wamdiff eval pdms | openloop | closedloop`, the pipeline's evaluation stages
and the demo all call these two functions.

`evaluate_open(planners, scenes, out)`:
  1. every planner is built first (a bad spec or checkpoint fails before anything is planned);
  2. PDMS only: the reference planner runs once per scene (cached; its time is reported apart);
  3. each planner plans every scene ONCE (`planners.plan_scenes`); failed plans stay failed unless its spec
     opted in to a fallback;
  4. those same plans are scored by PDMS and by the open-loop metrics; one CSV per planner and metric, one JSON
     aggregate per planner; with `settings.speed`, the model planners are then timed on the same scenes at
     batch 1/8/32, interleaved (`eval.plan_timing`; `speed` in each planner's entry);
  5. summaries (`pdms_summary.json`, `openloop_summary.json`, `open_summary.json`), `plans.json`, plots.
`evaluate_closed(planners, routes, out)`: each planner drives the route set in lockstep (`closedloop.run_routes`),
  one CSV + JSON per planner, `closedloop_summary.json`, frame strips, the driving-score plot.
Both return {planner name: result dict}; names are the keys of `planners` (spec text on the command line, the
row name in a pipeline config).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from wamdiff.eval import fanout
from wamdiff.eval.closedloop import aggregate_routes, run_routes
from wamdiff.eval.consistency import consistency_report
from wamdiff.eval.openloop import aggregate_openloop, openloop_row
from wamdiff.eval.pdms import EPDMS_METRICS, METRICS, PDMSConfig, PDMSEvaluator, aggregate
from wamdiff.eval.plan_timing import SpeedProbe, plans_speed, time_planners
from wamdiff.eval.planners import fallback_planner, make_planner, plan_scenes
from wamdiff.eval.report import plot_bev, plot_family_bars, planner_files, plot_strip, plot_subscores, write_csv
from wamdiff.eval.specs import PlannerSpec
from wamdiff.eval.failure_kinds import first_failures, plot_last_replans
from wamdiff.eval.route_diagnostics import failure_summary, plot_failure_timelines, plot_route_paths
from wamdiff.executors import ExecutorConfig, parallel_executor
from wamdiff.jsonfile import write_json


@dataclass(frozen=True)
class OpenLoopSettings:
    """How `evaluate_open` runs. `pdms=None`: open-loop metrics only (no reference planner, no simulation)."""

    pdms: PDMSConfig | None = PDMSConfig()
    batch: int = 64  # scenes per planner call and per scoring call
    plots: int = 0  # BEV plots for this many scenes, spread over families
    relative_to: str | dict | None = None  # open-loop reference: a planner name in `planners`, or its aggregate JSON
    executor: ExecutorConfig | None = None  # PDMS reference + scoring fanned out (`eval.fanout`); None: in this process
    speed: SpeedProbe | None = None  # model planners timed at batch 1/8/32 on the same scenes (`eval.plan_timing`)


def progress_bar(console: Console | None) -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console)


def _decode_stats(plans, batch: int) -> dict:
    """Speed of the evaluation's own planning pass (`decoding.speed`: `generate` time only; None for planners that
    do not decode)."""
    s = plans_speed(plans, batch)
    if not s.tokens or s.wall_s <= 0:
        return {"tokens": s.tokens, "forwards": s.forwards, "batch": batch, "tok_s": None, "tpf": None,
                "ms_per_token": None, "plans_per_s": None, "latency_ms": None}
    return s.as_dict()


def evaluate_open(planners: dict[str, PlannerSpec], scenes: list, out: str | Path,
                  settings: OpenLoopSettings = OpenLoopSettings(), *, unreadable: list | None = None,
                  console: Console | None = None) -> dict:
    """Plan every scene once per planner; score PDMS (if set) and open-loop metrics from those plans."""
    out = Path(out)
    if not scenes:
        raise ValueError("evaluate_open: no scenes to evaluate")
    ev = PDMSEvaluator(settings.pdms) if settings.pdms is not None else None
    skipped = unreadable_counts(unreadable)  # in every result and summary: a score over fewer scenes says so
    files = planner_files(planners)  # before any work: two planners must not share result files
    built = {name: (make_planner(spec, ev), fallback_planner(spec, ev)) for name, spec in planners.items()}  # 1.
    reference = settings.relative_to
    order = list(planners)
    if isinstance(reference, str):  # the reference planner's aggregate is needed first
        if reference not in planners:
            raise ValueError(f"relative_to: {reference!r} is not one of the planners {order}")
        order = [reference, *[n for n in order if n != reference]]
    results, plans_by, rows_by, timings = {}, {}, {}, {}
    with progress_bar(console) as prog, parallel_executor(settings.executor) as ex:
        if ev is not None:  # 2.
            task = prog.add_task("reference planner", total=len(scenes))
            t0 = time.perf_counter()
            if ex is not None:
                fanout.reference_plans(ev, scenes, ex, settings.batch, progress=lambda n: prog.advance(task, n))
            else:
                for s in scenes:
                    try:
                        ev.reference_poses(s)
                    except Exception:  # noqa: BLE001 - the scene becomes invalid at scoring, with the reason
                        pass
                    prog.advance(task)
            timings["reference_s"] = time.perf_counter() - t0
        for name in order:
            spec, (planner, fallback) = planners[name], built[name]
            task = prog.add_task(f"{name}: plan", total=len(scenes))
            t0 = time.perf_counter()
            plans = plan_scenes(planner, scenes, batch=settings.batch, fallback=fallback,  # 3.
                                progress=lambda n, task=task: prog.advance(task, n))
            plan_s = time.perf_counter() - t0
            entry = {"spec": spec.text, "fallback": spec.fallback, "n_scenes": len(scenes), **skipped, "plan_seconds": plan_s,
                     "n_failed": sum(not p.ok for p in plans), "n_fallback": sum(bool(p.fallback) for p in plans),
                     "decode": _decode_stats(plans, spec.batch), "pdms": None,
                     "consistency": consistency_report(plans, scenes, getattr(spec, "fmt", None))}
            file = files[name]
            if ev is not None:  # 4.
                task = prog.add_task(f"{name}: score", total=len(scenes))
                rows, t0 = [], time.perf_counter()
                if ex is not None:
                    rows = fanout.score_plans(ev, scenes, plans, name, ex, settings.batch,
                                              progress=lambda n, task=task: prog.advance(task, n))
                else:
                    for i in range(0, len(scenes), settings.batch):
                        rows += ev.score(scenes[i: i + settings.batch], plans[i: i + settings.batch], name)
                        prog.advance(task, len(scenes[i: i + settings.batch]))
                score_s = time.perf_counter() - t0
                agg = aggregate(rows, epdms=settings.pdms.epdms, config=settings.pdms)
                agg.update(planner=name, spec=spec.text, plan_seconds=plan_s, score_seconds=score_s,
                           plans_per_second=len(rows) / max(score_s, 1e-9), **skipped)
                write_csv(rows, out / f"pdms_{file}.csv")
                write_json(out / f"pdms_{file}.json", agg)
                entry["pdms"], rows_by[name] = agg, rows
            ol_rows = [openloop_row(s, p, name) for s, p in zip(scenes, plans)]
            ref = results[reference]["openloop"] if isinstance(reference, str) and name != reference else (
                reference if isinstance(reference, dict) else None)
            entry["openloop"] = aggregate_openloop(ol_rows, ref)
            entry["openloop"].update(planner=name, **skipped)
            write_csv(ol_rows, out / f"openloop_{file}.csv")
            write_json(out / f"openloop_{file}.json", entry["openloop"])
            write_json(out / f"plans_{file}.json", _plans_json(plans, scenes))
            results[name], plans_by[name] = entry, plans
    results = {name: results[name] for name in planners}  # back in the caller's order
    timed = {n: built[n][0] for n, spec in planners.items() if spec.kind == "model"}
    if settings.speed is not None and timed:  # 4b. the same scenes at batch 1/8/32, planners interleaved
        with progress_bar(console) as prog:
            task = prog.add_task("plan timings", total=len(settings.speed.batches) * settings.speed.repeats * len(timed))
            for name, speeds in time_planners(timed, scenes, settings.speed, lambda: prog.advance(task)).items():
                results[name]["speed"] = speeds
    _write_open_summaries(out, results, plans_by, scenes, timings)  # 5.
    if ev is not None:
        _plot_open(out, results, plans_by, rows_by, scenes, settings.plots, settings.pdms.epdms)
    return results


def unreadable_counts(unreadable: list | None) -> dict:
    """The scene files that were skipped because they could not be read: their count and which ones."""
    return {"n_unreadable": len(unreadable or []), "unreadable_files": list(unreadable or [])}


def _plans_json(plans: list, scenes: list) -> dict:
    return {"scene_ids": [s.scene_id for s in scenes], "xy": [None if p.xy is None else p.xy.tolist() for p in plans]}


def combine_open(out: str | Path, results: dict, scenes: list, plots: int = 0) -> None:
    """The all-planner summaries and plots of open-loop results evaluated in separate calls (the pipeline evaluates
    one report row at a time): each planner's plans from its `plans_<file>.json`."""
    import numpy as np

    from wamdiff.eval.planners import Plan

    out = Path(out)
    files = planner_files(list(results))
    plans_by = {}
    for name in results:
        stored = json.loads((out / f"plans_{files[name]}.json").read_text())
        by_id = dict(zip(stored["scene_ids"], stored["xy"]))
        plans_by[name] = [Plan(None if by_id.get(s.scene_id) is None else np.asarray(by_id[s.scene_id])) for s in scenes]
    _write_open_summaries(out, results, plans_by, scenes, {})
    if all(r.get("pdms") for r in results.values()):
        _plot_open(out, results, plans_by, {}, scenes, plots)


def combine_closed(out: str | Path, results: dict) -> None:
    """`closedloop_summary.json` and the driving-score plot of closed-loop results evaluated in separate calls."""
    out = Path(out)
    write_json(out / "closedloop_summary.json", {"version": next(iter(results.values()))["version"], "planners": results})
    plot_family_bars(results, "driving_score", out / "closedloop_driving_score.png")
    try:
        write_failure_kinds(out)
    except ValueError:  # planners that share no route: nothing to put side by side
        pass


def _write_open_summaries(out: Path, results: dict, plans_by: dict, scenes: list, timings: dict) -> None:
    ol = next(iter(results.values()))["openloop"]
    skipped = unreadable_counts(next(iter(results.values())).get("unreadable_files"))  # one scene set for all rows
    write_json(out / "openloop_summary.json", {"version": ol["version"], "n_scenes": len(scenes), **skipped,
                                               "planners": {n: r["openloop"] for n, r in results.items()}})
    if all(r["pdms"] is not None for r in results.values()):
        write_json(out / "pdms_summary.json", {
            "version": next(iter(results.values()))["pdms"]["version"], "n_scenes": len(scenes), **skipped,
            "timings": timings,
            "planners": {n: {k: r["pdms"][k] for k in ("overall", "per_family")} for n, r in results.items()}})
    write_json(out / "open_summary.json", results)
    write_json(out / "plans.json", {"scene_ids": [s.scene_id for s in scenes], "families": [s.family for s in scenes],
                                    "plans": {n: [None if p.xy is None else p.xy.tolist() for p in plans]
                                              for n, plans in plans_by.items()}})


def plot_indices(scenes: list, n: int) -> list[int]:
    """Up to n scenes, spread over families (round robin in scene order)."""
    by_family: dict[str, list[int]] = {}
    for i, s in enumerate(scenes):
        by_family.setdefault(s.family, []).append(i)
    picked, k = [], 0
    while len(picked) < min(n, len(scenes)):
        for idx in by_family.values():
            if k < len(idx) and len(picked) < n:
                picked.append(idx[k])
        k += 1
    return picked


def _plot_open(out: Path, results: dict, plans_by: dict, rows_by: dict, scenes: list, plots: int, epdms: bool = False):
    """Sub-score and per-family bars; BEV plots of `plots` scenes (with the simulated ego where `rows_by` has it)."""
    aggregates = {n: r["pdms"] for n, r in results.items()}
    metrics = METRICS + (EPDMS_METRICS if epdms else ())
    plot_subscores(aggregates, out / "pdms_subscores.png", [m for m in metrics if m not in ("tlc", "ec")])
    plot_family_bars(aggregates, "pdms", out / "pdms_per_family.png")
    for i in plot_indices(scenes, plots):
        s = scenes[i]
        traj = {n: plans[i].xy for n, plans in plans_by.items()}
        sims = {n: rows[i]["_states"] for n, rows in rows_by.items() if "_states" in rows[i]}
        plot_bev(s, traj, out / "bev" / f"{s.scene_id}.png", sims)


def evaluate_closed(planners: dict[str, PlannerSpec], routes: list, out: str | Path, *, record_frames: int = 0,
                    batch: int | None = None, model_routes: int | None = None, route_set: str = "",
                    console: Console | None = None, executor: ExecutorConfig | None = None, fail_strips: int = 2) -> dict:
    """Drive `routes` with every planner (model planners: the first `model_routes` routes only, when given).
    `executor`: route shards driven in parallel (`eval.fanout.drive_routes`); None: all here, in lockstep.
    `fail_strips`: the last replans of the first that many failed routes per family (`fail_strips/`)."""
    out = Path(out)
    files = planner_files(planners)
    built = {name: (make_planner(spec), fallback_planner(spec)) for name, spec in planners.items()}
    results = {}
    with progress_bar(console) as prog, parallel_executor(executor) as ex:
        for name, spec in planners.items():
            planner, fallback = built[name]
            rs = routes[:model_routes] if spec.learned and model_routes is not None else routes
            task = prog.add_task(f"{name}: closed loop", total=len(rs))
            t0 = time.perf_counter()
            if ex is not None:
                res = fanout.drive_routes(spec, rs, ex, executor.workers, record_frames=record_frames, batch=batch,
                                          progress=lambda task=task: prog.advance(task))
            else:
                res = run_routes(planner, rs, record_frames=record_frames, batch=batch, fallback=fallback,
                                 progress=lambda task=task: prog.advance(task))
            agg = aggregate_routes(res)
            agg.update(planner=name, spec=spec.text, fallback=spec.fallback, route_set=route_set,
                       wall_seconds=time.perf_counter() - t0)
            file = files[name]
            write_csv([r.row() for r in res], out / f"closedloop_{file}.csv")
            write_json(out / f"closedloop_{file}.json", agg)
            write_json(out / f"failures_{file}.json", failure_summary(res))
            plot_failure_timelines(res, out / f"timelines_{file}.png")
            plot_route_paths(res, out / f"paths_{file}.png")
            for r in first_failures(res, fail_strips):
                plot_last_replans(r, out / "fail_strips" / f"{file}_{r.route.name}.png",
                                  title=f"{name} {r.route.name}: {r.status} at {r.completion:.0f}%")
            for r in res:
                if r.frames:
                    plot_strip([f for _, f in r.frames], [c for c, _ in r.frames], out / "strips" / f"{file}_{r.route.name}.png",
                               title=f"{name} {r.route.name}: {r.status}")
            results[name] = {**agg, "routes": [{"name": r.route.name, "status": r.status, "success": r.success,
                                                "completion": r.completion, "driving_score": r.driving_score}
                                               for r in res]}
    combine_closed(out, results)
    return results


def write_failure_kinds(out: str | Path, folders: list | None = None, ref: str | None = None) -> dict:
    """failure_kinds.{csv,json,md,png} in `out` over the closed-loop results of `folders` (default: `out`)."""
    from wamdiff.eval.failure_kinds import failure_table, markdown, plot_kinds

    out = Path(out)
    table = failure_table([Path(f) for f in (folders or [out])], ref)
    write_csv(table["rows"], out / "failure_kinds.csv")
    write_json(out / "failure_kinds.json", table)
    (out / "failure_kinds.md").write_text(markdown(table))
    plot_kinds(table, out / "failure_kinds.png")
    return table


def headline_columns(results: dict, columns: list[str], failed: str = "n_failed") -> list[str]:
    """`columns` after the failed-plan count and, where any planner opted in to a fallback, the fallback count."""
    fallback = any(r.get("fallback") for r in results.values())
    return [failed, *(["n_fallback"] if fallback else []), *columns]


__all__ = ["OpenLoopSettings", "evaluate_closed", "evaluate_open", "headline_columns", "plot_indices",
           "write_failure_kinds"]
