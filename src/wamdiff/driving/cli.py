"""`wamdiff data ...`: generate datasets, inspect scenes, measure answer-format quantisation, write QA files."""

from __future__ import annotations

import json
import os
from pathlib import Path

import typer

from wamdiff.cli_choices import FAMILIES, AnswerFormat, Executor, Split, list_help, parse_list
from wamdiff.names import FORMATS
from wamdiff.driving.render import CameraConfig
from wamdiff.errors import UserError
from wamdiff.executors import EXECUTOR_HELP, RAY_ADDRESS_HELP

os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
os.environ.setdefault("PYGAME_HIDE_SUPPORT_PROMPT", "1")

app = typer.Typer(help="Driving data: generate, show, quantization, qa.", no_args_is_help=True, add_completion=False)


@app.command()
def generate(
    families: str = typer.Option(",".join(FAMILIES), "--families", "--family", help="Road families: " + list_help(FAMILIES) + "."),
    split: Split = typer.Option("train", help="Dataset split (each has its own seed range, disjoint from the others)."),
    n: int = typer.Option(100, "--n", min=1, help="Kept scenes per family."),
    out: Path = typer.Option(..., "--out", help="Dataset folder (created; re-running resumes)."),
    workers: int = typer.Option(2, min=1, help="Worker processes (with --executor ray and no --ray-address: local Ray CPUs)."),
    executor: Executor = typer.Option("process", help=EXECUTOR_HELP),
    ray_address: str = typer.Option(None, help=RAY_ADDRESS_HELP),
    fmt: AnswerFormat = typer.Option("text2", "--format", "--fmt", help="Answer format of the written samples (the "
                                                                       "default world's checkpoints use delta)."),
    density: float = typer.Option(1.0, help="Traffic density multiplier."),
    speed_scale: float = typer.Option(1.0, help="Multiplies desired speeds."),
    t0_spread: float = typer.Option(0.0, "--t0-spread", min=0.0,
                                    help="Seconds each scene's t0 is spread over along its route (0 = at the route's start)."),
    image_size: int = typer.Option(CameraConfig.size, min=8, help="Camera image side (pixels)."),
    pixels_per_meter: float = typer.Option(CameraConfig.pixels_per_meter, help="Camera scale."),
    look_ahead: float = typer.Option(CameraConfig.look_ahead, help="Metres the camera centre lies ahead of the ego (0 = ego-centred)."),
    route: bool = typer.Option(CameraConfig.route, help="Draw the planned route ahead in the camera view."),
) -> None:
    """Simulate scenes with the expert and write scenes/, <split>.json(l), <split>_qa.json, manifest.json."""
    from rich.console import Console
    from rich.table import Table

    from wamdiff.driving.dataset import generate_dataset
    from wamdiff.executors import ExecutorConfig

    fams = parse_list(families, FAMILIES, "--families")
    stats = generate_dataset(out, fams, split, n, workers, fmt,
                             camera={"size": image_size, "pixels_per_meter": pixels_per_meter, "look_ahead": look_ahead,
                                     "route": route},
                             executor=ExecutorConfig(executor, workers, ray_address), density=density, speed_scale=speed_scale,
                             t0_spread_s=t0_spread)
    manifest = json.loads((out / "manifest.json").read_text())["splits"][split]
    table = Table(title=f"{split}: {manifest['total']} scenes in {out}")
    for col in ("family", "kept", "attempted", "drop rate", "comfort pass", "drop reasons", "commands"):
        table.add_column(col)
    for fam, d in manifest["families"].items():
        table.add_row(fam, str(d["kept"]), str(d["attempted"]), f"{d['drop_rate']:.1%}", f"{d['expert_comfort_pass_rate']:.1%}",
                      ", ".join(f"{k}:{v}" for k, v in d["dropped"].items()), ", ".join(f"{k}:{v}" for k, v in d["commands"].items()))
    console = Console()
    console.print(table)
    earlier = {f: d.get("requested") for f, d in manifest["families"].items() if f not in fams or d.get("requested", n) > n}
    if earlier:
        console.print(f"merged with what {out} already held: " + ", ".join(f"{f} n={k}" for f, k in earlier.items())
                      + f" (the {split} files cover every family generated into this folder)")
    rate = stats["scenes_per_min"]
    console.print(f"this run: {stats['generated']} new, {stats['dropped']} dropped in {stats['seconds']:.1f} s"
                  + (f" = {rate:.0f} simulated scenes/min wall, {stats['cpu_scenes_per_min']:.0f}/min on {workers} free cores"
                     f" ({stats['cpu_seconds_per_scene'] * 1e3:.0f} ms CPU per scene)" if rate else " (nothing to do)"))


@app.command()
def show(
    scene: Path = typer.Argument(..., help="A scene .npz"),
    out: Path = typer.Option(..., "--out", help="PNG to write."),
) -> None:
    """Render camera + bird's-eye view (lanes, drivable area, agents, expert future, route) to a PNG."""
    from wamdiff.driving.viewer import show_scene

    typer.echo(show_scene(scene, out))


@app.command(help="Mean L2 quantisation error (m per waypoint) of every answer format over the dataset's expert "
                  f"futures: {', '.join(FORMATS)}.")
def quantization(
    data: Path = typer.Option(..., "--data", help="Dataset folder."),
    split: Split = typer.Option(None, help="Only this split (default: every scene in the folder)."),
    out: Path = typer.Option(None, help="Also write the numbers as JSON."),
) -> None:
    from wamdiff.driving.dataset import quantization_report
    from wamdiff.jsonfile import write_json

    rep = quantization_report(data, split)
    for fmt, err in rep.items():
        typer.echo(f"{fmt:8s} {err:.4f}" if fmt != "scenes" else f"scenes   {err}")
    if out:
        write_json(out, rep)


@app.command()
def qa(
    data: Path = typer.Option(..., "--data", help="Dataset folder."),
    split: Split = typer.Option("train", help="Which split's QA file (<split>_qa.json)."),
    predictions: Path = typer.Option(None, help="Optional JSON {sample id: predicted answer} to score."),
) -> None:
    """Score QA predictions against <split>_qa.json (exact match, per question kind)."""
    from collections import defaultdict

    from wamdiff.driving.qa import score_qa
    from wamdiff.driving.wamdiff2_json import read_samples

    samples = read_samples(data / f"{split}_qa.json")
    if predictions is None:
        kinds = defaultdict(int)
        for s in samples:
            kinds[s.meta.get("qa_kind", "?")] += 1
        typer.echo(json.dumps(dict(kinds), indent=1))
        return
    try:
        preds = json.loads(predictions.read_text())
    except json.JSONDecodeError as err:
        raise UserError(f"{predictions}:{err.lineno}: invalid JSON at column {err.colno} ({err.msg}); --predictions "
                        "must be a JSON object {{sample id: predicted answer}}") from None
    if not isinstance(preds, dict):
        raise UserError(f"{predictions}: expected a JSON object {{sample id: predicted answer}}, got {type(preds).__name__}")
    per = defaultdict(list)
    for s in samples:
        if s.id in preds:
            per[s.meta.get("qa_kind", "?")].append(score_qa(preds[s.id], s.answer))
    for kind, v in per.items():
        typer.echo(f"{kind:22s} {sum(v) / len(v):.3f} ({len(v)})")
