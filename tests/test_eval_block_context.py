"""The in-block context probe (`eval.block_context`, `wamdiff eval context`): its batched rows against one forward
per masked position, the per-sample gain and its interval by hand, the command end to end on a tiny model with an
AR reference counted by hand."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from wamdiff.eval.block_context import context_summary, sample_rows


def _tiny(tmp_path, block_size=4):
    models = pytest.importorskip("wamdiff.models")
    from wamdiff.models.convert import to_diffusion
    from wamdiff.training.synthetic import write_dataset

    tok = models.build_tokenizer()
    model = to_diffusion(models.build_model("tiny", tok, vision=True, seed=0), block_size, tokenizer=tok)
    models.save_model(model, tok, tmp_path / "ckpt")
    paths = write_dataset(tmp_path / "data", n_train=2, n_val=2, n_qa=3)
    for src, name in (("val", "test.json"), ("val_qa", "test_qa.json")):
        (tmp_path / "data" / name).write_text(paths[src].read_text())
    return tmp_path / "ckpt", tmp_path / "data"


def test_rows_match_one_forward_per_masked_position(tmp_path):
    from wamdiff.diffusion.forward import diffusion_forward
    from wamdiff.models import image_processor_for, load_model
    from wamdiff.models.tokens import IM_END, PAD, token_id
    from wamdiff.training.data import collate, load_examples

    ckpt, data = _tiny(tmp_path)
    model, tok = load_model(ckpt)
    model.eval()
    mask, pad, end = model.config.mask_token_id, token_id(tok, PAD), token_id(tok, IM_END)
    e = load_examples(data / "test.json", tok, vision=True, limit=1, image_processor=image_processor_for(model))[0]
    b = collate([e], pad_id=pad, block_multiple=4)
    rows = sample_rows(model, b, 4, mask, end)
    length = int((b.x0[0] == end).nonzero()[0]) + 1
    assert [r["position"] for r in rows] == list(range(length)) and length < b.x0.shape[1]  # the PAD tail left out
    every = b.x0.masked_fill(b.answer_mask.bool(), mask)
    with torch.inference_mode():
        all_lp = diffusion_forward(model, x0=b.x0, xt=every, block_size=4, **b.model_inputs())[0].float().log_softmax(-1)
        for j in (0, length // 2, length - 1):
            xt = b.x0.clone()
            xt[0, j] = mask
            one_lp = diffusion_forward(model, x0=b.x0, xt=xt, block_size=4, **b.model_inputs())[0, j].float().log_softmax(-1)
            gold = int(b.x0[0, j])
            assert rows[j]["gold"] == gold
            assert rows[j]["logp_one"] == pytest.approx(float(one_lp[gold]), abs=1e-4)
            assert rows[j]["logp_all"] == pytest.approx(float(all_lp[j, gold]), abs=1e-4)
            assert rows[j]["hit_one"] == int(one_lp.argmax() == gold)


def test_summary_gain_is_the_mean_over_samples_with_its_interval():
    rows = [{"id": "a", "task": "planning", "logp_one": -0.1, "logp_all": -1.1, "hit_one": 1, "hit_all": 0},
            {"id": "a", "task": "planning", "logp_one": -0.2, "logp_all": -0.2, "hit_one": 1, "hit_all": 1},
            {"id": "b", "task": "planning", "logp_one": -2.0, "logp_all": -1.0, "hit_one": 0, "hit_all": 0},
            {"id": "q", "task": "qa: meta_action", "logp_one": -0.5, "logp_all": -0.7, "hit_one": 1, "hit_all": 1}]
    s = context_summary(rows)
    gains = np.array([(1.0 + 0.0) / 2, -1.0])  # per sample: a's two positions, b's one
    half = 1.959964 * gains.std(ddof=1) / math.sqrt(2)
    p = s["planning"]
    assert (p["positions"], p["samples"], p["acc_one"], p["acc_all"]) == (3, 2, pytest.approx(2 / 3), pytest.approx(1 / 3))
    assert p["gain"] == pytest.approx(gains.mean()) and p["gain_ci95"] == pytest.approx([gains.mean() - half, gains.mean() + half])
    assert s["qa: meta_action"]["gain"] == pytest.approx(0.2)


def test_context_command_end_to_end_with_an_ar_reference(tmp_path):
    from typer.testing import CliRunner

    from wamdiff.diffusion.forward import ar_forward
    from wamdiff.eval.cli import app
    from wamdiff.models import image_processor_for, load_model
    from wamdiff.models.tokens import IM_END, PAD, token_id
    from wamdiff.training.data import collate, load_examples

    ckpt, data = _tiny(tmp_path)
    models = pytest.importorskip("wamdiff.models")
    tok = models.build_tokenizer()
    models.save_model(models.build_model("tiny", tok, vision=True, seed=1), tok, tmp_path / "ar")
    res = CliRunner().invoke(app, ["context", "-p", f"model:{ckpt}", "-p", f"model:{tmp_path / 'ar'}", "--data",
                                   str(data), "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "c" / "context.json").read_text())["models"]
    student, ar = got[f"model:{ckpt}"], got[f"model:{tmp_path / 'ar'}"]
    assert "planning" in student and any(t.startswith("qa") for t in student)  # synthetic questions have no kind
    assert student["planning"]["gain"] is not None and ar["planning"]["gain"] is None and ar["planning"]["acc_all"] is None
    assert (tmp_path / "c" / "context.md").exists()
    # the AR row: its greedy next-token hits on the gold answer, counted by hand from its logits
    model, tok = load_model(tmp_path / "ar")
    end, pad = token_id(tok, IM_END), token_id(tok, PAD)
    hits = n = 0
    for e in load_examples(data / "test.json", tok, vision=True, limit=100, image_processor=image_processor_for(model)):
        b = collate([e], pad_id=pad, block_multiple=1)
        length = int((b.x0[0] == end).nonzero()[0]) + 1
        with torch.inference_mode():
            pred = ar_forward(model, answer=b.x0, **b.model_inputs())[0, :length].argmax(-1)
        hits += int((pred == b.x0[0, :length]).sum())
        n += length
    assert ar["planning"]["positions"] == n and ar["planning"]["acc_one"] == pytest.approx(hits / n)


def test_a_bad_model_is_one_line_exit_2(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "wamdiff.cli", "eval", "context", "-p", "model:nowhere", "--data",
                        str(tmp_path / "none"), "--out", str(tmp_path / "c")], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and "model:nowhere" in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert not (tmp_path / "c").exists()
