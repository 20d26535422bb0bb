"""`wamdiff bench`: AR vs block-diffusion decoding speed, side by side, on a checkpoint or an untrained preset; and
`wamdiff model grammar` (a format's grammar under a checkpoint's tokenizer).

The commands of the decode engine that need the layers above it: the bench itself (`wamdiff.decoding.bench`) takes
its prompts, answer format and trajectory parser from here, built from the driving layer
(`wamdiff.driving.bench_inputs`), and its scene judge from this layer (`eval.bench_judge`); the grammar check turns
the format name into an answer format object (`driving.answer_format`). Heavy imports stay inside the commands so
`wamdiff --help` does not load torch."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from wamdiff.cli_choices import CACHES, GRID_DTYPES, AnswerFormat, Attention, FixedWidthFormat, Lean, list_help, parse_list
from wamdiff.outdir import claim_for_command

app = typer.Typer(help="Side-by-side AR vs block-diffusion decoding speed benchmark.", add_completion=False)


def _floats(s: str) -> list[float]:
    return [float(x) for x in s.split(",") if x.strip()]


def _ints(s: str) -> list[int]:
    return [int(x) for x in s.split(",") if x.strip()]


def _block_sizes(s: str) -> list:
    """Block sizes: integers and the keyword `fit` (one block holding the whole fixed-width answer)."""
    from wamdiff.decoding.bench.grid import FIT

    try:
        return [FIT if w == FIT else int(w) for w in _words(s)]
    except ValueError:
        raise typer.BadParameter(f"--blocks takes integers and {FIT!r}, comma separated; got {s!r}") from None


def _words(s: str) -> list[str]:
    return [x.strip() for x in s.split(",") if x.strip()]


def _on_off(s: str) -> list[bool]:
    words = _words(s)
    bad = [w for w in words if w not in ("on", "off")]
    if bad or not words:
        raise typer.BadParameter(f"--compile takes on, off or off,on; got {s!r}")
    return [w == "on" for w in words]


@app.callback(invoke_without_command=True)
def bench(
    checkpoint: Path = typer.Option(None, help="Checkpoint directory (wamdiff.models.load_model)."),
    preset: str = typer.Option(None, help="Untrained preset for a smoke run: a name in wamdiff.models.PRESETS."),
    ar_checkpoint: Path = typer.Option(None, help="AR baseline checkpoint (default: the same model decoded AR)."),
    vision: bool = typer.Option(True, help="Preset only: Qwen3-VL (image prompts) or text-only Qwen3."),
    block_size: int = typer.Option(8, min=1, help="Preset only: diffusion block size recorded in the model."),
    data: Path = typer.Option(None, help="WAM-Diff2 JSON of prompts (images loaded from paths); default synthetic."),
    n_prompts: int = typer.Option(8, min=1, help="Prompts to load / synthesise."),
    batch: str = typer.Option("1,8,32", help="Batch sizes, comma separated."),
    blocks: str = typer.Option("4,8,16,32", help="Block sizes B; 'fit' = one block holding the whole answer of a "
                                                 "fixed-width --format (delta: 17 tokens, end of turn included)."),
    taus: str = typer.Option("0.7,0.8,0.9,0.95", help="Confidence thresholds."),
    dtypes: str = typer.Option("fp32,bf16", help="Weight dtypes timed: " + list_help(GRID_DTYPES) + " (int8: fp32 with int8 "
                                                 "Linear weights, CPU only)."),
    max_new_tokens: int = typer.Option(160, min=1, help="Answer budget."),
    max_steps: str = typer.Option("32", help="Max denoising steps per block (a list: each is a grid point)."),
    repeats: int = typer.Option(1, min=1, help="Timed repeats per configuration (median)."),
    threads: str = typer.Option("0", help="torch thread counts, comma separated (0 = leave as is): a grid dimension "
                                          "like --dtypes (AR and diffusion alike at each; the headline takes each "
                                          "side's best); the first also runs the curve, roofline and levers."),
    compile: str = typer.Option("off", help="torch.compile the step: off, on, or off,on (each applies to AR and diffusion)."),
    caches: str = typer.Option("exact,delayed", help="Block K/V refresh: " + list_help(CACHES) + " (exact: the whole block "
                                                     "every step; delayed: only the still-masked and just-decoded positions)."),
    step_cost: bool = typer.Option(True, help="Also measure block-step / AR-step cost ratios and, for the roofline, this "
                                              "machine's step-cost model (--no-step-cost: neither is measured; the "
                                              "roofline then uses a cost model cached by an earlier run, if any)."),
    fmt: AnswerFormat = typer.Option(None, "--format", "--fmt", help="Answer format the L2 quality is parsed with "
                                                                     "(default: guessed from --data's first answer)."),
    device: str = typer.Option("cpu", help="cpu or cuda[:i]."),
    cuda_graphs: bool = typer.Option(True, help="On CUDA, replay each fixed-shape decode step as a CUDA graph (SDPA "
                                                "attention only; ignored on the CPU and with --attention flashinfer)."),
    attention: Attention = typer.Option("sdpa", help="Decode-step attention (flashinfer: CUDA only; torch_paged: a slow "
                                                     "reference)."),
    resume: bool = typer.Option(True, help="Reuse the rows an interrupted run with the same grid, models and prompts "
                                           "left in OUT/bench.partial.jsonl."),
    quick: bool = typer.Option(False, help="The timed grid only, shrunk to one setting: batch 1, the model's own B, "
                                           "tau 0.9, fp32, the first of --caches, 64 tokens; no step costs, no paired "
                                           "re-timing, roofline only from a cached cost model."),
    tune: bool = typer.Option(False, help="Speed dial: measure the model's TPF/quality curve (batch 1, untimed) and this "
                                          "machine's step-cost model, report the dial's pick per batch size against "
                                          "the grid, and store the curve for DecodeConfig(block_size='auto'). Needs "
                                          "--data with expert answers."),
    tune_prompts: int = typer.Option(0, min=0, help="--tune: prompts of --data for the TPF/quality curve (0 = --n-prompts); "
                                                  "more than the timed ones judges quality on more scenes."),
    judge: bool = typer.Option(None, help="Score the answers by PDMS and comfort on the --data samples' scenes, so "
                                          "'at AR quality' also needs PDMS within 0.5 and comfort within 0.02 of AR's "
                                          "(default: on when the scenes are there)."),
    lean: Lean = typer.Option("last_layer", help="Exact lean steps for AR and diffusion alike."),
    ordinal: int = typer.Option(2, min=0, help="Diffusion read-out of a grid format (delta, bins): the value mean within "
                                               "this many grid steps of the most likely one (0 = the most likely token); "
                                               "AR decodes greedily."),
    smoothness: Optional[float] = typer.Option(None, min=0.0, help="Diffusion joint read-out of a grid format's "
                                                                   "displacements (DecodeConfig.smoothness; 0 = each "
                                                                   "position on its own; default: the checkpoint's "
                                                                   "recorded decode, else 0)."),
    roofline: bool = typer.Option(True, help="Roofline estimate (FLOPs, matmul rate) beside the step costs."),
    confirm_repeats: int = typer.Option(7, min=0, help="Re-time the headline pair (fastest AR, fastest diffusion at AR "
                                                       "quality) this many paired rounds per batch size (0 = off)."),
    levers: bool = typer.Option(False, help="Cheaper-step levers, each paired against the reference path, and the "
                                            "measured effect of the answer length (17 tokens vs whole answers)."),
    out: Path = typer.Option(Path("runs/bench"), help="Output folder (bench.json, bench.png)."),
) -> None:
    """Run the benchmark (the default action of `wamdiff bench`)."""
    import torch
    from rich.console import Console

    from wamdiff.decoding.answer import format_name
    from wamdiff.decoding.bench import JOURNAL, BenchGrid, print_table, run_bench, write_outputs
    from wamdiff.decoding.bench.analysis import answer_length_section, levers_section, roofline_section
    from wamdiff.decoding.bench.confirm import confirm_headline
    from wamdiff.decoding.bench.tune import answer_length_effect, attach_measurements
    from wamdiff.decoding.bench.tune import tune as bench_tune
    from wamdiff.decoding.engine import model_block_settings
    from wamdiff.driving.bench_inputs import bench_inputs
    from wamdiff.models import build_model, build_tokenizer, image_processor_for, is_vision_model, load_model, to_diffusion
    from wamdiff.models.recorded import recorded_decode

    console = Console(width=max(160, Console().width))
    try:
        thread_counts = _ints(threads)
        if not thread_counts or min(thread_counts) < 0:
            raise ValueError
    except ValueError:
        raise typer.BadParameter(f"thread counts >= 0, comma separated; got {threads!r}", param_hint="--threads") from None
    dtype_list, cache_list = parse_list(dtypes, GRID_DTYPES, "--dtypes"), parse_list(caches, CACHES, "--caches")
    if thread_counts[0]:
        torch.set_num_threads(thread_counts[0])
    if (checkpoint is None) == (preset is None):
        raise typer.BadParameter("give exactly one of --checkpoint DIR or --preset NAME")
    claim_for_command(out)  # writable and ours before any model is loaded
    if smoothness is None:  # the decode the checkpoint was evaluated with, so a tuned pick keeps it
        smoothness = float(recorded_decode(checkpoint).get("smoothness", 0.0)) if checkpoint is not None else 0.0
    if checkpoint is not None:
        model, tok = load_model(checkpoint)
    else:
        tok = build_tokenizer()
        model = to_diffusion(build_model(preset, tok, vision=vision, seed=0), block_size, tokenizer=tok)
    is_vl = is_vision_model(model)
    # the prompts (--data's samples, else synthetic), the answer format (--format, else guessed from the first expert
    # answer) and the trajectory parser of the L2 figures, from the driving layer
    inputs = bench_inputs(tok, data=data, n=max(n_prompts, tune_prompts if tune and data is not None else 0),
                          vision=is_vl, image_processor=image_processor_for(model), fmt=fmt)
    if data is not None:
        tune_set = inputs[:tune_prompts or n_prompts]
        inputs = inputs[:n_prompts]
    prompts, expert, answer, parse = inputs.prompts, inputs.expert, inputs.fmt, inputs.parse
    compile_modes = _on_off(compile)
    try:
        points = (_ints(batch), _block_sizes(blocks), _floats(taus), dtype_list, max_new_tokens, cache_list)
        if quick:  # measures the shrunken grid and nothing else: one setting, at the model's own block size
            step_cost, confirm_repeats = False, 0
            points = ([1], [model_block_settings(model, tok)[0] or 32], [0.9], ["fp32"], 64, cache_list[:1])
        batch_sizes, block_sizes, thresholds, grid_dtypes, new_tokens, grid_caches = points
        grid = BenchGrid(batch_sizes, block_sizes, thresholds, grid_dtypes, new_tokens, _ints(max_steps), repeats,
                         compile_modes, step_cost, caches=grid_caches, threads=thread_counts, device=device,
                         cuda_graphs=cuda_graphs, attention=attention, lean=lean, ordinal_window=ordinal,
                         smoothness=smoothness)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    console.print(f"threads={torch.get_num_threads()} params={sum(p.numel() for p in model.parameters()) / 1e6:.1f}M "
                  f"vision={is_vl} prompts={len(prompts)} grid={grid}")
    timed = inputs.described(str(data) if data is not None else None)  # which prompts are timed: console and report
    if data is not None:
        ids = ", ".join(timed["ids"][:4]) + (", ..." if len(timed["ids"]) > 4 else "")
        console.print(f"prompts: {timed['prompts']} samples of {data} ({ids}), each its own prompt with its "
                      f"{'/'.join(map(str, sorted(set(timed['images']))))} image(s)")

    def progress(row):
        if isinstance(row, str):
            console.print(row)
        else:
            console.print(f"{row['dtype']}{'+compile' if row['compile'] else ''} bs{row['batch']} B{row['block_size']} "
                          f"tau{row['threshold']} <={row['max_steps']} steps {row['cache']}: "
                          f"AR {row['ar']['plans_per_s']:.2f} plans/s, diffusion {row['diffusion']['plans_per_s']:.2f} "
                          f"plans/s ({row['times_ar']:.2f}x AR), TPF {row['diffusion']['tpf']:.2f}")

    if tune and not expert:
        raise typer.BadParameter("--tune needs --data with expert answers (the quality bound: mean L2 to the expert "
                                 "within 10 % of AR's)", param_hint="--tune")
    ar_model, ar_tok = load_model(ar_checkpoint) if ar_checkpoint is not None else (None, None)
    try:
        grid = grid.resolved(tok, answer)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--blocks") from err
    # both prompt sets (timed, tuned) are prefixes of --data: one judge covers the longer
    scene_judge = _scene_judge(data, judge, max(len(prompts), len(tune_set.prompts) if tune else 0), format_name(answer))
    if data is not None:
        console.print("quality: " + ("L2, parses, PDMS and comfort on the prompts' scenes" if scene_judge is not None
                                     else "L2 and parses (no scenes judged)"))
    journal = out / JOURNAL
    if not resume:
        journal.unlink(missing_ok=True)
    tuned = (bench_tune(model, tok, tune_set.prompts, tune_set.expert, grid, fmt=answer, parse=parse, ar_model=ar_model,
                        ar_tokenizer=ar_tok, out=out, progress=progress, judge=scene_judge) if tune else None)
    result = run_bench(model, tok, prompts, grid, expert=expert, fmt=answer, parse=parse, progress=progress,
                       ar_model=ar_model, journal=journal, ar_tokenizer=ar_tok, judge=scene_judge)
    result["source"] = str(checkpoint) if checkpoint else f"preset:{preset}"
    result["inputs"] = timed
    if tuned:
        result["tune"] = tuned
        attach_measurements(result)
        tuned["answer_length"] = answer_length_effect(tuned)
    if confirm_repeats:
        result["confirmed"] = confirm_headline(result, model, tok, prompts, grid, fmt=answer, ar_model=ar_model,
                                               ar_tokenizer=ar_tok, repeats=confirm_repeats, progress=progress)
    if roofline:
        roof = roofline_section(model, tok, prompts, grid, fmt=answer, tune_res=tuned, rows=result["rows"],
                                progress=progress, measure=step_cost)
        if roof is not None:
            result["roofline"] = roof
        else:
            progress("roofline skipped: no step-cost model of this machine is cached and --no-step-cost (or --quick) "
                     "says not to measure one")
    if levers:
        result["levers"] = levers_section(model, tok, prompts, grid, fmt=answer, ar_model=ar_model, ar_tokenizer=ar_tok,
                                          progress=progress)
        progress("answer length: AR vs diffusion on the first 17 tokens and on whole answers, batch 1, paired")
        result["answer_length"] = answer_length_section(model, tok, prompts, grid, fmt=answer, ar_model=ar_model,
                                                        ar_tokenizer=ar_tok)
    write_outputs(result, out)
    journal.unlink(missing_ok=True)  # complete: the next run measures afresh
    print_table(result, console)
    console.print(f"wrote {out / 'bench.json'} and {out / 'bench.png'}")


def _scene_judge(data: Path | None, judge: bool | None, n: int, fmt: str | None):
    """The judge of `--judge` over the first `n` samples of --data (`eval.bench_judge`); None with --no-judge, without
    --data, or (by default) when the samples' scenes are not there. `--judge` without them: one-line error."""
    if judge is False or (data is None and judge is None):
        return None
    if data is None:
        raise typer.BadParameter("--judge needs --data: a WAM-Diff2 file whose samples have scenes", param_hint="--judge")
    from wamdiff.eval.bench_judge import judge_for_data

    try:
        return judge_for_data(data, n, fmt, required=bool(judge))
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--data") from None


def grammar(
    path: Path = typer.Argument(..., help="Checkpoint directory (its tokenizer is used)."),
    fmt: FixedWidthFormat = typer.Option("fixed1", "--format", "--fmt", help="Fixed-width answer format to check."),
) -> None:
    """Whether a fixed-width format has stable token positions under a checkpoint's tokenizer (its grammar).

    `wamdiff model grammar`: wired by the root CLI, since it needs the decoding and driving layers."""
    from rich.console import Console
    from transformers import AutoTokenizer

    from wamdiff.decoding.grammar import Grammar
    from wamdiff.driving.answer_format import answer_format
    from wamdiff.errors import UserError
    from wamdiff.models.recorded import is_model_dir
    from wamdiff.models.tokenizer import add_special_tokens

    if not is_model_dir(path):
        raise UserError(f"{path}: not a model directory (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    add_special_tokens(tokenizer)  # as load_model does: the bin tokens and the mask
    g = Grammar.for_format(tokenizer, answer_format(fmt))  # ValueError names the format, the tokenizer and the characters
    widths = [len(c) for c in g.classes[:-1]]
    Console().print(f"{fmt}: {len(widths)} answer tokens + end of turn; allowed tokens per position: "
                  + " ".join(map(str, widths[:24])) + (" ..." if len(widths) > 24 else ""))
