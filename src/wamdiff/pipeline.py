"""The main job, stage by stage: data -> AR VLA -> block curriculum -> distillation -> evaluation -> report.

`run_pipeline(config)` goes from nothing to every checkpoint; `run_demo(config)` evaluates checkpoints that
a pipeline produced (shipped in `checkpoints/`) on freshly generated test scenes. Both are resumable: each
finished stage leaves `<out>/stages/<name>.json` and is skipped next time; an interrupted training stage
resumes from its last checkpoint (the trainer's `--resume`).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import yaml
from rich.console import Console

console = Console()


# ------------------------------------------------------------------------------------------ config
@dataclass
class Pipeline:
    config_path: Path
    cfg: dict
    out: Path
    checkpoints: dict[str, Path] = field(default_factory=dict)  # stage name -> final model dir

    @classmethod
    def load(cls, path: str | Path) -> "Pipeline":
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"{path}: pipeline config not found")
        try:
            cfg = yaml.safe_load(path.read_text()) or {}
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML ({err})") from err
        for key in ("out", "data"):
            if key not in cfg:
                raise ValueError(f"{path}: missing top-level field '{key}'")
        p = cls(path, cfg, Path(cfg["out"]))
        for name, ckpt in (cfg.get("checkpoints") or {}).items():  # demo: shipped checkpoints
            p.checkpoints[name] = Path(ckpt)
        return p

    @property
    def data_dir(self) -> Path:
        return self.out / "data"

    def stage_file(self, name: str) -> Path:
        return self.out / "stages" / f"{name}.json"

    def checkpoint(self, stage: str) -> Path:
        if stage in self.checkpoints:
            return self.checkpoints[stage]
        return self.out / "ckpt" / stage / "final"

    def stage_decode(self, spec: str) -> tuple[str, dict]:
        """`stage:NAME[,key=value...]` -> (NAME, decode settings): `evaluate.decode` with the spec's own
        options on top (e.g. `stage:block32_more,steps=4` for a capped-steps row of the same checkpoint)."""
        from wamdiff.eval.planners import parse_options  # noqa: PLC0415

        stage, *items = spec.split(":", 1)[1].split(",")
        dec = {**self.cfg.get("evaluate", {}).get("decode", {}), **parse_options(spec, items)}
        if stage.endswith("ar_sft"):  # the AR model decodes autoregressively
            dec.update(mode="ar")
            dec.pop("block", None)
        return stage, dec

    def planner_spec(self, spec: str) -> str:
        """`stage:NAME[,key=value...]` -> `model:<checkpoint>,<decode settings>`; other specs pass through."""
        if not spec.startswith("stage:"):
            return spec
        stage, dec = self.stage_decode(spec)
        dec.setdefault("fmt", self.cfg["data"].get("fmt", "text2"))
        return "model:" + ",".join([str(self.checkpoint(stage)), *(f"{k}={v}" for k, v in dec.items())])


def run_stage(p: Pipeline, name: str, fn: Callable[[], dict], settings=None) -> dict:
    """Run `fn` unless its stage file exists with the same `settings` (the config the stage depends on); record
    wall time, the result and the settings' fingerprint. A stage whose settings changed runs again (training
    stages then resume from their last checkpoint); files written before fingerprints existed count as done."""
    f = p.stage_file(name)
    key = None if settings is None else hashlib.sha256(
        json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]
    if f.exists():
        done = json.loads(f.read_text())
        if key is None or done.get("settings_fingerprint") in (None, key):
            console.print(f"[dim]stage {name}: done earlier, skipped[/dim]")
            return done
        console.print(f"stage {name}: its settings changed since it ran; running it again")
    console.rule(f"stage {name}")
    t0 = time.perf_counter()
    result = fn() or {}
    result = {**result, "stage": name, "stage_wall_s": round(time.perf_counter() - t0, 1), "settings_fingerprint": key}
    f.parent.mkdir(parents=True, exist_ok=True)
    tmp = f.with_suffix(".tmp")
    tmp.write_text(json.dumps(result, indent=2, default=str))
    tmp.replace(f)
    _log(p, f"{name}: {result['stage_wall_s']} s")
    return result


def _log(p: Pipeline, line: str) -> None:
    p.out.mkdir(parents=True, exist_ok=True)
    with open(p.out / "pipeline.log", "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


# ------------------------------------------------------------------------------------------ stages
def stage_data(p: Pipeline, splits: tuple[str, ...] = ("train", "val", "test")) -> dict:
    from wamdiff.driving.dataset import generate_dataset

    d = p.cfg["data"]
    stats = {}
    for split in splits:
        n = int(d["per_family"][split])
        stats[split] = generate_dataset(p.data_dir, families=d["families"], split=split, n=n,
                                        workers=int(d.get("workers", 2)), fmt=d.get("fmt", "text2"))
    return {"splits": stats}


def stage_train(p: Pipeline, spec: dict) -> dict:
    from wamdiff.training.trainer import train

    name = spec["name"]
    out_dir = p.out / "ckpt" / name
    qa_weight = float(p.cfg["data"].get("qa_weight", 0.0))
    sources = [{"path": str(p.data_dir / "train.json"), "weight": 1.0}]
    if qa_weight > 0:
        sources.append({"path": str(p.data_dir / "train_qa.json"), "weight": qa_weight})
    overrides = {
        "name": name,
        "output_dir": str(out_dir),
        "seed": int(p.cfg.get("seed", 0)),
        "threads": p.cfg.get("threads"),
        "data.train": sources,
        "data.val": str(p.data_dir / "val.json"),
        "eval.qa.path": str(p.data_dir / "val_qa.json"),
    }
    if "init" in spec:
        overrides["model.init"] = str(p.checkpoint(spec["init"]))
    if "teacher" in spec:
        overrides["teacher.path"] = str(p.checkpoint(spec["teacher"]))
    overrides.update(spec.get("set", {}))
    result = train(spec["recipe"], overrides, resume=True)  # continues a killed stage; fresh when none
    keep = ("steps", "final_train_loss", "val_loss", "val_masked_acc", "val_ar_token_acc", "val_top5_overlap",
            "qa_exact_match_start", "qa_exact_match_end", "train_tokens_per_s", "wall_s")
    return {"checkpoint": str(result.final_model), **{k: result.metrics.get(k) for k in keep}}


def training_stages(p: Pipeline) -> list[dict]:
    return list(p.cfg.get("train") or [])


# ------------------------------------------------------------------------------------------ entry points
def provenance() -> dict:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        commit = ""
    import torch

    return {"commit": commit, "python": platform.python_version(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "machine": platform.machine(), "cpus": os.cpu_count()}


def _threads(p: Pipeline) -> None:
    import torch

    if p.cfg.get("threads"):
        torch.set_num_threads(int(p.cfg["threads"]))


def run_pipeline(config: str | Path, train_only: bool = False, stages: list[str] | None = None) -> dict:
    """Every stage in order (finished ones skipped). `stages` runs only those training stages and stops: two
    processes can then train independent chains (e.g. the teacher's) side by side on disjoint stages."""
    from wamdiff.evaluate import run_evaluation
    from wamdiff.report import write_report

    p = Pipeline.load(config)
    _threads(p)
    _log(p, f"pipeline start: {config} {provenance()}")
    t0 = time.perf_counter()
    run_stage(p, "data", lambda: stage_data(p), settings=p.cfg["data"])
    unknown = set(stages or ()) - {s["name"] for s in training_stages(p)}
    if unknown:
        raise ValueError(f"{config}: no training stage named {sorted(unknown)}")
    for spec in training_stages(p):
        if stages is None or spec["name"] in stages:
            run_stage(p, spec["name"], lambda spec=spec: stage_train(p, spec), settings=spec)
    if train_only or stages is not None:
        return {}
    results = run_evaluation(p, run_stage)
    report = write_report(p, results)
    _log(p, f"pipeline done in {time.perf_counter() - t0:.0f} s -> {report}")
    return results


def export_checkpoints(config: str | Path, dest: str | Path, stages: list[str]) -> Path:
    """Copy finished stages' models to `dest` in bf16 (half the bytes; loaded back as fp32) with the provenance
    (config, commit, stage metrics) and the pipeline's report table, for the demo to ship."""
    import shutil

    import torch

    from wamdiff.models import load_model, save_model

    p = Pipeline.load(config)
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    record = {"config": str(p.config_path), "config_text": p.config_path.read_text(), **provenance(), "stages": {}}
    for stage in stages:
        src = p.checkpoint(stage)
        model, tok = load_model(src)
        save_model(model.to(torch.bfloat16), tok, dest / stage)  # with src's image processor (image_processor_for)
        f = p.stage_file(stage)
        record["stages"][stage] = json.loads(f.read_text()) if f.exists() else {}
    (dest / "PROVENANCE.json").write_text(json.dumps(record, indent=2, default=str))
    summary = p.out / "report" / "summary.csv"
    if summary.exists():
        shutil.copyfile(summary, dest / "pipeline_summary.csv")
    return dest


def run_demo(config: str | Path) -> dict:
    from wamdiff.evaluate import run_evaluation
    from wamdiff.report import write_report

    p = Pipeline.load(config)
    _threads(p)
    missing = [f"{k}: {v}" for k, v in p.checkpoints.items() if not (v / "config.json").exists()]
    if missing:
        raise ValueError("demo checkpoints missing (run `make pipeline` to produce them): " + "; ".join(missing))
    t0 = time.perf_counter()
    run_stage(p, "data", lambda: stage_data(p, splits=("test",)), settings=p.cfg["data"])
    results = run_evaluation(p, run_stage)
    report = write_report(p, results)
    console.print(f"[bold]demo finished in {time.perf_counter() - t0:.0f} s; report: {report}[/bold]")
    return results
