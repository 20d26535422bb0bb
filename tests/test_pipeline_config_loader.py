"""The one config reader (`wamdiff.yamlconfig`) as recipes, pipeline configs and studies use it: unknown keys refused
naming the file that holds them, `use:` presets, and the record of what the pipeline sets in a stage's recipe."""

from __future__ import annotations

from pathlib import Path

import pytest

from wamdiff.errors import UserError
from wamdiff.orchestration.pipeline import Pipeline, _read_config

ROOT = Path(__file__).resolve().parents[1]


def _write(folder: Path, name: str, text: str) -> Path:
    (folder / name).write_text(text)
    return folder / name


def test_an_unknown_key_is_refused_naming_the_file_that_holds_it(tmp_path):
    _write(tmp_path, "base.yaml", "out: o\ndata: {fmt: delta}\n")
    study = _write(tmp_path, "study.yaml", "base: base.yaml\nevaluate: {planers: {a: expert}}\n")
    with pytest.raises(UserError, match=r"study\.yaml: evaluate: unknown key 'planers'"):
        _read_config(study)
    _write(tmp_path, "base.yaml", "out: o\ndata: {fmt: delta}\ntrian: []\n")  # the typo is in the base
    with pytest.raises(UserError, match=r"base\.yaml: unknown key 'trian'"):
        _read_config(_write(tmp_path, "ok.yaml", "base: base.yaml\n"))
    stage = _write(tmp_path, "stage.yaml", "out: o\ndata: {}\ntrain: [{name: a, recipe: r.yaml, int: x}]\n")
    with pytest.raises(UserError, match=r"stage\.yaml: stage 'a': unknown key 'int'"):
        _read_config(stage)


def test_a_recipe_key_is_refused_naming_its_file_in_a_base_chain(tmp_path):
    from wamdiff.training.config import load_recipe

    _write(tmp_path, "_common.yaml", "optim: {lr: 1.0e-3, lrr: 2}\n")
    recipe = _write(tmp_path, "r.yaml", "base: _common.yaml\nname: r\nmodel: {preset: tiny}\ndata: {train: [t.json]}\n")
    with pytest.raises(UserError, match=r"_common\.yaml: unknown key 'optim\.lrr'"):
        load_recipe(recipe)
    _write(tmp_path, "_common.yaml", "optim: {lr: 1.0e-3}\n")
    assert load_recipe(recipe).optim.lr == 1.0e-3
    with pytest.raises(UserError, match=r"--set: unknown key 'optim\.lrr'"):
        load_recipe(recipe, ["optim.lrr=1"])
    _write(tmp_path, "loop.yaml", "base: r.yaml\n")
    _write(tmp_path, "r.yaml", "base: loop.yaml\n")
    with pytest.raises(UserError, match="circular `base:` chain"):
        load_recipe(tmp_path / "r.yaml")


def test_a_stage_set_key_is_refused_when_the_config_loads(tmp_path):
    cfg = _write(tmp_path, "c.yaml", "out: o\ndata: {}\ntrain: [{name: a, recipe: r.yaml, set: {optim.stpes: 3}}]\n")
    with pytest.raises(UserError, match=r"c\.yaml: stage 'a': set: unknown key 'optim\.stpes'"):
        Pipeline.load(cfg)


def test_the_cli_says_it_in_one_line_with_exit_code_2(tmp_path, capsys):
    from wamdiff.cli import main

    cfg = _write(tmp_path, "c.yaml", "out: o\ndata: {}\nlane: 2\n")
    assert main(["pipeline", "--config", str(cfg), "--train-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {cfg}: unknown key 'lane' (known: bench, checkpoints, data, evaluate, lanes, map, out, presets, "
                   "seed, threads, train)"]


def test_presets_are_laid_under_a_stage_and_its_set(tmp_path):
    _write(tmp_path, "base.yaml", "out: o\ndata: {}\npresets:\n  mixture: {agg: 0.5, phases: 1.0}\n"
                                  "  short: {eval.every: 9, optim.lr: 1.0}\n  fast: {optim.lr: 2.0}\n")
    study = _write(tmp_path, "study.yaml", "base: base.yaml\ntrain:\n"
                   "  - {name: a, recipe: r.yaml, use: mixture, phases: 0.5, set: {optim.steps: 3, use: [short, fast]}}\n"
                   "  - {name: b, recipe: r.yaml, set: {use: short, eval.every: 1}}\n")
    a, b = _read_config(study)["train"]
    assert a == {"name": "a", "recipe": "r.yaml", "agg": 0.5, "phases": 0.5,
                 "set": {"eval.every": 9, "optim.lr": 2.0, "optim.steps": 3}}
    assert b == {"name": "b", "recipe": "r.yaml", "set": {"optim.lr": 1.0, "eval.every": 1}}
    _write(tmp_path, "bad.yaml", "base: base.yaml\ntrain: [{name: c, recipe: r.yaml, use: mix}]\n")
    with pytest.raises(UserError, match=r"bad\.yaml: stage 'c': use: no preset 'mix' \(presets: fast, mixture, short\)"):
        _read_config(tmp_path / "bad.yaml")


def test_the_shipped_default_spells_its_stages_as_before():
    """The default's presets expand to exactly the stage its YAML anchors wrote before (stage fingerprints depend on it)."""
    stages = {s["name"]: s for s in _read_config(ROOT / "configs" / "default.yaml")["train"]}
    assert stages["block32"] == {
        "name": "block32", "recipe": "configs/recipes/block32.yaml", "init": "block16",
        "agg": 0.5, "agg_rounds": [6], "phases": 1.0, "train_variants": 1.0,
        "set": {"optim.steps": 800, "diffusion.complementary": True, "diffusion.full_mask_copy": True,
                "eval.every": 100000, "eval.at_start": False, "eval.qa.at_start": False, "checkpoint.every": 250}}
    assert stages["ar_vla"]["set"] == {"optim.steps": 600, "eval.every": 100000, "eval.at_start": False,
                                       "eval.qa.at_start": False, "checkpoint.every": 250, "optim.lr": 3.0e-4,
                                       "optim.vision_lr": 1.5e-4, "optim.warmup_steps": 50}
    assert {k: stages["ar_vla"][k] for k in ("agg", "agg_rounds", "phases")} == {"agg": 0.5, "agg_rounds": [0, 3, 4, 5],
                                                                                  "phases": 1.0}
    parity = {s["name"]: s for s in _read_config(ROOT / "configs" / "studies" / "parity.yaml")["train"]}
    assert parity["b32_plus300"]["set"] == {"diffusion.complementary": True, "diffusion.full_mask_copy": True,
                                            "optim.steps": 300, "optim.lr": 2.0e-4, "optim.vision_lr": 5.0e-5,
                                            "eval.every": 100000, "eval.at_start": False, "eval.qa.at_start": False,
                                            "checkpoint.every": 250}


def test_what_the_pipeline_sets_in_a_recipe_is_listed(tmp_path):
    from wamdiff.orchestration.pipeline import PIPELINE_SET_FIELDS, overrides_line, pipeline_fields

    (tmp_path / "ar").mkdir()
    cfg = _write(tmp_path, "c.yaml", f"out: {tmp_path / 'run'}\nseed: 3\ndata: {{}}\ncheckpoints: {{ar: {tmp_path / 'ar'}}}\n"
                 "train: [{name: s, recipe: r.yaml, init: ar, teacher: ar, set: {seed: 4, optim.lr: 1.0}}]\n")
    p = Pipeline.load(cfg)
    spec = p.cfg["train"][0]
    fields = pipeline_fields(p, spec, tmp_path / "run" / "ckpt" / "s")
    assert tuple(fields) == PIPELINE_SET_FIELDS
    assert fields["seed"] == 3 and fields["model.init"] == fields["teacher.path"] == str(tmp_path / "ar")
    assert fields["data.val"] == str(tmp_path / "run" / "data" / "val.json")
    assert overrides_line(spec, fields) == ("stage s: recipe r.yaml; the pipeline sets name, output_dir, seed, threads, "
                                            "data.train, data.val, eval.qa.path, model.init, teacher.path; "
                                            "its set: seed, optim.lr")
