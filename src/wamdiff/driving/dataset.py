"""Dataset generation (`wamdiff data generate`): deterministic, parallel, resumable.

Seeds: each split owns a disjoint range, `SPLIT_SEED_BASE[split] + i` for i = 0, 1, 2, ... (train 0..,
val 10,000,000.., test 20,000,000..; a range holds 10 M seeds). Every family walks the same range, so a scene is
named by (family, split, seed): `scenes/<family>_<split>_<seed:08d>.npz/.png`. A seed whose run is dropped
(crash, comfort, drivable area) is skipped; the dataset is the first N kept seeds of each family, in seed
order, so the result does not depend on the worker count or on interruptions.

Resumable: kept seeds are the `.npz` files present (with their `.png`), dropped seeds are lines of
`drops_<split>.jsonl`; a re-run only simulates seeds that are neither. Ctrl-C stops the workers at once (they
ignore SIGINT; the main process terminates the pool); half-written temporaries are removed by the next run.
A re-run with other families or a smaller --n merges into the split (never drops what is there); one with
another world config or camera is refused. One run at a time per DIR (a lock, `wamdiff.outdir`). Outputs in DIR:
- `scenes/*.npz|png` (Scene.save), `drops_<split>.jsonl`;
- `<split>.json` and `<split>.jsonl`: WAM-Diff2 planning samples (prompt = prompts.scene_prompt, answer in --fmt);
- `<split>_qa.json`: multi-task questions (qa.py);
- `manifest.json`: per split: kept / dropped counts per family and reason, commands, seed range, format,
  timing (scenes/min), versions (wamdiff, highway-env), world config.
"""

from __future__ import annotations

import json
import os
import time
import warnings
from collections import Counter, defaultdict
from pathlib import Path

from wamdiff.names import SPLITS
from wamdiff.driving.world import FAMILIES
from wamdiff.errors import UserError
from wamdiff.executors import ExecutorConfig, open_executor
from wamdiff.jsonfile import write_json

SPLIT_SEED_BASE = {"train": 0, "val": 10_000_000, "test": 20_000_000}
assert tuple(SPLIT_SEED_BASE) == SPLITS, "driving.names.SPLITS must list the splits"
SPLIT_SEED_SPAN = 10_000_000


def split_seed(split: str, index: int) -> int:
    if split not in SPLIT_SEED_BASE:
        raise ValueError(f"unknown split {split!r}; expected one of {tuple(SPLIT_SEED_BASE)}")
    if not 0 <= index < SPLIT_SEED_SPAN:
        raise ValueError(f"seed index {index} outside the split's range [0, {SPLIT_SEED_SPAN})")
    return SPLIT_SEED_BASE[split] + index


def scene_name(family: str, split: str, seed: int) -> str:
    return f"{family}_{split}_{seed:08d}"


def _work(job) -> dict:
    family, split, seed, world_cfg, camera = job
    os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")
    from wamdiff.driving.capture import Drop, generate_scene
    from wamdiff.driving.render import CameraConfig

    t, cpu = time.perf_counter(), time.process_time()
    result = generate_scene(family, seed, split, camera=CameraConfig(**camera), **world_cfg)
    if isinstance(result, Drop):
        return {"family": family, "seed": seed, "status": "drop", "reason": result.reason, "detail": result.detail,
                "seconds": time.perf_counter() - t, "cpu_seconds": time.process_time() - cpu}
    result.save(job_out(job) / "scenes" / scene_name(family, split, seed))
    return {"family": family, "seed": seed, "status": "ok", "command": result.command, "seconds": time.perf_counter() - t,
            "cpu_seconds": time.process_time() - cpu}


_OUT: Path | None = None


def job_out(_job) -> Path:
    assert _OUT is not None
    return _OUT


def _init_worker(out: str) -> None:
    """Run once in every worker (`wamdiff.executors`: pool workers also ignore SIGINT there)."""
    global _OUT
    _OUT = Path(out)
    os.environ.setdefault("SDL_VIDEODRIVER", "offscreen")


def _read_drops(path: Path) -> dict[tuple[str, int], dict]:
    drops = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if line.strip():
                try:
                    d = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by an interruption: that seed is simply redone
                drops[(d["family"], int(d["seed"]))] = d
    return drops


def _kept_seeds(scenes: Path, family: str, split: str) -> list[int]:
    """Seeds of complete scenes on disk (Scene.save writes the .png before the .npz that completes it)."""
    seeds = []
    for p in scenes.glob(f"{family}_{split}_*.npz"):
        tail = p.stem.rsplit("_", 1)[1]
        if tail.isdigit() and p.with_suffix(".png").exists():
            seeds.append(int(tail))
    return sorted(seeds)


def _remove_leftovers(scenes: Path) -> None:
    """Half-written files of a killed run (Scene.save's temporaries); the seeds are simply simulated again."""
    from wamdiff.atomic import PARTIAL_SUFFIX
    from wamdiff.driving.scene import LEGACY_TEMPORARIES

    for pattern in (f"*{PARTIAL_SUFFIX}", *LEGACY_TEMPORARIES):
        for p in scenes.glob(pattern):
            p.unlink(missing_ok=True)


def _effective_settings(world_cfg: dict, camera: dict) -> dict:
    """What the scenes of a split depend on, defaults filled in, so equal settings compare equal however given."""
    from dataclasses import asdict

    from wamdiff.driving.render import CameraConfig
    from wamdiff.driving.world import WorldConfig

    eff = {"world": {f: asdict(WorldConfig.for_family(f, **world_cfg)) for f in FAMILIES},
           "camera": asdict(CameraConfig(**camera))}
    return json.loads(json.dumps(eff))


def _merged_targets(out: Path, split: str, families: tuple[str, ...], n: int, world_cfg: dict, camera: dict) -> dict[str, int]:
    """Kept scenes wanted per family: this request merged with what the split already holds (never less).

    A dataset's split covers every family generated into it, each with the largest `n` asked for, so a re-run
    with another --family or a smaller --n adds to the split files instead of rewriting them. Scenes are
    named by (family, split, seed) only, so a re-run with another world config or camera is refused: it would
    mix scenes of two settings in one split.
    """
    path = out / "manifest.json"
    targets = {f: n for f in families}
    if not path.exists():
        return targets
    try:
        prev = json.loads(path.read_text()).get("splits", {}).get(split)
    except (ValueError, AttributeError) as err:
        raise UserError(f"{path}: unreadable manifest ({err}); restore it, or move it away to start the "
                        "split's files from this request") from None
    if not prev:
        return targets
    old_world, old_camera = prev.get("world_config") or {}, prev.get("camera") or {}
    if _effective_settings(old_world, old_camera) != _effective_settings(world_cfg, camera):
        raise UserError(f"{path}: split {split!r} was generated with world config {old_world} and camera {old_camera}; "
                        f"this run asks for world config {world_cfg} and camera {camera}, which would mix two settings "
                        "in one split: re-run with the same options or choose another --out")
    legacy_n = prev.get("n_per_family") if isinstance(prev.get("n_per_family"), int) else 0  # manifests before "requested"
    merged = {f: max(int(d.get("requested", legacy_n)), targets.get(f, 0))  # the split's order first: files stay stable
              for f, d in (prev.get("families") or {}).items() if f in FAMILIES}
    return merged | {f: k for f, k in targets.items() if f not in merged}


def generate_dataset(out: str | Path, families=FAMILIES, split: str = "train", n: int = 100, workers: int = 2,
                     fmt: str = "text2", camera: dict | None = None, progress: bool = True,
                     executor: ExecutorConfig | None = None, **world_cfg) -> dict:
    """Make (or complete) `n` kept scenes per family for `split` in `out`; returns this run's stats.

    Re-running merges (see `_merged_targets`); the folder is locked for the run (`claim_output_dir`). An
    interruption (Ctrl-C, kill, a lost worker) leaves finished scenes and the drop log, from which the next run
    resumes. `executor`: where the scenes are simulated (default: a process pool of `workers`; Ray gives the same
    files).
    """
    from wamdiff.driving.trajectory import FORMATS
    from wamdiff.outdir import claim_output_dir

    if fmt not in FORMATS:
        raise UserError(f"unknown answer format {fmt!r} (--fmt); expected one of {FORMATS}")
    families = tuple(families)
    for f in families:
        if f not in FAMILIES:
            raise UserError(f"unknown family {f!r} (--family); expected one of {FAMILIES}")
    if int(n) < 1 or int(workers) < 1:
        raise UserError(f"--n ({n}) and --workers ({workers}) must be at least 1")
    split_seed(split, 0)
    out = Path(out)
    camera = dict(camera or {})
    executor = executor or ExecutorConfig("process", int(workers))
    with claim_output_dir(out):
        targets = _merged_targets(out, split, families, n, world_cfg, camera)
        return _generate(out, targets, split, executor, fmt, camera, progress, world_cfg)


def _generate(out: Path, targets: dict[str, int], split: str, executor: ExecutorConfig, fmt: str, camera: dict,
              progress: bool, world_cfg: dict) -> dict:
    workers = executor.workers
    scenes_dir = out / "scenes"
    scenes_dir.mkdir(parents=True, exist_ok=True)
    _remove_leftovers(scenes_dir)
    drops_path = out / f"drops_{split}.jsonl"
    drops = _read_drops(drops_path)
    kept = {f: _kept_seeds(scenes_dir, f, split) for f in targets}
    done = {(f, s) for f in targets for s in kept[f]} | set(drops)

    def plan_jobs() -> list:
        """Seeds still to simulate so that each family's first `n` kept seeds are known (seed order)."""
        jobs = []
        for f, n in targets.items():
            ok, i = 0, 0
            pending = 0
            while ok + pending < n:
                seed = split_seed(split, i)
                if (f, seed) in done:
                    ok += (f, seed) not in drops
                else:
                    jobs.append((f, split, seed, world_cfg, camera))
                    pending += 1
                i += 1
        return jobs

    t0 = time.perf_counter()
    generated, dropped_now, cpu_seconds = 0, 0, 0.0
    jobs = plan_jobs()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(jobs), desc=f"{split} scenes", unit="scene", dynamic_ncols=True)
    try:
        with open(drops_path, "a") as drop_log, open_executor(executor, _init_worker, (str(out),)) as pool:
            while jobs:
                for r in pool.imap_unordered(_work, jobs, chunksize=2):
                    done.add((r["family"], r["seed"]))
                    cpu_seconds += r["cpu_seconds"]
                    if r["status"] == "drop":
                        drops[(r["family"], r["seed"])] = r
                        drop_log.write(json.dumps(r) + "\n")
                        drop_log.flush()
                        dropped_now += 1
                    else:
                        kept[r["family"]].append(r["seed"])
                        generated += 1
                    if bar is not None:
                        bar.update(1)
                jobs = plan_jobs()  # dropped seeds leave gaps: top up until n kept per family
                if not jobs and _set_aside_unreadable(out, split, {f: sorted(kept[f])[:n] for f, n in targets.items()}, kept, done):
                    jobs = plan_jobs()  # every selected scene must load: an unreadable one is simulated again
                if bar is not None and jobs:
                    bar.total += len(jobs)
                    bar.refresh()
    finally:  # the executor stopped its workers (at once on Ctrl-C or an error)
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    selected = {f: sorted(kept[f])[:n] for f, n in targets.items()}
    stats = {
        "generated": generated,
        "dropped": dropped_now,
        "simulated": generated + dropped_now,
        "seconds": elapsed,
        "scenes_per_min": 60.0 * (generated + dropped_now) / elapsed if elapsed > 0 and generated + dropped_now else None,
        # what `workers` uncontended cores would do: wall numbers swing with other jobs on a shared machine
        "cpu_seconds_per_scene": cpu_seconds / (generated + dropped_now) if generated + dropped_now else None,
        "cpu_scenes_per_min": 60.0 * workers * (generated + dropped_now) / cpu_seconds if cpu_seconds > 0 else None,
        "executor": executor.describe(),
    }
    write_split_files(out, split, selected, fmt)
    _update_manifest(out, split, targets, fmt, selected, drops, stats, world_cfg, camera)
    return stats


def _set_aside_unreadable(out: Path, split: str, selected: dict[str, list[int]], kept: dict[str, list[int]], done: set) -> bool:
    """Rename selected scenes that do not load (truncated, corrupt) to `*.npz.unreadable`, with a warning, and
    forget them so they are simulated again; True if there was any."""
    from wamdiff.driving.scene import Scene

    bad = []
    for family, seeds in selected.items():
        for seed in seeds:
            path = out / "scenes" / f"{scene_name(family, split, seed)}.npz"
            try:
                Scene.load(path)
            except ValueError as err:
                warnings.warn(f"{err}; set aside as {path.name}.unreadable, its seed is simulated again", stacklevel=2)
                os.replace(path, path.with_name(path.name + ".unreadable"))
                kept[family].remove(seed)
                done.discard((family, seed))
                bad.append(path)
    return bool(bad)


def write_split_files(out: Path, split: str, selected: dict[str, list[int]], fmt: str) -> None:
    """`<split>.json`, `<split>.jsonl` (planning) and `<split>_qa.json` from the selected scenes."""
    from wamdiff.driving.prompts import answer_text, scene_prompt
    from wamdiff.driving.qa import qa_samples
    from wamdiff.driving.scene import Scene
    from wamdiff.driving.wamdiff2_json import ConversationSample, write_samples

    plan, qa = [], []
    for family, seeds in selected.items():
        for seed in seeds:
            name = scene_name(family, split, seed)
            scene = Scene.load(out / "scenes" / f"{name}.npz")
            png = str((out / "scenes" / f"{name}.png").resolve())
            plan.append(ConversationSample(
                id=name, image_paths=[png], human=scene_prompt(scene), answer=answer_text(scene, fmt),
                meta={"family": family, "seed": seed, "command": scene.command, "fmt": fmt,
                      "scene": f"scenes/{name}.npz"}))
            qa.extend(qa_samples(scene, png))
    write_samples(plan, out / f"{split}.json")
    write_samples(plan, out / f"{split}.jsonl")
    write_samples(qa, out / f"{split}_qa.json")


def write_hard_braking_split(out: str | Path, split: str = "train") -> Path:
    """`<split>_hard_braking.json` beside `<split>.json`: the samples whose ego brakes harder than
    `scene.HARD_BRAKING_MS2` at t0 (a fifth of the default world's scenes, where the diffusion student planned worse
    than the AR VLA: docs/PARITY.md), for a training mixture to weight up. Written again when `<split>.json` is newer."""
    from wamdiff.driving.scene import HARD_BRAKING_MS2, Scene

    out = Path(out)
    src, dst = out / f"{split}.json", out / f"{split}_hard_braking.json"
    if dst.exists() and dst.stat().st_mtime >= src.stat().st_mtime:
        return dst
    keep = []
    for i, rec in enumerate(json.loads(src.read_text())):
        if "scene" not in rec:
            raise UserError(f"{src}: sample {i} ({rec.get('id')}): field 'scene': missing (a hard-braking subset needs "
                            "the simulated scene files of `wamdiff data generate`)")
        if Scene.load(out / rec["scene"]).ego_accel < HARD_BRAKING_MS2:
            keep.append(rec)
    return write_json(dst, keep)


def _update_manifest(out: Path, split: str, targets: dict[str, int], fmt: str, selected, drops, stats, world_cfg, camera) -> None:
    import highway_env

    from wamdiff.driving.render import CameraConfig

    import wamdiff

    path = out / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    per_family = {}
    for f in targets:
        reasons = Counter(d["reason"] for (fam, _), d in drops.items() if fam == f)
        last = max(selected[f]) if selected[f] else -1
        # drops that happened before the last selected seed are the honest drop rate of this selection
        attempted = len(selected[f]) + sum(1 for (fam, s) in drops if fam == f and s <= last)
        commands = Counter()
        for seed in selected[f]:
            commands[_command_of(out, f, split, seed)] += 1
        per_family[f] = {
            "requested": targets[f],
            "kept": len(selected[f]),
            "attempted": attempted,
            "dropped": dict(reasons),
            "drop_rate": (attempted - len(selected[f])) / attempted if attempted else 0.0,
            # share of the expert's crash-free runs that keep every nuPlan comfort bound over 0..4 s
            "expert_comfort_pass_rate": _comfort_pass(reasons, attempted),
            "commands": dict(commands),
        }
    manifest.setdefault("splits", {})[split] = {
        "n_per_family": dict(targets),
        "families": per_family,
        "total": sum(len(v) for v in selected.values()),
        "seed_range": [SPLIT_SEED_BASE[split], SPLIT_SEED_BASE[split] + SPLIT_SEED_SPAN - 1],
        "answer_format": fmt,
        "files": {"planning": f"{split}.json", "planning_jsonl": f"{split}.jsonl", "qa": f"{split}_qa.json",
                  "drops": f"drops_{split}.jsonl"},
        "last_run": stats,
        "world_config": world_cfg,
        "camera": CameraConfig(**(camera or {})).to_dict(),  # every field, so a model can record what it saw
    }
    manifest["versions"] = {"wamdiff": getattr(wamdiff, "__version__", "0"), "highway_env": highway_env.__version__}
    manifest["seed_scheme"] = "seed = SPLIT_SEED_BASE[split] + i; train 0.., val 10,000,000.., test 20,000,000.. (10 M each)"
    write_json(path, manifest, indent=1)


def _comfort_pass(reasons: Counter, attempted: int) -> float:
    # the expert's runs that reached the comfort check: not crashed, and driven at all (a `route_end` scene is
    # dropped before the expert drives it)
    checked = attempted - reasons.get("crash", 0) - reasons.get("route_end", 0)
    uncomfortable = sum(v for k, v in reasons.items() if k.startswith("comfort_"))
    return 1.0 - uncomfortable / checked if checked > 0 else 1.0


def _command_of(out: Path, family: str, split: str, seed: int) -> str:
    import numpy as np

    with np.load(out / "scenes" / f"{scene_name(family, split, seed)}.npz", allow_pickle=False) as z:
        return json.loads(bytes(z["header"]).decode())["command"]


def quantization_report(data_dir: str | Path, split: str | None = None) -> dict[str, float]:
    """Mean L2 quantisation error (m per waypoint) of every answer format over the expert futures in DIR."""
    import numpy as np

    from wamdiff.driving.scene import Scene, is_scene_file
    from wamdiff.driving.trajectory import FORMATS, quantization_error

    files = sorted(p for p in Path(data_dir, "scenes").glob(f"*_{split}_*.npz" if split else "*.npz") if is_scene_file(p.name))
    if not files:
        raise UserError(f"{data_dir}: no scenes/*.npz found (--data must be a folder made by `wamdiff data generate`)")
    errs = defaultdict(list)
    for f in files:
        xy = Scene.load(f).future[:, :2].astype(np.float64)
        for fmt in FORMATS:
            errs[fmt].append(quantization_error(xy, fmt))
    return {fmt: float(np.mean(v)) for fmt, v in errs.items()} | {"scenes": len(files)}
