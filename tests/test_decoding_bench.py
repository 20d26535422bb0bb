"""`wamdiff bench` end to end on an untrained tiny preset with a shrunken grid (a smoke run, no timing asserts)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from wamdiff.decoding.bench import BenchGrid, quality, run_bench, synthetic_prompts
from wamdiff.decoding.cli import app
from wamdiff.decoding.config import Generation


def test_bench_cli_writes_json_plot_and_table(tmp_path):
    out = tmp_path / "bench"
    res = CliRunner().invoke(app, ["--preset", "tiny", "--batch", "1,2", "--blocks", "4", "--taus", "0.9",
                                   "--dtypes", "fp32", "--max-new-tokens", "8", "--n-prompts", "2", "--no-step-cost",
                                   "--max-steps", "8,2", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads((out / "bench.json").read_text())
    assert (out / "bench.png").stat().st_size > 0
    assert not (out / "bench.partial.jsonl").exists()  # a finished run leaves no journal to resume from
    assert "threads" in data and len(data["rows"]) == 8  # 2 batch sizes x 2 step caps x (exact, delayed) caches
    assert {r["cache"] for r in data["rows"]} == {"exact", "delayed"} and {r["max_steps"] for r in data["rows"]} == {8, 2}
    capped = [r for r in data["rows"] if r["max_steps"] == 2]
    assert all(r["diffusion"]["forwards_per_sample"] <= 2 * 2 for r in capped)  # 8 tokens = 2 blocks of 4, <= 2 steps each
    row = data["rows"][0]
    for k in ("tok_s", "ms_per_token", "forwards_per_sample", "tpf"):
        assert row["ar"][k] > 0 and row["diffusion"][k] > 0
    assert row["ar"]["tpf"] == 1.0  # AR: one token per forward
    assert "AR tok/s" in res.output and "best vs best" in res.output
    assert data["best"][0]["batch"] == 1 and data["best"][1]["batch"] == 2


def test_bench_needs_exactly_one_model_source(tmp_path):
    res = CliRunner().invoke(app, ["--out", str(tmp_path)])
    assert res.exit_code != 0


@pytest.mark.parametrize("args, word", [(["--compile", "maybe"], "--compile"), (["--caches", "lazy"], "lazy"),
                                        (["--dtypes", "fp8"], "fp8"), (["--attention", "flash"], "flash")])
def test_bench_rejects_unknown_grid_values(tmp_path, args, word):
    res = CliRunner().invoke(app, ["--preset", "tiny", "--out", str(tmp_path), *args])
    assert res.exit_code == 2 and word in res.output


def test_step_cost_and_quality_are_reported():
    from wamdiff.models import build_model, build_tokenizer, to_diffusion

    tok = build_tokenizer()
    model = to_diffusion(build_model("tiny", tok, vision=False, seed=0), 4, tokenizer=tok)
    prompts = synthetic_prompts(tok, 2, vision=False)
    grid = BenchGrid([1], [4], [0.9], ["fp32"], 6, 8, 1, False, True, step_cost_tokens=8, step_cost_repeats=1,
                     caches=["exact"])
    res = run_bench(model, tok, prompts, grid)
    assert len(res["rows"]) == 1 and res["step_cost"][0]["dtype"] == "fp32"
    assert res["step_cost"][0]["B4_ratio"] > 0
    assert next(model.parameters()).dtype.is_floating_point  # the caller's model is left as it was (copies are cast)
    text = ",".join(["1.00,2.00"] * 8)  # 8 waypoints, text2 (the format is guessed when none is given)
    g = [Generation([1, 2], text, 2, True)]
    q = quality(g, g, [",".join(["1.00,3.00"] * 8)], None)
    assert q["exact_match_vs_ar"] == 1.0 and q["l2_vs_ar"] == 0.0 and q["l2_vs_expert"] == pytest.approx(1.0)


def test_paired_bench_two_checkpoints_and_wamdiff2_json(tmp_path):
    import numpy as np
    from PIL import Image

    from wamdiff.decoding.bench import paired_bench
    from wamdiff.models import build_model, build_tokenizer, save_model, to_diffusion

    tok = build_tokenizer()
    save_model(build_model("tiny", tok, vision=True, seed=0), tok, tmp_path / "ar")
    save_model(to_diffusion(build_model("tiny", tok, vision=True, seed=1), 4, tokenizer=tok), tok, tmp_path / "diff")
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "img.png")
    answer = ",".join(["+001.0"] * 16)
    rec = {"id": "s0", "image": "img.png", "conversations": [
        {"from": "human", "value": "Here is a front-view image: <image>\nThe navigation information is: left"},
        {"from": "gpt", "value": answer}]}
    (tmp_path / "test.json").write_text(json.dumps([rec, rec]))
    res = paired_bench(ar_checkpoint=tmp_path / "ar", diffusion_checkpoint=tmp_path / "diff", data=tmp_path / "test.json",
                       out=tmp_path / "out", settings={"batch_sizes": [2], "block_sizes": [4], "thresholds": [0.9],
                                                       "dtypes": ["fp32"], "prompts": 2, "max_new_tokens": 8,
                                                       "step_cost": False})
    assert res["format"] == "fixed1" and res["ar_baseline"] == "separate AR checkpoint"
    assert (tmp_path / "out" / "bench.png").exists() and "| fp32 | 2 | 4 |" in res["markdown"]
    assert res["rows"][0]["quality"]["parse_failures"] == 2  # untrained models do not write trajectories


def test_best_vs_best_and_the_quality_bounded_headline():
    from wamdiff.decoding.bench import best_vs_best

    def row(dtype, ar_tok_s, d_tok_s, l2, ar_l2=1.0, cache="exact"):
        return {"dtype": dtype, "batch": 1, "block_size": 32, "threshold": 0.9, "max_steps": 4, "cache": cache,
                "ar": {"tok_s": ar_tok_s}, "diffusion": {"tok_s": d_tok_s, "tpf": 7.0},
                "quality": {"l2_vs_expert": l2}, "ar_quality": {"l2_vs_expert": ar_l2}}

    rows = [row("fp32", 500, 1500, 1.05), row("bf16", 380, 1800, 1.09), row("bf16", 390, 2000, 1.4, cache="delayed")]
    (b,) = best_vs_best(rows)
    assert b["ar_tok_s"] == 500 and b["diffusion_tok_s"] == 2000 and b["ratio"] == 4.0  # fastest of each side
    assert b["at_quality"]["diffusion_tok_s"] == 1800 and b["at_quality"]["ratio"] == 3.6  # 1.09 <= 1.1 x AR's L2
    (b,) = best_vs_best([row("fp32", 500, 1500, 2.0)])
    assert b["at_quality"] is None


def test_interrupted_bench_resumes_from_its_journal(tmp_path):
    from wamdiff.models import build_model, build_tokenizer, to_diffusion

    tok = build_tokenizer()
    model = to_diffusion(build_model("tiny", tok, vision=False, seed=0), 4, tokenizer=tok)
    prompts = synthetic_prompts(tok, 2, vision=False)
    grid = BenchGrid([1], [4], [0.5, 0.9], ["fp32"], 6, 8, 1, False, False, caches=["exact"])
    journal = tmp_path / "bench.partial.jsonl"
    full = run_bench(model, tok, prompts, grid, journal=journal)
    lines = journal.read_text().splitlines()
    assert len(lines) == 3  # fingerprint + 2 rows
    journal.write_text("\n".join(lines[:2]) + '\n{"kind": "row", "da')  # killed while writing the second row
    computed = []
    again = run_bench(model, tok, prompts, grid, journal=journal, progress=lambda r: computed.append(r))
    assert [r for r in computed if isinstance(r, dict)] == [again["rows"][1]]  # only the missing row ran
    assert again["rows"][0] == full["rows"][0] and "resuming: 1 rows" in computed[0]
    other = BenchGrid([1], [4], [0.9], ["fp32"], 6, 8, 1, False, False, caches=["exact"])
    computed.clear()
    run_bench(model, tok, prompts, other, journal=journal, progress=lambda r: computed.append(r))
    assert len(computed) == 1 and isinstance(computed[0], dict)  # another grid: nothing reused
    assert journal.with_suffix(".stale").exists()
