"""The results report: one table (planners x driving quality and speed) and the plots, as Markdown + PNG + JSON/CSV.

Rows are the report's planners (expert, constant velocity, reference, AR VLA, the diffusion student after
each training level); columns are PDMS and its sub-scores, L2 at 1/2/3/4 s, closed-loop success and driving
score, decoding speed (tok/s, ms/token, TPF, ratio to the AR VLA) and multi-task QA accuracy.
"""

from __future__ import annotations

import csv
import json
import math
import shutil
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

from wamdiff.decoding.speed import times_ar
from wamdiff.eval.front import plot_front
from wamdiff.driving.scene import HARD_BRAKING_MS2
from wamdiff.jsonfile import write_json

COLUMNS = [  # (key, header, format)
    ("pdms", "PDMS", "{:.1f}"), ("pdms_ci", "± 95 %", "{:.1f}"), ("d_pdms", "ΔPDMS vs AR (paired 95 %)", "{}"),
    ("train_steps", "steps after the AR VLA", "{:d}"), ("nc", "NC", "{:.3f}"), ("dac", "DAC", "{:.3f}"), ("ttc", "TTC", "{:.3f}"),
    ("ep", "EP", "{:.3f}"), ("c", "C", "{:.3f}"),
    ("l2_1s", "L2@1s", "{:.2f}"), ("l2_2s", "L2@2s", "{:.2f}"), ("l2_3s", "L2@3s", "{:.2f}"), ("l2_4s", "L2@4s", "{:.2f}"),
    ("d_l2_4s", "ΔL2@4s vs AR (paired 95 %)", "{}"),
    ("l2_4s_braking", f"L2@4s, ego braking < {HARD_BRAKING_MS2:g} m/s²", "{:.2f}"),
    ("jumps", "jumps %", "{:.1f}"), ("failed", "failed plans %", "{:.1f}"), ("fallback", "fallback plans", "{:d}"),
    ("cl_success", "CL success %", "{:.0f}"), ("cl_ci", "CL 95 % CI", "{}"), ("cl_ds", "CL DS", "{:.1f}"),
    ("cl_routes", "CL routes", "{:d}"),
    ("ms_plan_b1", "ms/plan b1", "{:.1f}"), ("plans_s_b1", "plans/s b1", "{:.2f}"), ("plans_s_b8", "plans/s b8", "{:.2f}"),
    ("plans_s_b32", "plans/s b32", "{:.2f}"), ("tok_s_b1", "tok/s b1", "{:.0f}"), ("tpf_b1", "TPF b1", "{:.2f}"),
    ("x_ar_b1", "× AR b1", "{:.2f}"), ("qa", "QA acc %", "{:.1f}"),
]
SPEED_NOTE = ("speed from the evaluation's plan timings (`eval.plan_timing`: each model planner decodes the same test "
              "scenes at batch 1, 8 and 32, planners interleaved; `generate` time only, as in `wamdiff bench`): "
              "ms/plan b1 = ms per trajectory at batch 1, plans/s at each batch, tok/s and TPF at batch 1, "
              "× AR b1 = plans/s ratio at batch 1 to the AR VLA the students are converted from (`bench.ar`; "
              "the definition of the README's headline)")


def _get(d: dict | None, *keys):
    for k in keys:
        if not isinstance(d, dict) or d.get(k) is None:
            return None
        d = d[k]
    return d


def _speed_reference(p, specs: dict) -> str | None:
    """The row "× AR" divides by: the AR VLA the students are converted from (`bench.ar`, the bench's AR side),
    else the first AR model row."""
    ar_rows = [n for n, s in specs.items() if s.kind == "model" and s.decode.mode == "ar"]
    stage = p.bench.ar if p.bench is not None else None
    source = next((n for n in ar_rows if stage and specs[n].checkpoint == p.checkpoint(stage)), None)
    return source or next(iter(ar_rows), None)


def scene_values(p, specs: dict, kind: str, field: str) -> dict[str, dict[str, float]]:
    """Per planner: {scene id: `field`} of the test split from the evaluation's per-scene CSVs (`<kind>_<row>.csv`:
    `pdms`, `openloop`), for paired comparisons. Invalid scenes, and empty cells (a failed plan has no L2), are left out."""
    from wamdiff.eval.paired import read_values
    from wamdiff.eval.report import planner_files

    files = planner_files(list(specs))  # the evaluation names its files by row name
    paths = {name: p.out / "eval" / f"{kind}_{files[name]}.csv" for name in specs}
    return {name: read_values(path, field) for name, path in paths.items() if path.exists()}


def steps_after(p, stage: str) -> int | None:
    """Training steps from the given AR VLA (or from scratch) to `stage`'s checkpoint: its own steps plus its init
    chain's, as the stage records say (an average: every input's chain, a shared stage once); 0 for a given
    checkpoint; None where a record is missing."""
    train = {s["name"]: s for s in p.cfg.get("train") or []}
    total, seen, todo = 0, set(), [stage]
    while todo:
        stage = todo.pop()
        if stage not in train or stage in p.checkpoints or stage in seen:
            continue
        seen.add(stage)
        if train[stage].get("average"):
            todo += train[stage]["average"]
            continue
        f = p.stage_file(stage)
        if not f.exists() or "recipe" not in train[stage]:
            return None
        total += int(json.loads(f.read_text()).get("steps") or 0)
        todo += [train[stage]["init"]] if "init" in train[stage] else []
    return total


def _paired_text(d, scale: float = 100, digits: int = 1) -> str | None:
    """A paired difference (`paired_ci95`) as "+mean (low…high)"; PDMS in points (x100), L2 in m."""
    f = f"{{:+.{digits}f}}"
    return None if d is None else f"{f} ({f}…{f})".format(scale * d[0], *(scale * x for x in d[1]))


def table_rows(p, results: dict) -> list[dict]:
    """One dict per planner with the COLUMNS keys (None where a figure does not apply)."""
    from wamdiff.eval.intervals import paired_ci95

    open_ = _get(results, "open", "planners") or {}
    closed = _get(results, "closed", "planners") or {}
    qa_res = _get(results, "qa", "planners") or {}
    specs = p.planners()
    ar_name = _speed_reference(p, specs)
    ar_b1 = _get(open_, ar_name, "speed", "1") if ar_name else None
    per_scene = scene_values(p, specs, "pdms", "pdms")
    per_scene_l2 = scene_values(p, specs, "openloop", "l2_4.0s")

    def paired(values: dict, name: str, **fmt) -> str | None:
        if name == ar_name or name not in values or ar_name not in values:
            return None
        return _paired_text(paired_ci95(values[name], values[ar_name]), **fmt)
    rows = []
    for name, spec in specs.items():
        o, c = open_.get(name, {}), _get(closed, name, "overall") or {}
        pd, ol = _get(o, "pdms", "overall") or {}, _get(o, "openloop", "overall") or {}
        speed = o.get("speed") or {}
        b1 = speed.get("1") or {}
        qa = _get(qa_res, name, "qa_exact_match")
        row = {
            "planner": name, "spec": spec.text,
            "pdms": None if pd.get("pdms") is None else 100 * pd["pdms"],
            "pdms_ci": _half_width(pd.get("pdms_ci95"), 100),
            "d_pdms": paired(per_scene, name), "d_l2_4s": paired(per_scene_l2, name, scale=1, digits=2),
            "train_steps": steps_after(p, spec.text[len("stage:"):].split(",")[0]) if spec.text.startswith("stage:") else None,
            "cl_ci": None if not c.get("success_rate_ci95") else "{:.0f}–{:.0f}".format(*(100 * x for x in c["success_rate_ci95"])),
            **{k: pd.get(k) for k in ("nc", "dac", "ttc", "ep", "c")},
            **{f"l2_{s}s": ol.get(f"l2_{s}.0s") for s in (1, 2, 3, 4)},
            "l2_4s_braking": _get(o, "openloop", "per_condition", "hard_braking", "l2_4.0s"),
            "failed": None if ol.get("failure_rate") is None else 100 * ol["failure_rate"],
            "jumps": None if _get(o, "consistency", "jump_share") is None else 100 * o["consistency"]["jump_share"],
            "fallback": (o.get("n_fallback", 0) + c.get("n_fallback", 0)) if spec.fallback else None,
            "cl_success": None if c.get("success_rate") is None else 100 * c["success_rate"],
            "cl_ds": c.get("driving_score"), "cl_routes": c.get("n"),
            "ms_plan_b1": b1.get("latency_ms"), **{f"plans_s_b{n}": _get(speed, str(n), "plans_per_s") for n in (1, 8, 32)},
            "tok_s_b1": b1.get("tok_s"), "tpf_b1": b1.get("tpf"), "x_ar_b1": times_ar(b1, ar_b1) if b1 and ar_b1 else None,
            "qa": None if qa is None else 100 * qa,
        }
        for variant, res in (results.get("open_variants") or {}).items():  # unseen traffic: PDMS and L2@4s
            v = _get(res, "planners", name) or {}
            vp, vl = _get(v, "pdms", "overall") or {}, _get(v, "openloop", "overall") or {}
            row[f"pdms_{variant}"] = None if vp.get("pdms") is None else 100 * vp["pdms"]
            row[f"c_{variant}"] = vp.get("c")
            row[f"l2_4s_{variant}"] = vl.get("l2_4.0s")
        rows.append(row)
    return rows


def _num(v):
    """CSV cell -> number where it is one (recorded tables)."""
    if v in ("", None):
        return None
    try:
        x = float(v)
    except ValueError:
        return v
    return int(x) if x.is_integer() and "." not in v else x


def _fmt(v, f: str) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "–"
    try:
        return f.format(v)
    except (ValueError, TypeError):
        return str(v)


def _half_width(ci, scale: float = 1.0) -> float | None:
    return None if not ci else scale * (ci[1] - ci[0]) / 2


def columns(rows: list[dict]) -> list[tuple]:
    """The COLUMNS shown (the fallback count only where some planner opted in to a fallback), then each unseen
    traffic variant's PDMS, C and L2@4s."""
    cols = [c for c in COLUMNS if c[0] != "fallback" or any(r.get("fallback") is not None for r in rows)]
    variants = [k[5:] for k in (rows[0] if rows else {}) if k.startswith("pdms_") and k not in ("pdms_ci",)]
    for v in variants:
        cols += [(f"pdms_{v}", f"PDMS {v}", "{:.1f}"), (f"c_{v}", f"C {v}", "{:.3f}"), (f"l2_4s_{v}", f"L2@4s {v}", "{:.2f}")]
    return cols


def print_table(rows: list[dict], console: Console | None = None) -> None:
    t = Table(title="wamdiff: planners on the default world", show_lines=False)
    t.add_column("planner")
    for _, h, _ in columns(rows):
        t.add_column(h, justify="right")
    for r in rows:
        t.add_row(r["planner"], *[_fmt(r.get(k), f) for k, _, f in columns(rows)])
    (console or Console(width=250)).print(t)


def markdown_table(rows: list[dict]) -> str:
    cols = columns(rows)
    head = "| planner | " + " | ".join(h for _, h, _ in cols) + " |"
    sep = "|---|" + "|".join("---:" for _ in cols) + "|"
    body = ["| " + r["planner"] + " | " + " | ".join(_fmt(r.get(k), f) for k, _, f in cols) + " |" for r in rows]
    return "\n".join([head, sep, *body])


# ------------------------------------------------------------------------------------------ plots
def plot_l2_horizon(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for name, o in (_get(results, "open", "planners") or {}).items():
        ol = _get(o, "openloop", "overall") or {}
        ts = [0.5 * (i + 1) for i in range(8)]
        ys = [ol.get(f"l2_{t}s") for t in ts]
        if all(y is not None for y in ys):
            ax.plot(ts, ys, marker="o", label=name)
    ax.set_xlabel("horizon (s)")
    ax.set_ylabel("L2 to the expert (m)")
    ax.set_title("L2 over the horizon (test split)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def plot_quality_rows(rows: list[dict], results: dict, path: Path) -> Path | None:
    """Per planner: PDMS with its 95 % interval, comfort, L2@4s and closed-loop success with its Wilson interval,
    side by side, so a reader sees which rows the intervals separate."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.get("pdms") is not None]
    if not rows:
        return None
    open_ = _get(results, "open", "planners") or {}
    closed = _get(results, "closed", "planners") or {}
    names = [r["planner"] for r in rows]
    y = list(range(len(rows)))[::-1]
    fig, axes = plt.subplots(1, 4, figsize=(15, 0.45 * len(rows) + 1.5), sharey=True)

    def bars(ax, values, cis, title, scale=1.0):
        v = [np.nan if x is None else x for x in values]
        # clipped at 0: a Wilson interval at 0 % / 100 % ends at the value itself, give or take a rounding error
        err = [[max(0.0, vi - lo * scale) if ci else 0 for vi, ci, (lo, _) in zip(v, cis, [c or (0, 0) for c in cis])],
               [max(0.0, hi * scale - vi) if ci else 0 for vi, ci, (_, hi) in zip(v, cis, [c or (0, 0) for c in cis])]]
        ax.barh(y, v, xerr=err, color="tab:blue", alpha=0.7, capsize=2)
        ax.set_title(title, fontsize=9)
        ax.grid(axis="x", alpha=0.3)

    pd_ci = [_get(open_, n, "pdms", "overall", "pdms_ci95") for n in names]
    bars(axes[0], [r["pdms"] for r in rows], pd_ci, "PDMS (95 % CI)", 100.0)
    bars(axes[1], [r.get("c") for r in rows], [_get(open_, n, "pdms", "overall", "c_ci95") for n in names], "comfort C")
    bars(axes[2], [r.get("l2_4s") for r in rows], [_get(open_, n, "openloop", "overall", "l2_4.0s_ci95") for n in names],
         "L2@4s [m] (95 % CI)")
    bars(axes[3], [r.get("cl_success") for r in rows], [_get(closed, n, "overall", "success_rate_ci95") for n in names],
         "closed-loop success % (Wilson 95 %)", 100.0)
    axes[0].set_yticks(y, names, fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_compute(rows: list[dict], results: dict, path: Path) -> Path | None:
    """PDMS (95 % interval) and L2@4s against the training steps after the AR VLA, AR rows and diffusion rows apart:
    "budget or method?" in one picture (a continued AR run and the curriculum at equal steps)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.get("train_steps") is not None and r.get("pdms") is not None]
    if len(rows) < 2:
        return None
    open_ = _get(results, "open", "planners") or {}
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.5))
    for r in rows:
        ar = _get(open_, r["planner"], "decode", "tpf") == 1.0 or "AR" in r["planner"].split(":")[0]
        style = dict(marker="s" if ar else "o", color="tab:orange" if ar else "tab:blue")
        ci = _get(open_, r["planner"], "pdms", "overall", "pdms_ci95")
        err = None if not ci else [[r["pdms"] - 100 * ci[0]], [100 * ci[1] - r["pdms"]]]
        axes[0].errorbar(r["train_steps"], r["pdms"], yerr=err, capsize=3, **style)
        axes[1].plot(r["train_steps"], r.get("l2_4s") or np.nan, **style)
        for ax, v in ((axes[0], r["pdms"]), (axes[1], r.get("l2_4s"))):
            if v is not None:
                ax.annotate(r["planner"][:38], (r["train_steps"], v), fontsize=6, xytext=(3, 3), textcoords="offset points")
    axes[0].set_ylabel("PDMS (test split, 95 % CI)")
    axes[1].set_ylabel("L2@4s to the expert [m]")
    for ax in axes:
        ax.set_xlabel("training steps after the AR VLA (squares: AR, circles: diffusion)")
        ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def family_table(results: dict) -> list[str]:
    """Markdown lines: PDMS and comfort per scenario family for every planner (test split)."""
    open_ = _get(results, "open", "planners") or {}
    fams = sorted({f for o in open_.values() for f in (_get(o, "pdms", "per_family") or {})})
    if not fams:
        return []
    out = ["## Per family (test split): PDMS / comfort C / DAC", "",
           "| planner | " + " | ".join(fams) + " |", "|---|" + "|".join("---:" for _ in fams) + "|"]
    for name, o in open_.items():
        cells = []
        for f in fams:
            d = _get(o, "pdms", "per_family", f) or {}
            cells.append("–" if d.get("pdms") is None else
                         f"{100 * d['pdms']:.1f} / {_fmt(d.get('c'), '{:.2f}')} / {_fmt(d.get('dac'), '{:.2f}')}")
        out.append(f"| {name} | " + " | ".join(cells) + " |")
    return out + [""]


# ------------------------------------------------------------------------------------------ report
def write_report(p, results: dict) -> Path:
    from wamdiff.provenance import provenance

    out = p.out / "report"
    out.mkdir(parents=True, exist_ok=True)
    rows = table_rows(p, results)
    print_table(rows)
    with open(out / "summary.csv", "w", newline="") as fh:
        w = csv.DictWriter(fh, fieldnames=["planner", "spec", *[k for k, _, _ in columns(rows)]], extrasaction="ignore")
        w.writeheader()
        w.writerows(rows)
    write_json(out / "summary.json", {"rows": rows, "provenance": provenance(), "results": results})
    plot_l2_horizon(results, out / "l2_horizon.png")
    quality_png = plot_quality_rows(rows, results, out / "quality_intervals.png")
    compute_png = plot_compute(rows, results, out / "quality_vs_steps.png")
    front_png = plot_front([{**r, "ar": r.get("tpf_b1") == 1.0} for r in rows], out / "front.png")
    bevs = []
    for bev in sorted((p.out / "eval" / "bev").glob("*.png")):  # drawn by the evaluation (eval.run)
        bevs.append(out / f"bev_{bev.name}")
        shutil.copyfile(bev, bevs[-1])
    bench = results.get("bench") or {}
    speed_png = None
    if bench.get("plot") and Path(bench["plot"]).exists():
        speed_png = out / "speed_quality.png"
        shutil.copyfile(bench["plot"], speed_png)
    lines = [
        "# wamdiff report", "",
        f"Config `{p.config_path}`, commit `{provenance()['commit'][:10]}`, {provenance()['threads']} torch threads.", "",
        "## Planners on the default world (test split; closed loop on the dev routes)", "",
        markdown_table(rows), "",
        "PDMS on the 0–100 scale (NAVSIM v1.1 definition); a failed plan (text that does not parse, a planner "
        "error) scores PDMS 0 and fails its closed-loop route, and `failed plans %` is its share of the test scenes; "
        "L2 in metres to the expert's logged trajectory at each horizon, over the plans that exist; `fallback plans` "
        "(only where a spec opted in with `fallback=`) counts the plans, test scenes and closed-loop replans, that "
        f"the fallback planner drew instead; {SPEED_NOTE}; QA = multi-task exact match after training; "
        "jumps % = plans whose waypoints imply more than 8 m/s² somewhere (`eval.consistency`: mutually "
        "inconsistent waypoints, e.g. a tens digit decided apart from its units).", "",
    ]
    skipped = max((r.get("n_unreadable", 0) for r in ((results.get("open") or {}).get("planners") or {}).values()), default=0)
    if skipped:  # a score over fewer test scenes than asked for says so next to the table
        lines += [f"**{skipped} unreadable test scene file(s) were skipped** (listed in `eval/pdms_summary.json`).", ""]
    if bench:
        lines += ["## Decoding speed, side by side (AR VLA vs diffusion student, same prompts)", "",
                  bench.get("markdown", "```\n" + json.dumps(bench, indent=1, default=str)[:3000] + "\n```"), ""]
        if speed_png:
            lines += ["![speed vs tau and quality](speed_quality.png)", ""]
    if results.get("overlap"):
        o = results["overlap"]
        lines += ["## Teacher–student top-5 token overlap", "",
                  f"diffusion teacher: {_fmt(_get(o, 'diffusion', 'top5_overlap'), '{:.3f}')}, "
                  f"AR teacher: {_fmt(_get(o, 'ar', 'top5_overlap'), '{:.3f}')} (paper: 0.582 vs 0.512)", ""]
    recorded = p.evaluate.recorded
    if recorded:
        from wamdiff.resources import shipped_path

        recorded = shipped_path(recorded)  # here, else under $WAMDIFF_CHECKPOINTS
    if recorded and Path(recorded).exists():
        with open(recorded) as fh:
            rec = list(csv.DictReader(fh))
        lines += ["## Every training level, from the full pipeline run (recorded, not re-run here)", "",
                  f"From `{recorded}` (see `checkpoints/PROVENANCE.json` for the config and commit); its speed columns "
                  "were timed on the machine that ran the pipeline, not on this one.", "",
                  markdown_table([{k: _num(v) for k, v in r.items()} for r in rec]), ""]
    lines += family_table(results)
    if results.get("map"):
        from wamdiff.eval.robustness_map import report_lines

        lines += report_lines(results["map"], p.out / "eval_map", out)
    jumps = [(n, o["consistency"]) for n, o in (_get(results, "open", "planners") or {}).items()
             if _get(o, "consistency", "n_plans")]
    if jumps:
        lines += ["## Where waypoints jump (mutual consistency, no simulation)", "",
                  "| planner | plans | jumps % | median peak accel m/s² | jump at waypoint | digit off at the jump |",
                  "|---|---:|---:|---:|---|---|"]
        for n, c in jumps:
            lines.append(f"| {n} | {c['n_plans']} | {_fmt(100 * c['jump_share'], '{:.1f}')} | "
                         f"{_fmt(c['median_peak_accel_ms2'], '{:.1f}')} | "
                         f"{', '.join(f'{k}: {v}' for k, v in c['jump_at_waypoint'].items()) or '–'} | "
                         f"{', '.join(f'{k}: {v}' for k, v in c['digit_off_at_jump'].items()) or '–'} |")
        lines.append("")
    if quality_png:
        lines += ["## Which rows the intervals separate", "", "ΔPDMS vs AR in the table is paired: the mean over the same "
                  "scenes of (row − AR VLA), with its 95 % interval.", "",
                  "![quality with 95 % intervals](quality_intervals.png)", ""]
    if compute_png:
        lines += ["## Quality against training steps after the AR VLA", "", "![quality vs steps](quality_vs_steps.png)", ""]
    if front_png:
        lines += ["## Quality against speed: the front to choose a model from", "", "PDMS and L2@4s of every model row "
                  "against its plans/s at batch 1 and 8 (the table's columns; log scale).", "", "![front](front.png)", ""]
    lines += ["## L2 over the horizon", "", "![l2](l2_horizon.png)", ""]
    if bevs:
        lines += ["## Example scenes (BEV)", ""] + [f"![{b.stem}]({b.name})" for b in bevs] + [""]
    training = results.get("training") or {}
    if training:
        lines += ["## Training stages", "",
                  "| stage | steps | val masked acc | val AR acc | top-5 overlap | QA start | QA end | tok/s | wall s |",
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for name, t in training.items():
            lines.append(f"| {name} | {_fmt(t.get('steps'), '{:d}')} | {_fmt(t.get('val_masked_acc'), '{:.3f}')} | "
                         f"{_fmt(t.get('val_ar_token_acc'), '{:.3f}')} | {_fmt(t.get('val_top5_overlap'), '{:.3f}')} | "
                         f"{_fmt(t.get('qa_exact_match_start'), '{:.3f}')} | {_fmt(t.get('qa_exact_match_end'), '{:.3f}')} | "
                         f"{_fmt(t.get('train_tokens_per_s'), '{:.0f}')} | {_fmt(t.get('stage_wall_s'), '{:.0f}')} |")
        lines.append("")
    path = out / "report.md"
    path.write_text("\n".join(lines))
    return path
