"""`wamdiff train --recipe configs/recipes/<recipe>.yaml [--set key=value ...] [--resume]`.

Runs in one process, or with several (the trainer reads the launch environment; optim.batch_size is global):
  CPU, one machine (gloo):  torchrun --nproc_per_node 2 -m wamdiff.cli train --recipe ...
  GPU cluster:              accelerate launch --config_file configs/accelerate/{fsdp,deepspeed_zero2}.yaml \
                                -m wamdiff.cli train --recipe ...   (or torchrun for plain data parallelism)
"""

from __future__ import annotations

import os

import typer

app = typer.Typer(help="Train from a YAML recipe (AR SFT, block curriculum, block/model distillation).",
                  invoke_without_command=True, add_completion=False)


@app.callback(invoke_without_command=True)
def main(
    ctx: typer.Context,
    recipe: str = typer.Option(None, "--recipe", "-r", help="Recipe YAML (configs/recipes/*.yaml)."),
    set_: list[str] = typer.Option(None, "--set", help="Override a recipe field, e.g. --set optim.lr=3e-4 (repeatable)."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the last complete checkpoint in output_dir."),
    print_recipe: bool = typer.Option(False, "--print", help="Print the resolved recipe and exit."),
) -> None:
    """Train one recipe (default command)."""
    if ctx.invoked_subcommand is not None:
        return
    if recipe is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(2)
    from wamdiff.training.config import load_recipe

    r = load_recipe(recipe, list(set_ or []))  # a bad recipe is a user error: one line, exit 2 (wamdiff.errors)
    if print_recipe:
        import yaml

        typer.echo(yaml.safe_dump(r.to_dict(), sort_keys=False))
        return
    from wamdiff.training.trainer import TrainingDiverged, train

    try:
        result = train(r, resume=resume)
    except TrainingDiverged as err:
        typer.secho(f"training stopped: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(3) from None
    if int(os.environ.get("RANK", "0")) != 0:
        return
    m = result.metrics
    keys = [k for k in ("final_train_loss", "val_loss", "val_masked_acc", "val_ar_token_acc", "val_top5_overlap",
                        "qa_exact_match_start", "qa_exact_match_end", "train_tokens_per_s", "wall_s") if m.get(k) is not None]
    typer.echo(f"done: {result.final_model}  " + "  ".join(f"{k}={m[k]:.4g}" for k in keys))


@app.command("throughput")
def throughput(
    preset: str = typer.Option("student", help="Model preset: a name in wamdiff.models.PRESETS."),
    kind: str = typer.Option("block", help="ar_sft | block."),
    block_size: int = typer.Option(16, help="Block size (block)."),
    batch_size: int = typer.Option(8, help="Samples per step."),
    answer_tokens: int = typer.Option(96, help="Answer length (synthetic)."),
    steps: int = typer.Option(6, help="Timed steps (after 2 warm-up steps)."),
    threads: int = typer.Option(2, help="torch threads."),
    vision: bool = typer.Option(True, help="Qwen3-VL with a 64x64 image (else text-only Qwen3)."),
) -> None:
    """Training tokens/s, bf16 autocast vs fp32, on synthetic batches (what `train` logs as tokens_per_s)."""
    from wamdiff.training.throughput import measure

    for mp in ("no", "bf16"):
        tps = measure(preset=preset, kind=kind, block_size=block_size, batch_size=batch_size, answer_tokens=answer_tokens,
                      steps=steps, threads=threads, vision=vision, mixed_precision=mp)
        typer.echo(f"{preset} {kind} B={block_size} batch={batch_size} {('fp32' if mp == 'no' else 'bf16')}: {tps:,.0f} tok/s")


@app.command("footprint")
def footprint(
    recipe: str = typer.Option(..., "--recipe", "-r", help="Recipe YAML (e.g. configs/recipes/lora/block8.yaml)."),
    set_: list[str] = typer.Option(None, "--set", help="Override a recipe field (repeatable)."),
    steps: int = typer.Option(3, help="Optimiser steps to run (the first is reported apart)."),
    out: str = typer.Option(None, help="Also write the figures to this JSON file."),
) -> None:
    """Peak RSS and seconds per step of a recipe's real training steps (nothing saved)."""
    import json

    from wamdiff.training.throughput import footprint as measure

    try:
        result = measure(recipe, list(set_ or []), steps=steps)
    except ValueError as err:
        typer.secho(f"error: {err}", fg=typer.colors.RED, err=True)
        raise typer.Exit(2) from None
    text = json.dumps(result, indent=2)
    typer.echo(text)
    if out:
        from pathlib import Path

        Path(out).write_text(text + "\n")
