"""FLOPs per plan (`models.flops`): the counter against a closed-form count of a text-only Qwen3, and the presets' ratio."""

import pytest
from typer.testing import CliRunner

from wamdiff.models import build_model, build_tokenizer, save_model
from wamdiff.models.cli import app
from wamdiff.models.flops import ANSWER_TOKENS, plan_flops


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def closed_form(cfg, queries: int, keys: int) -> int:
    """2 FLOPs per multiply-add: every projection and the tied LM head per query, and QK^T + AV over all keys."""
    h, hd, heads, kv, inter = cfg.hidden_size, cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads, cfg.intermediate_size
    linear = h * heads * hd + 2 * h * kv * hd + heads * hd * h + 3 * h * inter
    per_layer = 2 * queries * linear + 2 * 2 * queries * keys * heads * hd
    return cfg.num_hidden_layers * per_layer + 2 * queries * h * cfg.vocab_size


def test_text_model_matches_the_closed_form(tok):
    model = build_model("tiny", tok, vision=False, seed=0)
    f = plan_flops(model, tok, block_size=8, steps=3)
    n = f["prompt_tokens"]
    assert f["prompt"] == closed_form(model.config, n, n)
    assert f["ar_step"] == closed_form(model.config, 1, n + 1)
    assert f["block_step_B8"] == closed_form(model.config, 8, n + 8)
    assert f["plan_ar"] == f["prompt"] + (ANSWER_TOKENS - 1) * f["ar_step"]
    assert f["plan_block_B8_3steps"] == f["prompt"] + 3 * f["block_step_B8"]


def test_small_preset_costs_about_a_quarter_of_the_student(tok):
    student = plan_flops(build_model("student", tok, seed=0), tok)
    small = plan_flops(build_model("small", tok, seed=0), tok)
    assert small["prompt_tokens"] == student["prompt_tokens"]  # same image geometry: the same 16 image tokens
    assert 0.15 < small["plan_ar"] / student["plan_ar"] < 0.3
    assert small["prompt"] > small["ar_step"] * 50  # a vision model's prompt forward runs the vision tower too


def test_info_cli_prints_flops(tok, tmp_path):
    save_model(build_model("tiny", tok, seed=0), tok, tmp_path / "m")
    out = CliRunner().invoke(app, ["info", str(tmp_path / "m"), "--block-size", "4", "--steps", "2"])
    assert out.exit_code == 0, out.output
    assert "flops_plan_block_B4_2steps" in out.output and "flops_prompt" in out.output
