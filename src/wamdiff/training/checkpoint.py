"""Resumable checkpoints, written atomically.

Layout of one checkpoint `OUT/checkpoints/step-000120/` (under FSDP/DeepSpeed the optimiser state is in
`accelerate/`, written by `Accelerator.save_state`, instead of optimizer.pt):
  model/              save_model(...) output (safetensors, tokenizer, image processor, diffusion settings)
  optimizer.pt        optimizer state
  scheduler.pt        LR scheduler state
  rng-rank{r}.pt      python / numpy / torch RNG of every process
  state.json          step, data position, recipe
Everything is written into `step-000120.tmp-<pid>` and renamed in one `os.replace`, so a kill never leaves
a half-written checkpoint under the final name; `latest_checkpoint` only considers complete ones.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import torch

_STEP_DIR = re.compile(r"^step-(\d+)$")


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


def rng_state() -> dict[str, Any]:
    return {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])


def atomic_dir(final: Path, write) -> Path:
    """Call `write(tmp_dir)`, then rename tmp_dir to `final` (replacing an older copy)."""
    final = Path(final)
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f"{final.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        write(tmp)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if final.exists():  # os.replace cannot replace a non-empty directory: move the old one aside first
        old = final.with_name(f"{final.name}.old-{os.getpid()}")
        os.replace(final, old)
        os.replace(tmp, final)
        shutil.rmtree(old, ignore_errors=True)
    else:
        os.replace(tmp, final)
    return final


def save_training_state(tmp: Path, *, optimizer, scheduler, step: int, extra: dict) -> None:
    if optimizer is not None:
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    torch.save(scheduler.state_dict(), tmp / "scheduler.pt")
    (tmp / "state.json").write_text(json.dumps({"step": step, **extra}, indent=2, default=str))


def save_rng(directory: Path, rank: int) -> None:
    torch.save(rng_state(), Path(directory) / f"rng-rank{rank}.pt")


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return None
    steps = [(int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)) and (p / "state.json").exists()]
    return max(steps)[1] if steps else None


def prune_checkpoints(output_dir: str | Path, keep_last: int) -> None:
    root = checkpoint_root(output_dir)
    steps = sorted((int(m.group(1)), p) for p in root.iterdir() if (m := _STEP_DIR.match(p.name)))
    for _, p in steps[: max(0, len(steps) - max(1, keep_last))]:
        shutil.rmtree(p, ignore_errors=True)


def load_training_state(ckpt: Path, *, optimizer, scheduler, rank: int) -> dict:
    if optimizer is not None:  # None: restored elsewhere (accelerate.load_state under FSDP/DeepSpeed)
        optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", weights_only=False))
    scheduler.load_state_dict(torch.load(ckpt / "scheduler.pt", weights_only=False))
    rng_file = ckpt / f"rng-rank{rank}.pt"
    if rng_file.exists():
        set_rng_state(torch.load(rng_file, weights_only=False))
    return json.loads((ckpt / "state.json").read_text())
