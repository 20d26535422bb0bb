"""End to end at the smallest scale: the whole pipeline (data -> every training level -> evaluation -> report).

Slow (a few minutes on 2 cores): `make test-slow`. It checks that every artefact exists and every number in
the report is finite and inside its valid range; it does not judge quality (tiny models, a few steps).
"""

from __future__ import annotations

import csv
import json
import math

import pytest
import yaml

pytestmark = pytest.mark.slow

TINY = {"model.preset": "tiny", "optim.steps": 2, "optim.batch_size": 2, "optim.warmup_steps": 0,
        "eval.every": 100000, "eval.at_start": False, "eval.qa.at_start": False, "eval.qa.at_end": False,
        "data.max_val_samples": 2, "checkpoint.every": 1, "log.tensorboard": False, "log.progress": False}


def _stage(name, recipe, init=None, teacher=None, **extra):
    s = {"name": name, "recipe": f"configs/recipes/{recipe}.yaml", "set": {**TINY, **extra}}
    if init:
        s["init"] = init
    if teacher:
        s["teacher"] = teacher
    return s


def smoke_config(out) -> dict:
    return {
        "out": str(out), "seed": 0, "threads": 1,
        "data": {"families": ["highway", "merge"], "fmt": "fixed1", "per_family": {"train": 3, "val": 2, "test": 2},
                 "workers": 1, "qa_weight": 0.2, "train_variants": {"fast": {"speed_scale": 1.25, "per_family": 2}}},
        "train": [
            _stage("ar_sft", "ar_sft"),
            _stage("block1", "block1", "ar_sft"), _stage("block4", "block4", "block1"),
            _stage("block8", "block8", "block4"), _stage("block16", "block16", "block8"),
            {**_stage("block32", "block32", "block16"), "train_variants": 1.0},
            _stage("distill_block", "distill_block", "block32", "block16"),
            _stage("teacher_ar_sft", "ar_sft"), _stage("teacher_block32", "block32", "teacher_ar_sft"),
            _stage("distill_model", "distill_model", "distill_block", "teacher_block32",
                   **{"teacher.block_size": 16, "teacher.onpolicy_every": 1}),
        ],
        "evaluate": {
            "planners": {"expert": "expert", "constant velocity": "cv", "AR VLA": "stage:ar_sft",
                         "diffusion after curriculum (B32)": "stage:block32", "+ model-level distillation": "stage:distill_model",
                         "+ model-level distillation, <= 4 steps, delayed cache": "stage:distill_model,steps=4,delayed=1"},
            "decode": {"mode": "block", "block": 32, "threshold": 0.9, "batch": 4, "max_new_tokens": 48},
            "speed": {"batches": [1, 2], "plans": 2},
            "test_limit": 4, "qa_samples": 4,
            "closedloop": {"routes": "dev", "limit": 2, "model_routes": 1},
            "top5_overlap": {"student": "distill_block", "diffusion_teacher": "teacher_block32", "ar_teacher": "teacher_ar_sft",
                             "samples": 2},
        },
        "bench": {"ar": "ar_sft", "diffusion": "distill_model", "batch_sizes": [1], "block_sizes": [32], "thresholds": [0.9],
                  "dtypes": ["fp32"], "prompts": 2, "max_new_tokens": 48},
    }


RANGES = {  # report column -> valid range
    "pdms": (0, 100), "nc": (0, 1), "dac": (0, 1), "ttc": (0, 1), "ep": (0, 1), "c": (0, 1),
    "l2_1s": (0, 1e3), "l2_2s": (0, 1e3), "l2_3s": (0, 1e3), "l2_4s": (0, 1e3), "failed": (0, 100),
    "cl_success": (0, 100), "cl_ds": (0, 100), "cl_routes": (0, 10), "ms_plan_b1": (0, 1e6), "plans_s_b1": (0, 1e6),
    "tok_s_b1": (0, 1e7), "tpf_b1": (0, 1e3), "x_ar_b1": (0, 1e3), "qa": (0, 100),
}


def test_pipeline_smallest_scale(tmp_path, monkeypatch):
    import torch

    from wamdiff.orchestration.pipeline import run_pipeline

    monkeypatch.chdir(__import__("pathlib").Path(__file__).resolve().parents[1])
    torch.set_num_threads(1)
    cfg_path = tmp_path / "smoke.yaml"
    cfg_path.write_text(yaml.safe_dump(smoke_config(tmp_path / "run"), sort_keys=False))
    run_pipeline(cfg_path)
    out = tmp_path / "run"
    for name in ["data", "ar_sft", "block32", "distill_block", "distill_model", "eval_speed", "eval_qa", "overlap", "bench"]:
        assert (out / "stages" / f"{name}.json").exists(), name
    for kind in ("eval_open", "eval_closed"):  # one stage per report row
        assert len(list((out / "stages").glob(f"{kind}.*.json"))) == len(smoke_config(out)["evaluate"]["planners"]), kind
    assert len(json.loads((out / "data_train_fast" / "train.json").read_text())) == 4  # 2 per family, mixed into block32
    for stage in ["ar_sft", "block1", "block4", "block8", "block16", "block32", "distill_block", "distill_model"]:
        assert (out / "ckpt" / stage / "final" / "model.safetensors").exists(), stage
    report = out / "report"
    for f in ["report.md", "summary.csv", "summary.json", "l2_horizon.png", "speed_quality.png"]:
        assert (report / f).exists(), f
    rows = list(csv.DictReader(open(report / "summary.csv")))
    assert [r["planner"] for r in rows] == list(smoke_config(out)["evaluate"]["planners"])
    for r in rows:
        for key, (lo, hi) in RANGES.items():
            if r[key] == "":
                continue
            v = float(r[key])
            assert math.isfinite(v) and lo <= v <= hi, (r["planner"], key, v)
    models = [r for r in rows if r["spec"].startswith("stage:")]
    assert all(r["pdms"] != "" and r["tok_s_b1"] != "" and r["ms_plan_b1"] != "" and r["qa"] != "" for r in models)
    assert [float(r["x_ar_b1"]) for r in models if r["planner"] == "AR VLA"] == [1.0]  # × AR: the AR row is 1
    overlap = json.loads((out / "stages" / "overlap.json").read_text())
    assert 0.0 <= overlap["diffusion"]["top5_overlap"] <= 1.0 and 0.0 <= overlap["ar"]["top5_overlap"] <= 1.0
    # resumable: a second run skips every stage and rewrites the same table
    run_pipeline(cfg_path)
    assert list(csv.DictReader(open(report / "summary.csv"))) == rows
