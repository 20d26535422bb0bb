"""The headline figure: fastest AR setting against fastest diffusion setting per batch size, overall and among
the settings that keep AR's trajectory quality; the headline table (AR, best diffusion at AR quality, the speed
dial's pick) and the one-line wording (shared by console and Markdown).

Speed is `decoding.speed`'s one definition: "fastest" = most plans/s at that batch size (the same order as the
lowest latency), and "× AR" = plans/s ratio to the fastest AR setting at the same batch size. AR is re-timed beside
every diffusion point, so an AR setting has dozens of timings and a diffusion setting one: an AR setting is judged
by its median timing (`fastest_ar`), as a diffusion setting is by its one; its fastest single timing would be the
luckiest of many draws on a machine whose speed drifts by tens of percent within a minute.
"""

from __future__ import annotations

from wamdiff.decoding.dial import QUALITY_TOLERANCE, judged, meets_quality, quality_bound_text


def _plans_s(side: dict) -> float:
    return side.get("plans_per_s") or side["tok_s"]  # rows journaled before plans/s existed: tok/s orders alike


def best_vs_best(rows: list[dict], tolerance: float = QUALITY_TOLERANCE) -> list[dict]:
    """Per batch size: the fastest AR setting (any thread count, dtype, compile setting) against the fastest
    diffusion setting (any thread count, dtype, compile setting, B, tau, step cap, cache) -- the headline figure,
    so a setting that only slows AR down cannot flatter the ratio. When L2 to the expert is known, `at_quality`
    repeats the comparison over the diffusion settings that meet the quality bound (`dial.meets_quality`; None
    when no setting does); `judged_on_scenes`: the bound covered PDMS and comfort too (every row was judged)."""
    out = []
    for n in sorted({r["batch"] for r in rows}):
        sel = [r for r in rows if r["batch"] == n]
        ar, timings = fastest_ar(sel)
        entry = _versus(ar, max(sel, key=lambda r: _plans_s(r["diffusion"])), timings)
        good = [r for r in sel if at_ar_quality(r, tolerance)]
        entry["at_quality"] = _versus(ar, max(good, key=lambda r: _plans_s(r["diffusion"])), timings) if good else None
        entry["quality_tolerance"] = tolerance
        entry["judged_on_scenes"] = all(judged(r["quality"]) and judged(r.get("reference_ar_quality") or r["ar_quality"])
                                        for r in sel)
        out.append(entry)
    return out


def fastest_ar(rows: list[dict]) -> tuple[dict, list[dict]]:
    """(the row holding the fastest AR setting's median timing, every AR timing of that setting) among `rows` of one
    batch size. A setting = dtype, compile and thread count; its rows are its re-timings (the upper median of an
    even count: the faster middle one)."""
    by_setting: dict[tuple, list[dict]] = {}
    for r in rows:
        by_setting.setdefault((r["dtype"], r.get("compile", False), r.get("threads")), []).append(r)
    timed = [sorted(g, key=lambda r: _plans_s(r["ar"])) for g in by_setting.values()]
    best = max(timed, key=lambda g: _plans_s(g[len(g) // 2]["ar"]))
    return best[len(best) // 2], [r["ar"] for r in best]


# Quality is judged against AR at full precision: a cast that degrades AR as well (int8) must not lower the bar.
REFERENCE_DTYPE = "fp32"


def mark_reference_quality(rows: list[dict]) -> None:
    """Give every row `reference_ar_quality`: the AR answers' quality of the `REFERENCE_DTYPE` row with the same
    batch, thread count and compile setting (AR decodes greedily: its answers are the same in every such row). In
    place; rows without such a row keep their own AR as the reference."""
    ref = {(r["batch"], r.get("threads"), r.get("compile", False)): r["ar_quality"]
           for r in rows if r["dtype"] == REFERENCE_DTYPE}
    for r in rows:
        r["reference_ar_quality"] = ref.get((r["batch"], r.get("threads"), r.get("compile", False)), r["ar_quality"])


def at_ar_quality(row: dict, tolerance: float = QUALITY_TOLERANCE) -> bool:
    """A grid row meets the quality bound: judged on the speed dial's curve when the run tuned one (more prompts,
    the same decoding, the weights at `REFERENCE_DTYPE`; `tune.attach_measurements` sets `at_ar_quality`), else on
    the row's own prompts. A row at another dtype must also meet it on its own prompts: the curve did not see its
    weights. The reference is AR at `REFERENCE_DTYPE` (`mark_reference_quality`)."""
    own = meets_quality(row["quality"], row.get("reference_ar_quality") or row["ar_quality"], tolerance)
    if row.get("at_ar_quality") is not None:
        return bool(row["at_ar_quality"]) and (row["dtype"] == REFERENCE_DTYPE or own)
    return own


def _versus(ar: dict, d: dict, ar_timings: list[dict]) -> dict:
    a, s = ar["ar"], d["diffusion"]
    lat = [t["latency_ms"] for t in ar_timings if t.get("latency_ms") is not None]
    return {"batch": d["batch"], "ar_timings": len(ar_timings), "ar_latency_range_ms": [min(lat), max(lat)] if lat else None,
            "ar_dtype": ar["dtype"], "ar_compile": ar.get("compile", False),
            "ar_threads": ar.get("threads"), "ar_tok_s": a["tok_s"],
            "ar_plans_per_s": a.get("plans_per_s"), "ar_latency_ms": a.get("latency_ms"),
            "diffusion_dtype": d["dtype"], "diffusion_compile": d.get("compile", False),
            "diffusion_threads": d.get("threads"), "cache": d.get("cache", "exact"),
            "block_size": d["block_size"], "threshold": d["threshold"], "max_steps": d.get("max_steps"),
            "diffusion_tok_s": s["tok_s"], "diffusion_plans_per_s": s.get("plans_per_s"),
            "diffusion_latency_ms": s.get("latency_ms"), "tpf": s["tpf"],
            "ratio": s["tok_s"] / a["tok_s"], "times_ar": _plans_s(s) / _plans_s(a),
            "l2_vs_expert": d["quality"]["l2_vs_expert"], "ar_l2_vs_expert": d["ar_quality"]["l2_vs_expert"],
            "pdms": d["quality"].get("pdms"), "ar_pdms": d["ar_quality"].get("pdms"),
            "comfort": d["quality"].get("comfort"), "ar_comfort": d["ar_quality"].get("comfort")}


def setting_label(dtype: str, compiled, threads: int | None = None) -> str:
    """dtype, compile and thread count of a row / side (rows recorded before threads were a grid dimension: none)."""
    label = f"{dtype}+compile" if compiled else dtype
    return label if threads is None else f"{label}, {threads} thread{'s' if threads != 1 else ''}"


def row_setting(r: dict) -> str:
    return setting_label(r["dtype"], r.get("compile"), r.get("threads"))


def threads_label(result: dict) -> str:
    """The thread counts a run measured (a list; one int in results written before threads were a grid dimension)."""
    t = result["threads"]
    return ", ".join(map(str, t)) if isinstance(t, list) else str(t)


def diffusion_label(d: dict) -> str:
    """B, tau, step cap and cache of a row / pick."""
    return (f"B{d['block_size']}, tau {d['threshold']}, <= {d.get('max_steps')} steps/block, "
            f"{d.get('cache', 'exact')} cache")


def best_line(b: dict) -> str:
    ar_l2 = "-" if b.get("ar_l2_vs_expert") is None else f"{b['ar_l2_vs_expert']:.2f}"
    l2 = "" if b.get("l2_vs_expert") is None else f", L2 vs expert {b['l2_vs_expert']:.2f} m (AR {ar_l2})"
    if b.get("pdms") is not None and b.get("ar_pdms") is not None:
        l2 += f", PDMS {b['pdms']:.1f} (AR {b['ar_pdms']:.1f})"
    if b.get("comfort") is not None and b.get("ar_comfort") is not None:
        l2 += f", comfort {b['comfort']:.3f} (AR {b['ar_comfort']:.3f})"
    lat = ""
    if b.get("ar_latency_ms") is not None and b["batch"] == 1:
        lat = f"; ms per trajectory {b['ar_latency_ms']:.1f} -> {b['diffusion_latency_ms']:.1f}"
    if b.get("ar_latency_range_ms") and b.get("ar_timings", 1) > 1:
        lo, hi = b["ar_latency_range_ms"]
        lat += f" (AR: the median of its {b['ar_timings']} timings, {lo:.1f}-{hi:.1f} ms)"
    ar_setting = setting_label(b["ar_dtype"], b.get("ar_compile"), b.get("ar_threads"))
    d_setting = setting_label(b["diffusion_dtype"], b.get("diffusion_compile"), b.get("diffusion_threads"))
    return (f"batch {b['batch']}: AR {b['ar_tok_s']:.1f} tok/s ({ar_setting}) vs diffusion {b['diffusion_tok_s']:.1f} "
            f"tok/s ({d_setting}, "
            f"{diffusion_label(b)}, TPF {b['tpf']:.2f}{l2}): {b['times_ar']:.2f}x AR (plans/s; tok/s {b['ratio']:.2f}x){lat}")


def confirmed_line(c: dict) -> str:
    return (f"batch {c['batch']}: {c['diffusion_setting']} vs AR ({c['ar_setting']}): {c['times_ar']:.2f}x AR, median of "
            f"{c['repeats']} paired rounds (range {c['times_ar_min']:.2f}-{c['times_ar_max']:.2f}x; the grid's figure "
            f"{c['grid_times_ar']:.2f}x); ms per trajectory {c['ar_ms_per_plan'] * c['batch']:.1f} -> "
            f"{c['diffusion_ms_per_plan'] * c['batch']:.1f}")


def at_quality_line(b: dict) -> str:
    """The best-vs-best line among the settings at AR quality, saying what the bound checked (`dial.meets_quality`)."""
    bound = quality_bound_text(b["quality_tolerance"], judged_on_scenes=b.get("judged_on_scenes", False))
    return (f"at AR quality ({bound}): "
            + (best_line(b["at_quality"]) if b["at_quality"] else f"batch {b['batch']}: no setting"))


def headline_table(result: dict) -> list[dict]:
    """The rows `make bench` prints first, per batch size: the fastest AR setting, the fastest diffusion setting at
    AR quality (with its paired re-measurement, `bench.confirm`, when the run made one), and the speed dial's pick
    (when the run tuned it) with its share of that best."""
    rows_by = {}
    for r in result["rows"]:
        rows_by.setdefault(r["batch"], []).append(r)
    picks = [p for p in (result.get("tune") or {}).get("picks", []) if p.get("row") is not None]
    confirmed = {c["batch"]: c["times_ar"] for c in result.get("confirmed") or []}  # `bench.confirm`
    out = []
    for b in result.get("best", []):
        n = b["batch"]
        ar = fastest_ar(rows_by[n])[0]
        out.append(_table_row(n, "AR VLA (fastest setting, median timing)", row_setting(ar), ar["ar"], ar["ar_quality"],
                              ar["ar"]))
        q = b.get("at_quality")
        best = None
        if q:
            best = next(r for r in rows_by[n] if (r["dtype"], r["compile"], r.get("threads")) ==
                        (q["diffusion_dtype"], q["diffusion_compile"], q.get("diffusion_threads"))
                        and (r["block_size"], r["threshold"], r["max_steps"], r["cache"]) ==
                        (q["block_size"], q["threshold"], q["max_steps"], q["cache"]))
            entry = _table_row(n, "diffusion, fastest at AR quality", f"{row_setting(best)}, {diffusion_label(best)}",
                               best["diffusion"], best["quality"], ar["ar"])
            entry["times_ar_paired"] = confirmed.get(n)
            out.append(entry)
        for p in (p for p in picks if p["batch"] == n):
            row = p["row"]
            entry = _table_row(n, "diffusion, speed dial (auto)", f"{row_setting(p)}, {diffusion_label(p)}",
                               row["diffusion"], row["quality"], ar["ar"])
            entry["of_best"] = _plans_s(row["diffusion"]) / _plans_s(best["diffusion"]) if best else None
            out.append(entry)
    return out


def _table_row(n: int, who: str, setting: str, speed: dict, q: dict, ar: dict) -> dict:
    return {"batch": n, "planner": who, "setting": setting, "latency_ms": speed.get("latency_ms"),
            "plans_per_s": speed.get("plans_per_s"), "tok_s": speed["tok_s"], "tpf": speed["tpf"],
            "l2_vs_expert": (q or {}).get("l2_vs_expert"), "parse_failures": (q or {}).get("parse_failures"),
            "pdms": (q or {}).get("pdms"), "comfort": (q or {}).get("comfort"),
            "times_ar": _plans_s(speed) / _plans_s(ar)}
