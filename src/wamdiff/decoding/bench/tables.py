"""The benchmark's tables: Markdown (report) and rich (console). First the headline table (per batch size: the
fastest AR setting, the fastest diffusion setting at AR quality, the speed dial's pick), then the best-vs-best
lines, the grid, the step-cost ratios, the dial's picks against the grid, where the time goes for short and long
answers, the roofline estimate and the cheaper-step levers. Speed figures follow `decoding.speed`."""

from __future__ import annotations

from wamdiff.decoding.bench.headline import (
    at_quality_line, best_line, confirmed_line, diffusion_label, headline_table, row_setting,
    threads_label,
)


def _f(v, fmt: str = "{:.2f}") -> str:
    return "-" if v is None else fmt.format(v)


HEADLINE_COLUMNS = ["batch", "planner", "setting", "ms per trajectory", "plans/s", "tok/s", "TPF", "L2 vs expert",
                    "failed parses", "PDMS", "C", "× AR", "× AR paired", "of best"]


def _headline_cells(r: dict) -> list[str]:
    return [str(r["batch"]), r["planner"], r["setting"], _f(r["latency_ms"], "{:.1f}"), _f(r["plans_per_s"], "{:.2f}"),
            _f(r["tok_s"], "{:.0f}"), _f(r["tpf"]), _f(r["l2_vs_expert"], "{:.3f}"), _f(r["parse_failures"], "{:d}"),
            _f(r.get("pdms"), "{:.1f}"), _f(r.get("comfort"), "{:.3f}"), _f(r["times_ar"]) + "x",
            _f(r.get("times_ar_paired"), "{:.2f}x"), _f(r.get("of_best"), "{:.0%}")]


def _md(header: list[str], rows: list[list[str]]) -> list[str]:
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header), *["| " + " | ".join(r) + " |" for r in rows]]


def markdown_tables(result: dict) -> str:
    lines = [f"Threads: {threads_label(result)}; device: {result.get('device', 'cpu')}; AR baseline: {result.get('ar_baseline')}; "
             "speed = the `generate` call (prefill included), tok/s counts generated tokens only, ms per trajectory = "
             "wall time of one batch, × AR = plans/s ratio to the fastest AR setting at the same batch size.", ""]
    head = headline_table(result)
    if head:
        lines += ["Headline (per batch size):", "", *_md(HEADLINE_COLUMNS, [_headline_cells(r) for r in head]), ""]
    if result.get("best"):
        lines += ["Best AR (any thread count, dtype, compile setting) vs best diffusion (any thread count, dtype, compile "
                  "setting, B, tau, cache):", ""]
        lines += [f"- {best_line(b)}" for b in result["best"]]
        lines += [f"- {at_quality_line(b)}" for b in result["best"] if "at_quality" in b]
        lines.append("")
    if result.get("confirmed"):
        lines += ["The headline pair (fastest AR setting, fastest diffusion setting at AR quality) timed again, "
                  "interleaved, on the same prompts (`× AR paired`):", ""]
        lines += [f"- {confirmed_line(c)}" for c in result["confirmed"]]
        lines.append("")
    lines += _md(["setting", "batch", "B", "tau", "steps", "cache", "AR plans/s", "diff plans/s", "× AR", "AR tok/s",
                  "diff tok/s", "ms/tok AR", "ms/tok diff", "fwd/plan AR", "fwd/plan diff", "TPF", "exact vs AR",
                  "L2 vs expert diff (AR)", "parse fail diff (AR)"], [_grid_cells(r) for r in result["rows"]])
    if result.get("step_cost"):
        keys = [k for k in result["step_cost"][0] if k.endswith("_ratio")]
        lines += ["", "Cost of one forward in the decode loop relative to one AR step (every row with logits):", "",
                  *_md(["setting", "AR ms", *[k.replace("_ratio", "") for k in keys]],
                       [[row_setting(c), f"{c['ar_ms']:.2f}",
                         *[f"{c[k]:.2f}x" for k in keys]] for c in result["step_cost"]])]
    lines += _tune_lines(result.get("tune"))
    if result.get("roofline"):
        rf = result["roofline"]
        lines += ["", f"Roofline estimate (matmul rate {rf['peak_gflops']:.1f} GFLOP/s on this machine, "
                      f"{rf['weight_mb']:.1f} MB of weights; roofline ms = FLOPs at that rate, overhead = measured - roofline):", "",
                  *_md(["dtype", "batch", "forward", "rows", "MFLOP", "measured ms", "GFLOP/s", "roofline ms", "overhead ms",
                        "of peak"],
                       [[r["dtype"], str(r["batch"]), r["forward"], str(r["rows"]), f"{r['mflop']:.1f}",
                         f"{r['measured_ms']:.2f}", f"{r['gflop_s']:.1f}", f"{r['roofline_ms']:.2f}",
                         f"{r['overhead_ms']:.2f}", _f(r["of_peak"], "{:.0%}")] for r in rf["rows"]])]
        if rf.get("per_token"):
            lines += ["", "FLOPs per decoded token (batch 1): " + "; ".join(
                f"{p['who']} {p['mflop_per_token']:.1f} MFLOP" for p in rf["per_token"])]
    if result.get("levers"):
        lines += ["", "Cheaper steps: each lever against the reference path (lean off, no cached tables), same prompts, "
                      "interleaved, median of per-repeat ratios (< 1 = faster):", "",
                  *_md(["level", "what", "batch", "lever", "reference ms", "lever ms", "ratio", "same tokens"],
                       [[r["level"], r["mode"], str(r["batch"]), r["lever"],
                         f"{r.get('reference_ms_per_plan', r.get('reference_ms')):.2f}",
                         f"{r.get('lever_ms_per_plan', r.get('lever_ms')):.2f}", f"{r['ratio']:.3f}",
                         {True: "yes", False: "NO", None: "-"}[r.get("same_tokens")]] for r in result["levers"]])]
    if result.get("answer_length"):
        lines += ["", "Answer length, measured (batch 1, paired and interleaved; a 17-token answer = the first 17 tokens of "
                      "each answer, as long as a delta answer):", "",
                  *_md(["answer tokens", "diffusion setting", "AR ms/plan", "diffusion ms/plan", "× AR"],
                       [[str(r["answer_tokens"]) + (" (cut)" if r["truncated"] else ""), diffusion_label(r),
                         f"{r['ar_ms_per_plan']:.1f}", f"{r['diffusion_ms_per_plan']:.1f}", f"{r['times_ar']:.2f}x"]
                        for r in result["answer_length"]])]
    return "\n".join(lines) + "\n"


def _grid_cells(r: dict) -> list[str]:
    a, d, q = r["ar"], r["diffusion"], r["quality"]
    qa = r.get("ar_quality") or {}
    l2 = "-" if q["l2_vs_expert"] is None else f"{q['l2_vs_expert']:.3f}"
    if qa.get("l2_vs_expert") is not None:
        l2 += f" ({qa['l2_vs_expert']:.3f})"
    fails = f"{q['parse_failures']}" + (f" ({qa['parse_failures']})" if qa else "")
    return [row_setting(r), str(r["batch"]), str(r["block_size"]), str(r["threshold"]),
            str(r.get("max_steps", "-")), r.get("cache", "exact"), _f(a.get("plans_per_s")), _f(d.get("plans_per_s")),
            _f(r.get("times_ar")) + "x", f"{a['tok_s']:.1f}", f"{d['tok_s']:.1f}", f"{a['ms_per_token']:.2f}",
            f"{d['ms_per_token']:.2f}", f"{a['forwards_per_sample']:.1f}", f"{d['forwards_per_sample']:.1f}",
            f"{d['tpf']:.2f}", f"{q['exact_match_vs_ar']:.2f}", l2, fails]


def _tune_lines(t: dict | None) -> list[str]:
    if not t:
        return []
    c = t["curve"]
    lines = ["", f"Speed dial (`--tune`): TPF/quality curve on {c['prompts']} prompts (format {c['format']}, AR "
                 f"{c['ar_tokens_mean']:.1f} tokens/answer, AR L2 {_f(c['ar_quality'].get('l2_vs_expert'), '{:.3f}')}), "
                 f"curve in `{t['curve_file']}`; picks (fastest predicted at AR quality) against the grid "
                 f"(median |predicted/measured - 1| over the grid: {_f(t.get('prediction_error'), '{:.0%}')}):", ""]
    rows = []
    for p in t["picks"]:
        pk = p.get("pick")
        rows.append([row_setting(p), str(p["batch"]),
                     diffusion_label(p) if pk else "no setting at AR quality",
                     _f(pk and pk["predicted_ms_per_plan"], "{:.1f}"), _f(pk and pk["predicted_ar_ms_per_plan"], "{:.1f}"),
                     _f(p.get("pick_plans_per_s") and 1e3 / p["pick_plans_per_s"], "{:.1f}"),
                     diffusion_label(p["best"]) if p.get("best") else "-",
                     _f(p.get("best_plans_per_s") and 1e3 / p["best_plans_per_s"], "{:.1f}"), _f(p.get("of_best"), "{:.0%}")])
    lines += _md(["setting", "batch", "dial pick", "predicted ms/plan", "predicted AR ms/plan", "measured ms/plan",
                  "best grid point at AR quality", "its ms/plan", "pick / best (plans/s)"], rows)
    if t.get("answer_length"):
        lines += ["", "Where the time goes (batch 1, predicted from the step-cost model; diffusion = the batch-1 pick, a "
                      "short answer decodes only its first block):", "",
                  *_md(["setting", "answer tokens", "AR ms", "AR prefill share", "diffusion ms", "diffusion prefill share",
                        "× AR"],
                       [[row_setting(r), str(r["answer_tokens"]), f"{r['ar_ms']:.1f}",
                         f"{r['ar_prefill_share']:.0%}", f"{r['diffusion_ms']:.1f}", f"{r['diffusion_prefill_share']:.0%}",
                         f"{r['times_ar']:.2f}x"] for r in t["answer_length"]])]
    return lines


def print_table(result: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"AR vs block diffusion ({threads_label(result)} threads, {result['n_params'] / 1e6:.1f}M params)")
    cols = ["setting", "batch", "B", "tau", "steps", "cache", "AR plans/s", "diff plans/s", "× AR", "AR tok/s", "diff tok/s",
            "ms/tok AR", "ms/tok diff", "fwd/plan AR", "fwd/plan diff", "TPF", "exact vs AR"]
    for c in cols:
        t.add_column(c, justify="right")
    for r in result["rows"]:
        t.add_row(*_grid_cells(r)[:len(cols)])
    console.print(t)
    if result["step_cost"]:
        s = Table(title="cost of one forward inside the decode loop, relative to one AR step (lower = better)")
        keys = [k for k in result["step_cost"][0] if k.endswith("_ratio")]
        for c in ["setting", "AR ms", *[k.replace("_ratio", "") for k in keys]]:
            s.add_column(c, justify="right")
        for c in result["step_cost"]:
            s.add_row(row_setting(c), f"{c['ar_ms']:.2f}", *[f"{c[k]:.2f}x" for k in keys])
        console.print(s)
    for b in result.get("best", []):
        console.print(f"best vs best, {best_line(b)}")
        if "at_quality" in b:
            console.print(f"  {at_quality_line(b)}")
    for c in result.get("confirmed") or []:
        console.print(f"headline pair timed again, paired: {confirmed_line(c)}")
    head = headline_table(result)
    if head:
        h = Table(title="headline: per batch size, the fastest AR setting, the fastest diffusion setting at AR quality, "
                        "the speed dial's pick")
        for c in HEADLINE_COLUMNS:
            h.add_column(c, justify="left" if c in ("planner", "setting") else "right")
        for r in head:
            h.add_row(*_headline_cells(r))
        console.print(h)
