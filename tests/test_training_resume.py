"""Checkpoints: a run killed after k steps and resumed ends with the same weights as an uninterrupted run."""

from __future__ import annotations

import csv

import pytest
import torch
from test_training_fixtures import make_data, one_thread, state_dict_of, tiny_recipe

from wamdiff.training import train
from wamdiff.training.checkpoint import latest_checkpoint



class Killed(KeyboardInterrupt):
    pass


def test_resume_after_kill_equals_uninterrupted_run(tmp_path):
    data = make_data(tmp_path / "data", n_train=4)
    # bf16 autocast, gradient accumulation, warm-up + cosine, a 2-file mix: every piece of state must round-trip
    common = dict(optim={"steps": 6, "batch_size": 4, "grad_accum": 2, "warmup_steps": 2, "mixed_precision": "bf16"},
                  data={"train": [str(data["train"]), {"path": str(data["train_qa"]), "weight": 0.5}]},
                  checkpoint={"every": 2, "keep_last": 2}, eval={"at_start": False})
    with one_thread():
        full = train(tiny_recipe(data, tmp_path / "full", "block", **common))

        def kill_at_5(step: int) -> None:
            if step == 5:  # checkpoints exist for steps 2 and 4; step 5's update is lost
                raise Killed

        with pytest.raises(Killed):
            train(tiny_recipe(data, tmp_path / "killed", "block", **common), step_callback=kill_at_5)
        assert latest_checkpoint(tmp_path / "killed").name == "step-000004"
        assert not (tmp_path / "killed" / "final").exists()
        resumed = train(tiny_recipe(data, tmp_path / "killed", "block", **common), resume=True)

    assert resumed.metrics["resumed_from"].endswith("step-000004") and resumed.metrics["steps"] == 6
    a, b = state_dict_of(full.final_model), state_dict_of(resumed.final_model)
    assert a.keys() == b.keys()
    worst = max(float((a[k].float() - b[k].float()).abs().max()) for k in a)
    assert worst <= 1e-6, worst
    assert any(float((a[k] - state_dict_of(tmp_path / "killed" / "checkpoints" / "step-000004" / "model")[k]).abs().max()) > 0 for k in a)
    # the killed run's step-5 rows were dropped: one row per (step, name)
    with (tmp_path / "killed" / "metrics.csv").open() as f:
        rows = [(r["step"], r["name"]) for r in csv.DictReader(f)]
    assert len(rows) == len(set(rows)) and ("6", "loss") in rows
    assert sorted(p.name for p in (tmp_path / "killed" / "checkpoints").iterdir()) == ["step-000004", "step-000006"]


def test_resume_without_checkpoint_starts_fresh(tmp_path):
    data = make_data(tmp_path / "data", n_train=4)
    with one_thread():
        recipe = tiny_recipe(data, tmp_path / "fresh", "ar_sft", optim={"steps": 2}, eval={"at_start": False, "at_end": False})
        r = train(recipe, resume=True)
    assert r.metrics["steps"] == 2 and "resumed_from" not in r.metrics
    assert torch.isfinite(torch.tensor(r.metrics["final_train_loss"]))


def test_resumed_run_keeps_its_start_metrics(tmp_path):
    data = make_data(tmp_path / "data", n_train=4)
    rec = tiny_recipe(data, tmp_path / "run", "block", optim={"steps": 4}, checkpoint={"every": 2})

    def kill_at_3(step: int) -> None:
        if step == 3:
            raise Killed

    with one_thread():
        with pytest.raises(Killed):
            train(rec, step_callback=kill_at_3)
        m = train(rec, resume=True).metrics
    assert "val_loss_start" in m and "val_loss" in m
    assert [s for s, _ in m["history"]["loss"]] == [1, 2, 3, 4]


def test_a_training_run_leaves_ieee_subnormals_as_it_found_them(tmp_path):
    """Denormals are flushed while training (speed) but the setting is process-wide: after `train` returns, the
    smallest normal float halves to a subnormal again, not to zero."""
    import sys

    data = make_data(tmp_path / "data", n_train=4)
    assert sys.float_info.min / 2 > 0.0
    with one_thread():
        train(tiny_recipe(data, tmp_path / "run", "ar_sft", optim={"steps": 1}, eval={"at_start": False, "at_end": False}))
    assert sys.float_info.min / 2 > 0.0
