"""The headline figure: fastest AR setting against fastest diffusion setting per batch size, overall and among
the settings that keep AR's trajectory quality; and its one-line wording (shared by console and Markdown)."""

from __future__ import annotations

QUALITY_TOLERANCE = 0.10  # "at AR quality": mean waypoint L2 to the expert within 10 % of AR's on the same prompts


def best_vs_best(rows: list[dict], tolerance: float = QUALITY_TOLERANCE) -> list[dict]:
    """Per batch size: the fastest AR setting (any dtype, compile setting) against the fastest diffusion setting
    (any dtype, compile setting, B, tau, step cap, cache) -- the headline figure, so a setting that only slows
    AR down cannot flatter the ratio. When L2 to the expert is known, `at_quality` repeats the comparison over
    the diffusion settings whose L2 stays within `tolerance` of AR's (None when no setting does)."""
    out = []
    for n in sorted({r["batch"] for r in rows}):
        sel = [r for r in rows if r["batch"] == n]
        ar = max(sel, key=lambda r: r["ar"]["tok_s"])
        entry = _versus(ar, max(sel, key=lambda r: r["diffusion"]["tok_s"]))
        good = [r for r in sel if r["quality"]["l2_vs_expert"] is not None and r["ar_quality"]["l2_vs_expert"] is not None
                and r["quality"]["l2_vs_expert"] <= (1 + tolerance) * r["ar_quality"]["l2_vs_expert"]]
        entry["at_quality"] = _versus(ar, max(good, key=lambda r: r["diffusion"]["tok_s"])) if good else None
        entry["quality_tolerance"] = tolerance
        out.append(entry)
    return out


def _versus(ar: dict, d: dict) -> dict:
    return {"batch": d["batch"], "ar_dtype": ar["dtype"], "ar_compile": ar.get("compile", False), "ar_tok_s": ar["ar"]["tok_s"],
            "diffusion_dtype": d["dtype"], "diffusion_compile": d.get("compile", False), "cache": d.get("cache", "exact"),
            "block_size": d["block_size"], "threshold": d["threshold"], "max_steps": d.get("max_steps"),
            "diffusion_tok_s": d["diffusion"]["tok_s"], "tpf": d["diffusion"]["tpf"],
            "ratio": d["diffusion"]["tok_s"] / ar["ar"]["tok_s"],
            "l2_vs_expert": d["quality"]["l2_vs_expert"], "ar_l2_vs_expert": d["ar_quality"]["l2_vs_expert"]}


def setting_label(dtype: str, compiled) -> str:
    return f"{dtype}+compile" if compiled else dtype


def best_line(b: dict) -> str:
    l2 = "" if b.get("l2_vs_expert") is None else f", L2 vs expert {b['l2_vs_expert']:.2f} m (AR {b['ar_l2_vs_expert']:.2f})"
    return (f"batch {b['batch']}: AR {b['ar_tok_s']:.1f} tok/s ({setting_label(b['ar_dtype'], b.get('ar_compile'))}) vs "
            f"diffusion {b['diffusion_tok_s']:.1f} tok/s ({setting_label(b['diffusion_dtype'], b.get('diffusion_compile'))}, "
            f"B{b['block_size']}, tau {b['threshold']}, <= {b.get('max_steps')} steps/block, {b.get('cache', 'exact')} cache, "
            f"TPF {b['tpf']:.2f}{l2}): "
            f"{b['ratio']:.2f}x")


def at_quality_line(b: dict) -> str:
    return (f"at AR quality (L2 within {100 * b['quality_tolerance']:.0f} % of AR's): "
            + (best_line(b["at_quality"]) if b["at_quality"] else f"batch {b['batch']}: no setting"))
