"""Recipe = one YAML file describing a training run; this module loads, merges, overrides and validates it.

A recipe has sections `model`, `data`, `optim`, `diffusion`, `teacher`, `eval`, `checkpoint`, `log` plus the
top-level `name`, `kind` (ar_sft | block | distill_block | distill_model), `seed` and `output_dir`. A recipe
may name a `base:` YAML (path relative to itself; or a list of them, later ones winning) whose values it
overrides, so the block curriculum stages share one file of defaults and the LoRA recipes
(`configs/recipes/lora/`) lay one memory setting over each stage; files are read by `wamdiff.yamlconfig` (the one
reader of recipes, pipeline configs and studies), and a key that is no recipe field is refused naming its file.
`--set key.sub=value` overrides are parsed as YAML scalars.

Precedence, lowest first: the dataclass defaults below < `configs/recipes/_common.yaml` < the recipe (its other bases,
then its own values) < the overrides: `--set` for `wamdiff train`; in a pipeline stage, what the pipeline sets
(`orchestration.pipeline.PIPELINE_SET_FIELDS`: name, output dir, seed, threads, data, init, teacher), then the
stage's `set:` on top (printed and logged when the stage starts).
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import Any

import yaml

from wamdiff.errors import UserError
from wamdiff.names import PREDICTIONS
from wamdiff.yamlconfig import merge, read_config


class RecipeKind(str, Enum):
    """What a recipe trains. Code asks the kind what it means (`diffusion`, `distills`); nothing else spells it."""

    AR_SFT = "ar_sft"  # next-token SFT of the AR VLA
    BLOCK = "block"  # block-causal masked diffusion at block size B
    DISTILL_BLOCK = "distill_block"  # same model family, a diffusion teacher at a smaller B (B/2 by default)
    DISTILL_MODEL = "distill_model"  # a larger teacher (diffusion or AR) into a smaller student at B

    def __str__(self) -> str:
        return self.value

    @property
    def diffusion(self) -> bool:
        """The student is a block-diffusion model (converted, decoded block by block)."""
        return self is not RecipeKind.AR_SFT

    @property
    def distills(self) -> bool:
        """The loss compares the student with a frozen teacher."""
        return self in (RecipeKind.DISTILL_BLOCK, RecipeKind.DISTILL_MODEL)

    def default_teacher_block_size(self, block_size: int) -> int:
        return max(1, block_size // 2) if self is RecipeKind.DISTILL_BLOCK else block_size


@dataclass
class DataSource:
    path: str
    weight: float = 1.0  # relative share of training samples drawn from this file
    # false: a distillation's teacher does not score this file's samples; they learn from their labels alone (the
    # masked CE at full weight). For data the teacher has not learnt: the conversion's B16 teacher answers 0 of 200
    # meta-action questions right (docs/concepts/loss.md)
    distil: bool = True


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]  # the language model's
WEIGHT_DTYPES = ("fp32", "bf16")


@dataclass
class LoraSection:
    rank: int = 0  # 0 = off (full fine-tuning); > 0: low-rank adapters (peft), the base weights frozen
    alpha: float = 32.0
    dropout: float = 0.0
    targets: list[str] = field(default_factory=lambda: list(LORA_TARGETS))  # module names; the vision tower has none
    train_added_tokens: bool = True  # also train the embedding rows of wamdiff's tokens (mask, bins, specials)


@dataclass
class ModelSection:
    init: str | None = None  # checkpoint directory (save_model layout, or a local HF Qwen3/Qwen3-VL dir)
    preset: str | None = None  # tiny | student | teacher, when starting from scratch
    vision: bool = True
    block_size: int = 1  # ignored by ar_sft
    dtype: str = "fp32"  # the weights' storage: fp32 | bf16 (frozen bf16 weights compute in fp32 on CPUs without bf16)
    gradient_checkpointing: bool = False  # recompute each layer in backward: activations of one layer at a time
    grow: int = 1  # > 1: the init checkpoint's text decoder stacked this many times deep (`models.grow`): a larger
    # teacher that starts as exactly the init model
    lora: LoraSection = field(default_factory=LoraSection)


@dataclass
class DataSection:
    train: list[DataSource] = field(default_factory=list)
    val: str | None = None
    image_root: str | None = None  # where relative image paths resolve (default: each JSON file's folder)
    max_train_samples: int | None = None  # per source, after reading (small runs / tests)
    max_val_samples: int | None = 64


@dataclass
class OptimSection:
    steps: int = 1000
    batch_size: int = 8  # GLOBAL batch per optimiser step (split across processes and accumulation)
    grad_accum: int = 1
    lr: float = 1e-4  # language model (and everything that is not the vision tower)
    vision_lr: float | None = None  # vision tower; None = same as lr
    weight_decay: float = 0.0
    betas: tuple[float, float] = (0.9, 0.95)
    eps: float = 1e-8
    warmup_steps: int = 0
    min_lr_ratio: float = 0.1  # cosine decays to lr * min_lr_ratio
    grad_clip: float | None = 1.0
    mixed_precision: str = "bf16"  # bf16 | no
    ema_decay: float | None = None  # keep an exponential moving average of the weights; final/ = the average


@dataclass
class DiffusionSection:
    min_rate: float = 0.05  # per-block mask rate clipped to >= this (bounds the 1/t weight)
    complementary: bool = False  # add the complementary-masked copy of each sample
    full_mask_copy: bool = False  # add a copy of each sample with every answer token masked (a decode's first step)
    # > 0: a masked target on a value grid (delta displacements, bins) is a Gaussian this many grid steps wide over
    # its neighbours instead of one-hot (`diffusion.losses.grid_cross_entropy`); 0 = one-hot
    ordinal_sigma: float = 0.0
    # what the logits at answer column j predict (`models.convert.DiffusionSettings.prediction`): "same" (token j) or
    # "shifted" (token j + 1, the AR model's own reading). Set when an AR model is converted; None keeps a diffusion
    # init's own (an AR init then converts to "same"); a diffusion init of the other kind is an error.
    prediction: str | None = None


@dataclass
class TeacherSection:
    path: str | None = None
    kind: str = "diffusion"  # diffusion | ar (distill_model only)
    block_size: int | None = None  # None: B/2 for distill_block, B for distill_model
    kd_ratio: float = 1.0  # loss = kd_ratio * JSD + (1 - kd_ratio) * masked CE
    beta: float = 0.5
    temperature: float = 1.0
    onpolicy_every: int = 0  # distill_model: every N steps the student decodes x_0 itself (0 = off)
    onpolicy_steps_per_block: int | None = None  # fixed-steps decode for the refresh (None: block size)
    # the masked CE term on refreshed batches, whose x_0 is the student's own decode (true: the student also learns
    # to repeat its own answers; false: those batches learn from the teacher alone, as on-policy distillation does)
    onpolicy_ce: bool = True


@dataclass
class QASection:
    path: str | None = None
    max_samples: int = 32
    at_start: bool = True
    at_end: bool = True
    max_new_tokens: int = 64
    batch_size: int = 8


@dataclass
class EvalSection:
    every: int = 0  # steps between validation passes (0 = only at the start/end)
    batch_size: int = 8
    at_start: bool = False  # validation before the first step (the converted model before training)
    at_end: bool = True
    qa: QASection = field(default_factory=QASection)


@dataclass
class CheckpointSection:
    every: int = 0  # steps between resumable checkpoints (0 = none besides the final model)
    keep_last: int = 2


@dataclass
class LogSection:
    every: int = 10
    tensorboard: bool = True
    progress: bool = True


@dataclass
class Recipe:
    name: str = "run"
    kind: RecipeKind = RecipeKind.AR_SFT
    seed: int = 0
    output_dir: str = "runs/run"
    threads: int | None = None  # torch threads per process (None: leave as is)
    model: ModelSection = field(default_factory=ModelSection)
    data: DataSection = field(default_factory=DataSection)
    optim: OptimSection = field(default_factory=OptimSection)
    diffusion: DiffusionSection = field(default_factory=DiffusionSection)
    teacher: TeacherSection = field(default_factory=TeacherSection)
    eval: EvalSection = field(default_factory=EvalSection)
    checkpoint: CheckpointSection = field(default_factory=CheckpointSection)
    log: LogSection = field(default_factory=LogSection)

    @property
    def block_size(self) -> int:
        return int(self.model.block_size) if self.kind.diffusion else 1

    @property
    def teacher_block_size(self) -> int:
        """The teacher's block size: the configured one, else B/2 (distill_block) or B (distill_model)."""
        if self.teacher.block_size is not None:
            return int(self.teacher.block_size)
        return self.kind.default_teacher_block_size(self.block_size)

    def to_dict(self) -> dict:
        return {**dataclasses.asdict(self), "kind": self.kind.value}  # plain values (YAML / JSON)


# ----------------------------------------------------------------------------------------------- loading


def read_recipe_yaml(path: str | Path) -> dict:
    """Read a recipe YAML with its `base:` chain resolved (`wamdiff.yamlconfig.read_config`: bases first, the file's
    own values win), each file's keys checked against the `Recipe` fields. A path that is not in the working
    directory is looked up in the installed package's configs (`configs/recipes/...`)."""
    from wamdiff.resources import config_file

    return read_config(config_file(path), check=lambda raw, where: check_recipe_keys(raw, str(where)))


def check_recipe_keys(values: dict, where: str, cls=None, prefix: str = "") -> None:
    """A UserError naming `where` and the dotted key of the first key in `values` (nested or dotted, as in a recipe
    file or a stage's `set:`) that is no `Recipe` field."""
    cls = cls or Recipe
    known = {f.name: f for f in dataclasses.fields(cls)}
    for key, value in values.items():
        head, _, rest = str(key).partition(".")
        name = head[: -len("_extra")] if head.endswith("_extra") else head
        if name not in known:
            section = f" {prefix.rstrip('.')}" if prefix else ""
            raise UserError(f"{where}: unknown key {prefix + str(key)!r} (recipe{section} fields: {', '.join(sorted(known))})")
        f = known[name]
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if not dataclasses.is_dataclass(default):
            if rest:
                raise UserError(f"{where}: unknown key {prefix + str(key)!r} (recipe field {prefix + name} is not a section)")
            continue
        if rest:
            check_recipe_keys({rest: value}, where, type(default), f"{prefix}{name}.")
        elif isinstance(value, dict):
            check_recipe_keys(value, where, type(default), f"{prefix}{name}.")


def parse_overrides(items: list[str] | None) -> dict:
    """`["optim.lr=3e-4", "model.block_size=8"]` -> nested dict; values parsed as YAML scalars/lists."""
    out: dict = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set {item!r}: expected key=value (e.g. optim.lr=3e-4)")
        key, value = item.split("=", 1)
        set_dotted(out, key.strip(), yaml.safe_load(value))
    return out


def set_dotted(d: dict, key: str, value: Any) -> None:
    parts = key.split(".")
    for p in parts[:-1]:
        d = d.setdefault(p, {})
        if not isinstance(d, dict):
            raise ValueError(f"override {key!r}: {p!r} is not a section")
    d[parts[-1]] = value


def nest_dotted(overrides: dict | None) -> dict:
    """Accept both nested dicts and flat {'optim.lr': 1e-3} keys (the Python API takes either)."""
    out: dict = {}
    for k, v in (overrides or {}).items():
        if isinstance(v, dict):
            v = nest_dotted(v)
        if "." in k:
            nested: dict = {}
            set_dotted(nested, k, v)
            out = merge(out, nested)
        else:
            out = merge(out, {k: v})
    return out


def _build(cls, values: Any, where: str):
    """Dataclass from a mapping, naming the unknown key or wrong type precisely."""
    if not isinstance(values, dict):
        raise ValueError(f"recipe field {where}: expected a mapping, got {values!r}")
    known = {f.name: f for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ValueError(f"recipe field {where}: unknown key(s) {unknown}; allowed: {sorted(known)}")
    kwargs = {}
    for name, value in values.items():
        f = known[name]
        sub = f"{where}.{name}" if where else name
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        if isinstance(default, RecipeKind):
            try:
                kwargs[name] = RecipeKind(value)
            except ValueError:
                raise ValueError(f"recipe field {sub}: {value!r} is not one of {[k.value for k in RecipeKind]}") from None
        elif dataclasses.is_dataclass(default):
            kwargs[name] = _build(type(default), value, sub)
        elif name == "train" and cls is DataSection:
            kwargs[name] = _data_sources(value, sub)
        elif name == "betas":
            kwargs[name] = tuple(float(b) for b in value)
        elif isinstance(default, bool):
            if not isinstance(value, bool):
                raise ValueError(f"recipe field {sub}: expected true/false, got {value!r}")
            kwargs[name] = value
        elif isinstance(default, float) and value is not None:
            try:
                kwargs[name] = float(value)
            except (TypeError, ValueError):
                raise ValueError(f"recipe field {sub}: expected a number, got {value!r}") from None
        elif isinstance(default, int) and value is not None:
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"recipe field {sub}: expected an integer, got {value!r}")
            kwargs[name] = value
        else:
            kwargs[name] = value
    return cls(**kwargs)


def _data_sources(value: Any, where: str) -> list[DataSource]:
    if isinstance(value, (str, dict)):
        value = [value]
    out = []
    for i, v in enumerate(value or []):
        if isinstance(v, str):
            out.append(DataSource(path=v))
        else:
            out.append(_build(DataSource, v, f"{where}[{i}]"))
    return out


def validate(r: Recipe) -> Recipe:
    def bad(field_: str, msg: str):
        raise ValueError(f"recipe {r.name!r} field {field_}: {msg}")

    if not r.data.train:
        bad("data.train", "no training file given")
    if any(s.weight < 0 for s in r.data.train) or sum(s.weight for s in r.data.train) <= 0:
        bad("data.train", "mix weights must be >= 0 with a positive sum")
    if r.model.init is None and r.model.preset is None:
        bad("model", "give model.init (checkpoint) or model.preset")
    if r.block_size < 1:
        bad("model.block_size", f"must be >= 1, got {r.block_size}")
    if r.model.grow < 1:
        bad("model.grow", f"must be >= 1 (1 = as loaded), got {r.model.grow}")
    if r.model.grow > 1 and r.model.init is None:
        bad("model.grow", "grows a trained model: give model.init")
    if r.optim.steps < 1 or r.optim.batch_size < 1 or r.optim.grad_accum < 1:
        bad("optim", "steps, batch_size and grad_accum must be >= 1")
    if r.model.dtype not in WEIGHT_DTYPES:
        bad("model.dtype", f"{r.model.dtype!r} is not one of {WEIGHT_DTYPES}")
    lora = r.model.lora
    if lora.rank < 0:
        bad("model.lora.rank", f"must be >= 0 (0 = off), got {lora.rank}")
    if lora.rank and (lora.alpha <= 0 or not 0.0 <= lora.dropout < 1.0):
        bad("model.lora", f"alpha must be > 0 and dropout in [0, 1), got alpha={lora.alpha}, dropout={lora.dropout}")
    if lora.rank and (not isinstance(lora.targets, list) or not lora.targets or not all(isinstance(t, str) for t in lora.targets)):
        bad("model.lora.targets", f"expected a non-empty list of module names, got {lora.targets!r}")
    if r.optim.mixed_precision not in ("bf16", "no", "fp32"):
        bad("optim.mixed_precision", f"{r.optim.mixed_precision!r} is not bf16 | no")
    if not 0.0 < r.diffusion.min_rate <= 1.0:
        bad("diffusion.min_rate", "must be in (0, 1]")
    if r.diffusion.prediction is not None and r.diffusion.prediction not in PREDICTIONS:
        bad("diffusion.prediction", f"{r.diffusion.prediction!r} is not one of {', '.join(PREDICTIONS)}")
    if r.diffusion.ordinal_sigma < 0:
        bad("diffusion.ordinal_sigma", f"must be >= 0 (0 = one-hot targets), got {r.diffusion.ordinal_sigma}")
    if r.optim.ema_decay is not None and not 0.0 <= r.optim.ema_decay < 1.0:
        bad("optim.ema_decay", f"must be in [0, 1) (or null: off), got {r.optim.ema_decay}")
    if r.optim.ema_decay is not None and lora.rank:
        bad("optim.ema_decay", "an average of LoRA adapters is not supported; drop one of model.lora / optim.ema_decay")
    if r.kind.distills:
        if not r.teacher.path:
            bad("teacher.path", f"{r.kind} needs a teacher checkpoint")
        if r.teacher.kind not in ("diffusion", "ar"):
            bad("teacher.kind", f"{r.teacher.kind!r} is not diffusion | ar")
        if r.kind is RecipeKind.DISTILL_BLOCK and r.teacher.kind != "diffusion":
            bad("teacher.kind", "distill_block is same-paradigm: the teacher must be a diffusion model")
        if r.teacher_block_size < 1:
            bad("teacher.block_size", "must be >= 1")
        if not 0.0 <= r.teacher.kd_ratio <= 1.0:
            bad("teacher.kd_ratio", "must be in [0, 1]")
    return r


def load_recipe(recipe: dict | str | Path, overrides: dict | list[str] | None = None) -> Recipe:
    """Recipe from a YAML path or a dict, with overrides (nested/flat dict or `key=value` strings)."""
    raw = read_recipe_yaml(recipe) if isinstance(recipe, (str, Path)) else copy.deepcopy(recipe)
    if isinstance(recipe, dict) and "base" in raw:
        raise ValueError("recipe dict: `base:` is only supported in YAML files")
    over = parse_overrides(overrides) if isinstance(overrides, list) else nest_dotted(overrides)
    check_recipe_keys(over, "--set" if isinstance(overrides, list) else "recipe overrides")
    raw = merge(raw, over)
    return validate(_build(Recipe, raw, ""))
