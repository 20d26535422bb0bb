"""The main job, stage by stage: data -> AR VLA -> block curriculum -> distillation -> evaluation -> report.

`run_pipeline(config)` goes from nothing to every checkpoint; `run_demo(config)` evaluates checkpoints that
a pipeline produced (shipped in `checkpoints/`) on freshly generated test scenes. Both are resumable: each
finished stage leaves `<out>/stages/<name>.json` and is skipped next time; an interrupted training stage
resumes from its last checkpoint (the trainer's `--resume`).
"""

from __future__ import annotations

import copy
import hashlib
import json
import time
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from rich.console import Console

from wamdiff.errors import UserError
from wamdiff.jsonfile import write_json
from wamdiff.orchestration.sections import BenchSection, DataSection, EvaluateSection, parse_section
from wamdiff.outdir import path_name
from wamdiff.provenance import provenance
from wamdiff.yamlconfig import read_config, refuse_unknown

console = Console()

# `evaluate.decode` options that set how a diffusion student decodes; an AR row leaves them out (its own row may not)


# ------------------------------------------------------------------------------------------ config
@dataclass
class Pipeline:
    config_path: Path
    cfg: dict
    out: Path
    data: DataSection  # `data:`, `evaluate:` and `bench:` typed (`orchestration.sections`); `cfg` keeps them as written
    evaluate: EvaluateSection = field(default_factory=EvaluateSection)
    bench: BenchSection | None = None
    checkpoints: dict[str, Path] = field(default_factory=dict)  # stage name -> final model dir

    @classmethod
    def load(cls, path: str | Path, from_scratch: bool = False) -> "Pipeline":
        """The config at `path`; `from_scratch` drops the given checkpoints (`checkpoints:`) of stages the config
        can train, so those stages and what leads to them run too."""
        from wamdiff.resources import config_file, shipped_path

        path = config_file(path)  # from the working directory, else the installed package's configs
        if not path.is_file():
            raise UserError(f"{path}: pipeline config not found")
        cfg = _read_config(path)
        for key in ("out", "data"):
            if key not in cfg:
                raise UserError(f"{path}: missing top-level field '{key}'")
        from wamdiff.training.config import check_recipe_keys  # noqa: PLC0415  (training is below the pipeline)

        for spec in cfg.get("train") or []:  # a typo in a stage's `set:` found now, not when the stage starts
            check_recipe_keys(spec.get("set") or {}, f"{path}: stage {spec.get('name')!r}: set")
        if from_scratch and cfg.get("checkpoints"):
            trained = {s["name"] for s in cfg.get("train") or []}
            cfg["checkpoints"] = {k: v for k, v in cfg["checkpoints"].items() if k not in trained}
        bench = parse_section(BenchSection, cfg["bench"], path, "bench") if cfg.get("bench") else None
        p = cls(path, cfg, Path(cfg["out"]), parse_section(DataSection, cfg["data"], path, "data"),
                parse_section(EvaluateSection, cfg.get("evaluate"), path, "evaluate"), bench)
        check_path_names(p)
        for spec in cfg.get("train") or []:
            if "average" in spec:
                check_average_stage(path, spec)
        for name, ckpt in (cfg.get("checkpoints") or {}).items():  # demo: shipped checkpoints
            p.checkpoints[name] = shipped_path(ckpt)  # here, else under $WAMDIFF_CHECKPOINTS
        if p.evaluate.planners:
            try:  # every planner spec checked now, not after hours of training; as it plans and as it answers
                p.planners(), p.planners(free_text=True)
            except ValueError as err:
                raise ValueError(f"{path}: evaluate.planners: {err}") from None
        from wamdiff.eval.plan_timing import SpeedProbe  # noqa: PLC0415  (eval is below the pipeline)

        try:
            SpeedProbe.from_dict(p.evaluate.speed)
        except (TypeError, ValueError) as err:
            raise ValueError(f"{path}: {err}") from None
        return p

    @property
    def data_dir(self) -> Path:
        return self.out / "data"

    def format_dir(self, fmt: str | None = None) -> Path:
        """The dataset whose answers are in `fmt`: the main one (`data.fmt`), or `data_<fmt>` beside it for one of
        `data.formats` (same scenes, linked; only the answer text differs)."""
        if fmt is None or fmt == self.data.fmt:
            return self.data_dir
        if fmt not in self.data.formats:
            raise ValueError(f"{self.config_path}: answer format {fmt!r} is neither data.fmt nor in data.formats")
        return self.out / f"data_{fmt}"

    @property
    def phases_dir(self) -> Path:
        """Training scenes spread along the routes (`data.phases`: t0 anywhere in the first `t0_spread_s` seconds,
        so inside junctions and after them); a stage mixes them in with `phases: w`."""
        return self.out / "data_phases"

    def train_variant_dir(self, name: str) -> Path:
        """Training scenes simulated with other world settings (`data.train_variants.<name>`: busier or faster
        traffic than the default world's); a stage mixes them in with `train_variants: w`."""
        return self.out / f"data_train_{name}"

    def variant_dir(self, name: str) -> Path:
        """Test scenes of an unseen traffic variant (`data.variants.<name>`: world settings other than training's)."""
        return self.out / f"data_variant_{name}"

    def stage_format(self, stage: str) -> str:
        spec = {s["name"]: s for s in self.cfg.get("train") or []}.get(stage) or {}
        if spec.get("average"):  # an average of checkpoints answers as they do
            return self.stage_format(spec["average"][0])
        return spec.get("fmt") or self.data.fmt

    def stage_file(self, name: str) -> Path:
        return self.out / "stages" / f"{name}.json"

    def checkpoint(self, stage: str) -> Path:
        if stage in self.checkpoints:
            return self.checkpoints[stage]
        return self.out / "ckpt" / stage / "final"

    def planner(self, spec: str, free_text: bool = False):
        """A row's planner spec, typed: `stage:NAME[,key=value...]` is the model planner of that stage's checkpoint
        with `evaluate.decode` under the spec's own options (e.g. `stage:block32_more,steps=4` for a capped-steps
        row of the same checkpoint), answers in the data's format, AR decoding for an AR stage; any other text is
        a planner spec as on the command line. `free_text`: the row answering questions, `evaluate.text_decode`
        over `evaluate.decode`."""
        from wamdiff.decoding.config import BLOCK_SETTINGS, setting_name  # noqa: PLC0415
        from wamdiff.eval.specs import PLANNER_OPTIONS, PlannerSpec, split_options  # noqa: PLC0415

        if not spec.startswith("stage:"):
            return PlannerSpec.parse(spec, free_text)
        stage, *items = spec.split(":", 1)[1].split(",")
        decode, own = self.decode_layer(free_text), split_options(spec, items)
        if not self.is_diffusion_stage(stage):  # an AR row decodes greedily: `evaluate.decode`'s block settings
            def without(options, names):  # are the students'
                return {k: v for k, v in options.items() if k in PLANNER_OPTIONS or setting_name(k, spec) not in names}
            decode, own = without(decode, BLOCK_SETTINGS), {**without(own, ("block_size",)), "mode": "ar"}
        return PlannerSpec.model(self.checkpoint(stage), {"fmt": self.stage_format(stage)}, decode, own, text=spec,
                                 free_text=free_text)

    def decode_layer(self, free_text: bool = False) -> dict:
        """The pipeline's decode options for its students' plans (`evaluate.decode`) or free-text answers
        (`evaluate.text_decode` over them)."""
        return {**self.evaluate.decode, **(self.evaluate.text_decode if free_text else {})}

    def planners(self, free_text: bool = False) -> dict:
        """{report row name: PlannerSpec} of `evaluate.planners` (`free_text`: answering questions)."""
        return {name: self.planner(spec, free_text) for name, spec in self.evaluate.planners.items()}

    def is_diffusion_stage(self, stage: str) -> bool:
        """Whether a stage's model decodes block by block: its recipe kind when the pipeline trains it, else the
        shipped checkpoint's saved diffusion settings."""
        from wamdiff.training.config import RecipeKind, read_recipe_yaml  # noqa: PLC0415

        average = {s["name"]: s["average"] for s in self.cfg.get("train") or [] if s.get("average")}
        if stage in average:
            return self.is_diffusion_stage(average[stage][0])
        train = {s["name"]: s for s in self.cfg.get("train") or [] if "recipe" in s}
        if stage in train:
            kind = (train[stage].get("set") or {}).get("kind") or read_recipe_yaml(train[stage]["recipe"]).get("kind")
            return RecipeKind(kind or RecipeKind.AR_SFT).diffusion
        from wamdiff.models.recorded import is_diffusion, is_model_dir  # noqa: PLC0415

        if not is_model_dir(self.checkpoint(stage)):
            raise ValueError(f"{self.config_path}: stage {stage!r} is neither a training stage nor a checkpoint "
                             f"({self.checkpoint(stage) / 'config.json'})")
        return is_diffusion(self.checkpoint(stage))


def check_path_names(p: Pipeline) -> None:
    """Every name the pipeline turns into a file or folder (stages: `<out>/ckpt/<name>`, `<out>/stages/<name>.json`,
    an export's `<dest>/<name>`; world variants: `<out>/data_variant_<name>`) is one plain path component."""
    path, cfg = p.config_path, p.cfg
    for spec in cfg.get("train") or []:
        path_name(spec.get("name") if isinstance(spec, dict) else spec, f"{path}: train: stage name")
    for name in cfg.get("checkpoints") or {}:
        path_name(name, f"{path}: checkpoints")
    for key in ("variants", "train_variants"):
        for name in getattr(p.data, key):
            path_name(name, f"{path}: data.{key}")


# The keys a pipeline config may have (`check_config_keys`; `data:` has its model's, `sections.DataSection`); a
# top-level key starting with `_` only holds a YAML anchor for the file's own stages, and `presets` holds the mappings
# a stage or its `set:` names with `use:`.
CONFIG_KEYS = ("out", "seed", "threads", "lanes", "checkpoints", "data", "train", "evaluate", "bench", "presets", "map")
STAGE_KEYS = ("name", "recipe", "init", "teacher", "set", "fmt", "agg", "agg_rounds", "phases", "train_variants",
              "hard_braking", "qa", "aggregate", "average", "use")


def check_config_keys(raw: dict, path: Path) -> None:
    """One pipeline YAML's own keys (before its base is merged, so the error names the file that holds a typo; the
    merged `data:` is then parsed whole, nested keys and types too, by `Pipeline.load`)."""
    refuse_unknown([k for k in raw if not str(k).startswith("_")], CONFIG_KEYS, f"{path}")
    for key, allowed in (("data", DataSection.model_fields), ("evaluate", EvaluateSection.model_fields)):
        if isinstance(raw.get(key), dict):
            refuse_unknown(raw[key], allowed, f"{path}: {key}")
    for spec in [*(raw.get("train") or []), *(raw.get("train_extra") or [])]:
        if not isinstance(spec, dict):
            raise UserError(f"{path}: train: a stage is a mapping with a `name`, got {spec!r}")
        refuse_unknown(spec, STAGE_KEYS, f"{path}: stage {spec.get('name')!r}")
        where = f"{path}: stage {spec.get('name')!r}"
        if "qa" in spec:
            source_share(spec["qa"], f"{where}: qa")
        if isinstance(spec.get("train_variants"), dict):
            for name, share in spec["train_variants"].items():
                source_share(share, f"{where}: train_variants.{name}")


def source_share(value, where: str, default: float | None = None) -> tuple[float | None, bool]:
    """A data source's place in a stage's mixture, `w` or `{weight: w, distil: true|false}`, as (weight, distil).
    `distil: false`: the stage's teacher does not score the source (`training.config.DataSource.distil`). A mapping
    without `weight` takes `default` (None: the caller's own default, or an error where there is none)."""
    given = value if isinstance(value, dict) else {"weight": value}
    refuse_unknown(given, ("weight", "distil"), where)
    w = given.get("weight", default)
    if w is not None and (isinstance(w, bool) or not isinstance(w, (int, float)) or w < 0):
        raise UserError(f"{where}: the weight must be a number >= 0, got {w!r}")
    if not isinstance(given.get("distil", True), bool):
        raise UserError(f"{where}: distil must be true or false, got {given['distil']!r}")
    return (None if w is None else float(w)), given.get("distil", True)


def _source(path: Path, weight: float, distil: bool) -> dict:
    """One entry of a recipe's `data.train`; `distil` is written only when false, so a mixture without it reads as
    it did before the key existed (and its stage needs no re-run)."""
    return {"path": str(path), "weight": weight, **({} if distil else {"distil": False})}


def _read_config(path: Path) -> dict:
    """A pipeline YAML (or a study: one with `base:`) through the one config reader (`wamdiff.yamlconfig`: base-merge,
    `!replace`, `X_extra`), its keys checked file by file, then the presets a stage names with `use:` laid in."""
    return expand_presets(read_config(path, check=check_config_keys), path)


def expand_presets(cfg: dict, path: Path) -> dict:
    """Each training stage and its `set:` with `use: NAME` (or a list of names) gets the top-level `presets:` mapping
    of that name under its own keys (presets in the order listed, later ones winning; the stage's own keys win over
    all), so a setting shared by many stages (the short-eval settings, a data mixture) is written once, in
    configs/default.yaml, and a study that names it as `base:` uses the same. The stage spec keeps no `use:`."""
    presets = cfg.get("presets") or {}

    def laid(mapping: dict, where: str) -> dict:
        names = mapping.get("use")
        if names is None:
            return mapping
        out: dict = {}
        for name in [names] if isinstance(names, str) else list(names):
            if not isinstance(presets.get(name), dict):
                raise UserError(f"{path}: {where}: use: no preset {name!r} (presets: {', '.join(sorted(presets)) or 'none'})")
            out.update(copy.deepcopy(presets[name]))
        out.update({k: v for k, v in mapping.items() if k != "use"})
        return out

    stages = []
    for spec in cfg.get("train") or []:
        spec = laid(spec, f"stage {spec.get('name')!r}")
        if isinstance(spec.get("set"), dict):
            spec["set"] = laid(spec["set"], f"stage {spec.get('name')!r}: set")
        stages.append(spec)
    if "train" in cfg:
        cfg["train"] = stages
    return cfg


def _fingerprint(settings) -> str | None:
    return None if settings is None else hashlib.sha256(
        json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _finished_at(p: Pipeline, name: str) -> float | None:
    """When the stage `name` last finished (its record's stamp; the record file's mtime for older records)."""
    f = p.stage_file(name)
    if not f.exists():
        return None
    return json.loads(f.read_text()).get("finished_unix") or f.stat().st_mtime


def _stage_inputs(p: Pipeline, spec: dict) -> dict[str, float | str | None]:
    """What a training stage reads from other stages: each input's finish stamp, or its path when it is a given
    checkpoint (`checkpoints:`), so a stage trained again makes the stages after it stale."""
    from wamdiff.orchestration.schedule import stage_needs

    return {dep: str(p.checkpoints[dep]) if dep in p.checkpoints else _finished_at(p, dep)
            for dep in stage_needs(spec, training_stages(p))}


def stage_done(p: Pipeline, name: str, settings=None) -> dict | None:
    """The stage's record when it finished earlier with the same `settings` (files written before fingerprints
    existed count as done), and, for a training stage, after every stage it reads from finished; else None."""
    f = p.stage_file(name)
    if not f.exists():
        return None
    done = json.loads(f.read_text())
    if settings is not None and done.get("settings_fingerprint") not in (None, _fingerprint(settings)):
        return None
    if isinstance(settings, dict) and name in {s["name"] for s in training_stages(p)}:
        finished = done.get("finished_unix") or f.stat().st_mtime
        if any(isinstance(t, float) and t > finished for t in _stage_inputs(p, settings).values()):
            return None
    return done


def run_stage(p: Pipeline, name: str, fn: Callable[[], dict], settings=None) -> dict:
    """Run `fn` unless its stage file exists with the same `settings` (the config the stage depends on); record
    wall time, the result and the settings' fingerprint. A stage whose settings changed, or a training stage that
    finished before a stage it reads from, runs again (afresh: `_claim_stage_dir`)."""
    f = p.stage_file(name)
    key = _fingerprint(settings)
    done = stage_done(p, name, settings)
    if done is not None:
        console.print(f"[dim]stage {name}: done earlier, skipped[/dim]")
        return done
    if f.exists():
        console.print(f"stage {name}: its settings or a stage it reads from changed since it ran; running it again")
    console.rule(f"stage {name}")
    t0 = time.perf_counter()
    result = fn() or {}
    result = {**result, "stage": name, "stage_wall_s": round(time.perf_counter() - t0, 1), "settings_fingerprint": key,
              "finished_unix": time.time()}
    write_json(f, result)
    _log(p, f"{name}: {result['stage_wall_s']} s")
    return result


def _log(p: Pipeline, line: str) -> None:
    p.out.mkdir(parents=True, exist_ok=True)
    with open(p.out / "pipeline.log", "a") as fh:
        fh.write(f"{time.strftime('%Y-%m-%d %H:%M:%S')} {line}\n")


# ------------------------------------------------------------------------------------------ stages
def stage_data(p: Pipeline, splits: tuple[str, ...] = ("train", "val", "test")) -> dict:
    """The dataset in `data.fmt`; the same scenes in each of `data.formats` (`format_dir`); for each of
    `data.variants` a test split simulated with other world settings (`variant_dir`); with `data.phases` training
    scenes spread along the routes (`phases_dir`)."""
    import os
    import shutil

    from wamdiff.driving.dataset import generate_dataset

    d = p.data
    common = dict(families=d.families, workers=d.workers)
    stats = {}
    for split in splits:
        stats[split] = generate_dataset(p.data_dir, split=split, n=d.scenes(split, p.config_path), fmt=d.fmt, **common)
    for fmt in d.formats:
        other = p.format_dir(fmt)
        other.mkdir(parents=True, exist_ok=True)
        if not (other / "scenes").exists():
            os.symlink(os.path.relpath(p.data_dir / "scenes", other), other / "scenes")
        for drops in p.data_dir.glob("drops_*.jsonl"):
            shutil.copyfile(drops, other / drops.name)
        for split in splits:  # every scene is there already: this writes the answer files in `fmt`
            generate_dataset(other, split=split, n=d.scenes(split, p.config_path), fmt=fmt, progress=False, **common)
    if d.phases is not None and "train" in splits:
        stats["phases"] = generate_dataset(p.phases_dir, split="train", n=d.phases.per_family, fmt=d.fmt,
                                           **{**common, "families": d.families_of(d.phases)}, **d.phases.settings)
    worlds = [(f"variant_{name}", p.variant_dir(name), "test", world) for name, world in d.variants.items()]
    if "train" in splits:
        worlds += [(f"train_{name}", p.train_variant_dir(name), "train", world)
                   for name, world in d.train_variants.items()]
    for key, out, split, world in worlds:
        n = world.per_family or d.scenes(split, p.config_path)
        stats[key] = generate_dataset(out, split=split, n=n, fmt=d.fmt, **{**common, "families": d.families_of(world)},
                                      **world.settings)
    return {"splits": stats}


def stage_aggregate(p: Pipeline, spec: dict) -> dict:
    """One on-policy aggregation round (`eval.aggregation`): the stage `aggregate.planner` drives training routes,
    the expert labels what it visited; later stages with `agg` in their spec train on it."""
    from wamdiff.eval.aggregation import AggregationRound, aggregate_round
    from wamdiff.eval.run import progress_bar
    from wamdiff.names import FAMILIES

    a = dict(spec["aggregate"])
    planner = p.planner("stage:" + a.pop("planner"))
    types = {k: t for k, t in typing.get_type_hints(AggregationRound).items() if t in (int, float)}  # YAML scalars
    types["families"] = tuple  # a list: only these road families (default: all four)
    if set(a) - set(types):
        raise ValueError(f"{p.config_path}: stage {spec['name']!r}: unknown aggregate keys {sorted(set(a) - set(types))}; "
                         f"known: {sorted(types)}")
    if isinstance(a.get("families"), str):  # one name is a list of one, not a tuple of its letters
        a["families"] = [a["families"]]
    settings = AggregationRound(**{k: types[k](v) for k, v in a.items()})
    if unknown := set(settings.families) - set(FAMILIES):
        raise ValueError(f"{p.config_path}: stage {spec['name']!r}: aggregate families {sorted(unknown)} unknown; "
                         f"known: {list(FAMILIES)}")
    fmt = planner.fmt
    with progress_bar(console) as prog:
        task = prog.add_task(f"{spec['name']}: routes", total=len(settings.routes()))
        # a round that finished before runs again only because its settings or its planner changed: label anew
        entry = aggregate_round(planner, p.format_dir(fmt), settings, fmt, force=p.stage_file(spec["name"]).exists(),
                                progress=lambda: prog.advance(task))
    return {"labelled": entry["labelled"], "families": entry["families"]}


def training_sources(p: Pipeline, spec: dict) -> list[dict]:
    """A training stage's data mixture (`data.train` of its recipe): the expert scenes at weight 1, QA pairs at
    `data.qa_weight` (or the stage's `qa:`, a `source_share`), the aggregation rounds' on-policy scenes at `agg`,
    scenes along the routes at `phases`, the busier and faster traffic at `train_variants`, and the expert scenes
    whose ego brakes hard at t0 once more at `hard_braking`."""
    data = p.format_dir(spec.get("fmt"))
    where = f"{p.config_path}: stage {spec['name']!r}"
    qa_weight, qa_distil = source_share(spec.get("qa", {}), f"{where}: qa", default=p.data.qa_weight)
    sources = [{"path": str(data / "train.json"), "weight": 1.0}]
    if qa_weight > 0:
        sources.append(_source(data / "train_qa.json", qa_weight, qa_distil))
    if spec.get("agg") and "agg_rounds" in spec:  # only these rounds, each by its size (as if merged)
        from wamdiff.driving.wamdiff2_json import read_samples
        from wamdiff.eval.aggregation import round_files

        files = [round_files(data, int(r))[0] for r in spec["agg_rounds"]]
        sizes = [len(read_samples(f)) for f in files]  # a missing round: the aggregate stage before runs first
        sources += [{"path": str(f), "weight": float(spec["agg"]) * n / sum(sizes)}
                    for f, n in zip(files, sizes) if n]  # a round that labelled nothing adds no source
    elif spec.get("agg"):  # on-policy scenes of the aggregation rounds so far, at this share of the driving data
        sources.append({"path": str(data / "agg.json"), "weight": float(spec["agg"])})
    if spec.get("phases"):  # scenes from every phase of the routes (`data.phases`), at this share
        if data != p.data_dir or p.data.phases is None:
            raise ValueError(f"{p.config_path}: stage {spec['name']!r}: `phases` needs data.phases and the main "
                             "answer format")
        sources.append({"path": str(p.phases_dir / "train.json"), "weight": float(spec["phases"])})
    if spec.get("train_variants"):
        sources += train_variant_sources(p, spec, data)
    if spec.get("hard_braking"):  # the expert scenes that start in hard braking, again at this share (a subset)
        from wamdiff.driving.dataset import write_hard_braking_split

        sources.append({"path": str(write_hard_braking_split(data)), "weight": float(spec["hard_braking"])})
    return sources


def train_variant_sources(p: Pipeline, spec: dict, data: Path) -> list[dict]:
    """A stage's `train_variants:`: a number w = every `data.train_variants` set but the opt-in ones, at share w
    together, each by its size; a mapping {name: share} = each named set at its own share (`source_share`)."""
    where = f"{p.config_path}: stage {spec['name']!r}: train_variants"
    if data != p.data_dir or not p.data.train_variants:
        raise ValueError(f"{where}: needs data.train_variants and the main answer format")
    sets = p.data.train_variants
    given = spec["train_variants"]
    if isinstance(given, dict):
        unknown = sorted(set(given) - set(sets))
        if unknown:
            raise ValueError(f"{where}: no data.train_variants set {unknown[0]!r} (sets: {', '.join(sets)})")
        shares = {n: source_share(v, f"{where}.{n}") for n, v in given.items()}
        missing = [n for n, (w, _) in shares.items() if w is None]
        if missing:
            raise UserError(f"{where}.{missing[0]}: give its weight ({{weight: w, distil: ...}} or a number)")
        return [_source(p.train_variant_dir(n) / "train.json", w, distil) for n, (w, distil) in shares.items() if w]
    names = [n for n, world in sets.items() if not world.opt_in]
    sizes = [(sets[n].per_family or p.data.scenes("train", p.config_path)) * len(p.data.families_of(sets[n]))
             for n in names]
    return [_source(p.train_variant_dir(n) / "train.json", float(given) * k / sum(sizes), True)
            for n, k in zip(names, sizes)]


# What the pipeline sets in a training stage's recipe over the recipe file's values: the stage's name and folder, the
# config's seed and threads, the pipeline's data, and the checkpoints of the stages named by `init` / `teacher` (the
# last two only when the stage names them). The stage's `set:` goes on top of these and may set them again.
PIPELINE_SET_FIELDS = ("name", "output_dir", "seed", "threads", "data.train", "data.val", "eval.qa.path", "model.init",
                       "teacher.path")


def pipeline_fields(p: Pipeline, spec: dict, out_dir: Path) -> dict:
    """The values of `PIPELINE_SET_FIELDS` for a training stage (flat dotted keys, as `--set` takes them)."""
    data = p.format_dir(spec.get("fmt"))
    fields = {
        "name": spec["name"],
        "output_dir": str(out_dir),
        "seed": int(p.cfg.get("seed", 0)),
        "threads": p.cfg.get("threads"),
        "data.train": training_sources(p, spec),
        "data.val": str(data / "val.json"),
        "eval.qa.path": str(data / "val_qa.json"),
    }
    if "init" in spec:
        fields["model.init"] = str(p.checkpoint(spec["init"]))
    if "teacher" in spec:
        fields["teacher.path"] = str(p.checkpoint(spec["teacher"]))
    return fields


def overrides_line(spec: dict, fields: dict) -> str:
    """The record of what a stage changes in its recipe, printed and logged when it starts."""
    own = spec.get("set") or {}
    return (f"stage {spec['name']}: recipe {spec['recipe']}; the pipeline sets {', '.join(fields)}"
            + (f"; its set: {', '.join(map(str, own))}" if own else ""))


def stage_train(p: Pipeline, spec: dict) -> dict:
    from wamdiff.training.trainer import train

    overrides = pipeline_fields(p, spec, _claim_stage_dir(p, spec))
    line = overrides_line(spec, overrides)
    console.print(f"[dim]{line}[/dim]")
    _log(p, line)
    overrides.update(spec.get("set", {}))
    result = train(spec["recipe"], overrides, resume=True)  # continues a killed stage; fresh when none
    keep = ("steps", "final_train_loss", "val_loss", "val_masked_acc", "val_ar_token_acc", "val_top5_overlap",
            "qa_exact_match_start", "qa_exact_match_end", "train_tokens_per_s", "wall_s")
    return {"checkpoint": str(result.final_model), **{k: result.metrics.get(k) for k in keep}}


def stage_average(p: Pipeline, spec: dict) -> dict:
    """The uniform average of the weights of the stages `average` names (`models.average`): their mean as a model,
    saved where a training stage saves its final model (the spec is checked when the config loads)."""
    from wamdiff.models import save_model
    from wamdiff.models.average import average_weights

    model, tokenizer = average_weights([p.checkpoint(n) for n in spec["average"]])
    final = save_model(model, tokenizer, _claim_stage_dir(p, spec) / "final")
    return {"checkpoint": str(final), "averaged": spec["average"]}


def check_average_stage(config_path: Path, spec: dict) -> None:
    """An `average` stage lists two or more stage names and nothing else (checked when the config loads)."""
    names = spec["average"]
    if not isinstance(names, list) or len(names) < 2 or not all(isinstance(n, str) for n in names):
        raise ValueError(f"{config_path}: stage {spec['name']!r}: `average` must list two or more stage names, "
                         f"got {names!r}")
    if set(spec) - {"name", "average"}:
        raise ValueError(f"{config_path}: stage {spec['name']!r}: an `average` stage takes no other field "
                         f"(got {sorted(set(spec) - {'name', 'average'})})")


STAGE_KEY_FILE = "stage_key.json"  # in a training stage's output dir: the settings and inputs it was trained with


def _claim_stage_dir(p: Pipeline, spec: dict) -> Path:
    """The stage's output dir, to resume only what was trained with these settings from these inputs: a dir
    trained otherwise (another key, or no key and a finished record) is moved aside, never deleted."""
    out_dir = p.out / "ckpt" / spec["name"]
    key = {"settings": _fingerprint(spec), "inputs": _stage_inputs(p, spec)}
    key_file = out_dir / STAGE_KEY_FILE
    if out_dir.exists():
        old = json.loads(key_file.read_text()) if key_file.exists() else None
        if old != key and (old is not None or p.stage_file(spec["name"]).exists()):
            aside = out_dir.with_name(f"{spec['name']}.superseded-{time.strftime('%Y%m%d-%H%M%S')}")
            out_dir.rename(aside)
            console.print(f"stage {spec['name']}: trained with other settings or inputs before; kept as {aside}, "
                          "training afresh")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(key_file, key)
    return out_dir


def training_stages(p: Pipeline) -> list[dict]:
    return list(p.cfg.get("train") or [])


# ------------------------------------------------------------------------------------------ entry points
def _threads(p: Pipeline) -> None:
    import torch

    if p.cfg.get("threads"):
        torch.set_num_threads(int(p.cfg["threads"]))


def run_pipeline(config: str | Path, train_only: bool = False, stages: list[str] | None = None,
                 from_scratch: bool = False) -> dict:
    """Every stage the pipeline needs (`schedule.stages_to_run`; finished ones skipped), `lanes` of them at once,
    then the evaluation and the report. `stages` runs only those training stages, in order, and stops."""
    from wamdiff.orchestration.eval_stages import run_evaluation
    from wamdiff.orchestration.summary import write_report
    from wamdiff.orchestration.schedule import run_lanes, stage_command, stages_to_run

    p = Pipeline.load(config, from_scratch=from_scratch)
    _threads(p)
    _log(p, f"pipeline start: {config}{' --from-scratch' if from_scratch else ''} {provenance()}")
    t0 = time.perf_counter()
    run_stage(p, "data", lambda: stage_data(p), settings=p.cfg["data"])  # as written: `sections` says why
    unknown = set(stages or ()) - {s["name"] for s in training_stages(p)}
    if unknown:
        raise ValueError(f"{config}: no training stage named {sorted(unknown)}")
    plan = [s for s in training_stages(p) if s["name"] in stages] if stages is not None else \
        stages_to_run(p.cfg, set(p.checkpoints), p.evaluate, p.bench)
    lanes = int(p.cfg.get("lanes", 1))
    if stages is None and lanes > 1:
        run_lanes(plan, lanes, lambda s: stage_done(p, s["name"], s) is not None,
                  lambda name: stage_command(p.config_path, name, from_scratch), p.out / "logs")
    else:
        for spec in plan:
            fn = stage_aggregate if "aggregate" in spec else stage_average if "average" in spec else stage_train
            run_stage(p, spec["name"], lambda spec=spec, fn=fn: fn(p, spec), settings=spec)
    if train_only or stages is not None:
        return {}
    results = run_evaluation(p, run_stage)
    report = write_report(p, results)
    _log(p, f"pipeline done in {time.perf_counter() - t0:.0f} s -> {report}")
    return results


def export_checkpoints(config: str | Path, dest: str | Path, stages: list[str], from_scratch: bool = False) -> Path:
    """Copy finished stages' models to `dest` in bf16 (half the bytes; loaded back as fp32) with the provenance
    (config, commit, stage metrics, the sha256 of each weight file) and the pipeline's report table, for the demo to ship."""
    import shutil

    import torch

    from wamdiff.models import load_model, save_model

    p = Pipeline.load(config, from_scratch=from_scratch)
    for stage in stages:  # `--stages ../x` would write beside dest, not in it: refused before anything is written
        path_name(stage, "--stages")
    dest = Path(dest)
    dest.mkdir(parents=True, exist_ok=True)
    record = {"config": str(p.config_path), "config_text": p.config_path.read_text(), **provenance(), "stages": {}}
    finished = 0.0
    from wamdiff.decoding.config import BLOCK_SETTINGS, setting_name
    from wamdiff.eval.specs import PLANNER_OPTIONS

    # the students' block settings, recorded as the config spells them (`models.recorded.recorded_decode`)
    def block_settings(options: dict, section: str) -> dict:
        return {k: v for k, v in options.items()
                if k not in PLANNER_OPTIONS and setting_name(k, f"{p.config_path}: evaluate.{section}") in BLOCK_SETTINGS}

    decode = block_settings(p.evaluate.decode, "decode")
    text_decode = block_settings(p.evaluate.text_decode, "text_decode")
    for stage in stages:
        src = p.checkpoint(stage)
        if src.resolve() != (dest / stage).resolve():  # a given checkpoint exported onto itself stays untouched
            model, tok = load_model(src)  # (rewriting it would re-time its weights file and re-run its evaluation)
            if p.is_diffusion_stage(stage):  # `model:DIR` then decodes as the pipeline evaluated it
                if decode:
                    model.config.wamdiff_decode = decode
                if text_decode:
                    model.config.wamdiff_text_decode = text_decode
            save_model(model.to(torch.bfloat16), tok, dest / stage)  # with src's image processor (image_processor_for)
        f = p.stage_file(stage)
        record["stages"][stage] = json.loads(f.read_text()) if f.exists() else {}
        record["stages"][stage]["weights_sha256"] = _weights_sha256(dest / stage)
        finished = max(finished, f.stat().st_mtime if f.exists() else 0.0)
    write_json(dest / "PROVENANCE.json", record)
    summary, shipped = p.out / "report" / "summary.csv", dest / "pipeline_summary.csv"
    if summary.exists() and summary.stat().st_mtime >= finished:
        shutil.copyfile(summary, shipped)
    else:  # a report older than a stage describes other checkpoints: ship none rather than a wrong one
        shipped.unlink(missing_ok=True)
    from wamdiff.models.card import write_model_card

    for stage in stages:  # README.md model cards, the measured table from the summary just shipped (if any)
        write_model_card(dest / stage, summary_csv=shipped, provenance_json=dest / "PROVENANCE.json", stage=stage)
    return dest


def _weights_sha256(checkpoint: Path) -> dict[str, str]:
    """The checkpoint's recorded weight sums, checked against its files (recorded now when it has none: a given
    checkpoint exported onto itself keeps its weights file untouched, only SHA256SUMS is written beside it)."""
    from wamdiff.models.checksums import read_checksums, record_checksums, verify_checksums

    return verify_checksums(checkpoint) if read_checksums(checkpoint) else record_checksums(checkpoint)


def run_demo(config: str | Path) -> dict:
    from wamdiff.orchestration.eval_stages import run_evaluation
    from wamdiff.orchestration.summary import write_report

    p = Pipeline.load(config)
    _threads(p)
    missing = [f"{k}: {v}" for k, v in p.checkpoints.items() if not (v / "config.json").exists()]
    if missing:
        raise ValueError("demo checkpoints missing (run `make pipeline` to produce them): " + "; ".join(missing))
    t0 = time.perf_counter()
    run_stage(p, "data", lambda: stage_data(p, splits=("test",)), settings=p.cfg["data"])  # as written
    results = run_evaluation(p, run_stage)
    report = write_report(p, results)
    console.print(f"[bold]demo finished in {time.perf_counter() - t0:.0f} s; report: {report}[/bold]")
    return results
