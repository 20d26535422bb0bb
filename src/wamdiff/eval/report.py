"""Results on disk: CSV per scene, JSON aggregates, PNG plots (BEV, sub-score bars, closed-loop strips)."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path

import numpy as np


def safe_name(spec: str) -> str:
    """A file-system-safe planner name ("model:/x/ckpt,mode=block" -> "model_ckpt_mode-block")."""
    kind, _, rest = spec.partition(":")
    if rest:
        parts = rest.split(",")
        rest = "_".join([Path(parts[0]).name or "ckpt", *[p.replace("=", "-") for p in parts[1:]]])
    return re.sub(r"[^A-Za-z0-9._-]+", "_", f"{kind}_{rest}" if rest else kind)


def _jsonable(v):
    if isinstance(v, (np.floating, np.integer)):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, np.ndarray):
        return v.tolist()
    return v


def write_csv(rows: list[dict], path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    cols: list[str] = []
    for r in rows:
        cols += [k for k in r if not k.startswith("_") and k not in cols]
    tmp = path.with_suffix(path.suffix + ".tmp")
    with tmp.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=cols, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _jsonable(r.get(k)) for k in cols})
    tmp.replace(path)
    return path


def write_json(obj, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(obj, indent=2, default=_jsonable))
    tmp.replace(path)
    return path


# -- plots ---------------------------------------------------------------------------------------------
def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _draw_map(scene, ax):
    from matplotlib.patches import Polygon as MplPolygon

    for p in scene.map.drivable_polygons:
        ax.add_patch(MplPolygon(np.asarray(p), closed=True, fc="#e6e6e6", ec="none", zorder=0))
    for p in scene.map.intersection_polygons:
        ax.add_patch(MplPolygon(np.asarray(p), closed=True, fc="#dcdcf0", ec="none", zorder=0))
    for p in scene.map.lane_polygons:
        ax.add_patch(MplPolygon(np.asarray(p), closed=True, fc="none", ec="#bbbbbb", lw=0.5, zorder=1))
    rc = np.asarray(scene.map.route_centerline)
    if len(rc):
        ax.plot(rc[:, 0], rc[:, 1], ls="--", c="#7a7a7a", lw=0.8, zorder=1, label="route")


def _draw_boxes(ax, corners, color, alpha=1.0, lw=0.8, fill=False, zorder=3):
    from matplotlib.patches import Polygon as MplPolygon

    for c in corners:
        ax.add_patch(MplPolygon(c, closed=True, fill=fill, fc=color if fill else "none", ec=color, alpha=alpha, lw=lw, zorder=zorder))


def plot_bev(scene, trajectories: dict[str, np.ndarray], path: Path, sim_states: dict[str, np.ndarray] | None = None,
             title: str = "") -> Path:
    """Scene from above with the plans and the simulated ego boxes every second.

    Uses the world's `driving.viewer.plot_scene` (x forward drawn up) when present, else a plain drawing.
    """
    from .pdms.vehicle import box_corners, scene_vehicle, states_to_corners

    plt = _plt()
    veh = scene_vehicle(scene)
    colors = ["tab:orange", "tab:purple", "tab:cyan", "tab:olive", "tab:pink", "tab:brown"]
    try:
        from wamdiff.driving import viewer

        plot_scene = viewer.plot_scene
        colors = list(getattr(viewer, "_EXTRA_COLOURS", colors))  # simulated boxes in their plan's colour
    except (ImportError, AttributeError):
        plot_scene = None
    if plot_scene is not None:
        fig, ax = plt.subplots(figsize=(6, 7))
        # the viewer draws the logged expert itself
        trajectories = {k: v for k, v in trajectories.items() if k not in ("expert", "expert(log)")}
        sim_states = {k: v for k, v in (sim_states or {}).items() if k in trajectories}
        plot_scene(scene, trajectories, ax)
        to_screen = lambda xy: np.stack([-xy[..., 1], xy[..., 0]], -1)  # noqa: E731 - the viewer's frame
    else:
        fig, ax = plt.subplots(figsize=(7, 5))
        _draw_map(scene, ax)
        b, v = np.asarray(scene.agent_boxes), np.asarray(scene.agent_valid, bool)
        if len(b):
            sel = v[:, 0]
            _draw_boxes(ax, box_corners(b[sel, 0, 0], b[sel, 0, 1], b[sel, 0, 2], b[sel, 0, 3] / 2, b[sel, 0, 4] / 2), "#c0392b")
        for i, (name, xy) in enumerate(trajectories.items()):
            xy = np.asarray(xy)
            ax.plot(np.r_[0, xy[:, 0]], np.r_[0, xy[:, 1]], "o-", ms=3, c=colors[i % len(colors)], label=name, zorder=4)
        _draw_boxes(ax, box_corners(0.0, 0.0, 0.0, veh.half_length, veh.half_width, veh.rear_axle_to_center)[None], "k", lw=1.2)
        to_screen = lambda xy: xy  # noqa: E731
        ax.set_aspect("equal")
        ax.set_title(title or f"{scene.scene_id} ({scene.family}, {scene.command})", fontsize=9)
    for i, (name, st) in enumerate((sim_states or {}).items()):
        corners = states_to_corners(np.asarray(st)[10::10], veh)
        _draw_boxes(ax, to_screen(corners), colors[i % len(colors)], alpha=0.9, lw=0.9, zorder=8)
        ax.plot([], [], c=colors[i % len(colors)], lw=0.9, label=f"{name} simulated (1 s)")
    if plot_scene is None:
        allp = np.concatenate([np.zeros((1, 2))] + [np.asarray(x) for x in trajectories.values()])
        cx, cy = allp[:, 0].mean(), allp[:, 1].mean()
        span = max(40.0, np.ptp(allp[:, 0]) + 20, np.ptp(allp[:, 1]) + 20)
        ax.set_xlim(cx - span / 2, cx + span / 2)
        ax.set_ylim(cy - span * 0.35, cy + span * 0.35)
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
