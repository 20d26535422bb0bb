"""mkdocs hooks: the pages that are generated at build time, so they cannot drift from what they describe.

- `reference/cli.md`: every `wamdiff` command and option, read from the typer app itself (names, choices,
  defaults, help), the same objects `wamdiff <cmd> --help` prints;
- `results/pipeline.md`, `results/parity.md`, `results/bench.md`: tables built from the result files under
  `docs/results/` (the pipeline's `summary.csv`, the parity study's `paired.csv`, the benchmark's `bench.md`).

Run by `mkdocs build` (`make docs`); nothing here touches the network.
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"


def on_files(files, config):
    from mkdocs.structure.files import File

    for path, text in pages().items():
        files.append(File.generated(config, path, content=text))
    return files


GENERATED = ("reference/cli.md", "results/pipeline.md", "results/parity.md", "results/bench.md",
             "results/small-student.md", "results/main-student.md")  # under docs/


def pages() -> dict[str, str]:
    return {"reference/cli.md": cli_page(), "results/pipeline.md": pipeline_page(), "results/parity.md": parity_page(),
            "results/bench.md": bench_page(), "results/small-student.md": small_student_page(),
            "results/main-student.md": main_student_page()}


# ---- CLI reference -------------------------------------------------------------------------------------------

def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ").strip()


def _plain(text: str | None) -> str:
    from rich.text import Text

    return Text.from_markup(text or "").plain  # what the terminal shows ("\[ray]" -> "[ray]")


def _commands():
    """(path, click command) of every command, depth first, in the order `wamdiff --help` lists them."""
    sys.path.insert(0, str(ROOT / "src"))
    import typer

    from wamdiff.cli import app

    def walk(path, cmd):
        yield path, cmd
        for name in sorted(getattr(cmd, "commands", {})):
            yield from walk(f"{path} {name}", cmd.commands[name])

    yield from walk("wamdiff", typer.main.get_command(app))


def _value(param, ctx) -> str:
    """What the option takes, as its help shows it: `flag`, a type (`int range`, `path`) or the closed set `a|b`."""
    if getattr(param, "is_flag", False):
        return "flag"
    shown = getattr(param, "display_type", "")
    return str(shown(ctx) if callable(shown) else shown).strip("<>")


def _default(param) -> str:
    if getattr(param, "required", False):
        return "required"
    d = param.default
    if d is None or d == () or d == []:
        return ""
    if isinstance(d, (list, tuple)):
        return ", ".join(map(str, d))
    return str(getattr(d, "value", d))


def cli_page() -> str:
    lines = ["# Command-line reference", "",
             "Generated from the `wamdiff` typer app at build time: every command, option, accepted value and default "
             "here is the one `wamdiff <command> --help` prints and the validation applies. A value list like "
             "`ar|block` is the closed set the option accepts (from the code's registries, `wamdiff.cli_choices`). "
             "Old spellings (`--fmt`, `--family`, `--block`) still work and appear after the canonical name.", ""]
    for path, cmd in _commands():
        if getattr(cmd, "hidden", False):
            continue
        from typer._click.core import Context  # typer's own click: its parameters render their type with a context

        ctx = Context(cmd, info_name=path)
        depth = min(path.count(" ") + 2, 4)
        lines += [f"{'#' * depth} `{path}`", "", _plain(cmd.help or "").strip(), ""]
        args = [p for p in cmd.params if p.param_type_name == "argument"]
        opts = [p for p in cmd.params if p.param_type_name == "option" and not p.hidden and p.name != "help"]
        if args:
            lines += ["Arguments: " + ", ".join(f"`{p.name.upper()}`" + (f" ({_plain(getattr(p, 'help', ''))})"
                                                                         if getattr(p, "help", None) else "")
                                                for p in args), ""]
        if opts:
            lines += ["| option | value | default | what |", "|---|---|---|---|"]
            for p in opts:
                names = " / ".join(f"`{o}`" for o in [*p.opts, *p.secondary_opts])
                lines.append(f"| {names} | {_cell(_value(p, ctx))} | {_cell(_default(p))} | {_cell(_plain(p.help))} |")
            lines.append("")
    return "\n".join(lines) + "\n"


# ---- results ---------------------------------------------------------------------------------------------------

def _rows(path: Path) -> list[dict]:
    with open(path, newline="") as fh:
        return list(csv.DictReader(fh))


def _num(text: str, fmt: str) -> str:
    if text in ("", None):
        return "–"
    try:
        return format(float(text), fmt)
    except ValueError:
        return text


PIPELINE_COLUMNS = [  # (csv column, header, format)
    ("pdms", "PDMS", ".1f"), ("pdms_ci", "± 95 %", ".1f"), ("d_pdms", "ΔPDMS vs AR (paired 95 %)", ""),
    ("c", "C", ".3f"), ("l2_1s", "L2@1s", ".2f"), ("l2_4s", "L2@4s", ".2f"), ("d_l2_4s", "ΔL2@4s vs AR (paired 95 %)", ""),
    ("cl_success", "CL success %", ".0f"), ("cl_ci", "CL 95 %", ""), ("tpf_b1", "TPF", ".2f"), ("x_ar_b1", "× AR b1", ".2f"),
]


def pipeline_table(path: Path = RESULTS / "pipeline" / "summary.csv") -> str:
    """The pipeline's headline table from its summary.csv (the README shows the same figures)."""
    head = "| planner | " + " | ".join(h for _, h, _ in PIPELINE_COLUMNS) + " |"
    lines = [head, "|---|" + "---:|" * len(PIPELINE_COLUMNS)]
    for r in _rows(path):
        lines.append(f"| {_cell(r['planner'])} | " + " | ".join(_cell(_num(r[c], f) if f else (r[c] or "–"))
                                                           for c, _, f in PIPELINE_COLUMNS) + " |")
    return "\n".join(lines)


def pipeline_page() -> str:
    return "\n".join([
        "# Pipeline report", "",
        "The latest run of `wamdiff pipeline --config configs/default.yaml` (`make pipeline`), the run the shipped "
        "checkpoints come from. Table generated at build time from `docs/results/pipeline/summary.csv` (the same file "
        "ships as `checkpoints/pipeline_summary.csv`). 200 test scenes (50 per family); closed loop on 40 routes (10 "
        "per family); students decode one 17-token block in ≤ 4 forwards at τ 0.5 with the ordinal read-out unless the "
        "row says otherwise. PDMS ± a normal-approximation 95 % interval over scenes; Δ columns paired against the AR "
        "VLA over the same scenes; closed-loop success with its Wilson interval.", "",
        pipeline_table(), "",
        "The full report, with every column (sub-scores, per-variant splits, speed at batch 1/8/32, QA) and its plots: "
        "[report.md](pipeline/report.md).", "",
        "![L2 over the horizon](pipeline/l2_horizon.png)", "",
        "![PDMS and its intervals](pipeline/quality_intervals.png)", ""])


def front_columns(ref: str) -> list[tuple[str, str, str]]:
    """front.csv columns (column, header, format); the Δ columns are paired against `ref`."""
    return [("params", "params", ",.0f"), ("gflop_plan", "GFLOP / plan", ".3f"), ("pdms", "PDMS", ".2f"),
            ("d_pdms", f"Δ PDMS vs {ref}", "+.2f"), ("c", "C", ".3f"), ("l2_4s", "L2@4s", ".3f"),
            ("d_l2_4s", f"Δ L2@4s vs {ref}", "+.3f"), ("plans_s_b1", "plans/s b1", ".1f"), ("x_ar_b1", "× AR b1", ".2f"),
            ("plans_s_b8", "plans/s b8", ".1f"), ("x_ar_b8", "× AR b8", ".2f")]


def front_table(path: Path, ref: str) -> list[str]:
    columns = front_columns(ref)
    table = ["| model | " + " | ".join(h for _, h, _ in columns) + " |", "|---|" + "---:|" * len(columns)]
    for r in _rows(path):
        table.append(f"| {_cell(r['planner'])} | " + " | ".join(_cell(_num(r[c], f)) for c, _, f in columns) + " |")
    return table


def closed_loop_table(path: Path) -> list[str]:
    """Success per road family from `wamdiff eval failures`' closedloop_failure_kinds.csv."""
    rows = _rows(path)
    families = [f for f in ("highway", "merge", "intersection", "roundabout", "all") if any(r["family"] == f for r in rows)]
    table = ["| planner | " + " | ".join(families) + " |", "|---|" + "---:|" * len(families)]
    for planner in dict.fromkeys(r["planner"] for r in rows):
        got = {r["family"]: r for r in rows if r["planner"] == planner}
        table.append(f"| {_cell(planner)} | " + " | ".join(
            f"{got[f]['success']}/{got[f]['n']}" if f in got else "–" for f in families) + " |")
    return table


def small_student_page() -> str:
    folder = RESULTS / "small_student"
    return "\n".join([
        "# The small student", "",
        "A `small`-preset model (0.82 M parameters, 0.26 GFLOP per plan against the AR VLA's 0.94) trained as an AR "
        "VLA, converted, taught by the full-size block-distilled student, then fine-tuned on four on-policy rounds of "
        "its own (`configs/small.yaml`, [how](../guides/train.md)). The shipped one is "
        "`checkpoints/small/small_student_dagger4` (bf16).", "",
        "## Against the AR VLA", "",
        "Every model on the same 1,600 scenes (the test split and five world variants, two of them settings no stage "
        "trains on), pooled; Δ columns paired against the AR VLA scene by scene (`wamdiff eval paired`; the 95 % "
        "intervals per split in `paired.csv`). Speed from the test split's plan timings at the same decode "
        "(`eval pdms --speed 1,8`: one 17-token block, ≤ 4 forwards, τ 0.5, ordinal read-out, fp32, torch's default "
        "two threads). `small_student_xl` is the small student before its on-policy rounds. Measured on 2026-12-04, "
        "before the two splits along the routes were regenerated without scenes past their route's end; the main "
        "student page has the small student on the regenerated ones. Generated at build time "
        "from `docs/results/small_student/front.csv` (`wamdiff eval front`); the commands are in "
        "[results notes](../development/results-notes.md).", "",
        *front_table(folder / "front.csv", "AR VLA"), "", "![front](small_student/front.png)", "",
        "![paired](small_student/paired.png)", "",
        "One `wamdiff bench` run of the shipped small student against the AR VLA at the same decode (fp32, one "
        "thread, 32 timed prompts; \"at AR quality\" judged on L2, PDMS and comfort): "
        "[bench.md](small_student/bench.md).", "",
        "Closed loop on the 100 routes (`wamdiff eval closedloop --routes full`, routes completed per family; failure "
        "kinds in `closedloop_failure_kinds.csv`, the difference paired route by route in `closedloop_paired.csv`):", "",
        *closed_loop_table(folder / "closedloop_failure_kinds.csv"), "",
        "## The level-3 arms", "",
        "What the teacher gives, 2026-12-03, before the on-policy rounds: three level-3 arms with the same steps and "
        "data (no teacher, the full-size AR VLA, the full-size diffusion student), here the 1,800-step pair against "
        "the arm without a teacher (`small_l3_none_long`), the small AR VLA and the full-size models on the same "
        "1,600 scenes; files in `docs/results/small_student/arms/` (against the AR VLA in `paired_vs_ar.csv`, the "
        "teachers' top-5 overlap with the student in `overlap.json`).", "",
        *front_table(folder / "arms" / "front.csv", "no teacher"), "", "![front](small_student/arms/front.png)", ""])


def main_student_page() -> str:
    folder = RESULTS / "main_student"
    return "\n".join([
        "# The main student", "",
        "A [shifted-prediction](../concepts/loss.md#prediction) conversion of the AR VLA (the logits before an answer "
        "position predict it, as in the AR model), through the same levels as the same-position students, then taught "
        "by the same-position student `main_wide_mix` (the block-distilled student `distill_block` after two on-policy "
        "rounds of its own and faster traffic) on every planning source, with slower and faster traffic from the "
        "expert's labels, and last the driving questions from their labels (stages `sh_block4` … `sh_qa2`, "
        "`configs/default.yaml`; [how](../guides/train.md)). The shipped one is `checkpoints/main/sh_qa2` (bf16); "
        "`main_wide_mix` was shipped until 2026-12-05 (stop 10) and stays beside it here. "
        "Every student row decodes one 17-token block in ≤ 4 forwards at τ 0.5 with the ordinal read-out, and rows "
        "named `smoothness-0.003` also with the [joint read-out](../concepts/decoding.md#smoothness) of each block's "
        "displacements, the shipped student's recorded decode since 2026-12-04; the AR VLA decodes greedily. The "
        "commands are in the [results notes](../development/results-notes.md).", "",
        "## Closed loop", "",
        "The 100 routes (`wamdiff eval closedloop --routes full`), routes completed per family. Success with its "
        "Wilson interval and the difference to the AR VLA paired route by route are in `closedloop_paired.csv`; the "
        "failure kinds (collision, route deviation, timeout, off the drivable area) in "
        "`closedloop_failure_kinds.csv`, the difference to the block-distilled student in "
        "`closedloop_paired_vs_distill_block.csv`. Rows whose name has `final` are the fp32 stage outputs "
        "(`runs/default/ckpt/STAGE/final`), the others bf16 exports (`sh_qa2` is shipped; `main_wide_mix` and "
        "`main_dagger2` were until stop 10 and stop 7); `main_dagger` is the student after its first round.", "",
        *closed_loop_table(folder / "closedloop_failure_kinds.csv"), "",
        "Where on each route the shipped main student drove, with the command and the junction boxes:", "",
        "![timelines](main_student/closedloop_timelines.png)", "",
        "## Open loop and speed", "",
        "1,600 scenes (the test split and five world variants, two of them settings no stage trains on; the two "
        "splits along the routes regenerated on 2026-12-05 without scenes past their route's end), pooled; Δ columns "
        "paired against the AR VLA scene by scene (the 95 % intervals per split in `paired.csv`). Speed from the "
        "test split's plan timings at the same decode (fp32, torch's default "
        "two threads), measured on 2026-12-05 on a faster machine than the small student page's timings, so its "
        "ratios differ from those. Generated at build time from `docs/results/main_student/front.csv` "
        "(`wamdiff eval front`).", "",
        *front_table(folder / "front.csv", "AR VLA"), "", "![front](main_student/front.png)", "",
        "![paired](main_student/paired.png)", "",
        "## Robustness map", "",
        "`wamdiff eval map` on 18 cells: traffic density 0.5, 1, 2 × speed scale 0.8, 1, 1.4 × route phase 0 and "
        "16 s, wider than the conversion's training (density 1–1.3, speed scale 1–1.25); the main students' last "
        "stages also saw 1.35 and 1.5, and the shifted one density 1.3 at speed 0.9, density 1.8 at 0.7 and speed "
        "1.35 along the routes, chosen after this map showed its misses, so its cells no longer measure "
        "generalisation for that student: the cells drawn afterwards below do. 100 scenes per cell (25 per family), "
        "none past its route's end. Per "
        "cell PDMS, comfort and L2@4s of the expert, the AR VLA, `main_wide_mix` and the shipped main student, and "
        "each planner's "
        "difference to the AR VLA paired over the cell's scenes (outlined where the interval excludes 0). The table "
        "with every interval: [map.md](main_student/map/map.md) (and `map.csv`, `map.json`). Eight more cells chosen "
        "after `main_wide_mix` was (density 0.75 and 1.5 × speed scale 1.2 and 1.6 × phase 0 and 8 s; 80 scenes each), "
        "with `main_dagger2` beside it: [heldout_map/map.md](main_student/heldout_map/map.md), the pooled paired "
        "differences in `heldout_map/paired_vs_ar_vla.csv` and `paired_vs_main_wide_mix.csv`; and four slower "
        "cells drawn after the shifted student was (density 0.75 and 2.5 × speed scale 0.6 × phase 0 and 8 s): "
        "[slow_map/map.md](main_student/slow_map/map.md).", "",
        *(f"![{title}](main_student/map/heatmaps/{name}_{MAIN_STUDENT}.png)" + "\n" for title, name in (
            ("PDMS, main student minus AR VLA", "delta_PDMS"), ("comfort of the main student", "value_C"),
            ("L2@4s, main student minus AR VLA", "delta_L2_at_4s"))),
        "![comfort of the AR VLA](main_student/map/heatmaps/value_C_model_ar_vla_mode-ar_batch-16.png)", "",
        "## Does it read its own block?", "",
        "`wamdiff eval context` ([how](../guides/evaluate.md)) on 100 planning samples and 100 questions of the test "
        "split, for the AR VLA, every conversion stage and the shipped students: per task, the accuracy on a gold "
        "answer token with only its position masked and with the whole answer masked, and what the visible tokens "
        "add (nats). The same-position students read their block when they plan and not when they answer a question, "
        "which is where their QA gap comes from: [context.md](main_student/context/context.md); the shifted ones read "
        "it for both ([the shipped one](main_student/context/context_sh_qa2.md)). QA on the 890 test questions: "
        "[qa.md](main_student/qa.md).", ""])


MAIN_STUDENT = "model_sh_qa2_mode-block_block-17_steps-4_threshold-0.5_ordinal-2_batch-16_smoothness-0.003"  # its result name


def parity_page() -> str:
    rows = _rows(RESULTS / "parity_stop32" / "paired.csv")
    ref = "model_ar_vla_mode-ar_batch-16"
    student = next(r["planner"] for r in rows if r["planner"].startswith("model_hb2_"))
    lines = ["# Parity study: the main student against the AR VLA", "",
             "Paired differences, student (the two-seed average, fp32) minus the AR VLA, scene by scene (route by route "
             "for the closed loop), with 95 % intervals; generated at build time from "
             "`docs/results/parity_stop32/paired.csv` (`wamdiff eval paired` output). The study, its arms and what they "
             "answer: [the parity study](../PARITY.md); the folder's own notes: "
             "[parity_stop32](parity_stop32/README.md).", "",
             "| split | metric | n | AR VLA | student | Δ (95 %) |", "|---|---|---:|---:|---:|---:|"]
    means = {(r["split"], r["metric"], r["planner"]): r for r in rows}
    for r in rows:
        if r["planner"] != student:
            continue
        ar = means.get((r["split"], r["metric"], ref))
        delta = (f"{float(r['delta']):+.3f} ({float(r['low']):+.3f}…{float(r['high']):+.3f})" if r.get("delta") else "–")
        lines.append(f"| {r['split']} | {r['metric']} | {r['n']} | {_num(ar['mean'], '.3f') if ar else '–'} | "
                     f"{_num(r['mean'], '.3f')} | {delta} |")
    lines += ["", "![paired differences](parity_stop32/paired.png)", ""]
    return "\n".join(lines)


def bench_page() -> str:
    text = (RESULTS / "bench" / "bench.md").read_text()
    body = text.split("\n", 1)[1] if text.startswith("# ") else text
    return "\n".join(["# Speed benchmark", "",
                      "The latest `make bench` on the shipped `distill_block` against the shipped `ar_vla`, included at "
                      "build time from `docs/results/bench/bench.md` (the benchmark's own output). How to read it and "
                      "how it is measured: [Benchmark speed](../guides/benchmark.md).", "",
                      "![bench](bench/bench.png)", "", "## The benchmark's report", "", body.replace("\n# ", "\n## ")])
