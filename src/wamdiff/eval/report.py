"""Results on disk: CSV per scene and the PNG plots (BEV, sub-score bars, closed-loop strips); JSON goes through
`wamdiff.jsonfile.write_json`."""

from __future__ import annotations

import csv
import math
import re
from pathlib import Path

import numpy as np

from wamdiff.atomic import write_atomically


def safe_name(spec: str) -> str:
    """A file-system-safe planner name ("model:/x/ckpt,mode=block" -> "model_ckpt_mode-block")."""
    kind, _, rest = spec.partition(":")
    if rest:
        parts = rest.split(",")
        path = Path(parts[0])
        leaf = path.name or "ckpt"
        if leaf == "final" or leaf.startswith("step-"):  # a training run's output: the run names the model
            leaf = f"{path.parent.name}_{leaf}" if path.parent.name else leaf
        rest = "_".join([leaf, *[p.replace("=", "-") for p in parts[1:]]])
    return re.sub(r"[^A-Za-z0-9._-]+", "_", (f"{kind}_{rest}" if rest else kind).replace("+", "plus"))


def planner_files(names) -> dict[str, str]:
    """{planner name: its file stem}; UserError when two planners would write the same files."""
    from wamdiff.errors import UserError

    files: dict[str, str] = {}
    for name in names:
        file = safe_name(name)
        clash = next((n for n, f in files.items() if f == file), None)
        if clash is not None:
            raise UserError(f"planners {clash!r} and {name!r} would write the same result files ({file}.*): "
                            "give their checkpoints folders of different names")
        files[name] = file
    return files


def _cell(v):
    """A CSV cell: numpy scalars as Python numbers, non-finite floats empty."""
    if isinstance(v, (np.floating, np.integer)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


def write_csv(rows: list[dict], path: Path) -> Path:
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if not k.startswith("_") and k not in cols]

    def write(f) -> None:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(r.get(k)) for k in cols})

    return write_atomically(path, write, text=True)


# -- plots ---------------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_boxes(ax, corners, color, alpha=1.0, lw=0.8, fill=False, zorder=3):
    from matplotlib.patches import Polygon as MplPolygon

    for c in corners:
        ax.add_patch(MplPolygon(c, closed=True, fill=fill, fc=color if fill else "none", ec=color, alpha=alpha, lw=lw, zorder=zorder))


def plot_bev(scene, trajectories: dict[str, np.ndarray], path: Path, sim_states: dict[str, np.ndarray] | None = None,
             title: str = "") -> Path:
    """Scene from above (the world's `driving.viewer.plot_scene`, x forward drawn up) with the plans and each
    plan's simulated ego box every second, in the plan's colour."""
    from wamdiff.driving import viewer

    from .pdms.vehicle import scene_vehicle, states_to_corners

    plt = _plt()
    veh = scene_vehicle(scene)
    colors = list(viewer.PLAN_COLOURS)
    fig, ax = plt.subplots(figsize=(6, 7))
    # the viewer draws the logged expert itself
    trajectories = {k: v for k, v in trajectories.items() if v is not None and k not in ("expert", "expert(log)")}
    sim_states = {k: v for k, v in (sim_states or {}).items() if k in trajectories}
    viewer.plot_scene(scene, trajectories, ax)
    if title:
        ax.set_title(title, fontsize=9)
    for i, (name, st) in enumerate(sim_states.items()):
        corners = states_to_corners(np.asarray(st)[10::10], veh)
        _draw_boxes(ax, np.stack([-corners[..., 1], corners[..., 0]], -1), colors[i % len(colors)], alpha=0.9, lw=0.9,
                    zorder=8)  # into the viewer's frame
        ax.plot([], [], c=colors[i % len(colors)], lw=0.9, label=f"{name} simulated (1 s)")
    ax.legend(loc="lower right", fontsize=6)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_subscores(aggregates: dict[str, dict], path: Path, metrics=("nc", "dac", "ttc", "ep", "c", "pdms")) -> Path:
    """Grouped bars: one group per metric, one bar per planner (overall means)."""
    plt = _plt()
    names = list(aggregates)
    fig, ax = plt.subplots(figsize=(1.3 * len(metrics) + 2, 3.6))
    w = 0.8 / max(1, len(names))
    x = np.arange(len(metrics))
    for i, n in enumerate(names):
        ov = aggregates[n]["overall"]
        vals = [ov.get(m) if ov.get(m) is not None else 0.0 for m in metrics]
        ax.bar(x + i * w - 0.4 + w / 2, vals, w, label=n)
    ax.set_xticks(x, [m.upper() for m in metrics])
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=7, loc="lower left")
    ax.set_title(next(iter(aggregates.values())).get("version", ""), fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_family_bars(aggregates: dict[str, dict], metric: str, path: Path) -> Path:
    plt = _plt()
    names = list(aggregates)
    fams = sorted({f for a in aggregates.values() for f in a.get("per_family", {})})
    fig, ax = plt.subplots(figsize=(1.5 * len(fams) + 2, 3.4))
    w = 0.8 / max(1, len(names))
    x = np.arange(len(fams))
    for i, n in enumerate(names):
        pf = aggregates[n].get("per_family", {})
        ax.bar(x + i * w - 0.4 + w / 2, [(pf.get(f, {}).get(metric) or 0.0) for f in fams], w, label=n)
    ax.set_xticks(x, fams)
    ax.set_ylabel(metric)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_strip(frames: list[np.ndarray], captions: list[str], path: Path, title: str = "") -> Path:
    """A row of frames (H, W, 3) of a closed-loop episode."""
    plt = _plt()
    n = max(1, len(frames))
    fig, axes = plt.subplots(1, n, figsize=(2.2 * n, 2.6))
    axes = np.atleast_1d(axes)
    for ax, fr, cap in zip(axes, frames, captions):
        ax.imshow(fr)
        ax.set_title(cap, fontsize=7)
        ax.axis("off")
    for ax in axes[len(frames):]:
        ax.axis("off")
    if title:
        fig.suptitle(title, fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path
