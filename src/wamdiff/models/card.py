"""The model card of a checkpoint: `README.md` with Hugging Face front matter, so a converted or exported model
describes itself (base model, block size, decode settings, license, how to load it with its block-causal attention).

Written by `wamdiff model convert`, by the pipeline's export (`orchestration.pipeline.export_checkpoints`) and by
`wamdiff model card`. Figures are never written by hand: the measured table is taken from a measured CSV (the
export's `pipeline_summary.csv`, or the `front.csv` of `wamdiff eval front`) and the commit and machine from a
`PROVENANCE.json`, and left out when there is none.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import yaml

from wamdiff.models.recorded import recorded_diffusion

CARD_FILE = "README.md"
TAGS = ["wamdiff", "block-diffusion", "masked-diffusion", "autonomous-driving", "trajectory-planning"]
ONE_LINE_LOAD = 'from wamdiff.models import load_model; model, tokenizer = load_model("{path}")'
# summary.csv column -> card heading (the columns a reader of one model wants; those absent are left out)
# (pipeline summary.csv or eval front's front.csv)
COLUMNS = {"planner": "model", "pdms": "PDMS", "d_pdms": "Δ PDMS (paired)", "pdms_ci": "PDMS ±95 %", "c": "comfort",
           "l2_4s": "L2 @4 s (m)", "d_l2_4s": "Δ L2 @4 s (paired)",
           "cl_success": "closed-loop success %", "ms_plan_b1": "ms/plan B1", "plans_s_b1": "plans/s B1",
           "plans_s_b8": "plans/s B8", "plans_s_b32": "plans/s B32", "tpf_b1": "tokens/forward B1",
           "x_ar_b1": "× AR B1", "x_ar_b8": "× AR B8"}
# a measured CSV's model rows: their spec names a pipeline stage (summary) or a checkpoint (front)
MODEL_SPECS = ("stage:", "model:")


def front_matter(directory: str | Path) -> dict:
    """The YAML front matter of `directory/README.md` ({} when there is no card or it has none)."""
    path = Path(directory) / CARD_FILE
    try:
        text = path.read_text()
    except OSError:
        return {}
    if not text.startswith("---\n"):
        return {}
    head, sep, _ = text[4:].partition("\n---")
    if not sep:
        return {}
    try:
        got = yaml.safe_load(head)
    except yaml.YAMLError:
        return {}
    return got if isinstance(got, dict) else {}


def measured_rows(summary_csv: str | Path, stage: str | None) -> list[dict]:
    """The model rows of a measured CSV (spec `stage:...` or `model:...`), the row of `stage` first (a summary's row
    whose spec names that stage, or a row of that `planner` name); [] without the file."""
    path = Path(summary_csv)
    if not path.is_file():
        return []
    with path.open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if r.get("spec", "").startswith(MODEL_SPECS)]

    def mine(r):
        if stage is None:
            return False
        if r["spec"].startswith("stage:"):
            return r["spec"][len("stage:"):].split(",")[0] == stage
        return r.get("planner") == stage
    return [r | {"this model": mine(r)} for r in sorted(rows, key=lambda r: not mine(r))]


def _cell(key: str, value: str) -> str:
    if value in ("", None):
        return ""
    if key in ("planner",):
        return value
    try:
        x = float(value)
    except ValueError:
        return value
    return f"{x:.2f}" if abs(x) < 100 else f"{x:.1f}"


def _table(rows: list[dict]) -> list[str]:
    keys = [k for k in COLUMNS if any(r.get(k) not in (None, "") for r in rows)]
    # a front's interval is the paired difference's (against its reference row), not the PDMS's own
    heads = {**COLUMNS, "pdms_ci": "Δ PDMS ±95 %"} if "d_pdms" in keys else COLUMNS
    lines = ["| " + " | ".join(heads[k] for k in keys) + " |", "|" + "---|" * len(keys)]
    for r in rows:
        cells = [_cell(k, r.get(k, "")) for k in keys]
        if r.get("this model"):
            cells[0] = f"**{cells[0]}** (this model)"
        lines.append("| " + " | ".join(cells) + " |")
    return lines


MEASURED_FROM = "From the pipeline's report (simulated test split; speed on the machine below):"


def _options(options: dict) -> str:
    """Recorded decode options as a spec writes them: `block=17, steps=4`."""
    return ", ".join(f"{k}={v}" for k, v in options.items())


def model_card(config: dict, *, name: str, base_model: str | None = None, license: str = "mit",
               measured: list[dict] | None = None, provenance: dict | None = None, source: str | None = None,
               measured_from: str = MEASURED_FROM) -> str:
    """The card's text for a checkpoint whose `config.json` is `config`."""
    diffusion = recorded_diffusion(config)
    decode, text_decode = config.get("wamdiff_decode") or {}, config.get("wamdiff_text_decode") or {}
    vision = "vision_config" in config
    meta = {"license": license, "library_name": "transformers",
            "pipeline_tag": "image-text-to-text" if vision else "text-generation",
            "tags": TAGS + [config.get("model_type", "")] if config.get("model_type") else list(TAGS)}
    if base_model:
        meta["base_model"] = base_model
    lines = ["---", yaml.safe_dump(meta, sort_keys=False).rstrip(), "---", "", f"# {name}", ""]
    if diffusion:
        lines += [f"A block-causal masked-diffusion driving model made with wamdiff: {config.get('model_type', 'its')} "
                  f"architecture, trained on blocks of {diffusion.get('block_size')} answer tokens (decoded several "
                  "per forward; the decode below may set another block size), attending causally across blocks and "
                  "fully within one."]
    else:
        lines += ["An autoregressive driving model as wamdiff uses it (the conversion's input)."]
    if base_model or source:
        lines += ["", f"Converted from `{base_model or source}`."]
    lines += ["", "## Settings", "", "| setting | value |", "|---|---|"]
    if diffusion:
        lines += [f"| block size | {diffusion.get('block_size')} |", f"| mask token id | {diffusion.get('mask_token_id')} |",
                  f"| prediction | {diffusion['prediction']} |"]
    lines += [f"| decode (`wamdiff_decode`) | {_options(decode) or 'wamdiff defaults'} |"]
    if text_decode:
        lines += [f"| free-text decode, over it (`wamdiff_text_decode`) | {_options(text_decode)} |"]
    lines += [f"| weights dtype | {config.get('dtype') or config.get('torch_dtype') or 'float32'} |"]
    lines += ["", "## Load", "", "```python", ONE_LINE_LOAD.format(path="path/to/this/folder"), "```", "",
              "`load_model` returns the Hugging Face model with wamdiff's block-causal attention installed and the "
              "tokenizer with the mask token. A plain `from_pretrained` loads the same weights with causal attention, "
              "which decodes as the autoregressive model, not as this one.",
              "Plan with it: `wamdiff eval pdms --planner model:path/to/this/folder`; serve it: "
              "`wamdiff serve --checkpoint path/to/this/folder`."]
    if measured:
        lines += ["", "## Measured", "", measured_from, "", *_table(measured)]
        if provenance:
            where = ", ".join(f"{k} {provenance[k]}" for k in ("commit", "machine", "cpus", "threads", "torch")
                              if provenance.get(k) is not None)
            lines += ["", f"Measured at {where}."]
    lines += ["", "## License", "", f"`{license}`" + (" (the wamdiff code is MIT; these weights follow the license of "
                                                      "the model they were converted from)." if license != "mit" else
                                                      ", as the wamdiff code that produced it.")]
    return "\n".join(lines) + "\n"


def write_model_card(directory: str | Path, *, base_model: str | None = None, license: str | None = None,
                     summary_csv: str | Path | None = None, provenance_json: str | Path | None = None,
                     stage: str | None = None, source: str | Path | None = None,
                     measured_from: str = MEASURED_FROM) -> Path:
    """Write `directory/README.md` from its `config.json`, a measured CSV (`measured_rows`) and provenance when given.
    base_model and license default to those of the source's own card (`source/README.md`), else none and "other"
    (a converted model keeps its base model's license)."""
    directory = Path(directory)
    config = json.loads((directory / "config.json").read_text())
    inherited = front_matter(source) if source is not None else {}
    base_model = base_model or inherited.get("base_model")
    license = license or inherited.get("license") or ("other" if source is not None else "mit")
    measured = measured_rows(summary_csv, stage) if summary_csv is not None else []
    provenance = None
    if measured and provenance_json is not None and Path(provenance_json).is_file():
        provenance = json.loads(Path(provenance_json).read_text())
    text = model_card(config, name=stage or directory.name, base_model=base_model, license=license, measured=measured,
                      provenance=provenance, source=str(source) if source is not None else None,
                      measured_from=measured_from)
    path = directory / CARD_FILE
    path.write_text(text)
    return path
