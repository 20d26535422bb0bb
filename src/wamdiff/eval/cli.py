"""`wamdiff eval`: PDMS, open-loop and closed-loop evaluation of planners, plus the scoring benchmark.

Every command writes a results directory: one CSV per planner (a row per scene / route), one JSON aggregate
per planner, a summary JSON over all planners, and PNG plots. Every output carries the metric version.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from wamdiff.outdir import claim_for_command

app = typer.Typer(help="Evaluate planners: NAVSIM-style PDMS, open-loop L2, closed-loop success.", no_args_is_help=True,
                  add_completion=False)
console = Console()


def _progress() -> Progress:
    return Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), console=console)


def _load(data: str, split: str | None, families: str | None, limit: int | None):
    from .data import load_scenes

    fams = [f.strip() for f in families.split(",")] if families else None
    try:
        scenes, problems = load_scenes(data, split, fams, limit)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--data") from err
    if problems:
        console.print(f"[yellow]{len(problems)} unreadable scene file(s); first: {problems[0]}")
    if not scenes:
        raise typer.BadParameter(f"no scenes found under {data} (split={split}, families={families})")
    return scenes, problems


def _table(title: str, aggregates: dict[str, dict], cols: list[str], chunk: int = 7) -> None:
    """Planner x family tables, `chunk` metric columns at a time so they fit a terminal."""
    from .report import safe_name

    for i in range(0, len(cols), chunk):
        part = cols[i: i + chunk]
        t = Table(title=title if i == 0 else None, show_edge=False, pad_edge=False)
        t.add_column("planner", overflow="fold", max_width=18)
        t.add_column("family")
        for c in part:
            t.add_column(c, justify="right")
        for name, agg in aggregates.items():
            for fam, a in [("all", agg["overall"]), *agg.get("per_family", {}).items()]:
                t.add_row(safe_name(name), fam, *[("-" if a.get(c) is None else f"{a[c]:.3f}" if isinstance(a[c], float) else str(a[c]))
                                                  for c in part])
        console.print(t)


@app.command()
def pdms(
    planner: list[str] = typer.Option(["expert", "cv", "reference"], "--planner", "-p", help="Planner spec (repeatable)."),
    data: str = typer.Option(..., help="Directory of scene .npz files (searched recursively)."),
    out: str = typer.Option("runs/eval/pdms", help="Results directory."),
    split: str = typer.Option(None, help="Only scenes of this split."),
    families: str = typer.Option(None, help="Comma-separated families."),
    limit: int = typer.Option(None, min=1, help="At most this many scenes."),
    epdms: bool = typer.Option(False, help="Also compute the NAVSIM v2 EPDMS terms."),
    pacifica: bool = typer.Option(False, help="Use NAVSIM's Pacifica instead of the scene's ego box."),
    drivable_tolerance: float = typer.Option(0.0, help="Grow the drivable area by this many metres (0 = NAVSIM)."),
    plots: int = typer.Option(6, min=0, help="BEV plots for this many scenes."),
    batch: int = typer.Option(64, min=1, help="Scenes per planner/scoring batch."),
) -> None:
    """NAVSIM v1.1 PDM Score per scene and aggregated, for one or more planners."""
    from .pdms import PDMSConfig, PDMSEvaluator, aggregate
    from .planners import make_planner, plan_all
    from .report import plot_bev, plot_family_bars, plot_subscores, safe_name, write_csv, write_json

    outdir = claim_for_command(out)  # writable and ours before any planning
    scenes, problems = _load(data, split, families, limit)
    cfg = PDMSConfig(use_pacifica=pacifica, drivable_tolerance=drivable_tolerance, epdms=epdms,
                     reference_cache=str(outdir / "reference_cache"))
    ev = PDMSEvaluator(cfg)
    aggregates, all_rows, timings = {}, {}, {}
    with _progress() as prog:
        task = prog.add_task("reference planner", total=len(scenes))
        t0 = time.perf_counter()
        for s in scenes:
            try:
                ev.reference_poses(s)
            except Exception:  # noqa: BLE001 - the scene becomes invalid at scoring, with the reason
                pass
            prog.advance(task)
        timings["reference_s"] = time.perf_counter() - t0
        for spec in planner:
            p = make_planner(spec, ev)
            task = prog.add_task(f"{spec}: plan", total=len(scenes))
            t0 = time.perf_counter()
            plans = plan_all(p, scenes, batch=batch, progress=lambda n: prog.advance(task, n))
            t_plan = time.perf_counter() - t0
            task = prog.add_task(f"{spec}: score", total=len(scenes))
            rows, t0 = [], time.perf_counter()
            for i in range(0, len(scenes), batch):
                rows += ev.score(scenes[i: i + batch], plans[i: i + batch], spec)
                prog.advance(task, len(scenes[i: i + batch]))
            t_score = time.perf_counter() - t0
            agg = aggregate(rows, epdms=epdms, config=cfg)
            agg.update(planner=spec, plan_seconds=t_plan, score_seconds=t_score, plans_per_second=len(rows) / max(t_score, 1e-9),
                       unreadable_files=problems)
            name = safe_name(spec)
            write_csv(rows, outdir / f"pdms_{name}.csv")
            write_json(agg, outdir / f"pdms_{name}.json")
            aggregates[spec], all_rows[spec] = agg, (rows, plans)
    write_json({"version": next(iter(aggregates.values()))["version"], "timings": timings,
                "planners": {k: {"overall": v["overall"], "per_family": v["per_family"]} for k, v in aggregates.items()}},
               outdir / "pdms_summary.json")
    metrics = ("nc", "dac", "ttc", "ep", "c", "pdms") + (("ddc", "lk", "hc", "epdms") if epdms else ())
    plot_subscores(aggregates, outdir / "pdms_subscores.png", metrics)
    plot_family_bars(aggregates, "pdms", outdir / "pdms_per_family.png")
    for s_idx in _plot_indices(scenes, plots):
        s = scenes[s_idx]
        traj = {spec: all_rows[spec][1][s_idx].xy for spec in planner}
        if np.any(s.future):
            traj.setdefault("expert(log)", s.future[:, :2])
        sims = {spec: all_rows[spec][0][s_idx]["_states"] for spec in planner if "_states" in all_rows[spec][0][s_idx]}
        plot_bev(s, traj, outdir / "bev" / f"{s.scene_id}.png", sims)
    _table("PDMS (" + next(iter(aggregates.values()))["version"] + ")", aggregates,
           ["n_valid", "n_invalid", "n_fallback", *metrics], chunk=6)
    console.print(f"results in {outdir}/ (scoring speed: " +
                  ", ".join(f"{k} {v['plans_per_second']:.0f} plans/s" for k, v in aggregates.items()) + ")")


def _plot_indices(scenes, n: int) -> list[int]:
    """Up to n scenes, spread over families."""
    by_fam: dict[str, list[int]] = {}
    for i, s in enumerate(scenes):
        by_fam.setdefault(s.family, []).append(i)
    out, k = [], 0
    while len(out) < min(n, len(scenes)):
        for idx in by_fam.values():
            if k < len(idx) and len(out) < n:
                out.append(idx[k])
        k += 1
    return out


@app.command()
def openloop(
    planner: list[str] = typer.Option(["expert", "cv", "reference"], "--planner", "-p", help="Planner spec (repeatable)."),
    data: str = typer.Option(..., help="Directory of scene .npz files."),
    out: str = typer.Option("runs/eval/openloop", help="Results directory."),
    split: str = typer.Option(None),
    families: str = typer.Option(None),
    limit: int = typer.Option(None, min=1),
    compare: str = typer.Option(None, help="Aggregate JSON of a reference planner (relative change is reported)."),
    reference_planner: str = typer.Option(None, help="Or: a planner spec run here as the reference for relative change."),
    batch: int = typer.Option(64, min=1),
) -> None:
    """L2 per 0.5 s step and at 1/2/3/4 s, ADE/FDE, parse failures, plan collision rate."""
    import json

    from .openloop import aggregate_openloop, openloop_row
    from .planners import make_planner, plan_all
    from .report import safe_name, write_csv, write_json

    outdir = claim_for_command(out)  # writable and ours before any planning
    scenes, _ = _load(data, split, families, limit)
    ref_agg = json.loads(Path(compare).read_text()) if compare else None
    specs = list(planner)
    if reference_planner and reference_planner not in specs:
        specs = [reference_planner, *specs]
    aggregates = {}
    with _progress() as prog:
        for spec in specs:
            task = prog.add_task(spec, total=len(scenes))
            plans = plan_all(make_planner(spec), scenes, batch=batch, progress=lambda n: prog.advance(task, n))
            rows = [openloop_row(s, p, spec) for s, p in zip(scenes, plans)]
            reference = ref_agg if ref_agg is not None else (aggregates.get(reference_planner) if reference_planner != spec else None)
            agg = aggregate_openloop(rows, reference)
            agg["planner"] = spec
            write_csv(rows, outdir / f"openloop_{safe_name(spec)}.csv")
            write_json(agg, outdir / f"openloop_{safe_name(spec)}.json")
            aggregates[spec] = agg
    write_json({"version": next(iter(aggregates.values()))["version"], "planners": aggregates}, outdir / "openloop_summary.json")
    _table("open loop", aggregates, ["n_valid", "parse_failure_rate", "l2_1.0s", "l2_2.0s", "l2_3.0s", "l2_4.0s", "ade", "fde",
                                     "collision_rate"])
    console.print(f"results in {outdir}/")


@app.command()
def closedloop(
    planner: list[str] = typer.Option(["reference"], "--planner", "-p", help="Planner spec (repeatable)."),
    routes: str = typer.Option("dev", help="Route set: dev (10 routes) or full."),
    out: str = typer.Option("runs/eval/closedloop", help="Results directory."),
    families: str = typer.Option(None, help="Comma-separated families (default: all)."),
    strips: int = typer.Option(2, min=0, help="Frame strips for this many routes per planner."),
    batch: int = typer.Option(0, min=0, help="Routes driven in lockstep, their replans batched into one planner call "
                                      "(0: all routes of the set)."),
) -> None:
    """Bench2Drive-style closed loop: re-plan every 0.5 s, track at 10 Hz, reactive traffic.

    All routes advance in lockstep so that each replan step is ONE batched planner call; results equal
    driving the routes one by one."""
    from .closedloop import aggregate_routes, route_set, run_routes
    from .planners import make_planner
    from .report import plot_family_bars, plot_strip, safe_name, write_csv, write_json

    fams = [f.strip() for f in families.split(",")] if families else None
    try:
        rset = route_set(routes, fams)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--routes/--families") from err
    outdir = claim_for_command(out)  # writable and ours before any driving
    aggregates = {}
    with _progress() as prog:
        for spec in planner:
            task = prog.add_task(spec, total=len(rset))
            t0 = time.perf_counter()
            results = run_routes(make_planner(spec), rset, record_frames=strips, progress=lambda: prog.advance(task),
                                 batch=batch or None)
            agg = aggregate_routes(results)
            agg.update(planner=spec, route_set=routes, wall_seconds=time.perf_counter() - t0)
            rows = [r.row() for r in results]
            write_csv(rows, outdir / f"closedloop_{safe_name(spec)}.csv")
            write_json(agg, outdir / f"closedloop_{safe_name(spec)}.json")
            for r in results:
                if r.frames:
                    plot_strip([f for _, f in r.frames], [c for c, _ in r.frames],
                               outdir / "strips" / f"{safe_name(spec)}_{r.route.name}.png",
                               title=f"{spec} {r.route.name}: {r.status}")
            aggregates[spec] = agg
    write_json({"version": next(iter(aggregates.values()))["version"], "planners": aggregates}, outdir / "closedloop_summary.json")
    plot_family_bars(aggregates, "driving_score", outdir / "closedloop_driving_score.png")
    _table("closed loop (" + next(iter(aggregates.values()))["version"] + ")", aggregates,
           ["n", "success_rate", "route_completion", "driving_score", "efficiency", "comfort", "n_crashed", "n_timeout",
            "n_deviation", "n_error", "n_fallback"])
    console.print(f"results in {outdir}/")


@app.command()
def bench(
    data: str = typer.Option(None, help="Scene directory (default: synthetic scenes)."),
    n: int = typer.Option(400, min=1, help="Plans to score."),
    planner: str = typer.Option("cv", help="Planner whose plans are scored."),
    epdms: bool = typer.Option(False),
) -> None:
    """PDMS scoring throughput (plans/s, reference excluded since it is cached per scene)."""
    from .pdms import PDMSConfig, PDMSEvaluator
    from .planners import make_planner, plan_all
    from .synthetic import random_scenes

    if data:
        scenes, _ = _load(data, None, None, None)
        scenes = (scenes * (n // len(scenes) + 1))[:n]
    else:
        scenes = random_scenes(n)
    ev = PDMSEvaluator(PDMSConfig(epdms=epdms))
    uniq = {s.scene_id: s for s in scenes}
    t0 = time.perf_counter()
    for s in uniq.values():
        ev.reference_poses(s)
    t_ref = time.perf_counter() - t0
    plans = plan_all(make_planner(planner, ev), scenes)
    ev.score(scenes[:8], plans[:8])  # warm-up
    t0 = time.perf_counter()
    rows = ev.score(scenes, plans, planner)
    dt = time.perf_counter() - t0
    console.print(f"scored {len(rows)} plans over {len(uniq)} scenes in {dt:.2f}s: [bold]{len(rows) / dt:.0f} plans/s[/] "
                  f"(reference planner: {len(uniq) / t_ref:.1f} scenes/s, once per scene, cached); "
                  f"invalid {sum(not r['valid'] for r in rows)}")
