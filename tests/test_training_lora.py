"""The memory recipe: bf16 weights computed in fp32 (CPU), gradient checkpointing, LoRA adapters (peft).

Golden checks: the upcast model computes exactly what an fp32 copy computes; gradient checkpointing gives the
no-checkpointing gradients; a LoRA run touches only adapters and the added tokens' embedding rows; its
merged final model gives the logits the adapter model gave; a killed and resumed LoRA run equals an
uninterrupted one.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from test_training_fixtures import make_data, one_thread, state_dict_of, tiny_recipe

from wamdiff.models import build_model, build_tokenizer, save_model
from wamdiff.models.precision import compute_dtype, restore_stored_weights, upcast_frozen_weights
from wamdiff.training import train
from wamdiff.training.config import load_recipe
from wamdiff.training.trainer import Trainer

RECIPES = Path(__file__).resolve().parents[1] / "configs" / "recipes"


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _ids(tok, n=24, seed=0):
    return torch.randint(0, len(tok), (1, n), generator=torch.Generator().manual_seed(seed))


def test_upcast_bf16_weights_compute_what_an_fp32_copy_computes(tok):
    model = build_model("tiny", tok, vision=False, seed=0).to(torch.bfloat16).requires_grad_(False)
    reference = copy.deepcopy(model).float()  # the same (bf16-representable) values, stored in fp32
    assert upcast_frozen_weights(model) > 0 and compute_dtype(model) == torch.float32
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())  # storage is still bf16: half the bytes
    with torch.no_grad():
        torch.testing.assert_close(model(_ids(tok)).logits, reference(_ids(tok)).logits, rtol=0, atol=0)
    keys = set(model.state_dict())
    restore_stored_weights(model)
    assert compute_dtype(model) == torch.bfloat16 and "parametrizations" in " ".join(keys)
    assert set(model.state_dict()) == set(reference.state_dict())  # plain parameters again (saving, merging)


@pytest.mark.parametrize("kind", ["ar_sft", "block"])
def test_gradient_checkpointing_gives_the_same_gradients(tmp_path, kind):
    data = make_data(tmp_path / "data", n_train=4)
    grads, calls = [], []
    with one_thread():
        for ckpt in (False, True):
            r = load_recipe(tiny_recipe(data, tmp_path / f"gc{ckpt}", kind, model={"preset": "tiny", "block_size": 4,
                                                                                  "gradient_checkpointing": ckpt}))
            t = Trainer(r)
            inputs = t.my_rows(t.step_inputs(0), 0)
            t.model.train()
            saved = []  # tensors autograd keeps for backward: checkpointed layers keep only their inputs
            with torch.autograd.graph.saved_tensors_hooks(lambda x: saved.append(x.numel()) or x, lambda x: x):
                loss, _ = t.objective.loss(t.unwrapped, inputs)
            loss.backward()
            calls.append(sum(saved))
            grads.append({n: p.grad.clone() for n, p in t.model.named_parameters() if p.grad is not None})
            t.logger.close()
    assert calls[1] < calls[0] / 2, calls  # checkpointing kept far fewer activations
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for n in grads[0]:
        torch.testing.assert_close(grads[1][n], grads[0][n], rtol=1e-4, atol=1e-6)


def _lora_recipe(data, out, kind="block", **over):
    sections = dict(model={"preset": "tiny", "block_size": 4, "dtype": "bf16", "gradient_checkpointing": True,
                           "lora": {"rank": 4, "alpha": 8}},
                    optim={"steps": 4, "lr": 5e-3, "mixed_precision": "bf16"})
    from wamdiff.yamlconfig import merge

    return tiny_recipe(data, out, kind, **merge(sections, over))


def test_lora_trains_adapters_and_added_tokens_only_and_merges_exactly(tmp_path, tok):
    from wamdiff.diffusion.forward import diffusion_forward
    from wamdiff.models import load_model
    from wamdiff.models.tokens import SPECIAL_TOKENS

    data = make_data(tmp_path / "data", n_train=4)
    init = save_model(build_model("tiny", tok, seed=3).to(torch.bfloat16), tok, tmp_path / "init")
    with one_thread():
        t = Trainer(load_recipe(_lora_recipe(data, tmp_path / "run", model={"init": str(init), "preset": None})))
        trainable = [n for n, p in t.model.named_parameters() if p.requires_grad]
        assert trainable and all("lora_" in n or "trainable_tokens" in n for n in trainable)
        assert not any(".visual." in n for n in trainable)
        for step in range(4):
            t.train_step(step)
        batch = t.my_rows(t.step_inputs(99), 0)
        t.model.eval()
        with torch.no_grad():
            kw = batch.batch.model_inputs()
            before_merge = diffusion_forward(t.unwrapped, x0=batch.batch.x0, xt=batch.xt, block_size=4, **kw)
        final = t.save_final()
        t.logger.close()
    merged, _ = load_model(final)
    untrained, _ = load_model(init)
    from peft import PeftModel  # the adapters beside the merged model, in peft's own layout, on the recipe's init

    adapted = PeftModel.from_pretrained(load_model(init)[0], final / "adapter").eval()
    with torch.no_grad():
        after = diffusion_forward(merged, x0=batch.batch.x0, xt=batch.xt, block_size=4, **kw)
        start = diffusion_forward(untrained, x0=batch.batch.x0, xt=batch.xt, block_size=4, **kw)
        via_peft = diffusion_forward(adapted.get_base_model(), x0=batch.batch.x0, xt=batch.xt, block_size=4, **kw)
    # bf16 storage: the merged weight W + BA is rounded to bf16 once (the adapter model added BA in fp32)
    merge_error, training_change = float((after - before_merge).abs().max()), float((start - before_merge).abs().max())
    assert merge_error < 0.05 and training_change > 10 * merge_error, (merge_error, training_change)
    peft_error = float((via_peft - before_merge).abs().max())  # the adapter model again, from peft's own files
    assert peft_error < 0.05 and training_change > 10 * peft_error, (peft_error, training_change)
    a, b = state_dict_of(init), state_dict_of(final)
    assert a.keys() == b.keys()  # plain checkpoint: no adapter or parametrization keys
    changed = {k for k in a if not torch.equal(a[k], b[k])}
    assert changed and all(".visual." not in k for k in changed)  # the vision tower is frozen
    assert all(k.endswith("_proj.weight") or "embed_tokens" in k for k in changed), sorted(changed)[:5]
    emb = [k for k in a if k.endswith("embed_tokens.weight")][0]
    rows = set(torch.nonzero((a[emb] != b[emb]).any(1)).flatten().tolist())
    assert rows and rows <= {tok.convert_tokens_to_ids(s) for s in SPECIAL_TOKENS}  # only the added tokens' rows


def test_lora_resume_after_kill_equals_uninterrupted_run(tmp_path):
    data = make_data(tmp_path / "data", n_train=4)
    common = dict(optim={"steps": 4, "batch_size": 4, "grad_accum": 2}, checkpoint={"every": 2}, eval={"at_start": False})

    class Killed(KeyboardInterrupt):
        pass

    def kill_at_3(step):
        if step == 3:
            raise Killed

    with one_thread():
        full = train(_lora_recipe(data, tmp_path / "full", **common))
        with pytest.raises(Killed):
            train(_lora_recipe(data, tmp_path / "killed", **common), step_callback=kill_at_3)
        ckpt = tmp_path / "killed" / "checkpoints" / "step-000002"
        assert (ckpt / "adapter" / "adapter_model.safetensors").is_file() and not (ckpt / "model").exists()  # adapters only
        resumed = train(_lora_recipe(data, tmp_path / "killed", **common), resume=True)
    a, b = state_dict_of(full.final_model), state_dict_of(resumed.final_model)
    assert a.keys() == b.keys() and max(float((a[k].float() - b[k].float()).abs().max()) for k in a) == 0.0


def test_memory_settings_are_validated(tmp_path):
    data = make_data(tmp_path / "data", n_train=2)
    with pytest.raises(ValueError, match="model.dtype"):
        load_recipe(tiny_recipe(data, tmp_path / "x", model={"dtype": "fp16"}))
    with pytest.raises(ValueError, match="model.lora.rank"):
        load_recipe(tiny_recipe(data, tmp_path / "x", model={"lora": {"rank": -1}}))
    with one_thread(), pytest.raises(ValueError, match="model.lora.targets: no module"):
        Trainer(load_recipe(_lora_recipe(data, tmp_path / "y", model={"lora": {"targets": ["nope_proj"]}})))
    from wamdiff.models.precision import needs_fp32_compute

    if needs_fp32_compute("cpu"):  # full fine-tuning of bf16 weights would compute in emulated bf16
        with one_thread(), pytest.raises(ValueError, match="model.dtype: bf16 weights that train"):
            Trainer(load_recipe(tiny_recipe(data, tmp_path / "z", model={"preset": "tiny", "dtype": "bf16"})))


def test_lora_recipes_lay_the_memory_setting_over_every_stage():
    stages = ["ar_sft", "block1", "block4", "block8", "block16", "block32"]
    for stage in stages:
        r = load_recipe(RECIPES / "lora" / f"{stage}.yaml")
        plain = load_recipe(RECIPES / f"{stage}.yaml")
        assert r.model.lora.rank > 0 and r.model.dtype == "bf16" and r.model.gradient_checkpointing
        assert r.kind == plain.kind and r.block_size == plain.block_size and r.output_dir.startswith("runs/lora/")
        assert r.optim.batch_size // r.optim.grad_accum == 1  # one sample per micro-step: the 2B fits 24 GB
    for prev, stage in zip(stages, stages[1:]):
        assert load_recipe(RECIPES / "lora" / f"{stage}.yaml").model.init == f"runs/lora/{prev}/final"


def test_footprint_reports_memory_time_and_full_finetune_needs(tmp_path):
    from wamdiff.training.throughput import footprint

    data = make_data(tmp_path / "data", n_train=2)
    with one_thread():
        f = footprint(_lora_recipe(data, tmp_path / "fp", optim={"batch_size": 1}), steps=2)
    assert f["micro_batch"] == 1 and f["lora_rank"] == 4 and 0 < f["trainable_params"] < f["params"]
    assert f["peak_rss_gb"] >= f["rss_after_setup_gb"] > 0 and f["s_per_step"] > 0
    assert f["full_ft_fp32_adamw_gb"] == pytest.approx(16 * f["params"] / 1e9)
    assert f["prompt_tokens"] > 16 and f["answer_tokens"] % 4 == 0
    assert not (tmp_path / "fp").exists()  # nothing saved
