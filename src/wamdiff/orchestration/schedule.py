"""Which training stages a pipeline runs, and how: the stage graph and the lanes that run it side by side.

A stage needs the stages it starts from (`init`), learns from (`teacher`), drives (`aggregate.planner`), averages
(`average`) and the aggregation stages whose rounds it mixes in (`agg_rounds`; a bare `agg` every aggregation stage
before it). The pipeline runs what its evaluation rows, its overlap and bench stages and its last stages (those
nothing else needs) need, in config order. A stage given as a checkpoint (`checkpoints:`) is taken as it is, so what only
leads to it does not run: the default config converts the shipped mature AR VLA; `--from-scratch` drops the
given checkpoints of trained stages and runs the AR chain too.

Lanes (`lanes: N`): independent chains (the student's curriculum and the larger teacher's) train side by side,
each stage in its own process (`wamdiff pipeline --stages NAME`, its output in `<out>/logs/NAME.log`), a stage
starting once every stage it needs has finished; `threads` per process stays the config's.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from rich.console import Console

if TYPE_CHECKING:
    from wamdiff.orchestration.sections import BenchSection, EvaluateSection

console = Console()


def stage_needs(stage: dict, stages: list[dict]) -> list[str]:
    """The names of the stages `stage` needs before it can run (every name, trained here or given)."""
    need = [stage[k] for k in ("init", "teacher") if k in stage] + list(stage.get("average") or ())
    if "aggregate" in stage:  # a stage name, optionally with decode options ("block32,steps=2")
        need.append(stage["aggregate"]["planner"].split(",")[0])
    if stage.get("agg"):
        producers = {int(s["aggregate"]["round"]): s["name"] for s in stages if "aggregate" in s}
        if "agg_rounds" in stage:
            need += [producers[int(r)] for r in stage["agg_rounds"] if int(r) in producers]
        else:
            before = stages[: [s["name"] for s in stages].index(stage["name"])]
            need += [s["name"] for s in before if "aggregate" in s]
    return need


def referenced_stages(evaluate: EvaluateSection, bench: BenchSection | None) -> set[str]:
    """Stages the evaluation, the overlap and the bench read (the config's typed `evaluate:` and `bench:`)."""
    names = {spec[len("stage:"):].split(",")[0] for spec in evaluate.planners.values() if spec.startswith("stage:")}
    if evaluate.top5_overlap is not None:
        names |= set(evaluate.top5_overlap.stages.values())
    names |= {bench.ar, bench.diffusion} if bench is not None else set()
    return names


def stages_to_run(cfg: dict, given: set[str], evaluate: EvaluateSection, bench: BenchSection | None) -> list[dict]:
    """The training stages to run, in config order: every stage the references and the last stages need, not
    looking behind a `given` stage."""
    stages = list(cfg.get("train") or [])
    by_name = {s["name"]: s for s in stages}
    needed_by_others = {n for s in stages for n in stage_needs(s, stages)}
    todo = [n for n in referenced_stages(evaluate, bench) | {s["name"] for s in stages} - needed_by_others if n in by_name]
    run: set[str] = set()
    while todo:
        name = todo.pop()
        if name in run or name in given:
            continue
        run.add(name)
        todo += [n for n in stage_needs(by_name[name], stages) if n in by_name]
    return [s for s in stages if s["name"] in run]


def stage_command(config: Path, name: str, from_scratch: bool = False) -> list[str]:
    """The process that runs one stage of a pipeline (what a lane starts)."""
    cmd = [sys.executable, "-m", "wamdiff.cli", "pipeline", "--config", str(config), "--stages", name]
    return cmd + (["--from-scratch"] if from_scratch else [])


def run_lanes(stages: list[dict], lanes: int, is_done, command, log_dir: Path, poll_s: float = 2.0) -> None:
    """Run `stages` (in dependency order) with up to `lanes` processes at once, `command(name)` each, its output in
    `log_dir/<name>.log`; `is_done(stage)` tells a stage that finished earlier with the same settings and inputs (not
    started again, unless a stage it needs runs again). A failed stage stops new starts; the running ones finish,
    then a ValueError names the stage and its log. `poll_s`: how often the running processes are checked."""
    names = {s["name"] for s in stages}
    to_run = {s["name"] for s in stages if not is_done(s)}
    for s in stages:  # dependency order: a stage after one that runs again is stale once that one finishes
        if any(n in to_run for n in stage_needs(s, stages)):
            to_run.add(s["name"])
    waiting = [s for s in stages if s["name"] in to_run]
    finished = names - to_run
    running: dict[str, tuple[subprocess.Popen, float, Path]] = {}
    failed: list[str] = []
    log_dir.mkdir(parents=True, exist_ok=True)
    try:
        while waiting or running:
            for s in list(waiting):
                if failed or len(running) >= lanes:
                    break
                if all(n in finished or n not in names for n in stage_needs(s, stages)):
                    waiting.remove(s)
                    log = log_dir / f"{s['name']}.log"
                    with open(log, "w") as fh:
                        proc = subprocess.Popen(command(s["name"]), stdout=fh, stderr=subprocess.STDOUT)
                    running[s["name"]] = (proc, time.perf_counter(), log)
                    console.print(f"stage {s['name']}: started ({len(running)} running), log {log}")
            if not running and waiting and not failed:  # nothing can start: a need that is neither run nor given
                raise ValueError(f"stages {[s['name'] for s in waiting]} need stages that never finish")
            if not running:
                break
            time.sleep(poll_s)
            for name, (proc, t0, log) in list(running.items()):
                if proc.poll() is None:
                    continue
                del running[name]
                if proc.returncode == 0:
                    finished.add(name)
                    console.print(f"stage {name}: done in {time.perf_counter() - t0:.0f} s")
                else:
                    failed.append(name)
                    console.print(f"[red]stage {name}: failed (exit {proc.returncode}); see {log}[/red]")
    finally:  # Ctrl-C or an error here: no stage process outlives the pipeline
        for proc, _, _ in running.values():
            proc.terminate()
        for proc, _, _ in running.values():
            proc.wait()
    if failed:
        raise ValueError(f"stage {failed[0]} failed; its output is in {log_dir / (failed[0] + '.log')}")
