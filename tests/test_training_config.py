"""Recipe system, schedule, parameter groups, sampler, data position, checkpoint atomicity (no model)."""

from __future__ import annotations

import glob
import math
from pathlib import Path

import pytest
import torch

from wamdiff.training.checkpoint import atomic_dir, latest_checkpoint
from wamdiff.training.config import load_recipe, parse_overrides
from wamdiff.training.data import MixtureSampler
from wamdiff.training.trainer import cosine_with_warmup, param_groups

RECIPES = Path(__file__).resolve().parents[1] / "configs" / "recipes"


def test_every_shipped_recipe_loads_and_chains():
    names = {Path(f).stem: load_recipe(f) for f in glob.glob(str(RECIPES / "[!_]*.yaml"))}
    assert {"ar_sft", "block1", "block4", "block8", "block16", "block32", "distill_block", "distill_model"} <= set(names)
    assert names["ar_sft"].kind == "ar_sft" and names["ar_sft"].block_size == 1
    prev = "ar_sft"
    for B in (1, 4, 8, 16, 32):  # each stage starts from the previous stage's final model
        r = names[f"block{B}"]
        assert r.kind == "block" and r.block_size == B
        assert r.model.init == f"runs/{prev}/final"
        prev = f"block{B}"
    assert names["distill_block"].teacher_block_size == 16 and names["distill_block"].block_size == 32
    assert any(s.path.endswith("_qa.json") for s in names["ar_sft"].data.train)  # multi-task mix


def test_overrides_and_teacher_block_size_is_honoured():
    r = load_recipe(RECIPES / "distill_block.yaml", ["teacher.block_size=4", "optim.lr=1e-3", "model.block_size=16"])
    assert r.teacher_block_size == 4 and r.optim.lr == 1e-3 and r.block_size == 16
    r = load_recipe(RECIPES / "distill_block.yaml", {"teacher.block_size": None})
    assert r.teacher_block_size == 16  # default B/2
    r = load_recipe(RECIPES / "distill_model.yaml", {"teacher": {"block_size": None}})
    assert r.teacher_block_size == 32  # default: the student's own B
    assert parse_overrides(["data.train=[a.json, b.json]"]) == {"data": {"train": ["a.json", "b.json"]}}


@pytest.mark.parametrize(
    "override, fragment",
    [
        ({"kind": "bogus"}, "kind"),
        ({"optim.lr": "fast"}, "optim.lr"),
        ({"optim.typo": 1}, "unknown key"),
        ({"teacher.path": None}, "teacher.path"),
        ({"teacher.kind": "ar"}, "same-paradigm"),
        ({"diffusion.prediction": "next"}, "diffusion.prediction.*same, shifted"),
    ],
)
def test_bad_recipe_fields_are_named(override, fragment):
    with pytest.raises(ValueError, match=fragment):
        load_recipe(RECIPES / "distill_block.yaml", override)


def test_missing_recipe_file_is_a_value_error(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_recipe(tmp_path / "nope.yaml")


def test_cosine_schedule_with_warmup():
    f = cosine_with_warmup(warmup=4, total=20, min_ratio=0.1)
    assert [round(f(s), 6) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert f(4) == pytest.approx(1.0)
    assert f(12) == pytest.approx(0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * 0.5)))
    assert f(20) == pytest.approx(0.1) and f(100) == pytest.approx(0.1)


def test_vision_tower_gets_its_own_learning_rate():
    model = torch.nn.Module()
    model.visual = torch.nn.Linear(3, 3)
    model.language_model = torch.nn.Linear(3, 3)
    groups = {g["name"]: g for g in param_groups(model, lr=1e-3, vision_lr=1e-4, weight_decay=0.1)}
    assert groups["vision"]["lr"] == 1e-4 and groups["lm"]["lr"] == 1e-3
    assert groups["lm_nodecay"]["weight_decay"] == 0.0 and groups["lm"]["weight_decay"] == 0.1
    assert groups["vision"]["params"][0] is model.visual.weight


def test_mixture_sampler_weights_epochs_and_resume():
    s = MixtureSampler([5, 3], [3.0, 1.0], seed=1)
    draws = s.draw(400)
    share = sum(src == 0 for src, _ in draws) / len(draws)
    assert 0.68 < share < 0.82  # ~ 3/4
    first = [i for src, i in draws if src == 0][:5]
    assert sorted(first) == [0, 1, 2, 3, 4]  # an epoch is a permutation
    state = s.state_dict()
    nxt = s.draw(7)
    s2 = MixtureSampler([5, 3], [3.0, 1.0], seed=1)
    s2.load_state_dict(state)
    assert s2.draw(7) == nxt


def test_atomic_checkpoint_never_leaves_a_partial_directory(tmp_path):
    root = tmp_path / "checkpoints"

    def good(d):
        (d / "state.json").write_text("{}")

    def bad(d):
        (d / "state.json").write_text("{}")
        raise KeyboardInterrupt  # killed mid-write

    atomic_dir(root / "step-000002", good)
    with pytest.raises(KeyboardInterrupt):
        atomic_dir(root / "step-000004", bad)
    assert sorted(p.name for p in root.iterdir()) == ["step-000002"]
    assert latest_checkpoint(tmp_path).name == "step-000002"
