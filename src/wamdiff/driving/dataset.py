"""Dataset generation (`wamdiff data generate`): deterministic, parallel, resumable.

Seeds: each split owns a disjoint range, `SPLIT_SEED_BASE[split] + i` for i = 0, 1, 2, ... (train 0..,
val 10,000,000.., test 20,000,000..; a range holds 10 M seeds). Every family walks the same range, so a scene is
named by (family, split, seed): `scenes/<family>_<split>_<seed:08d>.npz/.png`. A seed whose run is dropped
(crash, comfort, drivable area) is skipped; the dataset is the first N kept seeds of each family, in seed
order, so the result does not depend on the worker count or on interruptions.

Resumable: kept seeds are the `.npz` files present, dropped seeds are lines of `drops_<split>.jsonl`; a re-run
only simulates seeds that are neither. Outputs in DIR:
- `scenes/*.npz|png` (Scene.save), `drops_<split>.jsonl`;
- `<split>.json` and `<split>.jsonl`: WAM-Diff2 planning samples (prompt = prompts.scene_prompt, answer in --fmt);
- `<split>_qa.json`: multi-task questions (qa.py);
- `manifest.json`: per split: kept / dropped counts per family and reason, commands, seed range, format,
  timing (scenes/min), versions (wamdiff, highway-env), world config.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import time
from collections import Counter, defaultdict
from pathlib import Path

from wamdiff.driving.world import FAMILIES

SPLIT_SEED_BASE = {"train": 0, "val": 10_000_000, "test": 20_000_000}
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


def generate_dataset(out: str | Path, families=FAMILIES, split: str = "train", n: int = 100, workers: int = 2,
                     fmt: str = "text2", camera: dict | None = None, progress: bool = True, **world_cfg) -> dict:
    """Make (or complete) `n` kept scenes per family for `split` in `out`; returns this run's stats."""
    from wamdiff.driving.trajectory import FORMATS

    if fmt not in FORMATS:
        raise ValueError(f"unknown answer format {fmt!r}; expected one of {FORMATS}")
    families = tuple(families)
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"unknown family {f!r}; expected one of {FAMILIES}")
    split_seed(split, 0)
    out = Path(out)
    (out / "scenes").mkdir(parents=True, exist_ok=True)
    camera = dict(camera or {})
    drops_path = out / f"drops_{split}.jsonl"
    drops = _read_drops(drops_path)
    kept = {f: sorted(int(p.stem.rsplit("_", 1)[1]) for p in (out / "scenes").glob(f"{f}_{split}_*.npz")) for f in families}
    done = {(f, s) for f in families for s in kept[f]} | set(drops)

    def plan_jobs() -> list:
        """Seeds still to simulate so that each family's first `n` kept seeds are known (seed order)."""
        jobs = []
        for f in families:
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
    pool = mp.get_context("fork" if os.name == "posix" else "spawn").Pool(workers, _init_worker, (str(out),)) if workers > 1 else None
    if pool is None:
        _init_worker(str(out))
    try:
        with open(drops_path, "a") as drop_log:
            while jobs:
                results = pool.imap_unordered(_work, jobs, chunksize=2) if pool else map(_work, jobs)
                for r in results:
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
                if bar is not None and jobs:
                    bar.total += len(jobs)
                    bar.refresh()
    finally:
        if pool is not None:
            pool.close()
            pool.join()
        if bar is not None:
            bar.close()
    elapsed = time.perf_counter() - t0
    selected = {f: sorted(kept[f])[:n] for f in families}
    stats = {
        "generated": generated,
        "dropped": dropped_now,
        "simulated": generated + dropped_now,
        "seconds": elapsed,
        "scenes_per_min": 60.0 * (generated + dropped_now) / elapsed if elapsed > 0 and generated + dropped_now else None,
        # what `workers` uncontended cores would do: wall numbers swing with other jobs on a shared machine
        "cpu_seconds_per_scene": cpu_seconds / (generated + dropped_now) if generated + dropped_now else None,
        "cpu_scenes_per_min": 60.0 * workers * (generated + dropped_now) / cpu_seconds if cpu_seconds > 0 else None,
    }
    write_split_files(out, split, selected, fmt)
    _update_manifest(out, split, families, n, fmt, selected, drops, stats, world_cfg, camera)
    return stats


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


def _update_manifest(out: Path, split: str, families, n: int, fmt: str, selected, drops, stats, world_cfg, camera) -> None:
    import highway_env

    from wamdiff.driving.render import CameraConfig

    import wamdiff

    path = out / "manifest.json"
    manifest = json.loads(path.read_text()) if path.exists() else {}
    per_family = {}
    for f in families:
        reasons = Counter(d["reason"] for (fam, _), d in drops.items() if fam == f)
        last = max(selected[f]) if selected[f] else -1
        # drops that happened before the last selected seed are the honest drop rate of this selection
        attempted = len(selected[f]) + sum(1 for (fam, s) in drops if fam == f and s <= last)
        commands = Counter()
        for seed in selected[f]:
            commands[_command_of(out, f, split, seed)] += 1
        per_family[f] = {
            "kept": len(selected[f]),
            "attempted": attempted,
            "dropped": dict(reasons),
            "drop_rate": (attempted - len(selected[f])) / attempted if attempted else 0.0,
            # share of the expert's crash-free runs that keep every nuPlan comfort bound over 0..4 s
            "expert_comfort_pass_rate": _comfort_pass(reasons, attempted),
            "commands": dict(commands),
        }
    manifest.setdefault("splits", {})[split] = {
        "n_per_family": n,
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
    tmp = path.with_name("manifest.json.tmp")
    tmp.write_text(json.dumps(manifest, indent=1))
    tmp.replace(path)


def _comfort_pass(reasons: Counter, attempted: int) -> float:
    crash_free = attempted - reasons.get("crash", 0)
    uncomfortable = sum(v for k, v in reasons.items() if k.startswith("comfort_"))
    return 1.0 - uncomfortable / crash_free if crash_free > 0 else 1.0


def _command_of(out: Path, family: str, split: str, seed: int) -> str:
    import numpy as np

    with np.load(out / "scenes" / f"{scene_name(family, split, seed)}.npz", allow_pickle=False) as z:
        return json.loads(bytes(z["header"]).decode())["command"]


def quantization_report(data_dir: str | Path, split: str | None = None) -> dict[str, float]:
    """Mean L2 quantisation error (m per waypoint) of every answer format over the expert futures in DIR."""
    import numpy as np

    from wamdiff.driving.trajectory import FORMATS, quantization_error

    files = sorted(Path(data_dir, "scenes").glob(f"*_{split}_*.npz" if split else "*.npz"))
    if not files:
        raise ValueError(f"{data_dir}: no scenes/*.npz found")
    errs = defaultdict(list)
    for f in files:
        with np.load(f, allow_pickle=False) as z:
            xy = z["future"][:, :2].astype(np.float64)
        for fmt in FORMATS:
            errs[fmt].append(quantization_error(xy, fmt))
    return {fmt: float(np.mean(v)) for fmt, v in errs.items()} | {"scenes": len(files)}
