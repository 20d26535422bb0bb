"""optim.ema_decay: final/ holds the exponential moving average of the weights, and resuming restores it."""

import shutil

import torch
from test_training_fixtures import make_data, one_thread, state_dict_of, tiny_recipe

from wamdiff.training.trainer import train


def _run(tmp_path, name, decay, steps=6, every=0, resume=False):
    paths = make_data(tmp_path / "data")
    recipe = tiny_recipe(paths, tmp_path / name, kind="ar_sft", optim={"steps": steps, "ema_decay": decay},
                         checkpoint={"every": every}, eval={"at_start": False, "at_end": False})
    with one_thread():
        return train(recipe, resume=resume).final_model


def test_decay_zero_is_the_last_weights_and_decay_one_stays_at_the_start(tmp_path):
    plain = state_dict_of(_run(tmp_path, "plain", None))
    zero = state_dict_of(_run(tmp_path, "zero", 0.0))
    assert all(torch.allclose(plain[k], zero[k], atol=1e-6) for k in plain)
    frozen = state_dict_of(_run(tmp_path, "frozen", 1.0 - 1e-9))
    from wamdiff.models import build_model, build_tokenizer

    torch.manual_seed(0)  # the trainer's seed: the tiny preset's initial weights
    start = build_model("tiny", build_tokenizer(), seed=0).state_dict()
    shared = [k for k in frozen if k in start]
    assert shared and all(torch.allclose(start[k], frozen[k], atol=1e-5) for k in shared)
    assert any(not torch.allclose(plain[k], frozen[k], atol=1e-3) for k in plain)  # the run did move the weights


def test_resume_restores_the_average(tmp_path):
    whole = state_dict_of(_run(tmp_path, "whole", 0.7, steps=6))
    out = tmp_path / "cut"
    _run(tmp_path, "cut", 0.7, steps=6, every=3)
    shutil.rmtree(out / "final")
    shutil.rmtree(out / "checkpoints" / "step-000006")  # as if killed after the checkpoint at step 3
    resumed = state_dict_of(_run(tmp_path, "cut", 0.7, steps=6, every=3, resume=True))
    assert all(torch.allclose(whole[k], resumed[k], atol=1e-6) for k in whole)
