"""Pipeline stages re-run only when their settings change (planner specs: tests/test_eval_run.py)."""

from __future__ import annotations

import pytest
import yaml

from wamdiff.orchestration.pipeline import Pipeline


def _pipeline(tmp_path) -> Pipeline:
    cfg = {"out": str(tmp_path / "run"), "data": {"fmt": "fixed1"},
           "evaluate": {"decode": {"mode": "block", "block": 32, "threshold": 0.9, "batch": 16}}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return Pipeline.load(tmp_path / "c.yaml")


def test_stage_reruns_only_when_its_settings_change(tmp_path):
    from wamdiff.orchestration.pipeline import run_stage

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
    from wamdiff.orchestration.pipeline import _read_config

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


def _chain(tmp_path, b_lr: float = 1e-3, **extra) -> Pipeline:
    """a -> b (init) -> round 7 driven by b -> c (init b, mixes round 7), with the AR VLA given; `extra`: more
    top-level sections."""
    (tmp_path / "ar").mkdir(exist_ok=True)
    cfg = {"out": str(tmp_path / "run"), "data": {"fmt": "delta"}, "checkpoints": {"ar": str(tmp_path / "ar")},
           "train": [{"name": "a", "recipe": "r.yaml", "init": "ar"},
                     {"name": "b", "recipe": "r.yaml", "init": "a", "set": {"optim.lr": b_lr}},
                     {"name": "r7", "aggregate": {"planner": "b,steps=2", "round": 7}},
                     {"name": "c", "recipe": "r.yaml", "init": "b", "agg": 0.5, "agg_rounds": [7]}], **extra}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(cfg))
    return Pipeline.load(tmp_path / "c.yaml")


def test_a_stage_runs_again_when_a_stage_it_reads_from_finished_after_it(tmp_path):
    """A stage is done only if it finished after every stage it starts from, learns from, drives or mixes in:
    training `b` again makes the round it drives and the stage after it stale, not the stage before it."""
    from wamdiff.orchestration.pipeline import run_stage, stage_done

    p = _chain(tmp_path)
    specs = {s["name"]: s for s in p.cfg["train"]}
    for name in ("a", "b", "r7", "c"):
        run_stage(p, name, dict, settings=specs[name])
    assert all(stage_done(p, n, specs[n]) is not None for n in specs)
    p2 = _chain(tmp_path, b_lr=2e-3)  # b's settings change: b runs again
    specs2 = {s["name"]: s for s in p2.cfg["train"]}
    assert stage_done(p2, "b", specs2["b"]) is None
    run_stage(p2, "b", dict, settings=specs2["b"])
    assert stage_done(p2, "a", specs2["a"]) is not None  # upstream of b: untouched
    assert stage_done(p2, "r7", specs2["r7"]) is None  # drives b
    assert stage_done(p2, "c", specs2["c"]) is None  # starts from b and mixes round 7
    run_stage(p2, "r7", dict, settings=specs2["r7"])
    run_stage(p2, "c", dict, settings=specs2["c"])
    assert all(stage_done(p2, n, specs2[n]) is not None for n in specs2)


def test_a_stage_dir_trained_otherwise_is_kept_aside_and_not_resumed(tmp_path):
    """Resuming is for an interrupted run of the same stage: a finished stage trained again (other settings or
    newer inputs) starts afresh, its old dir moved aside with every file in it."""
    from wamdiff.orchestration.pipeline import STAGE_KEY_FILE, _claim_stage_dir, run_stage

    p = _chain(tmp_path)
    spec = {s["name"]: s for s in p.cfg["train"]}["b"]
    legacy = p.out / "ckpt" / "b"
    (legacy / "checkpoints" / "step-100").mkdir(parents=True)
    assert _claim_stage_dir(p, spec) == legacy  # interrupted, no record: resumed in place
    assert (legacy / "checkpoints" / "step-100").is_dir() and (legacy / STAGE_KEY_FILE).is_file()
    assert _claim_stage_dir(p, spec) == legacy and (legacy / "checkpoints").is_dir()  # same key: resumed
    run_stage(p, "b", dict, settings=spec)  # it finished
    changed = {**spec, "set": {"optim.lr": 5e-3}}
    assert _claim_stage_dir(p, changed) == legacy and not (legacy / "checkpoints").exists()
    aside = [d for d in legacy.parent.iterdir() if d.name.startswith("b.superseded-")]
    assert len(aside) == 1 and (aside[0] / "checkpoints" / "step-100").is_dir()


def test_a_round_labelled_again_replaces_its_old_labels(tmp_path, monkeypatch):
    """An aggregation round whose planner was retrained is driven again (`force`), not read back from its files."""
    import wamdiff.eval.aggregation as aggregation
    import wamdiff.orchestration.pipeline as pipeline

    p = _chain(tmp_path)
    spec = {s["name"]: s for s in p.cfg["train"]}["r7"]
    seen = []
    monkeypatch.setattr(aggregation, "aggregate_round", lambda *a, force=False, **k: seen.append(force) or
                        {"labelled": 0, "families": {}})
    monkeypatch.setattr(Pipeline, "planner", lambda self, text: type("P", (), {"fmt": "delta"})())
    pipeline.stage_aggregate(p, spec)
    pipeline.run_stage(p, "r7", dict, settings=spec)
    pipeline.stage_aggregate(p, spec)
    assert seen == [False, True]


def test_overlap_and_bench_run_again_when_a_model_they_read_is_retrained(tmp_path):
    """Their settings hold the weights of the models they read: a retrained student (new weights file) changes
    them, a stage they do not read does not."""
    import os

    from wamdiff.orchestration.eval_stages import model_stage_settings
    from wamdiff.orchestration.sections import EvaluateSection

    p = _chain(tmp_path, bench={"ar": "ar", "diffusion": "b"})
    p.cfg["evaluate"] = {"top5_overlap": {"student": "c", "diffusion_teacher": "b", "ar_teacher": "ar"}}
    p.evaluate = EvaluateSection(**p.cfg["evaluate"])  # as `Pipeline.load` parses it
    for stage in ("a", "b", "c"):
        p.checkpoint(stage).mkdir(parents=True)
        (p.checkpoint(stage) / "model.safetensors").write_bytes(b"x" * 8)
    (tmp_path / "ar" / "model.safetensors").write_bytes(b"y" * 8)
    before = {s: model_stage_settings(p, s) for s in ("overlap", "bench")}
    os.utime(p.checkpoint("a") / "model.safetensors", ns=(1, 1))  # read by neither
    assert {s: model_stage_settings(p, s) for s in ("overlap", "bench")} == before
    (p.checkpoint("c") / "model.safetensors").write_bytes(b"z" * 9)  # the student, retrained
    assert model_stage_settings(p, "overlap") != before["overlap"]
    assert model_stage_settings(p, "bench") == before["bench"]
    os.utime(p.checkpoint("b") / "model.safetensors", ns=(2, 2))  # the bench's student
    assert model_stage_settings(p, "bench") != before["bench"]


def test_an_aggregate_stage_takes_a_list_of_families_and_refuses_an_unknown_one(tmp_path, monkeypatch):
    import wamdiff.eval.aggregation as aggregation
    import wamdiff.orchestration.pipeline as pipeline

    p = _chain(tmp_path)
    spec = {s["name"]: s for s in p.cfg["train"]}["r7"]
    seen = []
    monkeypatch.setattr(aggregation, "aggregate_round", lambda planner, out, settings, *a, **k: seen.append(settings) or
                        {"labelled": 0, "families": {}})
    monkeypatch.setattr(Pipeline, "planner", lambda self, text: type("P", (), {"fmt": "delta"})())
    two = {**spec, "aggregate": {**spec["aggregate"], "families": ["intersection", "roundabout"], "routes_per_family": 3}}
    pipeline.stage_aggregate(p, two)
    assert seen[0].families == ("intersection", "roundabout")
    assert [r.family for r in seen[0].routes()] == ["intersection"] * 3 + ["roundabout"] * 3
    one = {**spec, "aggregate": {**spec["aggregate"], "families": "merge", "routes_per_family": 2}}  # one name
    pipeline.stage_aggregate(p, one)
    assert seen[1].families == ("merge",)
    bad = {**spec, "aggregate": {**spec["aggregate"], "families": ["intersections"]}}
    with pytest.raises(ValueError, match=r"aggregate families \['intersections'\] unknown"):
        pipeline.stage_aggregate(p, bad)
