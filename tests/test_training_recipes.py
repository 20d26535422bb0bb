"""Every recipe kind trains a few steps on the tiny preset and overfits its fixed 4-sample batch; the block
size reaches the attention mask; distillation is exactly zero against itself; NaN guard; CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch
from test_training_fixtures import MaskSpy, make_data, one_thread, tiny_recipe

from wamdiff.training import TrainingDiverged, load_recipe, train
from wamdiff.training.trainer import Trainer



@pytest.fixture(scope="module", autouse=True)
def _threads():
    with one_thread():
        yield


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return make_data(tmp_path_factory.mktemp("data"), n_train=4, n_val=2, n_qa=4)


@pytest.fixture(scope="module")
def ar_model(data, tmp_path_factory):
    """The 'mature AR model' of the tests: ar_sft on the tiny preset (QA exact match before/after on)."""
    out = tmp_path_factory.mktemp("ar")
    rec = tiny_recipe(data, out, "ar_sft", optim={"steps": 20},
                      data={"train": [str(data["train"]), {"path": str(data["train_qa"]), "weight": 0.5}]},
                      eval={"qa": {"path": str(data["val_qa"]), "max_samples": 4, "max_new_tokens": 6, "at_start": True, "at_end": True}})
    return train(rec)


@pytest.fixture(scope="module")
def block_model(data, ar_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("block4")
    return train(tiny_recipe(data, out, "block", model={"init": str(ar_model.final_model), "block_size": 4}, optim={"steps": 20}))


def test_ar_sft_overfits_and_writes_every_artifact(ar_model):
    m = ar_model.metrics
    assert m["val_loss"] < m["val_loss_start"] - 0.3
    assert m["val_ar_token_acc"] > m["val_ar_token_acc_start"]
    assert 0.0 <= m["qa_exact_match_start"] <= 1.0 and 0.0 <= m["qa_exact_match_end"] <= 1.0
    out = ar_model.output_dir
    saved = json.loads((out / "metrics.json").read_text())
    assert saved["kind"] == "ar_sft" and saved["steps"] == 20
    assert (out / "metrics.csv").read_text().startswith("step,name,value")
    assert any((out / "tensorboard").iterdir())
    assert list(ar_model.final_model.glob("*.safetensors"))
    assert not list(out.glob("*.tmp-*"))


def test_block_stage_overfits_and_saves_its_block_size(block_model):
    from wamdiff.models.build import load_model
    from wamdiff.models.convert import diffusion_settings

    m = block_model.metrics
    assert m["val_loss"] < m["val_loss_start"] - 0.3
    assert m["val_masked_acc"] > m["val_masked_acc_start"]
    model, _ = load_model(block_model.final_model)
    assert diffusion_settings(model).block_size == 4


def _check_block_rule(mask: torch.Tensor, trainer: Trainer, batch, B: int) -> None:
    """Brute force, independent of the mask module: xt column j sees x0 column k iff block(k) < block(j), and
    xt column k iff same block; x0 never sees xt."""
    P, A = batch.prompt_ids.shape[1], batch.x0.shape[1]
    m = mask[0, 0].bool() if mask.dtype == torch.bool else (mask[0, 0] == 0)
    assert m.shape == (P + 2 * A, P + 2 * A)
    valid = int(batch.answer_mask[0].sum())
    for j in range(valid):
        for k in range(valid):
            assert bool(m[P + A + j, P + k]) == (k // B < j // B), (B, j, k)
            assert bool(m[P + A + j, P + A + k]) == (k // B == j // B), (B, j, k)
            assert not bool(m[P + j, P + A + k])


def record_loss_inputs(trainer: Trainer) -> list:
    """Wrap the objective's loss to keep the (already sliced) StepInputs it is given."""
    seen, real = [], trainer.objective.loss

    def loss(model, inputs):
        seen.append(inputs)
        return real(model, inputs)

    trainer.objective.loss = loss
    return seen


def test_block_size_reaches_the_training_mask(data, ar_model, tmp_path):
    masks = {}
    for B in (4, 8):
        rec = load_recipe(tiny_recipe(data, tmp_path / f"b{B}", "block", model={"init": str(ar_model.final_model), "block_size": B}))
        trainer = Trainer(rec)
        spy, seen = MaskSpy(trainer.unwrapped), record_loss_inputs(trainer)
        trainer.train_step(0)
        spy.remove()
        assert len(spy.masks) == 1
        _check_block_rule(spy.masks[0], trainer, seen[0].batch, B)
        masks[B] = spy.masks[0]
    assert masks[4].shape != masks[8].shape or not torch.equal(masks[4], masks[8])


def test_shifted_conversion_trains_records_and_is_kept_by_later_stages(data, ar_model, tmp_path):
    """`diffusion.prediction: shifted` converts the AR model that way: the stage learns, its checkpoint records it,
    the next stage (prediction unset) keeps it and distils against itself at exactly 0, and asking a shifted init for
    same-position prediction is refused."""
    from wamdiff.models import diffusion_settings, load_model

    conv = train(tiny_recipe(data, tmp_path / "s4", "block", model={"init": str(ar_model.final_model), "block_size": 4},
                             optim={"steps": 20}, diffusion={"prediction": "shifted"}))
    assert conv.metrics["val_loss"] < conv.metrics["val_loss_start"]
    assert diffusion_settings(load_model(conv.final_model)[0]).prediction == "shifted"
    rec = load_recipe(tiny_recipe(data, tmp_path / "s8", "distill_block",
                                  model={"init": str(conv.final_model), "block_size": 8},
                                  teacher={"path": str(conv.final_model), "block_size": 8}))
    trainer = Trainer(rec)
    assert diffusion_settings(trainer.unwrapped).shifted and diffusion_settings(trainer.objective.teacher).shifted
    assert trainer.train_step(0)["loss"] == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="'shifted'.*'same'"):
        Trainer(load_recipe(tiny_recipe(data, tmp_path / "bad", "block", diffusion={"prediction": "same"},
                                        model={"init": str(conv.final_model), "block_size": 4})))


def test_distillation_against_itself_is_exactly_zero(data, block_model, tmp_path):
    rec = load_recipe(tiny_recipe(data, tmp_path / "self", "distill_block",
                                  model={"init": str(block_model.final_model), "block_size": 4},
                                  teacher={"path": str(block_model.final_model), "block_size": 4}))
    trainer = Trainer(rec)
    out = trainer.train_step(0)
    assert out["loss"] == pytest.approx(0.0, abs=1e-6)
    assert out["grad_norm"] == pytest.approx(0.0, abs=1e-4)


def test_a_source_the_teacher_does_not_score_learns_from_its_labels_alone(data, block_model, tmp_path):
    """`distil: false` on the QA file, kd_ratio 0.5: against itself the teacher's JSD is 0 on every row, so the loss
    is the masked CE (recomputed here by hand from the student's logits: CE / t at masked answer positions, summed
    per sample, divided by its answer length) at weight 1 on a QA row and 0.5 on a driving row, mean over rows."""
    import torch.nn.functional as F

    qa = {"path": str(data["train_qa"]), "weight": 1.0, "distil": False}
    rec = load_recipe(tiny_recipe(data, tmp_path / "qa", "distill_block", optim={"batch_size": 8},
                                  data={"train": [str(data["train"]), qa]},
                                  model={"init": str(block_model.final_model), "block_size": 4},
                                  teacher={"path": str(block_model.final_model), "block_size": 4, "kd_ratio": 0.5}))
    assert [s.distil for s in rec.data.train] == [True, False]
    trainer = Trainer(rec)
    seen_inputs, seen_logits = record_loss_inputs(trainer), []
    real_logits = trainer.objective.student_logits

    def spy_logits(model, inputs):
        logits = real_logits(model, inputs)
        seen_logits.append(logits.detach().clone())
        return logits

    trainer.objective.student_logits = spy_logits
    out = trainer.train_step(0)
    inputs, logits = seen_inputs[0], seen_logits[0]
    own = torch.tensor([e.source == 1 for e in inputs.batch.examples])
    assert own.any() and (~own).any()  # both kinds of rows in the batch
    masked = (inputs.xt == trainer.objective.mask_token_id) & inputs.batch.answer_mask
    per_sample = torch.zeros(len(own))
    for i, j in masked.nonzero().tolist():
        ce = F.cross_entropy(logits[i, j].float()[None], inputs.batch.x0[i, j][None])
        per_sample[i] += float(ce) / float(inputs.t[i, j])
    per_sample /= inputs.batch.answer_mask.sum(1).float()
    # a distilled row: 0.5 * JSD (0 here) + 0.5 * CE; a QA row: its CE at full weight
    expected = float((per_sample * torch.where(own, 1.0, 0.5)).mean())
    assert float(per_sample[own].sum()) > 0.01
    assert out["loss"] == pytest.approx(expected, rel=1e-4)


def test_distill_block_teacher_sees_same_xt_at_its_configured_block_size(data, block_model, tmp_path):
    rec = load_recipe(tiny_recipe(data, tmp_path / "db", "distill_block", optim={"steps": 10},
                                  model={"init": str(block_model.final_model), "block_size": 8},
                                  teacher={"path": str(block_model.final_model), "block_size": 2}))
    trainer = Trainer(rec)
    assert trainer.objective.teacher_block_size == 2  # configured, not hard-coded B/2 = 4
    student_spy, teacher_spy = MaskSpy(trainer.unwrapped), MaskSpy(trainer.objective.teacher)
    seen = {}
    real_forward = trainer.objective.teacher_logits

    def spy_teacher(inputs):
        seen["teacher_xt"] = inputs.xt.clone()
        return real_forward(inputs)

    trainer.objective.teacher_logits = spy_teacher
    seen_inputs = record_loss_inputs(trainer)
    out = trainer.train_step(0)
    inputs = seen_inputs[0]
    assert out["loss"] > 0
    assert torch.equal(seen["teacher_xt"], inputs.xt)  # same noisy x_t
    _check_block_rule(student_spy.masks[0], trainer, inputs.batch, 8)
    _check_block_rule(teacher_spy.masks[0], trainer, inputs.batch, 2)
    # and it learns: a fresh student's KD loss on the held-out (= fixed) batch goes down
    fresh = rec.to_dict() | {"output_dir": str(tmp_path / "db2")}
    fresh["model"] = {"preset": "tiny", "init": None, "block_size": 8}
    result = train(fresh)
    assert result.metrics["val_kd_loss"] < result.metrics["val_kd_loss_start"]
    assert 0.0 <= result.metrics["val_top5_overlap"] <= 1.0


def test_distill_model_with_onpolicy_refresh(data, block_model, tmp_path):
    from wamdiff.decoding import DecodeConfig, generate

    rec = load_recipe(tiny_recipe(data, tmp_path / "dm", "distill_model", optim={"steps": 6},
                                  model={"preset": "tiny", "init": None, "block_size": 4},
                                  teacher={"path": str(block_model.final_model), "onpolicy_every": 2,
                                           "onpolicy_steps_per_block": 2}))
    trainer = Trainer(rec)
    inputs = trainer.step_inputs(0)  # step 0 refreshes: x_0 = the student's own fixed-steps greedy decode
    cfg = DecodeConfig(mode="block", block_size=4, strategy="fixed", max_steps=2,
                       max_new_tokens=inputs.batch.x0.shape[1])
    gens = generate(trainer.unwrapped, trainer.tokenizer, [e.prompt for e in inputs.batch.examples], cfg)
    for row, g in zip(inputs.batch.x0, gens):
        assert row[: len(g.token_ids)].tolist() == list(g.token_ids)
    data_answers = [e.answer_ids.tolist() for e in inputs.batch.examples]
    assert [row[: len(a)].tolist() for row, a in zip(inputs.batch.x0, data_answers)] != data_answers
    trainer.step = 0
    result = trainer.run()
    assert result.metrics["val_kd_loss"] < result.metrics["val_kd_loss_start"]


@pytest.mark.parametrize("onpolicy_ce", [True, False])
def test_refreshed_batches_learn_from_the_teacher_alone_unless_asked(data, block_model, tmp_path, onpolicy_ce):
    """A refreshed batch's x_0 is the student's own decode: with `teacher.onpolicy_ce: false` its loss is the KD
    term alone; a batch of dataset answers (and every batch with the default) keeps kd_ratio * KD + (1 - kd_ratio) * CE,
    each term recomputed here from the student's and the teacher's logits."""
    from wamdiff.diffusion.losses import symmetric_jsd

    rec = load_recipe(tiny_recipe(data, tmp_path / "dm", "distill_model", optim={"steps": 2},
                                  model={"preset": "tiny", "init": None, "block_size": 4},
                                  teacher={"path": str(block_model.final_model), "onpolicy_every": 2, "kd_ratio": 0.5,
                                           "onpolicy_steps_per_block": 2, "onpolicy_ce": onpolicy_ce}))
    trainer = Trainer(rec)
    obj, model = trainer.objective, trainer.unwrapped
    for step, refreshed in ((0, True), (1, False)):
        inputs = trainer.my_rows(trainer.step_inputs(step), 0)
        assert inputs.batch.on_policy is refreshed
        with torch.no_grad():
            loss, logs = obj.loss(model, inputs)
            s, t = obj.student_logits(model, inputs), obj.teacher_logits(inputs)
            kd = symmetric_jsd(s, t[..., :s.shape[-1]], obj.masked(inputs), inputs.batch.answer_mask, beta=0.5,
                               temperature=1.0)
            ce = obj.masked_ce(s, inputs)
        want = kd if (refreshed and not onpolicy_ce) else 0.5 * kd + 0.5 * ce
        assert torch.allclose(loss, want, atol=1e-6), (step, loss, want)
        assert ("ce_loss" in logs) is not (refreshed and not onpolicy_ce)


def test_distill_model_with_ar_teacher(data, ar_model, tmp_path):
    rec = tiny_recipe(data, tmp_path / "ar_teacher", "distill_model", optim={"steps": 8},
                      model={"preset": "tiny", "init": None, "block_size": 4},
                      teacher={"path": str(ar_model.final_model), "kind": "ar", "kd_ratio": 0.8})
    m = train(rec).metrics
    assert m["teacher_kind"] == "ar"
    assert m["val_kd_loss"] < m["val_kd_loss_start"]
    assert 0.0 <= m["val_top5_overlap"] <= 1.0


def test_nan_guard_stops_with_step_loss_and_recipe(data, tmp_path):
    rec = load_recipe(tiny_recipe(data, tmp_path / "nan", "block"))
    trainer = Trainer(rec)
    real = trainer.objective.loss
    calls = {"n": 0}

    def poisoned(model, inputs):
        calls["n"] += 1
        loss, logs = real(model, inputs)
        return (loss * float("nan") if calls["n"] == 3 else loss), logs

    trainer.objective.loss = poisoned
    with pytest.raises(TrainingDiverged, match=r"non-finite training loss nan at step 3 of recipe 'test-block'"):
        trainer.run()
    assert not (tmp_path / "nan" / "final").exists()


def test_cli_runs_a_recipe_with_overrides(data, tmp_path):
    import yaml
    from typer.testing import CliRunner

    from wamdiff.cli import app  # the root app: user errors go through its one error policy

    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(tiny_recipe(data, tmp_path / "cli", "block")))
    runner = CliRunner()
    res = runner.invoke(app, ["train", "--recipe", str(path), "--set", "optim.steps=2", "--set", "model.block_size=2"])
    assert res.exit_code == 0, res.output
    m = json.loads((tmp_path / "cli" / "metrics.json").read_text())
    assert m["steps"] == 2 and m["block_size"] == 2 and math.isfinite(m["final_train_loss"])
    bad = runner.invoke(app, ["train", "--recipe", str(path), "--set", "optim.lr=fast"])
    assert bad.exit_code == 2 and "optim.lr" in bad.output


def test_complementary_masking_partitions_each_answer(data, tmp_path):
    rec = load_recipe(tiny_recipe(data, tmp_path / "comp", "block", diffusion={"complementary": True}))
    trainer = Trainer(rec)
    part = trainer.my_rows(trainer.step_inputs(0), 0)
    n = len(part) // 2
    assert len(part) == 2 * len(trainer.step_inputs(1)) == 8
    first, second = part.xt[:n] == trainer.mask_id, part.xt[n:] == trainer.mask_id
    valid = part.batch.answer_mask[:n]
    assert torch.equal(first ^ second, valid) and not (first & second).any()
    assert torch.allclose(part.t[n:][valid], (1 - part.t[:n][valid]).clamp_min(rec.diffusion.min_rate))


def test_the_fully_masked_copy_masks_every_answer_token_at_rate_one(data, tmp_path):
    rec = load_recipe(tiny_recipe(data, tmp_path / "full", "block",
                                  diffusion={"complementary": True, "full_mask_copy": True}))
    trainer = Trainer(rec)
    part = trainer.my_rows(trainer.step_inputs(0), 0)
    n = len(part) // 3
    assert len(part) == 3 * n == 12 and trainer.objective.copies == 3
    valid = part.batch.answer_mask[2 * n:]
    assert torch.equal(part.xt[2 * n:] == trainer.mask_id, valid)  # every real answer token, nothing else
    assert (part.t[2 * n:] == 1).all()
    assert torch.equal(part.batch.prompt_ids[2 * n:], part.batch.prompt_ids[:n])  # the same samples
    m = trainer.run().metrics
    assert m["val_loss"] < m["val_loss_start"]


def test_text_only_student_trains(data, tmp_path):
    m = train(tiny_recipe(data, tmp_path / "text", "block", model={"vision": False}, optim={"steps": 6})).metrics
    assert m["val_loss"] < m["val_loss_start"]


def test_vision_tower_and_language_model_follow_their_own_schedules(data, tmp_path):
    rec = load_recipe(tiny_recipe(data, tmp_path / "lr", "block", optim={"steps": 4, "lr": 1e-3, "vision_lr": 1e-4,
                                                                         "warmup_steps": 2, "min_lr_ratio": 0.0}))
    trainer = Trainer(rec)
    groups = {g["name"]: g for g in trainer.optimizer.param_groups}
    vision_params = {id(p) for n, p in trainer.unwrapped.named_parameters() if n.startswith("model.visual.")}
    assert vision_params and {id(p) for g in ("vision", "vision_nodecay") for p in groups[g]["params"]} == vision_params
    seen = []
    for step in range(4):
        seen.append((groups["lm"]["lr"], groups["vision"]["lr"]))
        trainer.train_step(step)
    assert seen[0] == pytest.approx((5e-4, 5e-5)) and seen[1] == pytest.approx((1e-3, 1e-4))  # warm-up
    assert seen[3][0] == pytest.approx(1e-3 * 0.5 * (1 + math.cos(math.pi * 0.5)))  # cosine, step 3 of 4
    assert seen[3][0] / seen[3][1] == pytest.approx(10.0)


def test_ordinal_targets_train_a_delta_student(tmp_path):
    """`diffusion.ordinal_sigma`: the objective gets the vocabulary's grids and the stage learns delta answers; a
    recipe asking for ordinal targets without grids is refused."""
    from wamdiff.training.config import load_recipe as load
    from wamdiff.training.objectives import build_objective

    data = make_data(tmp_path / "data", n_train=4, n_val=2, n_qa=2, fmt="delta")
    rec = tiny_recipe(data, tmp_path / "run", "block", model={"preset": "tiny", "block_size": 32},
                      optim={"steps": 12}, diffusion={"ordinal_sigma": 1.0})
    trainer = Trainer(load(rec))
    assert trainer.objective.grids is not None and trainer.objective.grids.ids.shape[0] == 3  # bins, dx, dy
    m = trainer.run().metrics
    assert math.isfinite(m["final_train_loss"]) and m["val_loss"] < m["val_loss_start"] - 0.3
    with pytest.raises(ValueError, match="ordinal_sigma"):
        build_objective(load(rec), 0, grids=None)
