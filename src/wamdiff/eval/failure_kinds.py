"""How closed-loop routes fail, per family and planner, on the same routes: the table behind "why does a planner
lose a family".

A route's status (`closedloop.RouteResult.status`) maps to one kind (`KINDS`): success; collision; route deviation
(centre more than 12 m off the route centreline); timeout (the route's time ran out while moving); stop (no progress
for 20 s: "agent blocked"); planner error (a plan that does not parse, nothing to drive); off drivable (completed,
but drove outside the drivable area: an infraction, no success); error (the simulation raised).

`failure_table(folders, ref)` reads the `closedloop_<planner>.csv` of one or more `eval closedloop` folders,
keeps the routes every planner drove (the comparison is on the same routes), and gives per planner and family the
count of each kind, plus against `ref` the routes the reference completes and the planner fails (and the reverse).
`plot_last_replans(result, path)`: a failed route's last replans, the camera images the planner saw above a
bird's-eye view of the route, the driven path and each of those plans (what `eval closedloop` draws for the first
failing routes of each family, `fail_strips/`).
"""

from __future__ import annotations

import csv
from pathlib import Path

KINDS = ("success", "collision", "route deviation", "timeout", "stop", "planner error", "off drivable", "error")
STATUS_KIND = {"Failed - collision": "collision", "Failed - route deviation": "route deviation",
               "Failed - timeout": "timeout", "Failed - agent blocked": "stop", "Failed - planner error": "planner error",
               "Failed - error": "error"}


def failure_kind(status: str, success: bool) -> str:
    """The kind of a route's end (`KINDS`)."""
    if success:
        return "success"
    if status == "Completed":
        return "off drivable"
    return STATUS_KIND.get(status, "error")


def read_routes(folders: list[Path]) -> dict[str, dict[str, dict]]:
    """{planner file name: {route: {family, kind, status, completion}}} of every closedloop_*.csv in `folders` (a
    planner in two folders: the later folder's routes are added to the earlier's)."""
    out: dict[str, dict[str, dict]] = {}
    for folder in folders:
        if not Path(folder).is_dir():
            raise ValueError(f"{folder}: not a folder of `eval closedloop` results")
        for path in sorted(Path(folder).glob("closedloop_*.csv")):
            name = path.name[len("closedloop_"): -len(".csv")]
            with open(path) as fh:
                rows = list(csv.DictReader(fh))
            missing = {"route", "family", "status", "success"} - set(rows[0] if rows else {})
            if rows and missing:
                raise ValueError(f"{path}: not a closed-loop result CSV (no column {sorted(missing)[0]!r})")
            for r in rows:
                out.setdefault(name, {})[r["route"]] = {
                    "family": r["family"], "status": r["status"], "completion": float(r.get("route_completion") or 0),
                    "kind": failure_kind(r["status"], r["success"] == "True")}
    if not out:
        raise ValueError(f"{', '.join(map(str, folders))}: no closedloop_*.csv; run `wamdiff eval closedloop` first")
    return out


def failure_table(folders: list[Path], ref: str | None = None) -> dict:
    """Per planner and family (and `all`): n and the count of each kind over the routes every planner drove; with
    `ref` (a planner file name or a unique part of it), the routes only one of the two completes."""
    from .paired import find_reference

    routes = read_routes(folders)
    common = set.intersection(*(set(v) for v in routes.values()))
    if not common:
        raise ValueError("the planners share no route: evaluate them on the same route set")
    rows = []
    for name, by_route in routes.items():
        fams = sorted({by_route[r]["family"] for r in common})
        for fam in [*fams, "all"]:
            mine = [by_route[r] for r in sorted(common) if fam == "all" or by_route[r]["family"] == fam]
            counts = {k: sum(x["kind"] == k for x in mine) for k in KINDS}
            rows.append({"planner": name, "family": fam, "n": len(mine), **counts,
                         "success_rate": counts["success"] / len(mine) if mine else None})
    result = {"n_common_routes": len(common), "dropped_routes": {n: len(set(v) - common) for n, v in routes.items()},
              "rows": rows}
    if ref is not None:
        r_name = find_reference(set(routes), ref)
        result["ref"] = r_name
        lost = {}
        for name, by_route in routes.items():
            if name == r_name:
                continue
            lost[name] = {
                "lost": [{"route": r, "family": by_route[r]["family"], "kind": by_route[r]["kind"],
                          "completion": by_route[r]["completion"]}
                         for r in sorted(common) if routes[r_name][r]["kind"] == "success" and by_route[r]["kind"] != "success"],
                "won": [{"route": r, "family": by_route[r]["family"], "ref_kind": routes[r_name][r]["kind"]}
                        for r in sorted(common) if by_route[r]["kind"] == "success" and routes[r_name][r]["kind"] != "success"]}
        result["vs_ref"] = lost
    return result


def markdown(table: dict) -> str:
    """The table as markdown: a row per planner and family, a column per kind."""
    lines = [f"Failure kinds on the {table['n_common_routes']} routes every planner drove.", "",
             "| planner | family | n | " + " | ".join(KINDS) + " |", "|---|---|---:|" + "---:|" * len(KINDS)]
    for r in table["rows"]:
        lines.append(f"| {r['planner']} | {r['family']} | {r['n']} | " + " | ".join(str(r[k]) for k in KINDS) + " |")
    for name, d in (table.get("vs_ref") or {}).items():
        lost = ", ".join(f"{x['route']} ({x['kind']})" for x in d["lost"]) or "none"
        won = ", ".join(x["route"] for x in d["won"]) or "none"
        lines += ["", f"**{name}** fails where `{table['ref']}` succeeds: {lost}; succeeds where it fails: {won}."]
    return "\n".join(lines) + "\n"


def plot_kinds(table: dict, path: Path) -> Path:
    """Stacked bars: per family, a bar per planner split into the kinds."""
    import numpy as np

    from .report import _plt

    plt = _plt()
    rows = table["rows"]
    planners = list(dict.fromkeys(r["planner"] for r in rows))
    fams = list(dict.fromkeys(r["family"] for r in rows))
    colors = dict(zip(KINDS, ["tab:green", "tab:red", "tab:purple", "tab:orange", "tab:brown", "tab:pink", "tab:olive",
                              "black"]))
    fig, ax = plt.subplots(figsize=(1.2 + 0.5 * len(fams) * len(planners), 3.6))
    width = 0.8 / len(planners)
    for j, name in enumerate(planners):
        bottom = np.zeros(len(fams))
        for k in KINDS:
            vals = np.array([next(r[k] for r in rows if r["planner"] == name and r["family"] == f) for f in fams], float)
            ns = np.array([max(1, next(r["n"] for r in rows if r["planner"] == name and r["family"] == f)) for f in fams])
            ax.bar(np.arange(len(fams)) + j * width, vals / ns, width, bottom=bottom, color=colors[k],
                   label=k if j == 0 else None, edgecolor="white", linewidth=0.5)
            bottom += vals / ns
        for i in range(len(fams)):
            ax.text(i + j * width, 1.01, str(j + 1), ha="center", fontsize=6)
    ax.set_xticks(np.arange(len(fams)) + 0.4 - width / 2, fams)
    ax.set_ylabel("share of routes")
    ax.set_title("route ends per family; bars: " + ", ".join(f"{j + 1} = {n}" for j, n in enumerate(planners)), fontsize=7)
    ax.legend(fontsize=6, ncol=4, loc="lower center", bbox_to_anchor=(0.5, -0.38), frameon=False)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_last_replans(result, path: Path, title: str = "") -> Path | None:
    """A failed route's last replans: their camera images on top, and below a bird's-eye view of the route
    centreline, the driven path and each of those plans (world frame, later plans darker)."""
    import numpy as np

    from .report import _plt
    from .route_diagnostics import _trace

    if not result.last_replans:
        return None
    plt = _plt()
    k = len(result.last_replans)
    fig = plt.figure(figsize=(2.3 * max(k, 2), 5.2))
    grid = fig.add_gridspec(2, k, height_ratios=[1, 1.3])
    for i, (t, v, command, image, _) in enumerate(result.last_replans):
        ax = fig.add_subplot(grid[0, i])
        ax.imshow(image)
        ax.set_title(f"t={t:.1f}s v={v:.1f} {command}", fontsize=7)
        ax.axis("off")
    ax = fig.add_subplot(grid[1, :])
    if result.route_xy is not None:
        ax.plot(result.route_xy[:, 0], result.route_xy[:, 1], color="0.8", lw=4, label="route")
    tr = _trace(result)
    if len(tr["t"]):
        ax.plot(tr["x"], tr["y"], color="black", lw=1, label="driven")
    shades = plt.cm.Blues(np.linspace(0.4, 1.0, k))
    for (t, _, _, _, xy), c in zip(result.last_replans, shades):
        ax.plot(xy[:, 0], xy[:, 1], color=c, lw=1.5, marker=".", ms=2, label=f"plan t={t:.1f}s")
    ends = np.array([xy[0] for *_, xy in result.last_replans])
    cx, cy = ends[-1]
    half = 40.0
    ax.set_xlim(cx - half, cx + half)
    ax.set_ylim(cy - half / 2, cy + half / 2)
    ax.set_aspect("equal")
    ax.legend(fontsize=6, loc="upper left")
    fig.suptitle(title or f"{result.route.name}: {result.status} at {result.completion:.0f}%", fontsize=8)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def first_failures(results, per_family: int) -> list:
    """The first `per_family` failed routes of each family, in route order."""
    out, seen = [], {}
    for r in results:
        fam = r.route.family
        if not r.success and r.last_replans and seen.get(fam, 0) < per_family:
            seen[fam] = seen.get(fam, 0) + 1
            out.append(r)
    return out


__all__ = ["KINDS", "failure_kind", "failure_table", "first_failures", "markdown", "plot_kinds", "plot_last_replans",
           "read_routes"]
