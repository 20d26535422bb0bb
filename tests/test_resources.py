"""Configs and shipped checkpoints found from any directory: configs from the package, checkpoints through
WAMDIFF_CHECKPOINTS; the working directory always wins."""

from __future__ import annotations

from pathlib import Path

import yaml

from wamdiff.resources import CHECKPOINTS_ENV, config_file, packaged_configs, shipped_path

ROOT = Path(__file__).resolve().parents[1]


def test_configs_are_package_data_equal_to_the_repository_configs():
    shipped = sorted(p.relative_to(ROOT / "configs") for p in (ROOT / "configs").rglob("*.yaml"))
    packaged = sorted(p.relative_to(packaged_configs()) for p in packaged_configs().rglob("*.yaml"))
    assert shipped and packaged == shipped
    assert (packaged_configs() / "demo.yaml").read_text() == (ROOT / "configs" / "demo.yaml").read_text()


def test_a_config_path_is_read_here_first_else_from_the_package(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert config_file("configs/demo.yaml") == packaged_configs() / "demo.yaml"
    assert config_file("recipes/lora/block8.yaml") == packaged_configs() / "recipes" / "lora" / "block8.yaml"
    assert config_file("configs/nope.yaml") == Path("configs/nope.yaml")  # missing everywhere: the caller says so
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "demo.yaml").write_text("out: mine\n")
    assert config_file("configs/demo.yaml") == Path("configs/demo.yaml")  # the user's own file wins


def test_checkpoints_come_from_the_working_directory_else_wamdiff_checkpoints(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(CHECKPOINTS_ENV, raising=False)
    assert shipped_path("checkpoints/ar_vla") == Path("checkpoints/ar_vla")
    store = tmp_path / "store"
    (store / "ar_vla").mkdir(parents=True)
    monkeypatch.setenv(CHECKPOINTS_ENV, str(store))
    assert shipped_path("checkpoints/ar_vla") == store / "ar_vla"
    assert shipped_path("checkpoints/other") == Path("checkpoints/other")  # not there either: unchanged
    (tmp_path / "checkpoints" / "ar_vla").mkdir(parents=True)
    assert shipped_path("checkpoints/ar_vla") == Path("checkpoints/ar_vla")


def test_the_demo_config_loads_from_another_directory_with_its_checkpoints(tmp_path, monkeypatch):
    from wamdiff.orchestration.pipeline import Pipeline
    from wamdiff.training.config import read_recipe_yaml

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(CHECKPOINTS_ENV, str(ROOT / "checkpoints"))
    p = Pipeline.load("configs/demo.yaml")
    assert p.checkpoint("distill_block") == ROOT / "checkpoints" / "distill_block"
    assert (p.checkpoint("distill_block") / "config.json").is_file()
    recipe = read_recipe_yaml("configs/recipes/lora/block8.yaml")  # its `base:` chain resolved inside the package
    base = yaml.safe_load((ROOT / "configs" / "recipes" / "_common.yaml").read_text())
    assert recipe["model"]["lora"]["rank"] > 0 and recipe["optim"]["min_lr_ratio"] == base["optim"]["min_lr_ratio"]
