"""The pipeline config's `data:`, `evaluate:` and `bench:` sections, typed (`orchestration.sections`): one line naming the file and
the field for a bad value, the defaults from the models, and the shipped configs read as they are written."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from wamdiff.errors import UserError
from wamdiff.orchestration.pipeline import Pipeline

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted([*(ROOT / "configs").glob("*.yaml"), *(ROOT / "configs" / "studies").glob("*.yaml")])


def _load(tmp_path, data: dict, **extra) -> Pipeline:
    (tmp_path / "c.yaml").write_text(yaml.safe_dump({"out": str(tmp_path / "run"), "data": data, **extra}))
    return Pipeline.load(tmp_path / "c.yaml")


@pytest.mark.parametrize("data, message", [
    ({"fmtt": "delta"}, "data: unknown key 'fmtt'"),  # the file's own keys, before its base is merged
    ({"per_family": {"tran": 3}}, "data.per_family: unknown key 'tran'"),
    ({"workers": "two"}, "data.workers: Input should be a valid integer"),
    ({"fmt": "delta2"}, "data.fmt: Input should be"),
    ({"families": ["highway", "highwya"]}, "data.families.1: Input should be"),
    ({"per_family": {"train": 0}}, "data.per_family.train: Input should be greater than 0"),
    ({"variants": {"dense": {"per_family": "many"}}}, "data.variants.dense.per_family: Input should be a valid integer"),
    ({"phases": {"t0_spread_s": 16.0}}, "data.phases.per_family: Field required"),
])
def test_a_bad_data_value_is_one_line_naming_the_file_and_the_field(tmp_path, data, message):
    with pytest.raises(UserError) as err:
        _load(tmp_path, data)
    assert str(err.value).startswith(f"{tmp_path / 'c.yaml'}: {message}") and "\n" not in str(err.value)


@pytest.mark.parametrize("evaluate, message", [
    ({"planer": {}}, "evaluate: unknown key 'planer'"),  # the file's own keys
    ({"closedloop": {"routes": "all"}}, "evaluate.closedloop.routes: Input should be 'dev' or 'full'"),
    ({"closedloop": {"route": "dev"}}, "evaluate.closedloop: unknown key 'route'"),
    ({"qa_samples": 0}, "evaluate.qa_samples: Input should be greater than 0"),
    ({"workers": "many"}, "evaluate.workers: Input should be a valid integer"),
    ({"top5_overlap": {"student": "s", "ar_teacher": "a"}}, "evaluate.top5_overlap.diffusion_teacher: Field required"),
    ({"planners": {"AR": 3}}, "evaluate.planners.AR: Input should be a valid string"),
])
def test_a_bad_evaluate_value_is_one_line_naming_the_file_and_the_field(tmp_path, evaluate, message):
    with pytest.raises(UserError) as err:
        _load(tmp_path, {}, evaluate=evaluate)
    assert str(err.value).startswith(f"{tmp_path / 'c.yaml'}: {message}") and "\n" not in str(err.value)


def test_an_empty_closed_loop_or_overlap_is_off_as_an_absent_one(tmp_path):
    """`closedloop: {}` and `top5_overlap: false` run nothing, as they did when the section was read as a dict; a
    closed loop with only a route set takes the other defaults, and its model planners drive every route."""
    ev = _load(tmp_path, {}, evaluate={"closedloop": {}, "top5_overlap": False}).evaluate
    assert ev.closedloop is None and ev.top5_overlap is None
    cl = _load(tmp_path, {}, evaluate={"closedloop": {"routes": "full"}}).evaluate.closedloop
    assert (cl.routes, cl.per_family, cl.limit, cl.model_routes) == ("full", None, None, None)
    assert _load(tmp_path, {}).evaluate.model_dump() == {
        "planners": {}, "decode": {}, "text_decode": {}, "speed": {}, "test_limit": None, "workers": 1, "variants": False,
        "closedloop": None, "top5_overlap": None, "bev_plots": 4, "qa_samples": 64, "recorded": None}


def test_a_bad_bench_key_is_one_line_naming_the_file(tmp_path):
    with pytest.raises(UserError, match=r"c\.yaml: bench: unknown key 'threshold' \(known: .*thresholds"):
        _load(tmp_path, {}, bench={"ar": "a", "diffusion": "b", "threshold": [0.9]})
    with pytest.raises(UserError, match=r"c\.yaml: bench\.diffusion: Field required"):
        _load(tmp_path, {}, bench={"ar": "a"})
    with pytest.raises(UserError, match=r"c\.yaml: bench\.prompts: Input should be a valid integer"):
        _load(tmp_path, {}, bench={"ar": "a", "diffusion": "b", "prompts": "all"})


@pytest.mark.parametrize("grid, message", [
    ({"thresholds": [0.9, 1.5]}, "bench.thresholds.1: Input should be less than or equal to 1"),
    ({"caches": ["lazy"]}, "bench.caches.0: Input should be 'exact' or 'delayed'"),
    ({"block_sizes": [32, "fits"]}, "bench.block_sizes.1"),
    ({"dtypes": ["fp16"]}, "bench.dtypes.0: Input should be 'fp32', 'bf16' or 'int8'"),
    ({"batch_sizes": [0]}, "bench.batch_sizes.0: Input should be greater than 0"),
    ({"attention": "flash"}, "bench.attention: Input should be"),
])
def test_a_bad_bench_grid_value_is_refused_when_the_config_loads(tmp_path, grid, message):
    with pytest.raises(UserError) as err:
        _load(tmp_path, {}, bench={"ar": "a", "diffusion": "b", **grid})
    assert str(err.value).startswith(f"{tmp_path / 'c.yaml'}: {message}") and "\n" not in str(err.value)
    # what needs the machine waits for the bench: a CUDA grid loads on a CPU, and its values pass on as written
    got = _load(tmp_path, {}, bench={"ar": "a", "diffusion": "b", "device": "cuda", "block_sizes": ["fit", 16]}).bench
    assert got.settings("delta") == {"device": "cuda", "block_sizes": ["fit", 16], "prompts": 8, "format": "delta"}


def test_the_cli_says_a_bad_data_value_in_one_line_with_exit_code_2(tmp_path, capsys):
    from wamdiff.cli import main

    (tmp_path / "c.yaml").write_text(f"out: {tmp_path / 'run'}\ndata: {{qa_weight: lots}}\n")
    assert main(["pipeline", "--config", str(tmp_path / "c.yaml"), "--train-only"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {tmp_path / 'c.yaml'}: data.qa_weight: ")


def test_a_data_key_typo_in_a_base_names_the_base(tmp_path):
    (tmp_path / "base.yaml").write_text("out: o\ndata: {fmt: delta, qa_weigth: 0.1}\n")
    (tmp_path / "study.yaml").write_text("base: base.yaml\n")
    with pytest.raises(UserError, match=r"base\.yaml: data: unknown key 'qa_weigth'"):
        Pipeline.load(tmp_path / "study.yaml")


def test_the_defaults_come_from_the_model(tmp_path):
    from wamdiff.names import FAMILIES
    from wamdiff.orchestration.pipeline import training_sources
    from wamdiff.orchestration.sections import DataSection

    p = _load(tmp_path, {})
    assert p.data == DataSection() and p.bench is None
    assert (p.data.fmt, p.data.workers, p.data.qa_weight, p.data.families) == ("text2", 2, 0.0, list(FAMILIES))
    assert p.format_dir("text2") == p.data_dir and p.stage_format("any") == "text2"
    assert [s["weight"] for s in training_sources(p, {"name": "x"})] == [1.0]  # no QA pairs at weight 0
    with pytest.raises(UserError, match=r"c\.yaml: data\.per_family\.train: not set"):
        p.data.scenes("train", p.config_path)
    bench = _load(tmp_path, {"fmt": "delta"}, bench={"ar": "a", "diffusion": "b", "ordinal": 2}).bench
    assert bench.settings("delta") == {"ordinal": 2, "prompts": 8, "format": "delta"}  # grid keys as written


@pytest.mark.parametrize("path", CONFIGS, ids=lambda p: p.name)
def test_a_shipped_config_reads_as_written(path):
    """The typed sections hold exactly the YAML's values (nothing coerced, nothing dropped): the stage fingerprints,
    which hash the sections as written, and the typed values describe the same settings."""
    p = Pipeline.load(path)
    assert p.data.model_dump(exclude_unset=True) == p.cfg["data"]
    assert (p.bench.model_dump(exclude_unset=True) if p.bench else None) == p.cfg.get("bench")
    assert p.evaluate.model_dump(exclude_unset=True) == (p.cfg.get("evaluate") or {})


def test_the_bench_keys_are_those_paired_bench_reads():
    """`BenchSection`'s fields (what a `bench:` section may hold) cover every key `grid_from_settings` reads, so a
    grid field added there cannot be refused by the config check."""
    from wamdiff.decoding.bench.paired import grid_from_settings
    from wamdiff.orchestration.sections import BenchSection

    read = set()

    class Seen(dict):
        def get(self, key, default=None):
            read.add(key)
            return super().get(key, default)

    grid_from_settings(Seen())
    assert read and read <= set(BenchSection.model_fields)
