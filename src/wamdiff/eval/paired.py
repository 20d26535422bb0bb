"""Planners compared scene by scene (route by route) against one reference, across evaluation folders.

`eval pdms` / `eval closedloop` write one CSV per planner with a row per scene / route. `paired_rows(folders, refs)`
reads those of every folder (a folder per split: the test split, each world variant), pairs every planner with the
reference planner (or the per-scene mean of several) on the scenes both scored, and gives per folder and pooled
over all of them: the mean, the paired
difference to the reference with its 95 % interval (`intervals.paired_ci95`) and the count. Pooling pairs scene by
scene over the union, so a split with more scenes weighs more. Why: the report's per-row intervals overlap for
rows a point apart; the paired interval separates them (and says when even 1000 scenes do not).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from wamdiff.eval.intervals import paired_ci95, wilson_ci95


@dataclass(frozen=True)
class Metric:
    kind: str  # the CSV's prefix: pdms_<planner>.csv, openloop_<planner>.csv, closedloop_<planner>.csv
    field: str  # its column
    label: str
    scale: float = 1.0  # PDMS and success rates in points


METRICS = (Metric("pdms", "pdms", "PDMS", 100.0), Metric("pdms", "c", "C"), Metric("openloop", "l2_4.0s", "L2@4s"),
           Metric("closedloop", "success", "CL success %", 100.0), Metric("closedloop", "driving_score", "CL DS"))
POOLED = "pooled"


def read_values(path: Path, field: str) -> dict[str, float]:
    """{scene or route id: `field`} of one per-scene / per-route CSV; invalid scenes and empty cells (a failed plan
    has no L2) are left out; True / False read as 1 / 0."""
    with open(path) as fh:
        rows = list(csv.DictReader(fh))
    key = "scene_id" if rows and "scene_id" in rows[0] else "route"
    cell = {"True": 1.0, "False": 0.0}
    return {r[key]: cell[r[field]] if r[field] in cell else float(r[field]) for r in rows
            if r.get("valid", "True") == "True" and r.get(field) not in (None, "")}


def planners_in(folder: Path, kind: str) -> dict[str, Path]:
    """{planner file name: CSV} of one kind in an evaluation folder."""
    return {p.name[len(kind) + 1: -len(".csv")]: p for p in sorted(folder.glob(f"{kind}_*.csv"))}


def find_reference(names: set[str], ref: str) -> str:
    """The planner named `ref`, or the one planner whose file name contains it; ValueError otherwise."""
    if ref in names:
        return ref
    hits = sorted(n for n in names if ref in n)
    if len(hits) != 1:
        raise ValueError(f"--ref {ref!r}: {'no planner' if not hits else f'{len(hits)} planners'} match "
                         f"(planners: {', '.join(sorted(names)) or 'none'})")
    return hits[0]


def paired_rows(folders: list[Path], refs: list[str]) -> list[dict]:
    """A row per (split, planner, metric) with n, mean and, for planners other than the reference, the paired
    difference to it (`delta`, `low`, `high`); split `pooled` pairs over every folder's scenes at once. Several
    `refs`: the reference is their per-scene mean (a model average against the models it averages)."""
    for folder in folders:
        if not folder.is_dir():
            raise ValueError(f"{folder}: not a folder of evaluation results")
    names = {n for f in folders for m in METRICS for n in planners_in(f, m.kind)}
    if not names:
        raise ValueError(f"{', '.join(map(str, folders))}: no per-scene result CSVs (pdms_*.csv, openloop_*.csv, "
                         "closedloop_*.csv); run `wamdiff eval pdms` or `eval closedloop` first")
    chosen = [find_reference(names, r) for r in refs]
    reference = chosen[0] if len(chosen) == 1 else "mean of " + " and ".join(chosen)
    rows = []
    for m in METRICS:
        pooled: dict[str, dict[str, float]] = {}
        folders_with = 0  # pooled only over two or more folders that have this metric
        for folder in folders:
            values = {n: read_values(p, m.field) for n, p in planners_in(folder, m.kind).items()}
            folders_with += bool(values)
            if len(chosen) > 1 and all(n in values for n in chosen):
                values[reference] = {k: sum(values[n][k] for n in chosen) / len(chosen) for k in values[chosen[0]]
                                     if all(k in values[n] for n in chosen)}
            for n, v in values.items():
                pooled.setdefault(n, {}).update({f"{folder.name}/{k}": x for k, x in v.items()})
            rows += _metric_rows(folder.name, m, values, reference)
        if folders_with > 1:
            rows += _metric_rows(POOLED, m, pooled, reference)
    return rows


def _metric_rows(split: str, m: Metric, values: dict[str, dict[str, float]], reference: str) -> list[dict]:
    rows = []
    for name, v in sorted(values.items(), key=lambda kv: (kv[0] != reference, kv[0])):
        if not v:
            continue
        row = {"split": split, "planner": name, "metric": m.label, "n": len(v), "mean": m.scale * sum(v.values()) / len(v)}
        if m.kind == "closedloop" and m.field == "success":
            row["mean_low"], row["mean_high"] = (m.scale * x for x in wilson_ci95(int(sum(v.values())), len(v)))
        paired = paired_ci95(v, values[reference]) if name != reference and reference in values else None
        if paired is not None:
            row.update(delta=m.scale * paired[0], low=m.scale * paired[1][0], high=m.scale * paired[1][1])
        rows.append(row)
    return rows


def plot_paired(rows: list[dict], path: Path) -> Path | None:
    """Paired difference to the reference (95 %) per split, one panel per metric that has any."""
    from wamdiff.eval.report import _plt

    labels = [m.label for m in METRICS if any(r["metric"] == m.label and "delta" in r for r in rows)]
    if not labels:
        return None
    plt = _plt()
    planners = list(dict.fromkeys(r["planner"] for r in rows if "delta" in r))  # one colour per planner everywhere
    fig, axes = plt.subplots(1, len(labels), figsize=(5 * len(labels), 4), squeeze=False)
    for ax, label in zip(axes[0], labels):
        mine = [r for r in rows if r["metric"] == label and "delta" in r]
        splits = list(dict.fromkeys(r["split"] for r in mine))
        for j, name in enumerate(planners):
            pts = [(splits.index(r["split"]) + 0.8 * (j + 0.5) / len(planners) - 0.4, r) for r in mine if r["planner"] == name]
            if not pts:
                continue
            ax.errorbar([x for x, _ in pts], [r["delta"] for _, r in pts], capsize=3, fmt="o", label=name[:40],
                        color=f"C{j % 10}",
                        yerr=[[r["delta"] - r["low"] for _, r in pts], [r["high"] - r["delta"] for _, r in pts]])
        ax.axhline(0, color="grey", lw=0.8)
        ax.set_xticks(range(len(splits)), splits, rotation=30, ha="right")
        ax.set_title(f"{label}: planner − reference (95 %)")
    legend = {}  # every planner once, whichever panel drew it
    for ax in axes[0]:
        for handle, name in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(name, handle)
    axes[0][0].legend(list(legend.values()), list(legend), fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
