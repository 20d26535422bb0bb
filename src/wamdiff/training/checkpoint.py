"""Resumable checkpoints, written atomically, read back without unpickling.

Layout of one checkpoint `OUT/checkpoints/step-000120/` (under FSDP/DeepSpeed the optimiser state is in
`accelerate/`, written by `Accelerator.save_state`, instead of optimizer.pt):
  model/              save_model(...) output (safetensors, tokenizer, image processor, diffusion settings)
  optimizer.pt        optimizer state dict
  scheduler.pt        LR scheduler state dict
  rng-rank{r}.pt      python / numpy / torch RNG of every process
  state.json          step, data position, recipe
The .pt files hold only tensors and plain containers (numbers, strings, lists, tuples, dicts) and are read
with `torch.load(weights_only=True)`: torch's restricted unpickler, which refuses any other global, so a
crafted file in a checkpoint folder cannot run code on `--resume`; it is reported as unreadable instead.

Everything is written into `step-000120.tmp-<pid>` and renamed in one `os.replace`, so a kill never leaves
a half-written checkpoint under the final name; `checkpoints()` only lists complete ones and
`remove_leftovers` clears what a killed save left behind.
"""

from __future__ import annotations

import json
import os
import pickle
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from wamdiff.errors import UserError

_STEP_DIR = re.compile(r"^step-(\d+)$")
FINAL_STEPS = "trained_steps.json"
_LEFTOVER = re.compile(r"^(step-\d+|final)\.(tmp-\d+|old-\d+|shards)$")


def checkpoint_root(output_dir: str | Path) -> Path:
    return Path(output_dir) / "checkpoints"


# ------------------------------------------------------------------------------------------------ RNG


def rng_state() -> dict[str, Any]:
    """Every RNG the trainer draws from, as tensors and plain containers (loadable with weights_only=True)."""
    np_state = np.random.get_state(legacy=False)
    return {
        "python": random.getstate(),  # (version, tuple of 625 ints, gauss_next)
        "numpy": {"bit_generator": np_state["bit_generator"], "key": torch.from_numpy(np_state["state"]["key"].astype(np.int64)),
                  "pos": int(np_state["state"]["pos"]), "has_gauss": int(np_state["has_gauss"]), "gauss": float(np_state["gauss"])},
        "torch": torch.get_rng_state(),
    }


def set_rng_state(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    n = state["numpy"]
    if isinstance(n, dict):
        np.random.set_state({"bit_generator": n["bit_generator"], "state": {"key": n["key"].numpy().astype(np.uint32), "pos": n["pos"]},
                             "has_gauss": n["has_gauss"], "gauss": n["gauss"]})
    else:  # checkpoints written before the plain format: numpy's legacy tuple
        np.random.set_state(n)
    torch.set_rng_state(state["torch"])


def _numpy_array_globals() -> list:
    """What a numpy array needs under weights_only (torch's documented allow-list): older RNG files hold one."""
    return [np._core.multiarray._reconstruct, np.ndarray, np.dtype, type(np.dtype(np.uint32))]


# ------------------------------------------------------------------------------------------------ writing


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


def save_rng(directory: Path, rank: int, state: dict | None = None) -> None:
    torch.save(rng_state() if state is None else state, Path(directory) / f"rng-rank{rank}.pt")


def remove_leftovers(output_dir: str | Path) -> list[Path]:
    """Clear what a killed save left: `*.tmp-<pid>` and `*.shards` folders are removed; an `*.old-<pid>` folder
    whose final copy is missing (killed between atomic_dir's two renames) is the last complete copy: put back."""
    out = Path(output_dir)
    touched = []
    for parent in (checkpoint_root(out), out):
        if not parent.is_dir():
            continue
        for p in sorted(parent.iterdir()):
            m = _LEFTOVER.match(p.name)
            if not m or not p.is_dir():
                continue
            final = p.with_name(m.group(1))
            if m.group(2).startswith("old-") and not final.exists():
                os.replace(p, final)
            else:
                shutil.rmtree(p, ignore_errors=True)
            touched.append(p)
    return touched


def write_final_steps(directory: Path, steps: int) -> None:
    """Record in final/ how many steps made it, so a later --resume with fewer optim.steps can refuse."""
    (Path(directory) / FINAL_STEPS).write_text(json.dumps({"steps": int(steps)}))


def final_steps(output_dir: str | Path) -> int | None:
    try:
        return int(json.loads((Path(output_dir) / "final" / FINAL_STEPS).read_text())["steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prune_checkpoints(output_dir: str | Path, keep_last: int) -> None:
    steps = checkpoints(output_dir, complete=False)
    for _, p in steps[: max(0, len(steps) - max(1, keep_last))]:
        shutil.rmtree(p, ignore_errors=True)


# ------------------------------------------------------------------------------------------------ reading


def checkpoints(output_dir: str | Path, *, complete: bool = True) -> list[tuple[int, Path]]:
    """(step, folder) of the checkpoints under output_dir, oldest first (complete: with a state.json)."""
    root = checkpoint_root(output_dir)
    if not root.is_dir():
        return []
    return sorted((int(m.group(1)), p) for p in root.iterdir()
                  if (m := _STEP_DIR.match(p.name)) and (not complete or (p / "state.json").exists()))


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    found = checkpoints(output_dir)
    return found[-1][1] if found else None


def load_plain(path: Path, *, legacy_numpy: bool = False):
    """A .pt file of tensors and plain containers; never unpickles anything else (see the module docstring)."""
    try:
        try:
            return torch.load(path, map_location="cpu", weights_only=True)
        except pickle.UnpicklingError:
            if not legacy_numpy:
                raise
            with torch.serialization.safe_globals(_numpy_array_globals()):
                return torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        why = next((ln.strip() for ln in str(err).splitlines() if "GLOBAL" in ln), "it is not tensors and plain data")
        raise UserError(f"{path}: refused, not loaded: the file holds objects that only a full unpickle could build "
                        f"({why}), which could run code; delete this checkpoint if you did not write it") from err
    except (RuntimeError, OSError, EOFError, ValueError) as err:
        raise UserError(f"{path}: unreadable checkpoint file ({type(err).__name__}: {' '.join(str(err).split())[:200]})") from err


@dataclass
class TrainingState:
    """Everything a checkpoint holds besides the model weights, read and checked before any of it is applied."""

    path: Path
    step: int
    state: dict  # state.json
    optimizer: dict | None
    scheduler: dict
    rng: dict | None  # this process's


def read_training_state(ckpt: Path, *, rank: int, with_optimizer: bool = True) -> TrainingState:
    """Read a checkpoint's state files (every process's RNG file is checked, so all ranks agree on whether the
    checkpoint is usable); UserError naming the file when one is missing, corrupt or not plain data."""
    try:
        state = json.loads((ckpt / "state.json").read_text())
        step = int(state["step"])
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{ckpt / 'state.json'}: unreadable checkpoint state ({type(err).__name__}: {err})") from err
    optimizer = load_plain(ckpt / "optimizer.pt") if with_optimizer else None
    scheduler = load_plain(ckpt / "scheduler.pt")
    rngs = {int(m.group(1)): load_plain(p, legacy_numpy=True)
            for p in sorted(ckpt.glob("rng-rank*.pt")) if (m := re.match(r"rng-rank(\d+)\.pt$", p.name))}
    return TrainingState(ckpt, step, state, optimizer, scheduler, rngs.get(rank))


def apply_training_state(ts: TrainingState, *, optimizer, scheduler) -> dict:
    """Restore optimiser, scheduler and RNG from a read checkpoint; returns its state.json."""
    if optimizer is not None:  # None: restored elsewhere (accelerate.load_state under FSDP/DeepSpeed)
        optimizer.load_state_dict(ts.optimizer)
    scheduler.load_state_dict(ts.scheduler)
    if ts.rng is not None:
        set_rng_state(ts.rng)
    return ts.state


def load_training_state(ckpt: Path, *, optimizer, scheduler, rank: int) -> dict:
    return apply_training_state(read_training_state(ckpt, rank=rank, with_optimizer=optimizer is not None),
                                optimizer=optimizer, scheduler=scheduler)
