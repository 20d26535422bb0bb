"""`wamdiff model ...`: build presets, convert AR checkpoints to block diffusion, inspect checkpoints."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from wamdiff.cli_choices import Prediction

app = typer.Typer(help="Build model presets or a stand-in of a real Qwen3-VL, convert AR checkpoints to block diffusion, "
                       "inspect checkpoints.", no_args_is_help=True)
console = Console()


def _show(info: dict, title: str) -> None:
    table = Table(title=title, show_header=False)
    for k, v in info.items():
        table.add_row(k, f"{v:,}" if isinstance(v, int) else str(v))
    console.print(table)


@app.command()
def build(
    preset: str = typer.Option("student", help="Size preset: a name in wamdiff.models.PRESETS (an unknown one is refused with the list)."),
    out: Path = typer.Option(..., help="Output directory."),
    text_only: bool = typer.Option(False, "--text-only", help="Qwen3ForCausalLM instead of Qwen3-VL."),
    seed: int = typer.Option(0, help="Initialisation seed."),
) -> None:
    """Build a randomly initialised model + tokenizer (+ image processor) from a preset and save it."""
    from wamdiff.models import build_model, build_tokenizer, model_info, save_model

    tokenizer = build_tokenizer()
    save_model(build_model(preset, tokenizer, vision=not text_only, seed=seed), tokenizer, out)
    _show(model_info(out), f"built {out}")


@app.command()
def standin(
    out: Path = typer.Option(..., help="Output directory (a Hugging Face checkpoint layout)."),
    size: str = typer.Option("qwen3-vl-2b", help="Published config sizes to copy."),
    text_layers: int = typer.Option(None, help="Cut the text decoder to this many layers (default: published depth)."),
    vision_layers: int = typer.Option(None, help="Cut the vision tower to this many blocks (default: published depth)."),
    processor: bool = typer.Option(True, help="Write a preprocessor_config.json shaped like the published one."),
    chat_template: bool = typer.Option(True, help="Give its tokenizer Qwen's published chat template (as a real "
                                                  "checkpoint has); --no-chat-template: none (wamdiff's layout)."),
    seed: int = typer.Option(0, help="Initialisation seed."),
) -> None:
    """A random-weight stand-in for a real Qwen3-VL checkpoint (published sizes, own Qwen2-style tokenizer)."""
    from wamdiff.models import model_info
    from wamdiff.models.standin import build_standin

    try:
        build_standin(out, size, text_layers=text_layers, vision_layers=vision_layers, processor_file=processor, seed=seed,
                      chat_template=chat_template)
    except ValueError as err:
        raise typer.BadParameter(str(err)) from err
    _show(model_info(out), f"stand-in {size} -> {out}")


@app.command()
def convert(
    src: Path = typer.Argument(..., help="AR (or diffusion) checkpoint directory."),
    block_size: int = typer.Option(32, min=1, help="Diffusion block size B."),
    out: Path = typer.Option(..., help="Output directory."),
    prediction: Prediction = typer.Option(None, help="Which token an answer position's logits predict: same (that "
                                                     "position's) or shifted (the next one's, the AR model's reading). "
                                                     "Default: a diffusion source's own, else same."),
    base_model: str = typer.Option(None, help="Model card: the Hugging Face id of the base model (default: the "
                                              "source's own card's base_model, if any)."),
    license: str = typer.Option(None, help="Model card: the weights' license (default: the source card's, else other)."),
    chat_template: Path = typer.Option(None, help="A Jinja chat template file the prompts are built with from now "
                                                  "on (your VLA's fine-tuning layout); saved as the converted "
                                                  "tokenizer's own. Default: the source tokenizer's template, else "
                                                  "wamdiff's layout."),
) -> None:
    """Convert a checkpoint to block diffusion (settings in its config; weights unchanged) with a model card."""
    from wamdiff.models import load_model, model_info, save_model, to_diffusion
    from wamdiff.models.card import write_model_card
    from wamdiff.models.processor import read_chat_template

    template = None
    if chat_template is not None:
        try:
            template = read_chat_template(chat_template)
        except ValueError as err:
            raise typer.BadParameter(str(err), param_hint="--chat-template") from None
    model, tokenizer = load_model(src, dtype="auto")  # weights unchanged, dtype included
    if template is not None:
        tokenizer.chat_template = template  # save_pretrained writes it (chat_template.jinja): every later load has it
    try:
        model = to_diffusion(model, block_size, tokenizer=tokenizer, prediction=prediction)
    except ValueError as err:
        raise typer.BadParameter(str(err), param_hint="--prediction") from None
    save_model(model, tokenizer, out)  # + the source's image processor
    write_model_card(out, base_model=base_model, license=license, source=src)
    _show(model_info(out), f"converted {src} -> {out}")


@app.command()
def card(
    path: Path = typer.Argument(..., help="Checkpoint directory (its README.md is rewritten)."),
    measured: Path = typer.Option(None, help="A measured CSV for the card's table: `wamdiff eval front`'s front.csv "
                                             "or a pipeline summary.csv (its model rows)."),
    row: str = typer.Option(None, help="The row of --measured that is this model (default: the folder's name)."),
    provenance: Path = typer.Option(None, help="A PROVENANCE.json whose commit and machine the card names."),
    measured_from: str = typer.Option(None, help="The sentence above the table: where the figures come from."),
) -> None:
    """Write a checkpoint's model card again, with a measured table; base model and license kept from its card."""
    from wamdiff.errors import UserError
    from wamdiff.models.card import MEASURED_FROM, front_matter, measured_rows, write_model_card
    from wamdiff.models.recorded import is_model_dir

    if not is_model_dir(path):
        raise UserError(f"{path}: not a checkpoint (no config.json)")
    name = row or path.name
    if measured is None and row is not None:
        raise UserError("--row names a row of --measured: give --measured too")
    if measured is not None:
        if not measured.is_file():
            raise UserError(f"--measured {measured}: no such file")
        if not any(r["this model"] for r in measured_rows(measured, name)):
            raise UserError(f"--measured {measured}: no model row named {name!r}; name it with --row")
    if provenance is not None and not provenance.is_file():
        raise UserError(f"--provenance {provenance}: no such file")
    own = front_matter(path)
    written = write_model_card(path, base_model=own.get("base_model"), license=own.get("license"),
                               summary_csv=measured, provenance_json=provenance, stage=name,
                               measured_from=measured_from or MEASURED_FROM)
    console.print(f"wrote {written}")


@app.command()
def average(
    sources: list[Path] = typer.Argument(..., help="Two or more checkpoint directories: fine-tunes of one model."),
    out: Path = typer.Option(..., help="Output directory."),
) -> None:
    """The uniform average of the checkpoints' weights (a model soup), saved as a checkpoint of its own."""
    from wamdiff.models import model_info, save_model
    from wamdiff.models.average import average_weights

    model, tokenizer = average_weights(sources)
    save_model(model, tokenizer, out)  # + the first checkpoint's image processor
    _show(model_info(out), f"average of {len(sources)} checkpoints -> {out}")


@app.command()
def info(
    path: Path = typer.Argument(..., help="Checkpoint directory."),
    flops: bool = typer.Option(True, help="Also count the FLOPs of one plan (prompt forward, AR and block steps)."),
    block_size: int = typer.Option(17, help="Queries per block step in the FLOP count (17: one block holds the "
                                             "delta answer)."),
    steps: int = typer.Option(4, help="Block steps per plan in the FLOP count."),
) -> None:
    """Parameters, sizes and diffusion settings of a checkpoint; with --flops the FLOPs of one plan."""
    from wamdiff.models import load_model, model_info
    from wamdiff.models.flops import plan_flops

    info = model_info(path)
    if flops:
        model, tokenizer = load_model(path)
        info.update({f"flops_{k}" if k != "prompt_tokens" else k: v
                     for k, v in plan_flops(model, tokenizer, block_size=block_size, steps=steps).items()})
    _show(info, str(path))


@app.command()
def verify(
    path: Path = typer.Argument(..., help="Checkpoint directory."),
    record: bool = typer.Option(False, "--record", help="Record the weights as they are now (SHA256SUMS) instead of "
                                                        "checking them: only for weights you trust."),
) -> None:
    """Check the sha256 of a checkpoint's weight files against its SHA256SUMS and, for an exported checkpoint, the
    `weights_sha256` of its stage in ../PROVENANCE.json. A mismatch is a one-line error (exit 2)."""
    from wamdiff.errors import UserError
    from wamdiff.models.checksums import read_checksums, record_checksums, verify_checksums

    if not path.is_dir():
        raise UserError(f"{path}: not a directory")
    if record:
        for name, digest in record_checksums(path).items():
            console.print(f"{digest}  {path / name}")
        return
    recorded = read_checksums(path)
    if recorded is None:
        raise UserError(f"{path}: no SHA256SUMS (saved before weights were recorded, or not by wamdiff); record the "
                        f"weights you trust with `wamdiff model verify {path} --record`")
    verify_checksums(path, recorded)
    sources = ["SHA256SUMS"]
    provenance = path.resolve().parent / "PROVENANCE.json"
    if provenance.is_file():  # an exported checkpoint: its stage's entry must agree too
        import json

        try:
            stage = (json.loads(provenance.read_text()).get("stages") or {}).get(path.resolve().name) or {}
        except ValueError as err:
            raise UserError(f"{provenance}: not valid JSON ({err})") from None
        if stage.get("weights_sha256"):
            verify_checksums(path, stage["weights_sha256"], source=str(provenance))
            sources.append(str(provenance))
    console.print(f"{path}: {len(recorded)} weight file(s) match the sha256 recorded in {' and '.join(sources)}")
