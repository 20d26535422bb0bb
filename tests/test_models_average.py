"""Weight averaging (`models.average`, the pipeline's `average` stage): the result is the element-wise mean of the
checkpoints' stored tensors (computed here from the safetensors files themselves), averaging a model with itself
changes nothing it computes, and checkpoints that are not fine-tunes of one model are refused with one line."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from safetensors.torch import load_file

from wamdiff.models import build_model, build_tokenizer, encode_answer, load_model, save_model
from wamdiff.models.average import average_weights
from wamdiff.models.convert import to_diffusion

TOK = build_tokenizer()


def _checkpoint(path, seed: int, block: int = 4, grow: int = 1, prediction: str = "same"):
    model = to_diffusion(build_model("tiny", TOK, vision=True, seed=seed), block, tokenizer=TOK, prediction=prediction)
    if grow > 1:
        from wamdiff.models import grow_depth

        grow_depth(model, grow)
    return save_model(model, TOK, path)


@torch.no_grad()
def test_the_average_is_the_mean_of_every_stored_tensor(tmp_path):
    a, b, c = (_checkpoint(tmp_path / n, seed) for n, seed in (("a", 1), ("b", 2), ("c", 3)))
    model, _ = average_weights([a, b, c])
    state = model.state_dict()
    files = [load_file(str(p / "model.safetensors")) for p in (a, b, c)]
    assert files[0].keys() <= state.keys() and len(files[0]) > 10
    for k, t in files[0].items():
        expect = (t.double() + files[1][k].double() + files[2][k].double()) / 3
        torch.testing.assert_close(state[k].double(), expect, rtol=0, atol=1e-7, msg=k)
    assert not torch.equal(state[k], t)  # the seeds differ: the mean is not the first one
    assert model.config.diffusion == load_model(a)[0].config.diffusion


@torch.no_grad()
def test_a_model_averaged_with_itself_computes_the_same_logits(tmp_path):
    a = _checkpoint(tmp_path / "a", 5)
    ids = encode_answer(TOK, "1.25,-3.50")[None]
    same, _ = average_weights([a, a])
    orig, _ = load_model(a)
    torch.testing.assert_close(same.eval()(input_ids=ids).logits, orig.eval()(input_ids=ids).logits, rtol=0, atol=1e-6)


def test_checkpoints_of_other_models_or_decoding_are_refused(tmp_path):
    a = _checkpoint(tmp_path / "a", 1)
    with pytest.raises(ValueError, match="decoded alike"):  # same weights' shapes, another block size
        average_weights([a, _checkpoint(tmp_path / "b8", 2, block=8)])
    with pytest.raises(ValueError, match="decoded alike"):  # the logits of one position predict another token
        average_weights([a, _checkpoint(tmp_path / "shifted", 2, prediction="shifted")])
    old = _checkpoint(tmp_path / "old", 3)  # saved before `prediction` was recorded: a same-position model
    config = json.loads((old / "config.json").read_text())
    del config["diffusion"]["prediction"]
    (old / "config.json").write_text(json.dumps(config))
    average_weights([a, old])
    with pytest.raises(ValueError, match="do not match"):  # twice as deep
        average_weights([a, _checkpoint(tmp_path / "deep", 2, grow=2)])
    with pytest.raises(ValueError, match="at least two"):
        average_weights([a])


def test_the_pipeline_stage_averages_its_inputs_and_reports_their_steps(tmp_path):
    """An `average` stage saves the mean where a training stage saves its model, decodes and answers as its inputs,
    is skipped once done, and its row's training steps count every input's chain (the shared start once)."""
    from wamdiff.orchestration.pipeline import Pipeline, run_stage, stage_average
    from wamdiff.orchestration.summary import steps_after

    a, b = _checkpoint(tmp_path / "a", 1), _checkpoint(tmp_path / "b", 2)
    spec = {"name": "soup", "average": ["a", "b"]}
    cfg = {"out": str(tmp_path / "run"), "data": {"fmt": "delta"}, "checkpoints": {"a": str(a), "b": str(b)},
           "train": [spec]}
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(cfg))
    p = Pipeline.load(tmp_path / "p.yaml")
    calls = []
    for _ in range(2):
        run_stage(p, "soup", lambda: calls.append(1) or stage_average(p, spec), settings=spec)
    assert calls == [1]  # the second run found it done
    saved = load_file(str(p.checkpoint("soup") / "model.safetensors"))
    fa, fb = load_file(str(a / "model.safetensors")), load_file(str(b / "model.safetensors"))
    for k in fa:
        torch.testing.assert_close(saved[k].double(), (fa[k].double() + fb[k].double()) / 2, rtol=0, atol=1e-7)
    assert p.is_diffusion_stage("soup") and p.stage_format("soup") == "delta"
    for bad, message in (({"name": "bad", "average": ["a"]}, "two or more stage names"),
                         ({"name": "bad", "average": ["a", "b"], "init": "a"}, "takes no other field")):
        (tmp_path / "bad.yaml").write_text(yaml.safe_dump({**cfg, "train": [bad]}))
        with pytest.raises(ValueError, match=message):  # when the config loads, not after hours of training
            Pipeline.load(tmp_path / "bad.yaml")

    chain = {"out": str(tmp_path / "run2"), "data": {"fmt": "delta"}, "checkpoints": {"ar": str(a)}, "train": [
        {"name": "b32", "recipe": "configs/recipes/block32.yaml", "init": "ar"},
        {"name": "s0", "recipe": "configs/recipes/distill_block.yaml", "init": "b32"},
        {"name": "s1", "recipe": "configs/recipes/distill_block.yaml", "init": "b32"},
        {"name": "soup", "average": ["s0", "s1"]}]}
    (tmp_path / "q.yaml").write_text(yaml.safe_dump(chain))
    q = Pipeline.load(tmp_path / "q.yaml")
    for stage, steps in (("b32", 800), ("s0", 300), ("s1", 300)):
        q.stage_file(stage).parent.mkdir(parents=True, exist_ok=True)
        q.stage_file(stage).write_text(json.dumps({"steps": steps}))
    assert steps_after(q, "soup") == 800 + 300 + 300 and steps_after(q, "s0") == 1100


def test_the_average_command_writes_the_mean_or_one_line(tmp_path):
    from typer.testing import CliRunner

    from wamdiff.cli import app  # the root app: the command is wired there, under its error policy

    a, b = _checkpoint(tmp_path / "a", 1), _checkpoint(tmp_path / "b", 2)
    ok = CliRunner().invoke(app, ["model", "average", str(a), str(b), "--out", str(tmp_path / "soup")])
    assert ok.exit_code == 0, ok.output
    saved, (fa, fb) = load_file(str(tmp_path / "soup" / "model.safetensors")), (load_file(str(p / "model.safetensors")) for p in (a, b))
    k = next(iter(fa))
    torch.testing.assert_close(saved[k].double(), (fa[k].double() + fb[k].double()) / 2, rtol=0, atol=1e-7)
    bad = CliRunner().invoke(app, ["model", "average", str(a), str(_checkpoint(tmp_path / "b8", 2, block=8)),
                                   "--out", str(tmp_path / "x")])
    assert bad.exit_code == 2 and "decoded alike" in " ".join(bad.output.replace("│", " ").split())
    assert "Traceback" not in bad.output and not (tmp_path / "x").exists()
