"""`wamdiff eval failures | map | qa | context`: how routes fail, the robustness map over world settings, QA
retention, and whether a student reads the answer tokens it can see.

Registered on `wamdiff eval` by `eval.cli`; every bad input (a folder, a grid value, a spec, a QA file) is a
ValueError / UserError: the CLI's one-line error, exit 2.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from wamdiff.errors import UserError
from wamdiff.eval.robustness_map import DEFAULT_DENSITY, DEFAULT_PHASE, DEFAULT_SPEED_SCALE
from wamdiff.outdir import claim_for_command

console = Console()


def _specs(texts: list[str], free_text: bool = False) -> dict:
    """Planner specs checked before any work (a missing checkpoint is found now; nothing is loaded). `free_text`:
    the models answer questions (their recorded free-text decode, `PlannerSpec.parse`)."""
    from .planners import make_planner
    from .specs import parse_specs

    specs = parse_specs(list(texts), free_text)
    for spec in specs.values():
        make_planner(spec)
    return specs


def failures(
    folders: list[Path] = typer.Argument(..., help="`eval closedloop` result folders (every closedloop_*.csv in them)."),
    ref: str = typer.Option(None, help="A planner (its file name or a unique part): also list the routes it completes "
                                       "that another planner fails, and the reverse."),
    out: str = typer.Option("runs/eval/failures", help="Results directory (failure_kinds.csv/.json/.md/.png)."),
) -> None:
    """Failure kinds per family and planner on the routes every planner drove: success, collision, route deviation,
    timeout, stop (agent blocked), planner error, off drivable, error."""
    from .failure_kinds import KINDS, failure_table
    from .run import write_failure_kinds

    failure_table(list(folders), ref)  # a bad folder or reference: the one-line error before claiming --out
    claim_for_command(out)
    table = write_failure_kinds(out, list(folders), ref)
    t = Table(title=f"route ends on the {table['n_common_routes']} routes every planner drove", show_edge=False,
              pad_edge=False)
    for col in ("planner", "family", "n", *KINDS):
        t.add_column(col, justify="left" if col in ("planner", "family") else "right", overflow="fold")
    for r in table["rows"]:
        t.add_row(r["planner"], r["family"], str(r["n"]), *[str(r[k]) for k in KINDS])
    console.print(t)
    for name, d in (table.get("vs_ref") or {}).items():
        console.print(f"{name}: fails {len(d['lost'])} route(s) {table['ref']} completes, completes {len(d['won'])} it fails")
    console.print(f"results in {out}/ (the last replans of failed routes: `eval closedloop --fail-strips`, fail_strips/)")


def _listed(values) -> str:
    return ",".join(f"{v:g}" for v in values)


def robustness_map(
    planner: list[str] = typer.Option(..., "--planner", "-p", help="Planner spec (repeatable)."),
    ref: str = typer.Option(None, help="The planner the paired differences are against (one of the --planner specs; "
                                       "default: the first)."),
    density: str = typer.Option(_listed(DEFAULT_DENSITY), help="Traffic density multipliers (comma separated; "
                                                                "training: 1-1.3)."),
    speed_scale: str = typer.Option(_listed(DEFAULT_SPEED_SCALE), help="Desired-speed scales (training: 1-1.25; the "
                                                                       "main student's last stage also 1.35 and 1.5)."),
    phase: str = typer.Option(_listed(DEFAULT_PHASE), help="Route phases: seconds the scenes' t0 is spread over along "
                                                           "the route (0 = route starts; a scene with less route ahead "
                                                           "than 4 s of driving is replaced by the next seed's)."),
    per_family: int = typer.Option(10, "--per-family", min=1, help="Test scenes per family and cell."),
    families: str = typer.Option(None, "--families", "--family", help="Only these road families (default: all)."),
    out: str = typer.Option("runs/eval/map", help="Results directory (re-running skips the cells already done)."),
    workers: int = typer.Option(1, min=1, help="Scene generation worker processes."),
    batch: int = typer.Option(64, min=1, help="Scenes per planner/scoring batch."),
) -> None:
    """The robustness map: every planner on a grid of world settings (traffic density x speed scale x route phase),
    PDMS, comfort and L2@4s per cell with the paired difference to --ref and its 95 % interval; heatmaps, CSV, JSON."""
    from wamdiff.cli_choices import FAMILIES, parse_list

    from .robustness_map import MapGrid, parse_values, run_map

    try:
        grid = MapGrid.from_dict({"density": parse_values(density, "--density"),
                                  "speed_scale": parse_values(speed_scale, "--speed-scale"),
                                  "phase": parse_values(phase, "--phase"), "per_family": per_family,
                                  "families": parse_list(families, FAMILIES, "--families") if families else []},
                                 where="grid")
    except ValueError as err:
        raise UserError(str(err).replace("grid.", "--").replace("speed_scale", "speed-scale")) from None
    specs = _specs(planner)
    ref_name = ref or next(iter(specs))
    if ref_name not in specs:
        raise UserError(f"--ref {ref!r}: not one of the --planner specs ({', '.join(specs)})")
    claim_for_command(out)
    cells = grid.cells()
    console.print(f"{len(cells)} cells x {len(specs)} planners, {grid.per_family} scenes per family and cell -> {out}/")
    summary = run_map(specs, grid, out, ref=ref_name, workers=workers, batch=batch, console=console,
                      say=console.print)
    t = Table(title=f"robustness map (Δ vs {summary['ref']}, paired 95 %)", show_edge=False, pad_edge=False)
    for col in ("planner", "density", "speed", "phase", "n", "PDMS", "ΔPDMS", "C", "L2@4s"):
        t.add_column(col, justify="left" if col == "planner" else "right", overflow="fold")
    by = {(r["cell"], r["planner"], r["metric"]): r for r in summary["rows"]}
    for (cell, name, metric), r in sorted(by.items()):
        if metric != "PDMS":
            continue
        c, l2 = by.get((cell, name, "C")), by.get((cell, name, "L2@4s"))
        d = f"{r['delta']:+.1f} ({r['low']:+.1f}…{r['high']:+.1f})" if r.get("delta") is not None else "–"
        t.add_row(name, f"{r['density']:g}", f"{r['speed_scale']:g}", f"{r['phase']:g}", str(r["n"]), f"{r['mean']:.1f}",
                  d, "-" if c is None else f"{c['mean']:.3f}", "-" if l2 is None else f"{l2['mean']:.2f}")
    console.print(t)
    console.print(f"results in {out}/ (map.csv, map.json, map.md, heatmaps/)")


def qa(
    planner: list[str] = typer.Option(..., "--planner", "-p", help="Model planner spec, model:PATH[,decode options] "
                                                                   "(repeatable); decoded as the checkpoint records "
                                                                   "for free text (else as it plans), 32 answer tokens."),
    data: Path = typer.Option(..., help="Dataset folder (its <split>_qa.json, from `wamdiff data generate`)."),
    split: str = typer.Option("test", help="Which split's questions (<split>_qa.json)."),
    limit: int = typer.Option(None, min=1, help="At most this many questions (default: all; the default test split "
                                                "has about 900)."),
    ref: str = typer.Option(None, help="The model the paired differences are against (one of the --planner specs; "
                                       "default: the first)."),
    out: str = typer.Option("runs/eval/qa", help="Results directory (qa_<planner>.csv, qa_summary.json, qa.md)."),
    batch: int = typer.Option(16, min=1, help="Questions decoded together."),
) -> None:
    """Multi-task retention: exact match on driving questions per model, with its Wilson 95 % interval, per kind
    and family, and every model against --ref on the same questions (paired difference, McNemar's p)."""
    from wamdiff.jsonfile import write_json

    from .qa_retention import answer_questions, qa_summary, read_questions
    from .report import planner_files, write_csv
    from .run import progress_bar

    specs = _specs(planner, free_text=True)
    bad = [s.text for s in specs.values() if s.kind != "model"]
    if bad:
        raise UserError(f"--planner {bad[0]!r}: QA needs a model planner (model:PATH)")
    ref_name = ref or next(iter(specs))
    if ref_name not in specs:
        raise UserError(f"--ref {ref!r}: not one of the --planner specs ({', '.join(specs)})")
    qa_file = Path(data) / f"{split}_qa.json"
    n = len(read_questions(qa_file, limit))  # a missing or unreadable file: the one-line error
    if n < 500:
        console.print(f"[yellow]{n} questions: a 95 % interval of about ±{100 / n ** 0.5:.0f} points; generate more "
                      "scenes (`wamdiff data generate --split test --n ...`) for 500 or more")
    claim_for_command(out)
    files = planner_files(list(specs))
    rows_by = {}
    with progress_bar(console) as prog:
        for name, spec in specs.items():
            task = prog.add_task(f"{name}: QA", total=n)
            rows_by[name] = answer_questions(spec, qa_file, limit, batch, progress=lambda k, task=task: prog.advance(task, k))
            write_csv(rows_by[name], Path(out) / f"qa_{files[name]}.csv")
    summary = qa_summary(rows_by, ref_name)
    write_json(Path(out) / "qa_summary.json", {"qa_file": str(qa_file), "n_questions": n, "ref": ref_name,
                                               "models": summary})
    lines = [f"QA exact match on {n} questions of `{qa_file}` (Wilson 95 %); Δ = model − `{ref_name}` on the same "
             "questions (paired 95 %, McNemar's exact p).", "", "| model | n | accuracy % | 95 % | Δ points | 95 % | p |",
             "|---|---:|---:|---|---:|---|---:|"]
    t = Table(title=f"QA retention ({n} questions)", show_edge=False, pad_edge=False)
    for col in ("model", "n", "acc %", "95 %", "Δ vs ref", "95 %", "McNemar p"):
        t.add_column(col, justify="left" if col == "model" else "right", overflow="fold")
    for name, s in summary.items():
        o, v = s["overall"], s.get("vs_ref")
        lo, hi = o["ci95"]
        cells = [str(o["n"]), f"{100 * o['accuracy']:.1f}", f"{100 * lo:.1f}…{100 * hi:.1f}",
                 "–" if not v else f"{100 * v['delta']:+.1f}",
                 "–" if not v else f"{100 * v['ci95'][0]:+.1f}…{100 * v['ci95'][1]:+.1f}",
                 "–" if not v else f"{v['mcnemar_p']:.3f}"]
        t.add_row(name, *cells)
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    console.print(t)
    (Path(out) / "qa.md").write_text("\n".join(lines) + "\n")
    console.print(f"results in {out}/")


def context(
    planner: list[str] = typer.Option(..., "--planner", "-p", help="Model spec, model:PATH (repeatable; an AR model "
                                                                   "for reference)."),
    data: Path = typer.Option(..., help="Dataset folder (its <split>.json and <split>_qa.json)."),
    split: str = typer.Option("test", help="Which split."),
    limit: int = typer.Option(100, min=1, help="Samples of each file (planning, QA); every answer position of each."),
    out: str = typer.Option("runs/eval/context", help="Results directory (context_<planner>.csv, context.json, "
                                                      "context.md)."),
) -> None:
    """Does a diffusion student read the answer tokens it can see? Per task, its accuracy on a gold answer token
    with only that position masked and with the whole answer masked, and the log-probability it gains from the
    visible tokens of its block (nats, 95 % interval over samples), at the block size it was trained on. An AR
    model: its next-token accuracy on the gold answer, for reference."""
    from wamdiff.jsonfile import write_json

    from .block_context import context_summary, model_rows
    from .report import planner_files, write_csv
    from .run import progress_bar

    specs = _specs(planner)
    bad = [s.text for s in specs.values() if s.kind != "model"]
    if bad:
        raise UserError(f"--planner {bad[0]!r}: the probe needs a model planner (model:PATH)")
    wanted = {source: Path(data) / name for source, name in (("planning", f"{split}.json"), ("qa", f"{split}_qa.json"))}
    files = {k: str(f) for k, f in wanted.items() if f.is_file()}
    if not files:
        raise UserError(f"{wanted['planning']}: no such file (write the split with `wamdiff data generate`)")
    claim_for_command(out)
    names = planner_files(list(specs))
    summary, lines = {}, ["Answer tokens a diffusion model sees: accuracy on the gold token with only its position "
                          "masked (one) and with the whole answer masked (all); gain = mean log p(one) − log p(all) "
                          "per sample, nats (95 %).", "", "| model | task | positions | acc one % | acc all % | gain | 95 % |",
                          "|---|---|---:|---:|---:|---:|---|"]
    t = Table(title="in-block context", show_edge=False, pad_edge=False)
    for col in ("model", "task", "positions", "acc one %", "acc all %", "gain", "95 %"):
        t.add_column(col, justify="left" if col in ("model", "task") else "right", overflow="fold")
    with progress_bar(console) as prog:
        for name, spec in specs.items():
            task = prog.add_task(f"{name}: context", total=None)
            rows = model_rows(spec.checkpoint, files, limit, progress=lambda k, task=task: prog.advance(task, k))
            write_csv(rows, Path(out) / f"context_{names[name]}.csv")
            summary[name] = context_summary(rows)
    for name, tasks in summary.items():
        for task, r in tasks.items():
            lo, hi = r["gain_ci95"] or (None, None)
            cells = [task, str(r["positions"]), f"{100 * r['acc_one']:.1f}",
                     "–" if r["acc_all"] is None else f"{100 * r['acc_all']:.1f}",
                     "–" if r["gain"] is None else f"{r['gain']:+.3f}", "–" if lo is None else f"{lo:+.3f}…{hi:+.3f}"]
            t.add_row(name, *cells)
            lines.append(f"| {name} | " + " | ".join(cells) + " |")
    console.print(t)
    write_json(Path(out) / "context.json", {"files": files, "limit": limit, "models": summary})
    (Path(out) / "context.md").write_text("\n".join(lines) + "\n")
    console.print(f"results in {out}/")


__all__ = ["context", "failures", "qa", "robustness_map"]
