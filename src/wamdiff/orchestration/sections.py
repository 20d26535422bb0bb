"""The pipeline config's `data:`, `evaluate:` and `bench:` sections, typed: parsed once when the config loads
(`Pipeline.load`: `p.data`, `p.evaluate`, `p.bench`), each default written once here, a wrong type or an unknown key
refused as one line naming the file and the field (`parse_section`).

A stage's fingerprint still hashes the section as the YAML wrote it (`p.cfg["data"]`, `p.cfg["bench"]`, ...), not these
models: a default added here later must not re-run the finished stages of existing runs.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal, Optional, Union

from pydantic import (BaseModel, ConfigDict, Field, NonNegativeFloat, NonNegativeInt, PositiveInt, ValidationError,
                      field_validator, model_validator)

from wamdiff.decoding.bench_settings import PROMPTS
from wamdiff.errors import UserError
from wamdiff.names import ATTENTIONS, CACHES, FAMILIES, FORMATS, GRID_DTYPES, LEAN_MODES

Family = Literal[FAMILIES]  # type: ignore[valid-type]
Format = Literal[FORMATS]  # type: ignore[valid-type]


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class PerFamily(_Section):
    """Scenes per road family of each split; a run needs only the splits it makes (the demo: `test`)."""

    train: Optional[PositiveInt] = None
    val: Optional[PositiveInt] = None
    test: Optional[PositiveInt] = None


class World(BaseModel):
    """Scenes of other world settings: the `WorldConfig` fields (density, speed_scale, t0_spread_s, ...) passed to
    the world as written, which checks them when the scenes are made; `per_family` overrides the split's count and
    `families` the road families (`data.families` when not given)."""

    model_config = ConfigDict(extra="allow")
    per_family: Optional[PositiveInt] = None
    families: Optional[list[Family]] = None

    @field_validator("families")
    @classmethod
    def _some_distinct(cls, v):
        if v is not None and (not v or len(set(v)) != len(v)):
            raise ValueError("give one or more distinct road families")
        return v

    @property
    def settings(self) -> dict[str, Any]:
        return dict(self.model_extra or {})


class TrainVariant(World):
    """`data.train_variants.<name>`: training scenes of other world settings. `opt_in`: only a stage that names the
    set (`train_variants: {NAME: w}`) mixes it in; `train_variants: w` takes every other set, so a set added for a new
    stage leaves the mixture of the stages written before it as it was."""

    opt_in: bool = False


class Phases(World):
    """`data.phases`: training scenes whose t0 is spread along the routes, `per_family` of them per family."""

    per_family: PositiveInt


class DataSection(_Section):
    """`data:` the scenes every stage trains and is evaluated on (`pipeline.stage_data`)."""

    families: list[Family] = Field(default_factory=lambda: list(FAMILIES))
    fmt: Format = "text2"  # the main dataset's answer format
    formats: list[Format] = []  # the same scenes answered in these formats too (`Pipeline.format_dir`)
    per_family: PerFamily = Field(default_factory=PerFamily)
    workers: PositiveInt = 2  # scene-simulation processes (the data stage and the robustness map)
    qa_weight: float = 0.0  # the QA pairs' share of a training stage's mixture
    variants: dict[str, World] = {}  # test-only traffic variants (`Pipeline.variant_dir`)
    train_variants: dict[str, TrainVariant] = {}  # training-only ones, mixed in by a stage's `train_variants:`
    phases: Optional[Phases] = None

    def families_of(self, world: World) -> list[str]:
        """The road families of a world set's scenes: its own `families`, else these."""
        return list(world.families or self.families)

    def scenes(self, split: str, path) -> int:
        """Scenes per family of `split` (`per_family`), which the config at `path` must set for a run that makes it."""
        n = getattr(self.per_family, split)
        if n is None:
            raise UserError(f"{path}: data.per_family.{split}: not set, and this run makes the {split} split")
        return n


class ClosedLoop(_Section):
    """`evaluate.closedloop`: the route set (`eval.closedloop.route_set`: dev or full), its first `per_family` routes
    of each family, then its first `limit`; model planners drive the first `model_routes` of them (default: all)."""

    routes: Literal["dev", "full"] = "dev"
    per_family: Optional[PositiveInt] = None
    limit: Optional[PositiveInt] = None
    model_routes: Optional[NonNegativeInt] = None


class Top5Overlap(_Section):
    """`evaluate.top5_overlap`: the student's top-5 overlap with a diffusion and an AR teacher (stage names), on the
    first `samples` validation answers."""

    student: str
    diffusion_teacher: str
    ar_teacher: str
    samples: PositiveInt = 64

    @property
    def stages(self) -> dict[str, str]:
        """The three models it reads: role -> stage name."""
        return {"student": self.student, "diffusion_teacher": self.diffusion_teacher, "ar_teacher": self.ar_teacher}


class EvaluateSection(_Section):
    """`evaluate:` the report's rows and what each evaluation stage measures (`orchestration.eval_stages`)."""

    planners: dict[str, str] = {}  # report row name -> planner spec (`eval.planners.parse_spec`)
    decode: dict[str, Any] = {}  # how the students decode, under each row's own options (`Pipeline.planner`)
    text_decode: dict[str, Any] = {}  # how they decode free-text answers (QA), over `decode` (`Pipeline.planner`)
    speed: Any = Field(default_factory=dict)  # `eval.plan_timing.SpeedProbe` (checked by it; false: no timing)
    test_limit: Optional[PositiveInt] = None  # the first this many test scenes (default: all)
    workers: PositiveInt = 1  # scoring and closed-loop processes
    variants: bool = False  # also every `data.variants` test set
    closedloop: Optional[ClosedLoop] = None  # none: no closed loop
    top5_overlap: Optional[Top5Overlap] = None
    bev_plots: NonNegativeInt = 4  # bird's-eye plots of the first scenes
    qa_samples: PositiveInt = 64  # QA retention on the first this many test questions
    recorded: Optional[str] = None  # a recorded table of every training level, shown in the report (the demo's)

    @field_validator("closedloop", "top5_overlap", mode="before")
    @classmethod
    def _empty_is_off(cls, v):  # `closedloop: {}` or `false` turns the stage off, as an absent key does
        return v or None


class BenchSection(BaseModel):
    """`bench:` the AR VLA (`ar`) against the diffusion student (`diffusion`), decoding speed on the same `prompts`
    (`decoding.bench.paired_bench`), over a grid (`decoding.bench.paired.grid_from_settings` reads the keys below;
    one left out takes `BenchGrid`'s default). Values are checked here, when the config loads; what needs the
    machine (a CUDA device for `device: cuda`) is checked when the bench starts, so such a config loads on a CPU."""

    model_config = ConfigDict(extra="allow")  # so an unknown key is refused with the known ones listed (`_known_keys`)
    ar: str
    diffusion: str
    prompts: PositiveInt = PROMPTS
    format: Optional[Format] = None  # the prompts' answer format; default: data.fmt
    # the grid (`BenchGrid`'s fields; a list is a grid dimension)
    batch_sizes: Optional[list[PositiveInt]] = None
    block_sizes: Optional[list[Union[PositiveInt, Literal["fit"]]]] = None
    thresholds: Optional[list[Annotated[float, Field(gt=0, le=1)]]] = None
    dtypes: Optional[list[Literal[GRID_DTYPES]]] = None  # type: ignore[valid-type]
    max_new_tokens: Optional[PositiveInt] = None
    max_steps: Optional[Union[PositiveInt, list[PositiveInt]]] = None
    max_steps_per_block: Optional[Union[PositiveInt, list[PositiveInt]]] = None  # `max_steps`' old name
    repeats: Optional[PositiveInt] = None
    compile: Optional[Union[bool, list[bool]]] = None
    step_cost: Optional[bool] = None
    caches: Optional[list[Literal[CACHES]]] = None  # type: ignore[valid-type]
    device: Optional[str] = None
    attention: Optional[Literal[ATTENTIONS]] = None  # type: ignore[valid-type]
    cuda_graphs: Optional[bool] = None
    lean: Optional[Literal[LEAN_MODES]] = None  # type: ignore[valid-type]
    prefill_cache: Optional[bool] = None
    ordinal: Optional[NonNegativeInt] = None  # `BenchGrid.ordinal_window`
    smoothness: Optional[NonNegativeFloat] = None  # `BenchGrid.smoothness`
    threads: Optional[Union[NonNegativeInt, list[NonNegativeInt]]] = None
    confirm_repeats: Optional[NonNegativeInt] = None  # paired re-timing rounds of the headline pair

    @model_validator(mode="after")
    def _known_keys(self) -> "BenchSection":
        if self.model_extra:
            raise ValueError(f"unknown key {next(iter(self.model_extra))!r} (known: {', '.join(sorted(type(self).model_fields))})")
        return self

    def settings(self, fmt: str) -> dict[str, Any]:
        """What `paired_bench` takes: the grid's keys as written, the prompts and their format (`fmt` unless `format`
        is set)."""
        grid = self.model_dump(exclude_unset=True, exclude={"ar", "diffusion", "prompts", "format"})
        return {**grid, "prompts": self.prompts, "format": self.format or fmt}


def parse_section(model: type[BaseModel], raw, path, name: str):
    """`raw` (the config's `name:` section) as `model`; the first problem as one UserError line:
    `<path>: <name>.<field>: <what is wrong>`."""
    try:
        return model.model_validate({} if raw is None else raw)
    except ValidationError as err:
        e = err.errors()[0]
        field = ".".join([name, *map(str, e["loc"])])
        if e["type"] == "extra_forbidden":
            *where, key = field.split(".")
            raise UserError(f"{path}: {'.'.join(where)}: unknown key {key!r}") from None
        what = e["msg"].removeprefix("Value error, ")
        got = "" if e["type"] in ("missing", "value_error") else f", got {e['input']!r}"
        raise UserError(f"{path}: {field}: {what}{got}") from None
