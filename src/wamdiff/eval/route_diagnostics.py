"""Where closed-loop routes fail: failure timelines, driven paths against the route, and a summary table.

Built from `RouteResult.trace` (one row per 0.1 s tick, `closedloop.TRACE_FIELDS`) and `RouteResult.route_xy`:
- `failure_summary(results)`: per family, how each failed route ended, where on the route (progress, inside a
  junction or not) and under which navigation command;
- `plot_failure_timelines(results, path)`: one row per route and family, progress along the route on x, the
  command in colour, junction stretches shaded, the end marked by its status;
- `plot_route_paths(results, path)`: bird's-eye small multiples of the driven path over the route centreline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

COMMAND_COLORS = {"left": "tab:blue", "straight": "tab:gray", "right": "tab:orange", "unknown": "black", "": "black"}
VIEW_HALF_M = 45.0  # half side of each path plot, around where the route ended
STATUS_MARKERS = {"Completed": ("o", "tab:green"), "Failed - collision": ("X", "tab:red"),
                  "Failed - route deviation": ("D", "tab:purple")}


def _trace(result) -> dict[str, np.ndarray]:
    from .closedloop import TRACE_FIELDS

    if not result.trace:
        return {k: np.zeros(0) for k in TRACE_FIELDS}
    cols = list(zip(*result.trace))
    return {k: np.asarray(v) for k, v in zip(TRACE_FIELDS, cols)}


def failure_summary(results) -> dict:
    """Per family: counts by status, and for each failed route where it ended (JSON-ready)."""
    out: dict[str, dict] = {}
    for r in results:
        fam = out.setdefault(r.route.family, {"n": 0, "statuses": {}, "failures": []})
        fam["n"] += 1
        fam["statuses"][r.status] = fam["statuses"].get(r.status, 0) + 1
        if r.success:
            continue
        tr = _trace(r)
        end = {"route": r.route.name, "status": r.status, "completion": round(r.completion, 1),
               "t": float(tr["t"][-1]) if len(tr["t"]) else None,
               "progress_m": float(tr["progress_m"][-1]) if len(tr["t"]) else None,
               "in_junction": bool(tr["in_junction"][-1]) if len(tr["t"]) else None,
               "command": str(tr["command"][-1]) if len(tr["t"]) else None,
               "collision_kind": r.collision_kind, "collision_at_fault": r.collision_at_fault}
        if len(tr["t"]) and np.any(tr["in_junction"]):
            first = float(tr["progress_m"][np.argmax(tr["in_junction"])])
            end["m_past_junction_entry"] = round(float(tr["progress_m"][-1]) - first, 1)
        fam["failures"].append(end)
    for fam in out.values():
        fails = fam["failures"]
        fam["share_failing_in_junction"] = (float(np.mean([bool(f["in_junction"]) for f in fails])) if fails else None)
    return out


def plot_failure_timelines(results, path: str | Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    families = sorted({r.route.family for r in results})
    rows = {f: [r for r in results if r.route.family == f] for f in families}
    height = max(2.0, 0.18 * max(len(v) for v in rows.values()) + 1.0)
    fig, axes = plt.subplots(1, len(families), figsize=(4.2 * len(families), height), squeeze=False)
    for ax, fam in zip(axes[0], families):
        for i, r in enumerate(rows[fam]):
            tr = _trace(r)
            if not len(tr["t"]):
                continue
            length = max(r.route_length_m, 1e-6)
            x = 100.0 * tr["progress_m"] / length
            ax.scatter(x[tr["in_junction"].astype(bool)], np.full(int(tr["in_junction"].astype(bool).sum()), i),
                       s=40, color="0.85", marker="s", linewidths=0, zorder=1)
            ax.scatter(x, np.full(len(x), i), s=4, c=[COMMAND_COLORS.get(str(c), "black") for c in tr["command"]], zorder=2)
            marker, color = STATUS_MARKERS.get(r.status, ("s", "black"))
            ax.scatter([x[-1]], [i], marker=marker, color=color, s=30, zorder=3)
        ax.set_title(f"{fam}: {sum(r.success for r in rows[fam])}/{len(rows[fam])} succeeded", fontsize=9)
        ax.set_xlabel("route progress [%]")
        ax.set_yticks(range(len(rows[fam])), [r.route.name.split("_")[-1] for r in rows[fam]], fontsize=6)
        ax.set_xlim(-2, 102)
    handles = [plt.Line2D([], [], color=c, marker="o", ls="", label=k) for k, c in COMMAND_COLORS.items() if k]
    handles += [plt.Line2D([], [], color=c, marker=m, ls="", label=k) for k, (m, c) in STATUS_MARKERS.items()]
    handles.append(plt.Line2D([], [], color="0.85", marker="s", ls="", label="inside a junction"))
    fig.legend(handles=handles, loc="lower center", ncol=len(handles), fontsize=7, frameon=False)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_route_paths(results, path: str | Path, only_failed: bool = True, max_routes: int = 24) -> Path | None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    chosen = [r for r in results if (not r.success or not only_failed) and r.route_xy is not None and r.trace][:max_routes]
    if not chosen:
        return None
    cols = min(6, len(chosen))
    nrows = int(np.ceil(len(chosen) / cols))
    fig, axes = plt.subplots(nrows, cols, figsize=(2.6 * cols, 2.6 * nrows), squeeze=False)
    for ax in axes.flat:
        ax.axis("off")
    for ax, r in zip(axes.flat, chosen):
        tr = _trace(r)
        route = r.route_xy
        ax.plot(route[:, 0], route[:, 1], color="0.75", lw=3, zorder=1)
        ax.scatter(tr["x"], tr["y"], s=2, c=[COMMAND_COLORS.get(str(c), "black") for c in tr["command"]], zorder=2)
        marker, color = STATUS_MARKERS.get(r.status, ("s", "black"))
        ax.scatter(tr["x"][-1:], tr["y"][-1:], marker=marker, color=color, s=30, zorder=3)
        cx, cy, half = tr["x"][-1], tr["y"][-1], VIEW_HALF_M  # centred where the route ended
        ax.set_xlim(cx - half, cx + half)
        ax.set_ylim(cy - half, cy + half)
        ax.set_aspect("equal")
        ax.set_title(f"{r.route.name}\n{r.status.replace('Failed - ', '')} at {r.completion:.0f}%", fontsize=7)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
