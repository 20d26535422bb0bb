"""The robustness map: planners over a grid of world settings, one cell per (traffic density, speed scale, route
phase), each with its own test scenes.

Per cell `<out>/cells/<cell>/` holds the scenes (`data/`, `driving.dataset.generate_dataset` with that cell's
`density`, `speed_scale` and `t0_spread_s`; the test split's seeds, so every cell has the same roads and ego
starts and only the traffic differs), the per-scene result CSVs of `eval.run.evaluate_open` and `cell.json` (which
planner, which spec, on how many scenes). Per cell and planner: PDMS (0-100), comfort C and L2@4s, and against the
reference planner the paired difference on the same scenes with its 95 % interval (`eval.paired.paired_rows`).

Resumable and monotone: a planner whose spec was already evaluated on a cell's current scenes is not evaluated
again; results of planners or cells a later run does not ask for stay in the map (`map.json` is rebuilt from every
cell folder), and a cell's scenes only ever grow (`generate_dataset` merges). Outputs: `map.csv` (a row per cell,
planner and metric), `map.json`, `map.md`, and `heatmaps/`: one PNG per metric and planner, and one per metric
and planner of its difference to the reference (the interval in each square; a square whose interval excludes 0
is outlined).
"""

from __future__ import annotations

import json
import math
import textwrap
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from wamdiff.jsonfile import write_json

# /2: scenes with less route ahead than 4 s of driving are dropped (`driving.capture`, `route_end`); /1 cells kept them
MAP_VERSION = "wamdiff-map/2"
MAP_METRICS = ("PDMS", "C", "L2@4s")  # labels of `eval.paired.METRICS`
HIGHER_IS_BETTER = {"PDMS": True, "C": True, "L2@4s": False}
# Training saw density 1.0-1.3, speed scale 1.0-1.25 (the main student's last stage also 1.35 and 1.5), t0 at the
# route start and spread over 16 s (configs/default.yaml data: train_variants, phases); the default grid reaches past
# both ends of each.
DEFAULT_DENSITY = (0.5, 1.0, 1.6, 2.2)
DEFAULT_SPEED_SCALE = (0.7, 1.0, 1.4, 1.7)
DEFAULT_PHASE = (0.0, 16.0)
AXES = ("density", "speed_scale", "phase")


@dataclass(frozen=True)
class Cell:
    density: float
    speed_scale: float
    phase: float  # seconds the scenes' t0 is spread over along the route (0: route starts)

    @property
    def name(self) -> str:
        return f"d{self.density:g}_s{self.speed_scale:g}_p{self.phase:g}"

    def world(self) -> dict:
        return {"density": self.density, "speed_scale": self.speed_scale, "t0_spread_s": self.phase}


@dataclass(frozen=True)
class MapGrid:
    """The grid of world settings and the scenes per cell; `from_dict` checks every field (ValueError naming it)."""

    density: tuple[float, ...] = DEFAULT_DENSITY
    speed_scale: tuple[float, ...] = DEFAULT_SPEED_SCALE
    phase: tuple[float, ...] = DEFAULT_PHASE
    per_family: int = 10
    families: tuple[str, ...] = ()  # () = every family

    @classmethod
    def from_dict(cls, d: dict, where: str = "map") -> "MapGrid":
        known = {"density", "speed_scale", "phase", "per_family", "families"}
        extra = set(d) - known
        if extra:
            raise ValueError(f"{where}: unknown field(s) {sorted(extra)}; expected {sorted(known)}")
        out = {}
        for axis, low in (("density", 0.05), ("speed_scale", 0.1), ("phase", 0.0)):
            if axis not in d:
                continue
            raw = d[axis]
            values = raw if isinstance(raw, (list, tuple)) else [raw]
            try:
                vals = tuple(float(v) for v in values)
            except (TypeError, ValueError):
                raise ValueError(f"{where}.{axis}: {raw!r} is not a list of numbers") from None
            if not vals or any(not math.isfinite(v) or v < low for v in vals) or len(set(vals)) != len(vals):
                raise ValueError(f"{where}.{axis}: {raw!r}: expected distinct numbers >= {low:g}")
            out[axis] = tuple(sorted(vals))
        if "per_family" in d:
            if not isinstance(d["per_family"], int) or isinstance(d["per_family"], bool) or d["per_family"] < 1:
                raise ValueError(f"{where}.per_family: {d['per_family']!r}: expected a whole number >= 1")
            out["per_family"] = d["per_family"]
        if "families" in d:
            from wamdiff.cli_choices import FAMILIES  # the names only: no world import

            fams = tuple(d["families"] or ())
            bad = [f for f in fams if f not in FAMILIES]
            if bad:
                raise ValueError(f"{where}.families: unknown {bad}; expected some of {list(FAMILIES)}")
            out["families"] = fams
        return cls(**out)

    def cells(self) -> list[Cell]:
        return [Cell(d, s, p) for p in self.phase for d in self.density for s in self.speed_scale]


def parse_values(text: str, option: str) -> list[float]:
    """'0.5,1,1.6' -> [0.5, 1.0, 1.6] (ValueError naming the option)."""
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{option} {text!r}: expected comma-separated numbers") from None


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        return None  # absent or torn by an interruption: the cell is redone


def simulate_cell(cell: Cell, grid: MapGrid, folder: Path, workers: int = 1, fmt: str = "delta") -> tuple[list, list]:
    """A cell's test scenes (generated into `folder`, or completed there): (scenes, unreadable files)."""
    from wamdiff.driving.dataset import generate_dataset
    from wamdiff.driving.world import FAMILIES
    from wamdiff.eval.data import load_scenes

    families = list(grid.families or FAMILIES)
    generate_dataset(folder, families, "test", grid.per_family, workers, fmt, progress=False, **cell.world())
    return load_scenes(str(folder / "scenes"), "test", families, None)


def run_map(planners: dict, grid: MapGrid, out: str | Path, *, ref: str, workers: int = 1, batch: int = 64,
            console=None, say=print, scenes_for=None) -> dict:
    """Evaluate `planners` ({name: PlannerSpec}) on every cell of `grid`; returns the map summary (`map.json`).
    `ref`: the planner name the paired differences are against (one of `planners`). `scenes_for(cell, folder)`:
    the cell's (scenes, unreadable files); default `simulate_cell`."""
    from wamdiff.eval.pdms import PDMSConfig
    from wamdiff.eval.report import planner_files
    from wamdiff.eval.run import OpenLoopSettings, evaluate_open

    if ref not in planners:
        raise ValueError(f"--ref {ref!r}: not one of the planners ({', '.join(planners)})")
    out = Path(out)
    files = planner_files(list(planners))
    scenes_for = scenes_for or (lambda cell, folder: simulate_cell(cell, grid, folder, workers))
    cells = grid.cells()
    for i, cell in enumerate(cells, 1):
        cdir = out / "cells" / cell.name
        record = _read_json(cdir / "cell.json") or {}
        if record and record.get("version") != MAP_VERSION:
            raise ValueError(f"{cdir / 'cell.json'}: made by {record.get('version')}, not {MAP_VERSION} (the scenes "
                             f"differ); map into a fresh folder or move {out} away")
        t0 = time.perf_counter()
        say(f"[{i}/{len(cells)}] {cell.name}: scenes")
        scenes, problems = scenes_for(cell, cdir / "data")
        if not scenes:
            raise ValueError(f"{cdir / 'data'}: no test scenes were generated for cell {cell.name}")
        done = record.get("planners", {})
        todo = {n: s for n, s in planners.items()
                if (done.get(files[n]) or {}).get("spec") != s.text or done[files[n]].get("n_scenes") != len(scenes)}
        if not todo:
            say(f"[{i}/{len(cells)}] {cell.name}: done already ({len(scenes)} scenes)")
            continue
        say(f"[{i}/{len(cells)}] {cell.name}: {len(scenes)} scenes, evaluating {', '.join(todo)}")
        settings = OpenLoopSettings(pdms=PDMSConfig(reference_cache=str(cdir / "reference_cache")), batch=batch)
        got = evaluate_open(todo, scenes, cdir, settings, unreadable=problems, console=console)
        for n, r in got.items():
            done[files[n]] = {"name": n, "spec": planners[n].text, "n_scenes": len(scenes), "n_failed": r["n_failed"]}
        write_json(cdir / "cell.json", {"version": MAP_VERSION, "cell": asdict(cell), "planners": done})
        say(f"[{i}/{len(cells)}] {cell.name}: done in {time.perf_counter() - t0:.0f} s")
    return collect_map(out, files[ref])


def cell_rows(cell_dir: Path, cell: dict, ref_file: str) -> list[dict]:
    """Rows (cell, planner, metric, n, mean, delta, low, high) of one cell folder: PDMS, C and L2@4s of every
    planner evaluated there, paired against `ref_file` (its result file name) where it is there too."""
    from wamdiff.eval.paired import paired_rows, planners_in

    if ref_file not in planners_in(cell_dir, "pdms"):
        ref_file = None
    rows = paired_rows([cell_dir], [ref_file] if ref_file else [next(iter(planners_in(cell_dir, "pdms")))])
    record = _read_json(cell_dir / "cell.json") or {}
    failed = {f: d.get("n_failed") for f, d in record.get("planners", {}).items()}
    out = []
    for r in rows:
        if r["metric"] not in MAP_METRICS:
            continue
        row = {**cell, "cell": cell_dir.name, "planner": r["planner"], "metric": r["metric"], "n": r["n"],
               "mean": r["mean"], "n_failed": failed.get(r["planner"])}
        if ref_file and "delta" in r:
            row.update(ref=ref_file, delta=r["delta"], low=r["low"], high=r["high"])
        out.append(row)
    return out


def collect_map(out: str | Path, ref_file: str) -> dict:
    """Every evaluated cell under `out/cells` into map.csv / map.json / map.md and the heatmaps."""
    from wamdiff.eval.report import write_csv

    out = Path(out)
    rows = []
    for cdir in sorted((out / "cells").glob("*/")):
        record = _read_json(cdir / "cell.json")
        if not record or not record.get("planners"):
            continue
        rows += cell_rows(cdir, record["cell"], ref_file)
    if not rows:
        raise ValueError(f"{out}: no evaluated cells")
    summary = {"version": MAP_VERSION, "ref": ref_file, "metrics": list(MAP_METRICS),
               "planners": sorted({r["planner"] for r in rows}),
               "axes": {a: sorted({r[a] for r in rows}) for a in AXES}, "rows": rows}
    before = _read_json(out / "map.json") or {}
    if before.get("rows") == json.loads(json.dumps(rows)) and all((out / h).exists() for h in before.get("heatmaps", [])):
        summary["heatmaps"] = before["heatmaps"]  # nothing new: a resumed run does not redraw
    else:
        summary["heatmaps"] = [str(p.relative_to(out)) for p in plot_heatmaps(rows, out / "heatmaps")]
    summary["markdown"] = map_markdown(summary)
    write_csv(rows, out / "map.csv")
    write_json(out / "map.json", summary)
    (out / "map.md").write_text(summary["markdown"] + "\n")
    return summary


def heat_grid(rows: list[dict], planner: str, metric: str, phase: float, field: str = "mean"):
    """(densities, speed scales, matrix [density x speed] of `field`, NaN where no row): one heatmap's data."""
    import numpy as np

    dens = sorted({r["density"] for r in rows})
    speeds = sorted({r["speed_scale"] for r in rows})
    m = np.full((len(dens), len(speeds)), np.nan)
    for r in rows:
        if r["planner"] == planner and r["metric"] == metric and r["phase"] == phase and r.get(field) is not None:
            m[dens.index(r["density"]), speeds.index(r["speed_scale"])] = r[field]
    return dens, speeds, m


def plot_heatmaps(rows: list[dict], folder: Path) -> list[Path]:
    """One PNG per (metric, planner) of its value per cell, and per (metric, planner other than the reference) of
    its paired difference; a panel per route phase, density down, speed scale across."""
    import numpy as np

    from wamdiff.eval.report import _plt

    plt = _plt()
    folder.mkdir(parents=True, exist_ok=True)
    phases = sorted({r["phase"] for r in rows})
    paths = []
    for metric in MAP_METRICS:
        for planner in sorted({r["planner"] for r in rows if r["metric"] == metric}):
            mine = [r for r in rows if r["planner"] == planner and r["metric"] == metric]
            for field in ("mean", "delta"):
                if field == "delta" and not any(r.get("delta") is not None for r in mine):
                    continue
                fig, axes = plt.subplots(1, len(phases), figsize=(3.6 * len(phases) + 0.8, 3.6), squeeze=False)
                vals = np.array([r[field] for r in mine if r.get(field) is not None], float)
                if field == "delta":
                    span = float(np.nanmax(np.abs(vals))) if len(vals) else 1.0
                    sign = 1 if HIGHER_IS_BETTER[metric] else -1  # green = better than the reference
                    kw = dict(cmap="RdYlGn" if sign > 0 else "RdYlGn_r", vmin=-span or -1, vmax=span or 1)
                else:
                    kw = dict(cmap="viridis" if HIGHER_IS_BETTER[metric] else "viridis_r",
                              vmin=float(np.nanmin(vals)) if len(vals) else 0, vmax=float(np.nanmax(vals)) if len(vals) else 1)
                for ax, phase in zip(axes[0], phases):
                    dens, speeds, m = heat_grid(mine, planner, metric, phase, field)
                    im = ax.imshow(m, origin="lower", aspect="auto", **kw)
                    for (a, b), v in np.ndenumerate(m):
                        if np.isnan(v):
                            continue
                        text = f"{v:.2f}" if metric != "PDMS" else f"{v:.1f}"
                        if field == "delta":
                            r = next(x for x in mine if x["phase"] == phase and x["density"] == dens[a]
                                     and x["speed_scale"] == speeds[b])
                            d = 1 if metric == "PDMS" else 2  # PDMS points need no second decimal (and fit the square)
                            text = f"{v:+.{d}f}\n[{r['low']:+.{d}f}, {r['high']:+.{d}f}]"
                            if r["low"] > 0 or r["high"] < 0:
                                ax.add_patch(plt.Rectangle((b - 0.5, a - 0.5), 1, 1, fill=False, lw=2, ec="black"))
                        r_, g_, b_, _ = im.cmap(im.norm(v))  # dark squares (viridis' low end) get white text
                        ink = "white" if 0.299 * r_ + 0.587 * g_ + 0.114 * b_ < 0.45 else "black"
                        ax.text(b, a, text, ha="center", va="center", fontsize=7, color=ink)
                    ax.set_xticks(range(len(speeds)), [f"{s:g}" for s in speeds])
                    ax.set_yticks(range(len(dens)), [f"{d:g}" for d in dens])
                    ax.set_xlabel("speed scale")
                    ax.set_ylabel("traffic density")
                    ax.set_title(f"route phase t0 spread {phase:g} s", fontsize=8)
                ref = next((r.get("ref") for r in mine if r.get("ref")), "")
                title = f"{metric}: {planner}" + (f" − {ref} (paired, 95 %)" if field == "delta" else "")
                lines = textwrap.wrap(title, 90)  # result names are long: wrap, not clip, and make room above
                fig.suptitle("\n".join(lines), fontsize=8)
                # the margins before the colorbar, which takes its room from the panels as they then stand
                fig.subplots_adjust(left=0.16, bottom=0.17, top=0.88 - 0.035 * len(lines), right=0.86, wspace=0.35)
                fig.colorbar(im, ax=list(axes[0]), shrink=0.8, fraction=0.05)
                safe = metric.replace("@", "_at_").replace("/", "_")
                path = folder / f"{'delta' if field == 'delta' else 'value'}_{safe}_{planner}.png"
                fig.savefig(path, dpi=100)
                plt.close(fig)
                paths.append(path)
    return paths


def map_markdown(summary: dict) -> str:
    """A table per metric: a row per planner and cell (value; paired difference to the reference with its interval)."""
    rows = summary["rows"]
    lines = [f"Reference for the paired differences: `{summary['ref']}`. Cells: traffic density x speed scale x route "
             "phase (t0 spread, s); PDMS 0-100, comfort C, L2@4s in m; Δ = planner − reference on the same scenes "
             "(95 % interval).", ""]
    for metric in MAP_METRICS:
        mine = [r for r in rows if r["metric"] == metric]
        if not mine:
            continue
        lines += [f"**{metric}**", "", "| planner | density | speed | phase | n | failed | value | Δ (95 %) |",
                  "|---|---:|---:|---:|---:|---:|---:|---|"]
        for r in sorted(mine, key=lambda r: (r["planner"], r["phase"], r["density"], r["speed_scale"])):
            delta = (f"{r['delta']:+.2f} ({r['low']:+.2f}…{r['high']:+.2f})" if r.get("delta") is not None else "–")
            lines.append(f"| {r['planner']} | {r['density']:g} | {r['speed_scale']:g} | {r['phase']:g} | {r['n']} | "
                         f"{'–' if r.get('n_failed') is None else r['n_failed']} | {r['mean']:.3f} | {delta} |")
        lines.append("")
    return "\n".join(lines)


def pipeline_map_settings(p) -> tuple[dict, str, MapGrid]:
    """The pipeline's `map:` section checked: ({name: spec}, reference name, grid). `planners` maps a name to a
    spec as `evaluate.planners` does (`stage:NAME` is that stage's checkpoint, decoded as its report row would be),
    `ref` is one of those names (default: the first); the rest is the grid (`MapGrid` fields; families default to
    `data.families`). A mistake is a ValueError naming the config and the field."""
    cfg = dict(p.cfg["map"] or {})
    where = f"{p.config_path}: map"
    rows = cfg.pop("planners", None)
    ref = cfg.pop("ref", None)
    if rows is None:
        specs = p.planners()
    elif not isinstance(rows, dict) or not rows:
        raise ValueError(f"{where}.planners: expected a mapping of name: planner spec, got {rows!r}")
    else:
        specs = {}
        for name, text in rows.items():
            try:
                specs[str(name)] = p.planner(str(text))
            except ValueError as err:
                raise ValueError(f"{where}.planners.{name}: {err}") from None
    ref = ref if ref is not None else next(iter(specs))
    if ref not in specs:
        raise ValueError(f"{where}.ref: {ref!r} is not one of the map's planners ({', '.join(specs)})")
    cfg.setdefault("families", list(p.data.families))
    return specs, ref, MapGrid.from_dict(cfg, where=where)


def pipeline_map(p) -> dict:
    """The pipeline's `eval_map` stage: the map of `map:` into `<out>/eval_map` (resumable cell by cell)."""
    specs, ref, grid = pipeline_map_settings(p)
    return run_map(specs, grid, p.out / "eval_map", ref=ref, workers=p.data.workers)


def report_lines(summary: dict, map_dir: Path, report_dir: Path) -> list[str]:
    """The report's map section: the PDMS difference heatmaps (copied next to the report) and the table."""
    import shutil

    lines = ["## Robustness map: quality over a grid of world settings", ""]
    for rel in summary.get("heatmaps", []):
        src = Path(map_dir) / rel
        if Path(rel).name.startswith("delta_PDMS_") and src.exists():
            shutil.copyfile(src, Path(report_dir) / f"map_{src.name}")
            lines += [f"![{src.stem}](map_{src.name})", ""]
    return lines + [summary.get("markdown", ""), f"Every heatmap, `map.csv` and `map.json` in `{map_dir}`.", ""]


__all__ = ["Cell", "MapGrid", "collect_map", "heat_grid", "map_markdown", "parse_values", "pipeline_map",
           "pipeline_map_settings", "plot_heatmaps", "report_lines", "run_map"]
