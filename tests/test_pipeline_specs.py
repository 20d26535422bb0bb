"""Planner specs of a pipeline config: `stage:NAME[,key=value...]` resolves to a model planner."""

from __future__ import annotations

import pytest
import yaml

from wamdiff.eval.planners import make_planner
from wamdiff.pipeline import Pipeline


def _pipeline(tmp_path) -> Pipeline:
    cfg = {"out": str(tmp_path / "run"), "data": {"fmt": "fixed1"},
           "evaluate": {"decode": {"mode": "block", "block": 32, "threshold": 0.9, "batch": 16}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return Pipeline.load(tmp_path / "c.yaml")


def test_stage_options_override_the_decode_settings(tmp_path):
    p = _pipeline(tmp_path)
    stage, dec = p.stage_decode("stage:block32_more,steps=4,delayed=1")
    assert stage == "block32_more" and dec == {"mode": "block", "block": 32, "threshold": 0.9, "batch": 16,
                                               "steps": "4", "delayed": "1"}
    assert p.stage_decode("stage:ar_sft")[1]["mode"] == "ar" and "block" not in p.stage_decode("stage:ar_sft")[1]
    ckpt = p.out / "ckpt" / "block32_more" / "final"
    ckpt.mkdir(parents=True)
    (ckpt / "config.json").write_text("{}")
    planner = make_planner(p.planner_spec("stage:block32_more,steps=4,delayed=1"))
    cfg = planner.decode_config()
    assert cfg.max_steps_per_block == 4 and cfg.delayed_cache and cfg.block_size == 32 and planner.settings.fmt == "fixed1"
    assert p.planner_spec("cv") == "cv"
    with pytest.raises(ValueError, match="key=value"):
        p.stage_decode("stage:block32_more,steps")


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
