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
