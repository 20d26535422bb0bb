"""`wamdiff eval`: PDMS, open-loop and closed-loop evaluation of planners, plus the scoring benchmark.

Every command is a thin wrapper over `eval.run` (the same entry the pipeline and the demo use) and writes a
results directory: one CSV per planner (a row per scene / route), one JSON aggregate per planner, a summary JSON
over all planners, and PNG plots. Every output carries the metric version.
"""

from __future__ import annotations

import time
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from wamdiff.cli_choices import FAMILIES, AnswerFormat, Executor, RouteSet, Split, list_help, parse_list
from wamdiff.errors import UserError
from wamdiff.executors import EXECUTOR_HELP, RAY_ADDRESS_HELP
from wamdiff.outdir import claim_for_command

app = typer.Typer(help="Evaluate planners: NAVSIM-style PDMS, open-loop L2, closed-loop success.", no_args_is_help=True,
                  add_completion=False)
console = Console()


def _load(data: str, split: str | None, families: str | None, limit: int | None):
    from .data import load_scenes

    fams = parse_list(families, FAMILIES, "--families") if families else None
    scenes, problems = load_scenes(data, split, fams, limit)
    if problems:
        console.print(f"[yellow]{len(problems)} unreadable scene file(s); first: {problems[0]}")
    if not scenes:
        raise UserError(f"--data {data}: no scenes found (split={split}, families={families}); generate some with "
                        "`wamdiff data generate`")
    return scenes, problems


def _scene_count(scenes: list, problems: list) -> str:
    """A table title's scene count, with the unreadable files that were skipped (they are in no score)."""
    return f"{len(scenes)} scenes" + (f", {len(problems)} unreadable scene file(s) skipped" if problems else "")


HEADERS = {"n_failed": "failed", "n_failed_plans": "failed plans", "n_fallback": "fallback"}  # headline counts


def _table(title: str, aggregates: dict[str, dict], cols: list[str], chunk: int = 7) -> None:
    """Planner x family tables, `chunk` metric columns at a time so they fit a terminal."""
    from .report import safe_name

    for i in range(0, len(cols), chunk):
        part = cols[i: i + chunk]
        t = Table(title=title if i == 0 else None, show_edge=False, pad_edge=False)
        t.add_column("planner", overflow="fold", max_width=18)
        t.add_column("family")
        for c in part:
            t.add_column(HEADERS.get(c, c), justify="right", min_width=len(HEADERS.get(c, c)))
        for name, agg in aggregates.items():
            for fam, a in [("all", agg["overall"]), *agg.get("per_family", {}).items()]:
                t.add_row(safe_name(name), fam, *[("-" if a.get(c) is None else f"{a[c]:.3f}" if isinstance(a[c], float) else str(a[c]))
                                                  for c in part])
        console.print(t)


def _specs(texts: list[str], scenes: bool = True) -> dict:
    """Every planner spec (and model checkpoint) checked before anything runs; a bad one is a one-line error, exit 2.
    `scenes`: they plan simulator scenes, which render one camera, so a model whose prompt takes more is refused."""
    from .planners import make_planner
    from .specs import parse_specs

    specs = parse_specs(list(texts))  # a bad spec raises ValueError: the CLI's one-line error, exit 2
    for spec in specs.values():
        planner = make_planner(spec)  # cheap: finds a missing checkpoint now, loads nothing
        if scenes and spec.kind == "model" and planner.n_images != 1:  # reads config.json only
            raise UserError(f"planner {spec.text!r}: its prompt takes {planner.n_images} camera images and the "
                            "simulator renders one; evaluate it on its own WAM-Diff2 samples (`wamdiff eval openloop "
                            "--data FILE.json`)")
    return specs


@app.command()
def pdms(
    planner: list[str] = typer.Option(["expert", "cv", "reference"], "--planner", "-p", help="Planner spec (repeatable)."),
    data: str = typer.Option(..., help="Directory of scene .npz files (searched recursively)."),
    out: str = typer.Option("runs/eval/pdms", help="Results directory."),
    split: Split = typer.Option(None, help="Only scenes of this split (default: every scene under --data)."),
    families: str = typer.Option(None, "--families", "--family", help=f"Only these road families: {list_help(FAMILIES)} (default: all)."),
    limit: int = typer.Option(None, min=1, help="At most this many scenes."),
    epdms: bool = typer.Option(False, help="Also compute the NAVSIM v2 EPDMS terms."),
    pacifica: bool = typer.Option(False, help="Use NAVSIM's Pacifica instead of the scene's ego box."),
    drivable_tolerance: float = typer.Option(0.0, help="Grow the drivable area by this many metres (0 = NAVSIM)."),
    plots: int = typer.Option(6, min=0, help="BEV plots for this many scenes."),
    batch: int = typer.Option(64, min=1, help="Scenes per planner/scoring batch."),
    executor: Executor = typer.Option("process", help=EXECUTOR_HELP + " Runs the reference planner and the scoring."),
    workers: int = typer.Option(1, min=1, help="Scoring workers (1: in this process; with ray and no address: local Ray CPUs)."),
    ray_address: str = typer.Option(None, help=RAY_ADDRESS_HELP),
    speed: str = typer.Option(None, help="Also time every model planner on the same scenes at these batch sizes "
                                         "(comma separated, e.g. 1,8; planners interleaved, median of the repeats)."),
    speed_plans: int = typer.Option(32, min=1, help="With --speed: scenes timed per batch size."),
    speed_repeats: int = typer.Option(3, min=1, help="With --speed: interleaved repeats (the median is kept)."),
) -> None:
    """NAVSIM v1.1 PDM Score per scene and aggregated, for one or more planners (open-loop metrics from the same
    plans are written too; with --speed, each model planner's plan timings in open_summary.json)."""
    from wamdiff.executors import ExecutorConfig

    from .pdms import EPDMS_METRICS, METRICS, PDMSConfig
    from .plan_timing import SpeedProbe
    from .run import OpenLoopSettings, evaluate_open, headline_columns

    try:
        probe = SpeedProbe.from_dict({"batches": [int(b) for b in speed.split(",")], "plans": speed_plans,
                                      "repeats": speed_repeats}) if speed else None
    except ValueError as err:
        raise UserError(f"--speed {speed!r}: {err}") from None

    from .json_data import is_json_data

    if is_json_data(data):
        raise UserError(f"--data {data}: PDMS simulates scenes, and a WAM-Diff2 file holds samples; measure a model on "
                        "it with `wamdiff eval openloop --data FILE.json -p model:CKPT`")
    fan_out = ExecutorConfig(executor, workers, ray_address)
    specs = _specs(planner)
    claim_for_command(out)  # writable and ours before any planning
    scenes, problems = _load(data, split, families, limit)
    cfg = PDMSConfig(use_pacifica=pacifica, drivable_tolerance=drivable_tolerance, epdms=epdms,
                     reference_cache=str(Path(out) / "reference_cache"))
    results = evaluate_open(specs, scenes, out, OpenLoopSettings(pdms=cfg, batch=batch, plots=plots, executor=fan_out,
                                                                 speed=probe),
                            unreadable=problems, console=console)
    aggregates = {name: r["pdms"] for name, r in results.items()}
    metrics = [*METRICS, *(EPDMS_METRICS if epdms else ())]
    _table(f"PDMS ({next(iter(aggregates.values()))['version']}; {_scene_count(scenes, problems)})", aggregates,
           headline_columns(results, ["n_valid", "n_invalid", *metrics]), chunk=6)
    console.print(f"results in {out}/ (scoring speed: " +
                  ", ".join(f"{k} {v['plans_per_second']:.0f} plans/s" for k, v in aggregates.items()) + ")")


@app.command()
def openloop(
    planner: list[str] = typer.Option(["expert", "cv", "reference"], "--planner", "-p", help="Planner spec (repeatable)."),
    data: str = typer.Option(..., help="Directory of scene .npz files, or a WAM-Diff2 .json / .jsonl of samples (each "
                                       "planned from its own prompt and images by model:CKPT planners, measured "
                                       "against its gpt answer)."),
    out: str = typer.Option("runs/eval/openloop", help="Results directory."),
    split: Split = typer.Option(None, help="Only scenes of this split (default: every scene under --data)."),
    families: str = typer.Option(None, "--families", "--family", help=f"Only these road families: {list_help(FAMILIES)} (default: all)."),
    limit: int = typer.Option(None, min=1, help="At most this many scenes."),
    compare: str = typer.Option(None, help="Aggregate JSON of a reference planner (relative change is reported)."),
    reference_planner: str = typer.Option(None, help="Or: a planner spec run here as the reference for relative change."),
    batch: int = typer.Option(64, min=1, help="Scenes per planner batch."),
) -> None:
    """L2 per 0.5 s step and at 1/2/3/4 s, ADE/FDE, failed plans, plan collision rate (scenes only). With --data
    FILE.json: a model's L2 on your own samples, each decoded from its own prompt (however many cameras)."""
    import json

    from .run import OpenLoopSettings, evaluate_open, headline_columns

    from .json_data import is_json_data, load_json_samples, refuse_scene_planners
    from .specs import parse_specs

    texts = list(planner)
    if reference_planner and reference_planner not in texts:
        texts = [reference_planner, *texts]
    own = is_json_data(data)  # a user's WAM-Diff2 file: each sample planned from its own prompt (`eval.json_data`)
    if own:
        for flag, value in (("--split", split), ("--families", families)):
            if value:
                raise UserError(f"{flag} {value}: selects simulator scenes; --data {data} holds WAM-Diff2 samples")
        refuse_scene_planners(parse_specs(texts), data)  # before any checkpoint is looked at
    specs = _specs(texts, scenes=not own)
    claim_for_command(out)  # writable and ours before any planning
    if own:
        scenes, problems = load_json_samples(data, specs, limit), []
    else:
        scenes, problems = _load(data, split, families, limit)
    relative_to = json.loads(Path(compare).read_text()) if compare else reference_planner
    results = evaluate_open(specs, scenes, out, OpenLoopSettings(pdms=None, batch=batch, relative_to=relative_to),
                            unreadable=problems, console=console)
    count = f"{len(scenes)} samples of {data}" if own else _scene_count(scenes, problems)
    _table(f"open loop ({count})", {n: r["openloop"] for n, r in results.items()},
           headline_columns(results, ["n_valid", "failure_rate", "l2_1.0s", "l2_2.0s", "l2_3.0s", "l2_4.0s", "ade", "fde",
                                      "collision_rate"]))
    console.print(f"results in {out}/")


@app.command()
def closedloop(
    planner: list[str] = typer.Option(["reference"], "--planner", "-p", help="Planner spec (repeatable)."),
    routes: RouteSet = typer.Option("dev", help="Route set: dev (each family's dev routes, 10 in all) or full (25 per family)."),
    out: str = typer.Option("runs/eval/closedloop", help="Results directory."),
    families: str = typer.Option(None, "--families", "--family", help=f"Only these road families: {list_help(FAMILIES)} (default: all)."),
    per_family: int = typer.Option(None, "--per-family", min=1,
                                   help="Only the first N routes of each family (e.g. --routes full --per-family 10: 40 routes)."),
    strips: int = typer.Option(2, min=0, help="Frame strips for this many routes per planner."),
    fail_strips: int = typer.Option(2, min=0, help="The last replans (camera and plans) of the first this many failed "
                                               "routes of each family, per planner (fail_strips/)."),
    batch: int = typer.Option(0, min=0, help="Routes driven in lockstep, their replans batched into one planner call "
                                      "(0: all routes of the set)."),
    executor: Executor = typer.Option("process", help=EXECUTOR_HELP + " Drives route shards in parallel."),
    workers: int = typer.Option(1, min=1, help="Route shards driven at once (1: all here, in lockstep)."),
    ray_address: str = typer.Option(None, help=RAY_ADDRESS_HELP),
) -> None:
    """Bench2Drive-style closed loop: re-plan every 0.5 s, track at 10 Hz, reactive traffic.

    All routes advance in lockstep so that each replan step is ONE batched planner call; results equal
    driving the routes one by one."""
    from wamdiff.executors import ExecutorConfig

    from .closedloop import route_set
    from .run import evaluate_closed, headline_columns

    fan_out = ExecutorConfig(executor, workers, ray_address)
    specs = _specs(planner)
    fams = parse_list(families, FAMILIES, "--families") if families else None
    try:
        rset = route_set(routes, fams, per_family)
    except ValueError as err:
        raise UserError(f"--routes/--families/--per-family: {err}") from None
    claim_for_command(out)  # writable and ours before any driving
    results = evaluate_closed(specs, rset, out, record_frames=strips, batch=batch or None, route_set=routes, console=console,
                              executor=fan_out, fail_strips=fail_strips)
    _table("closed loop (" + next(iter(results.values()))["version"] + ")", results,
           headline_columns(results, ["n", "success_rate", "route_completion", "driving_score", "efficiency", "comfort",
                                      "n_crashed", "n_crashed_not_at_fault", "success_rate_excl_not_at_fault", "n_timeout",
                                      "n_deviation", "n_planner_error", "n_error"],
                            failed="n_failed_plans"))
    console.print(f"results in {out}/")


@app.command()
def paired(
    folders: list[Path] = typer.Argument(..., help="Result folders of `eval pdms` / `eval closedloop`, one per split."),
    ref: list[str] = typer.Option(..., help="The reference planner: its file name in the folders, or a unique part "
                                           "of it; repeated: their per-scene mean is the reference."),
    out: str = typer.Option("runs/eval/paired", help="Results directory (paired.csv, paired.json, paired.png)."),
) -> None:
    """Every planner against the reference, scene by scene (route by route): mean, paired difference and its 95 %
    interval per folder and pooled over all of them."""
    from wamdiff.jsonfile import write_json

    from .paired import paired_rows, plot_paired
    from .report import write_csv

    rows = paired_rows(list(folders), list(ref))  # a missing folder or reference: ValueError, the one-line error
    claim_for_command(out)
    t = Table(title=f"paired against {rows[0]['planner']}", show_edge=False, pad_edge=False)
    for col in ("split", "metric", "planner", "n", "mean", "Δ (95 %)"):
        t.add_column(col, justify="right" if col in ("n", "mean") else "left", overflow="fold")
    names = {r["planner"] for r in rows}
    short = {n: n.removeprefix("model_").split("_mode-")[0] for n in names}  # the checkpoint, where that is unique
    if len(set(short.values())) < len(names):
        short = {n: n for n in names}
    for r in rows:
        delta = f"{r['delta']:+.3f} ({r['low']:+.3f}…{r['high']:+.3f})" if "delta" in r else "–"
        t.add_row(r["split"], r["metric"], short[r["planner"]], str(r["n"]), f"{r['mean']:.3f}", delta)
    console.print(t)
    write_csv(rows, Path(out) / "paired.csv")
    write_json(Path(out) / "paired.json", rows)
    plot_paired(rows, Path(out) / "paired.png")
    console.print(f"results in {out}/")


@app.command()
def front(
    timed: Path = typer.Argument(..., help="An `eval pdms --speed` result folder (the plan timings)."),
    paired_json: Path = typer.Option(..., "--paired", help="paired.json of `eval paired` over the same planners "
                                                            "(quality pooled over its folders)."),
    ar: str = typer.Option("ar_vla", help="The AR planner the speed-ups are against: its file name or a unique part."),
    out: str = typer.Option("runs/eval/front", help="Results directory (front.csv, front.json, front.png)."),
) -> None:
    """The size / quality / speed front: every model planner's parameters, FLOPs per plan, pooled PDMS, comfort and
    L2@4s (with the paired interval), plans/s and x AR at each timed batch size, in one table and plot."""
    from wamdiff.jsonfile import write_json

    from .front import front_rows, plot_front
    from .report import write_csv

    rows = front_rows(timed, paired_json, ar)  # a missing file or planner: ValueError, the one-line error
    claim_for_command(out)
    batches = sorted({int(k.split("_b")[-1]) for r in rows for k in r if k.startswith("plans_s_b")})
    t = Table(title="size / quality / speed", show_edge=False, pad_edge=False)
    cols = ["planner", "params", "GFLOP/plan", "PDMS", "C", "L2@4s", *[f"plans/s b{b}" for b in batches],
            *[f"x AR b{b}" for b in batches]]
    for c in cols:
        t.add_column(c, justify="left" if c == "planner" else "right", overflow="fold")
    fmt = lambda v, f: "-" if v is None else f.format(v)  # noqa: E731
    for r in rows:
        t.add_row(r["planner"], fmt(r["params"], "{:,}"), fmt(r["gflop_plan"], "{:.3f}"), fmt(r["pdms"], "{:.1f}"),
                  fmt(r["c"], "{:.3f}"), fmt(r["l2_4s"], "{:.2f}"), *[fmt(r.get(f"plans_s_b{b}"), "{:.1f}") for b in batches],
                  *[fmt(r.get(f"x_ar_b{b}"), "{:.2f}") for b in batches])
    console.print(t)
    write_csv(rows, Path(out) / "front.csv")
    write_json(Path(out) / "front.json", rows)
    plot_front(rows, Path(out) / "front.png", batches=tuple(batches[:2]))
    console.print(f"results in {out}/")


@app.command()
def bench(
    data: str = typer.Option(None, help="Scene directory (default: synthetic scenes)."),
    n: int = typer.Option(400, min=1, help="Plans to score."),
    planner: str = typer.Option("cv", help="Planner whose plans are scored."),
    epdms: bool = typer.Option(False, help="Also score the NAVSIM v2 EPDMS terms."),
) -> None:
    """PDMS scoring throughput (plans/s, reference excluded since it is cached per scene)."""
    from .pdms import PDMSConfig, PDMSEvaluator
    from .planners import make_planner, plan_scenes
    from .synthetic import random_scenes

    (spec,) = _specs([planner]).values()

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
    plans = plan_scenes(make_planner(spec, ev), scenes)
    ev.score(scenes[:8], plans[:8])  # warm-up
    t0 = time.perf_counter()
    rows = ev.score(scenes, plans, planner)
    dt = time.perf_counter() - t0
    console.print(f"scored {len(rows)} plans over {len(uniq)} scenes in {dt:.2f}s: [bold]{len(rows) / dt:.0f} plans/s[/] "
                  f"(reference planner: {len(uniq) / t_ref:.1f} scenes/s, once per scene, cached); "
                  f"invalid {sum(not r['valid'] for r in rows)}")


def aggregate(
    planner: str = typer.Option(..., "--planner", "-p", help="The model that drives (planner spec, e.g. model:DIR)."),
    data: Path = typer.Option(..., "--data", help="Dataset folder the labelled scenes are added to (agg.json)."),
    round_index: int = typer.Option(0, "--round", min=0, help="Aggregation round (its own route seeds)."),
    routes_per_family: int = typer.Option(25, min=1, help="Training routes driven per family."),
    label_every: int = typer.Option(2, min=1, help="Replans (0.5 s) between labelled states."),
    recover_m: float = typer.Option(0.0, min=0.0, help="Also label states up to this many metres off the route, the "
                                    "expert steering back to it (recovery labels); 0: on-route states only."),
    fmt: AnswerFormat = typer.Option("delta", "--format", "--fmt", help="Answer format of the labels (as the model's training data)."),
    force: bool = typer.Option(False, help="Redo the round even if its files exist."),
) -> None:
    """On-policy aggregation (DAgger), one round: drive training routes with the model, label the visited states
    with the expert's plan, add them to DATA/agg.json (train on train.json + agg.json next)."""
    from .aggregation import AggregationRound, aggregate_round
    from .run import progress_bar

    (spec,) = _specs([planner]).values()
    claim_for_command(str(data))
    settings = AggregationRound(round_index, routes_per_family, label_every, recover_m)
    with progress_bar(console) as prog:
        task = prog.add_task(f"round {round_index}: routes", total=len(settings.routes()))
        entry = aggregate_round(spec, data, settings, fmt, force=force, progress=lambda: prog.advance(task))
    t = Table(title=f"aggregation round {round_index}: {entry['labelled']} labelled scenes in {data}")
    for col in ("family", "visited", "labelled", "of them recovery", "off route", "dropped", "routes"):
        t.add_column(col)
    for fam, c in entry["families"].items():
        drops = sum(v for k, v in c.items() if k.startswith("drop_"))
        ends = ", ".join(f"{k[6:]}: {v}" for k, v in c.items() if k.startswith("route_"))
        t.add_row(fam, str(c.get("visited", 0)), str(c.get("labelled", 0)), str(c.get("labelled_recovery", 0)),
                  str(c.get("off_route", 0)), str(drops), ends)
    console.print(t)


# `eval failures`, `eval map`, `eval qa` and `eval context` live in their own module (the robustness and retention
# tooling)
from .cli_map import context, failures, qa, robustness_map  # noqa: E402

app.command()(failures)
app.command("map")(robustness_map)
app.command()(qa)
app.command()(context)
