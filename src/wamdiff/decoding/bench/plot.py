"""The benchmark's figure (matplotlib, PNG)."""

from __future__ import annotations

import statistics
from pathlib import Path

from wamdiff.decoding.bench.headline import row_setting, threads_label


def _times_ar(r: dict) -> float:
    return r.get("times_ar") or r["speedup"]  # rows journaled before plans/s existed: the tok/s ratio


def write_plot(result: dict, path: Path) -> None:
    """One row of panels per batch size: speed vs B (at the tau nearest 0.9), TPF vs tau, speed vs quality."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = result["rows"]
    batches = sorted({r["batch"] for r in rows})
    fig, axes = plt.subplots(len(batches), 3, figsize=(17, 4.2 * len(batches)), squeeze=False)
    taus = sorted({r["threshold"] for r in rows})
    tau_b = min(taus, key=lambda t: abs(t - 0.9))
    has_l2 = any(r["quality"]["l2_vs_expert"] is not None for r in rows)

    def setting(r):  # dtype + compile + threads, step cap, cache
        return f"{row_setting(r)} <={r.get('max_steps', '-')}st {r.get('cache', 'exact')}"

    for ax_row, n in zip(axes, batches):
        mine = [r for r in rows if r["batch"] == n]
        for name in sorted({setting(r) for r in mine}):
            sel = sorted((r for r in mine if setting(r) == name and r["threshold"] == tau_b), key=lambda r: r["block_size"])
            ax_row[0].plot([r["block_size"] for r in sel], [_times_ar(r) for r in sel], marker="o", label=name)
        for b in sorted({r["block_size"] for r in mine}):
            for cap in sorted({r.get("max_steps", 0) for r in mine}):
                sel = [r for r in mine if r["block_size"] == b and r.get("max_steps", 0) == cap]
                xs = sorted({r["threshold"] for r in sel})  # TPF barely depends on dtype / cache: their mean
                ys = [statistics.fmean(r["diffusion"]["tpf"] for r in sel if r["threshold"] == t) for t in xs]
                ax_row[1].plot(xs, ys, marker="o", label=f"B{b} <={cap} steps")
        for cache, color in (("exact", "tab:blue"), ("delayed", "tab:orange")):
            for cap, marker in zip(sorted({r.get("max_steps", 0) for r in mine}), "o^sv"):
                sel = [r for r in mine if r.get("cache", "exact") == cache and r.get("max_steps", 0) == cap]
                if sel:
                    q = [r["quality"]["l2_vs_expert"] if has_l2 else 1 - r["quality"]["exact_match_vs_ar"] for r in sel]
                    ax_row[2].scatter(q, [_times_ar(r) for r in sel], s=14, color=color, marker=marker,
                                      label=f"{cache} cache, <={cap} steps")
        if has_l2 and mine[0]["ar_quality"]["l2_vs_expert"] is not None:
            ax_row[2].axvline(mine[0]["ar_quality"]["l2_vs_expert"], color="k", lw=0.8, ls="--", label="AR")
        labels = [("block size B", "× AR (plans/s ratio)", f"speed vs B (tau {tau_b}), batch {n}"),
                  ("threshold tau", "tokens per forward", f"TPF vs tau, batch {n}"),
                  ("L2 vs expert (m)" if has_l2 else "1 - exact match vs AR", "× AR (plans/s ratio)",
                   f"speed vs quality, batch {n}")]
        for ax, (x, y, t) in zip(ax_row, labels):
            ax.set_xlabel(x), ax.set_ylabel(y), ax.set_title(t), ax.grid(alpha=0.3)
            ax.legend(fontsize=6, loc="best")
        ax_row[0].axhline(1.0, color="k", lw=0.6)
        ax_row[0].set_xscale("log", base=2)
    fig.suptitle(f"wamdiff bench ({threads_label(result)} threads)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
