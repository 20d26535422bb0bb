"""Look at a scene: camera image and a bird's-eye view (ego frame) with matplotlib; `wamdiff data show`.

`plot_scene(scene, trajectories=None, ax=None)` draws the BEV on `ax` (or a new one): drivable area, junction
areas, lane borders, the route centreline (dashed), agents at t0 (boxes; their logged 5 s paths faint), the ego
box, the expert future (red) and any extra (8, 2|3) trajectories given as {label: array}. Reusable by eval.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from wamdiff.driving import geometry as geo
from wamdiff.driving.scene import Scene

PLAN_COLOURS = ["tab:blue", "tab:orange", "tab:purple", "tab:brown", "tab:pink", "tab:cyan", "tab:olive"]


def plot_scene(scene: Scene, trajectories: dict[str, np.ndarray] | None = None, ax=None, extent: float = 60.0):
    import matplotlib.pyplot as plt
    from matplotlib.patches import Polygon as MplPolygon

    if ax is None:
        _, ax = plt.subplots(figsize=(6, 6))
    # plot with x (forward) up and y (left) to the left: screen = (-y, x)
    scr = lambda xy: np.stack([-np.asarray(xy)[..., 1], np.asarray(xy)[..., 0]], -1)  # noqa: E731
    for poly in scene.map.drivable_polygons:
        ax.add_patch(MplPolygon(scr(poly), closed=True, facecolor="0.85", edgecolor="none", zorder=0))
    for poly in scene.map.intersection_polygons:
        ax.add_patch(MplPolygon(scr(poly), closed=True, facecolor="wheat", edgecolor="none", alpha=0.6, zorder=1))
    for poly in scene.map.lane_polygons:
        n = len(poly) // 2
        for border in (poly[:n], poly[n:]):
            b = scr(border)
            ax.plot(b[:, 0], b[:, 1], color="white", lw=0.8, zorder=2)
    if len(scene.map.route_centerline):
        r = scr(scene.map.route_centerline)
        ax.plot(r[:, 0], r[:, 1], "--", color="tab:green", lw=1.2, zorder=3, label="route")
    for a in range(len(scene.agent_boxes)):
        valid = scene.agent_valid[a]
        if valid.any():
            path = scr(scene.agent_boxes[a, valid, :2])
            ax.plot(path[:, 0], path[:, 1], color="tab:blue", lw=0.6, alpha=0.4, zorder=3)
        if valid[0]:
            x, y, h, length, width = scene.agent_boxes[a, 0]
            colour = "tab:blue" if scene.agent_is_vehicle[a] else "tab:red"
            ax.add_patch(MplPolygon(scr(geo.box_corners(x, y, h, length, width)), closed=True, facecolor=colour, alpha=0.8, zorder=4))
    ego = geo.box_corners(geo.REAR_AXLE_TO_CENTER, 0.0, 0.0, scene.ego_length, scene.ego_width)
    ax.add_patch(MplPolygon(scr(ego), closed=True, facecolor="limegreen", edgecolor="k", zorder=5))
    if np.any(scene.future):
        f = scr(np.vstack([[0, 0], scene.future[:, :2]]))
        ax.plot(f[:, 0], f[:, 1], "o-", color="tab:red", ms=3, lw=1.5, zorder=6, label="expert")
    for k, (label, traj) in enumerate((trajectories or {}).items()):
        t = scr(np.vstack([[0, 0], np.asarray(traj)[:, :2]]))
        ax.plot(t[:, 0], t[:, 1], "s-", color=PLAN_COLOURS[k % len(PLAN_COLOURS)], ms=3, lw=1.2, zorder=7, label=label)
    ax.set_xlim(-extent / 2, extent / 2)
    ax.set_ylim(-extent / 4, extent * 0.75 + 20)
    ax.set_aspect("equal")
    ax.set_facecolor("#3a5a3a")
    ax.set_title(f"{scene.scene_id}  cmd={scene.command}  v={scene.ego_speed:.1f} m/s", fontsize=8)
    ax.set_xlabel("-y (m, right)")
    ax.set_ylabel("x (m, forward)")
    ax.legend(fontsize=6, loc="lower right")
    return ax


def show_scene(scene_path: str | Path, out: str | Path, trajectories: dict[str, np.ndarray] | None = None) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scene = Scene.load(scene_path)
    fig, (ax_cam, ax_bev) = plt.subplots(1, 2, figsize=(11, 5.5), gridspec_kw={"width_ratios": [1, 1.2]})
    ax_cam.imshow(scene.image, interpolation="nearest")
    ax_cam.set_title(f"camera {scene.image.shape[1]}x{scene.image.shape[0]} (heading up)", fontsize=8)
    ax_cam.axis("off")
    plot_scene(scene, trajectories, ax_bev)
    fig.tight_layout()
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
