"""The benchmark's tables: Markdown (report) and rich (console), rows then headline then step costs."""

from __future__ import annotations

from wamdiff.decoding.bench.headline import at_quality_line, best_line, setting_label


def markdown_tables(result: dict) -> str:
    lines = [f"Threads: {result['threads']}; AR baseline: {result.get('ar_baseline')}; tok/s counts generated tokens only.",
             "", "| dtype | batch | B | tau | steps | cache | AR tok/s | diffusion tok/s | ratio | ms/tok AR | ms/tok diff "
             "| fwd/sample AR | fwd/sample diff | TPF | exact vs AR | L2 vs expert diff (AR) | parse fail diff (AR) |",
             "|" + "---|" * 17]
    for r in result["rows"]:
        a, d, q = r["ar"], r["diffusion"], r["quality"]
        qa = r.get("ar_quality") or {}
        l2 = "-" if q["l2_vs_expert"] is None else f"{q['l2_vs_expert']:.3f}"
        if qa.get("l2_vs_expert") is not None:
            l2 += f" ({qa['l2_vs_expert']:.3f})"
        fails = f"{q['parse_failures']}" + (f" ({qa['parse_failures']})" if qa else "")
        lines.append(f"| {setting_label(r['dtype'], r.get('compile'))} | {r['batch']} | {r['block_size']} | {r['threshold']} | "
                     f"{r.get('max_steps', '-')} | {r.get('cache', 'exact')} | {a['tok_s']:.1f} | "
                     f"{d['tok_s']:.1f} | {r['speedup']:.2f}x | {a['ms_per_token']:.2f} | {d['ms_per_token']:.2f} | "
                     f"{a['forwards_per_sample']:.1f} | {d['forwards_per_sample']:.1f} | {d['tpf']:.2f} | "
                     f"{q['exact_match_vs_ar']:.2f} | {l2} | {fails} |")
    if result.get("best"):
        lines += ["", "Best AR (any dtype, compile setting) vs best diffusion (any dtype, compile setting, B, tau, cache):", ""]
        lines += [f"- {best_line(b)}" for b in result["best"]]
        lines += [f"- {at_quality_line(b)}" for b in result["best"] if "at_quality" in b]
    if result.get("step_cost"):
        keys = [k for k in result["step_cost"][0] if k.endswith("_ratio")]
        lines += ["", "Cost of one forward in the decode loop relative to one AR step:", "",
                  "| dtype | threads | AR ms | " + " | ".join(k.replace("_ratio", "") for k in keys) + " |",
                  "|" + "---|" * (3 + len(keys))]
        for c in result["step_cost"]:
            lines.append(f"| {setting_label(c['dtype'], c.get('compile'))} | {c['threads']} | {c['ar_ms']:.2f} | "
                         + " | ".join(f"{c[k]:.2f}x" for k in keys) + " |")
    return "\n".join(lines) + "\n"


def print_table(result: dict, console=None) -> None:
    from rich.console import Console
    from rich.table import Table

    console = console or Console()
    t = Table(title=f"AR vs block diffusion ({result['threads']} threads, {result['n_params'] / 1e6:.1f}M params)")
    for c in ["dtype", "batch", "B", "tau", "steps", "cache", "AR tok/s", "diff tok/s", "ratio", "ms/tok AR", "ms/tok diff",
              "fwd/sample AR", "fwd/sample diff", "TPF", "exact vs AR"]:
        t.add_column(c, justify="right")
    for r in result["rows"]:
        a, d = r["ar"], r["diffusion"]
        t.add_row(setting_label(r["dtype"], r.get("compile")), str(r["batch"]), str(r["block_size"]), f"{r['threshold']:.2f}",
                  str(r.get("max_steps", "-")), r.get("cache", "exact"), f"{a['tok_s']:.1f}",
                  f"{d['tok_s']:.1f}", f"{r['speedup']:.2f}x", f"{a['ms_per_token']:.2f}", f"{d['ms_per_token']:.2f}",
                  f"{a['forwards_per_sample']:.1f}", f"{d['forwards_per_sample']:.1f}", f"{d['tpf']:.2f}",
                  f"{r['quality']['exact_match_vs_ar']:.2f}")
    console.print(t)
    for b in result.get("best", []):
        console.print(f"best vs best, {best_line(b)}")
        if "at_quality" in b:
            console.print(f"  {at_quality_line(b)}")
    if result["step_cost"]:
        s = Table(title="cost of one forward inside the decode loop, relative to one AR step (lower = better)")
        keys = [k for k in result["step_cost"][0] if k.endswith("_ratio")]
        for c in ["dtype", "threads", "AR ms", *[k.replace("_ratio", "") for k in keys]]:
            s.add_column(c, justify="right")
        for c in result["step_cost"]:
            s.add_row(setting_label(c["dtype"], c.get("compile")), str(c["threads"]), f"{c['ar_ms']:.2f}", *[f"{c[k]:.2f}x" for k in keys])
        console.print(s)
