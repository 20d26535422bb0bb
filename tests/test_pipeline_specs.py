"""Pipeline stages re-run only when their settings change (planner specs: tests/test_eval_run.py)."""

from __future__ import annotations

import yaml

from wamdiff.pipeline import Pipeline


def _pipeline(tmp_path) -> Pipeline:
    cfg = {"out": str(tmp_path / "run"), "data": {"fmt": "fixed1"},
           "evaluate": {"decode": {"mode": "block", "block": 32, "threshold": 0.9, "batch": 16}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return Pipeline.load(tmp_path / "c.yaml")


def test_stage_reruns_only_when_its_settings_change(tmp_path):
    from wamdiff.pipeline import run_stage

    p = _pipeline(tmp_path)
    calls = []

    def fn():
        calls.append(1)
        return {"value": len(calls)}

    assert run_stage(p, "eval_open", fn, settings={"a": 1})["value"] == 1
    assert run_stage(p, "eval_open", fn, settings={"a": 1})["value"] == 1 and len(calls) == 1  # skipped
    assert run_stage(p, "eval_open", fn, settings={"a": 2})["value"] == 2  # settings changed: runs again
    legacy = p.stage_file("old")
    legacy.write_text('{"value": 7}')  # written before fingerprints existed: counts as done
    assert run_stage(p, "old", fn, settings={"a": 3})["value"] == 7 and len(calls) == 2


def test_config_base_merges_and_extends(tmp_path):
    from wamdiff.pipeline import _read_config

    (tmp_path / "base.yaml").write_text("out: runs/x\ndata: {fmt: delta, per_family: {train: 10}}\n"
                                        "train: [{name: a}]\nevaluate: {planners: {expert: expert}}\n")
    (tmp_path / "study.yaml").write_text("base: base.yaml\ndata: {per_family: {train: 20}}\ntrain_extra: [{name: b}]\n"
                                         "evaluate: {planners_extra: {cv: cv}}\n")
    cfg = _read_config(tmp_path / "study.yaml")
    assert cfg["data"] == {"fmt": "delta", "per_family": {"train": 20}}
    assert [s["name"] for s in cfg["train"]] == ["a", "b"]
    assert cfg["evaluate"]["planners"] == {"expert": "expert", "cv": "cv"}
    (tmp_path / "bad.yaml").write_text("base: base.yaml\nseed_extra: [1]\n")
    import pytest

    with pytest.raises(ValueError, match="seed_extra"):
        _read_config(tmp_path / "bad.yaml")
