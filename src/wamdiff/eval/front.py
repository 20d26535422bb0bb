"""The size / quality / speed front a user chooses a model from: for every model planner its parameters, FLOPs per
plan (`models.flops`), quality pooled over the evaluated splits (`eval paired`: PDMS, comfort, L2@4s, each with its
paired interval against the reference) and speed (`eval pdms --speed`: plans/s per batch size, x AR), as a table
and a plot of PDMS and L2@4s against plans/s.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from wamdiff.decoding.speed import times_ar
from wamdiff.eval.paired import POOLED, find_reference
from wamdiff.eval.report import safe_name
from wamdiff.eval.specs import PlannerSpec

QUALITY = {"PDMS": "pdms", "C": "c", "L2@4s": "l2_4s"}  # eval paired's metric labels -> the front's columns


def _read_json(path: Path, what: str):
    if not path.is_file():
        raise ValueError(f"{path}: no such file ({what})")
    return json.loads(path.read_text())


def model_cost(spec: PlannerSpec) -> dict:
    """Parameters and FLOPs of one plan at the spec's decode (AR: prompt + 16 steps; block: prompt + its step cap)."""
    from wamdiff.models import count_parameters, load_model
    from wamdiff.models.flops import ANSWER_TOKENS, plan_flops

    model, tokenizer = load_model(spec.checkpoint)
    d = spec.decode
    block = d.block_size if isinstance(d.block_size, int) else ANSWER_TOKENS
    flops = plan_flops(model, tokenizer, block_size=block, steps=d.max_steps)
    plan = flops["plan_ar"] if d.mode == "ar" else flops[f"plan_block_B{block}_{d.max_steps}steps"]
    return {"params": count_parameters(model)["total"], "gflop_plan": plan / 1e9}


def front_rows(timed: Path, paired_json: Path, ar: str) -> list[dict]:
    """One row per timed model planner of `timed` (an `eval pdms --speed` folder), its quality from `paired_json`."""
    results = _read_json(Path(timed) / "open_summary.json", "an `eval pdms` result folder")
    timed_names = [n for n, r in results.items() if r.get("speed")]
    if not timed_names:
        raise ValueError(f"{timed}: no plan timings (run `wamdiff eval pdms --speed 1,8 ...`)")
    pooled = {}
    for r in _read_json(Path(paired_json), "`eval paired` output"):  # {planner: {metric: {split: row}}}
        pooled.setdefault(r["planner"], {}).setdefault(r["metric"], {})[r["split"]] = r
    ar_name = find_reference(set(timed_names), ar)
    rows = []
    for name in timed_names:
        spec = PlannerSpec.parse(name)
        metrics = pooled.get(safe_name(name), {})
        ckpt = Path(spec.checkpoint)
        row = {"planner": ckpt.parent.name if ckpt.name == "final" else ckpt.name, "spec": name, "mode": spec.decode.mode,
               "ar": spec.decode.mode == "ar", **model_cost(spec)}
        for label, key in QUALITY.items():
            by_split = metrics.get(label, {})
            q = by_split.get(POOLED) or (next(iter(by_split.values())) if len(by_split) == 1 else None)
            row[key] = None if q is None else q["mean"]
            row[f"{key}_ci"] = None if q is None or "low" not in q else (q["high"] - q["low"]) / 2
            row[f"d_{key}"] = None if q is None or "delta" not in q else q["delta"]
        for batch, speed in results[name]["speed"].items():
            row[f"plans_s_b{batch}"] = speed.get("plans_per_s")
            row[f"x_ar_b{batch}"] = times_ar(speed, results[ar_name]["speed"].get(batch))
        rows.append(row)
    return rows


def plot_front(rows: list[dict], path: Path, batches: tuple[int, ...] = (1, 8)) -> Path | None:
    """PDMS (error bar: `pdms_ci`, a 95 % interval's half width; in `front_rows` the paired one against the
    reference) and L2@4s against plans/s at each batch size, one
    point per row (`ar` rows squares, diffusion circles), log speed axis. None when fewer than two rows are timed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in rows if r.get(f"plans_s_b{batches[0]}") is not None and r.get("pdms") is not None]
    if len(rows) < 2:
        return None
    fig, axes = plt.subplots(2, len(batches), figsize=(6 * len(batches), 8), squeeze=False)
    for col, batch in enumerate(batches):
        for r in rows:
            x = r.get(f"plans_s_b{batch}")
            if x is None:
                continue
            style = dict(marker="s" if r.get("ar") else "o", color="tab:orange" if r.get("ar") else "tab:blue")
            axes[0, col].errorbar(x, r["pdms"], yerr=r.get("pdms_ci") or 0.0, capsize=3, **style)
            axes[1, col].plot(x, np.nan if r.get("l2_4s") is None else r["l2_4s"], **style)
            for ax, v in ((axes[0, col], r["pdms"]), (axes[1, col], r.get("l2_4s"))):
                if v is not None:
                    ax.annotate(r["planner"][-40:], (x, v), fontsize=6, xytext=(3, 3), textcoords="offset points")
        axes[1, col].set_xlabel(f"plans/s at batch {batch} (squares: AR, circles: diffusion)")
        axes[0, col].set_ylabel("PDMS (95 % interval)")
        axes[1, col].set_ylabel("L2@4s to the expert [m]")
    for ax in axes.flat:
        ax.set_xscale("log")
        ax.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
