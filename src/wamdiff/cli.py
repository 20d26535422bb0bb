"""The one `wamdiff` command. Each area owns its sub-command module; this file only wires them.

Sub-apps are imported lazily inside the wiring so `wamdiff --help` stays fast and a broken area does not
take the whole CLI down. Every command runs under the one error policy of `wamdiff.errors` (a user error is one
line and exit code 2; `--debug` shows the traceback).
"""

from __future__ import annotations

import importlib
import os
import sys

import typer
from typer.core import TyperGroup


class _PolicyGroup(TyperGroup):
    """The root command group: run as a program (the `wamdiff` entry point, `python -m wamdiff.cli`, typer's
    CliRunner) it applies the error policy; with standalone_mode=False it behaves as plain click."""

    def main(self, args=None, prog_name=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, standalone_mode=False, **extra)
        from wamdiff.errors import INTERRUPTED_EXIT, run_cli

        code = run_cli(lambda **kw: super(_PolicyGroup, self).main(**kw, **extra), args, "wamdiff")
        if code == INTERRUPTED_EXIT:  # the one line is out and the work's own cleanup ran: skip interpreter exit,
            sys.stdout.flush()      # whose joins of pool feeder / manager threads can wait for ever after Ctrl-C
            sys.stderr.flush()
            os._exit(code)
        sys.exit(code)


app = typer.Typer(help="wamdiff: AR driving VLA -> fast block-causal diffusion (data, train, eval, bench, demo).", no_args_is_help=True,
                  add_completion=False, cls=_PolicyGroup)

# (sub-command, module that defines `app`, help)
_SUBCOMMANDS = [
    ("data", "wamdiff.driving.cli", "Generate, inspect and convert driving datasets (highway-env world, WAM-Diff2 JSON)."),
    ("model", "wamdiff.models.cli", "Build model presets, convert AR checkpoints to block diffusion, inspect checkpoints."),
    ("train", "wamdiff.training.cli", "Train from a YAML recipe (AR SFT, block curriculum, block/model distillation)."),
    ("eval", "wamdiff.eval.cli", "Evaluate planners: NAVSIM-style PDMS, open-loop L2, closed-loop success."),
    ("bench", "wamdiff.eval.bench_cli", "Side-by-side AR vs block-diffusion decoding speed benchmark."),
]

for _name, _module, _help in _SUBCOMMANDS:
    try:
        _sub = importlib.import_module(_module).app
    except (ImportError, AttributeError) as _err:  # area not built yet: say so instead of crashing
        _sub = typer.Typer(help=f"{_help} [unavailable: {_err}]")
    app.add_typer(_sub, name=_name, help=_help)
    if _name == "data":
        _data_app = _sub
    if _name == "model":
        _model_app = _sub


def _wire_aggregate() -> None:
    """`wamdiff data aggregate` belongs with the data commands but drives a planner (the eval layer): wired here."""
    try:
        from wamdiff.eval.cli import aggregate
    except ImportError:  # pragma: no cover - eval unavailable: the data commands still work
        return
    _data_app.command("aggregate")(aggregate)
    from wamdiff.eval.bench_cli import grammar

    _model_app.command("grammar")(grammar)  # models sit below decoding and driving: the grammar check is wired here


_wire_aggregate()


app.add_typer(importlib.import_module("wamdiff.serve.cli").app)  # `wamdiff serve`, `wamdiff serve-bench`: at the root


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", help="Show the traceback of an error (anywhere on the line; or WAMDIFF_DEBUG=1)."),
) -> None:
    """wamdiff: AR driving VLA -> fast block-causal diffusion (data, train, eval, bench, demo)."""


def main(argv: list[str] | None = None) -> int:
    """Run `wamdiff ARGV` under the error policy; returns the exit code instead of exiting."""
    from wamdiff.errors import run_cli

    return run_cli(typer.main.get_command(app), argv)


study_app = typer.Typer(help="Studies: the default pipeline plus ablation arms, one report (configs/studies/).",
                        no_args_is_help=True, add_completion=False)
app.add_typer(study_app, name="study")


@study_app.command("parity")
def study_parity(
    config: str = typer.Option("configs/studies/parity.yaml", help="Study YAML (a pipeline config with `base:`)."),
    train_only: bool = typer.Option(False, help="Stop after the training stages."),
    stages: str = typer.Option(None, help="Comma-separated training stages to run (only those)."),
) -> None:
    """Driving-quality parity of the diffusion student with its AR VLA: budget vs method, answer format, loss
    details, decoding; every arm a row of runs/default/report (PDMS, comfort, L2, closed loop, 95 % intervals)."""
    from wamdiff.orchestration.pipeline import run_pipeline

    run_pipeline(config, train_only=train_only, stages=stages.split(",") if stages else None)


@app.command()
def pipeline(
    config: str = typer.Option("configs/default.yaml", help="Pipeline YAML."),
    train_only: bool = typer.Option(False, help="Stop after the training stages (no evaluation, no report)."),
    stages: str = typer.Option(None, help="Comma-separated training stages to run (only those), names from the config's "
                               "`train:` (training and `aggregate` rounds), e.g. teacher_ar,teacher_block4."),
    export: str = typer.Option(None, help="Instead of running: copy the --stages' models (bf16) + provenance to this folder."),
    from_scratch: bool = typer.Option(False, "--from-scratch", help="Also train the stages the config is given as "
                                      "checkpoints (`checkpoints:`; the default's mature AR VLA) and what leads to them."),
) -> None:
    """From nothing to every checkpoint and the report: data, AR SFT, curriculum, distillation, evaluation."""
    from wamdiff.orchestration.pipeline import export_checkpoints, run_pipeline

    if export:
        if not stages:
            raise typer.BadParameter("--export needs --stages (which models to copy)")
        typer.echo(f"exported to {export_checkpoints(config, export, stages.split(','), from_scratch=from_scratch)}")
        return
    run_pipeline(config, train_only=train_only, stages=stages.split(",") if stages else None, from_scratch=from_scratch)


@app.command()
def demo(config: str = typer.Option("configs/demo.yaml", help="Demo YAML.")) -> None:
    """Run the main job on the default world and write the report (see README)."""
    from wamdiff.orchestration.pipeline import run_demo

    run_demo(config)


if __name__ == "__main__":
    app()
