"""`wamdiff bench` end to end on an untrained tiny preset with a shrunken grid (a smoke run, no timing asserts)."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from wamdiff.decoding.bench import BenchGrid, quality, run_bench
from wamdiff.driving.answer_format import answer_format
from wamdiff.driving.bench_inputs import answer_parser, bench_inputs, synthetic_prompts
from wamdiff.eval.bench_cli import app
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
    from test_reliability_errors import assert_user_error, cli

    assert_user_error(cli("bench", "--out", tmp_path), "give exactly one of --checkpoint DIR or --preset NAME")
    assert_user_error(cli("bench", "--preset", "tiny", "--checkpoint", tmp_path, "--out", tmp_path),
                      "give exactly one of --checkpoint DIR or --preset NAME")


@pytest.mark.parametrize("args, word", [(["--compile", "maybe"], "--compile"), (["--caches", "lazy"], "lazy"),
                                        (["--dtypes", "fp8"], "fp8"), (["--attention", "flash"], "flash"),
                                        (["--threads", "-1"], "--threads"), (["--threads", "1,x"], "--threads")])
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
    q = quality(g, g, [",".join(["1.00,3.00"] * 8)], answer_parser(None))
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
    res = paired_bench(ar_checkpoint=tmp_path / "ar", diffusion_checkpoint=tmp_path / "diff",
                       inputs=lambda tok, **kw: bench_inputs(tok, data=tmp_path / "test.json", **kw),
                       out=tmp_path / "out", settings={"batch_sizes": [2], "block_sizes": [4], "thresholds": [0.9],
                                                       "dtypes": ["fp32"], "prompts": 2, "max_new_tokens": 8,
                                                       "step_cost": False})
    assert res["format"] == "fixed1" and res["ar_baseline"] == "separate AR checkpoint"
    assert (tmp_path / "out" / "bench.png").exists() and "| fp32, 2 threads | 2 | 4 |" in res["markdown"]
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


def test_an_int8_row_is_judged_against_fp32_ar_and_on_its_own_answers():
    """int8 weights degrade AR too: the bound is AR at fp32 (same batch and threads), and a verdict from the speed
    dial's curve (measured with fp32 weights) does not carry over to int8 rows unless their own answers meet it."""
    from wamdiff.decoding.bench.headline import at_ar_quality, best_vs_best, mark_reference_quality

    def row(dtype, d_tok_s, l2, ar_l2, curve=None):
        return {"dtype": dtype, "compile": False, "threads": 1, "batch": 1, "block_size": 17, "threshold": 0.5,
                "max_steps": 1, "cache": "exact", "ar": {"tok_s": 400}, "diffusion": {"tok_s": d_tok_s, "tpf": 17.0},
                "quality": {"l2_vs_expert": l2}, "ar_quality": {"l2_vs_expert": ar_l2}, "at_ar_quality": curve}

    fp32, int8 = row("fp32", 1000, 1.05, 1.0, curve=True), row("int8", 1500, 1.3, 1.25, curve=True)
    assert at_ar_quality(int8)  # against its own (int8) AR: 1.3 <= 1.1 x 1.25
    mark_reference_quality([fp32, int8])
    assert int8["reference_ar_quality"] == fp32["ar_quality"] and at_ar_quality(fp32)
    assert not at_ar_quality(int8)  # 1.3 > 1.1 x 1.0, whatever the curve said for the same decode setting
    assert best_vs_best([fp32, int8])[0]["at_quality"]["diffusion_dtype"] == "fp32"
    good = row("int8", 1500, 1.08, 1.25, curve=True)
    mark_reference_quality([fp32, good])
    assert at_ar_quality(good) and best_vs_best([fp32, good])[0]["at_quality"]["diffusion_dtype"] == "int8"
    assert not at_ar_quality(row("int8", 1500, 1.08, 1.25, curve=False))  # the curve's verdict still counts


def test_an_ar_setting_is_judged_by_its_median_timing_not_its_luckiest():
    """AR is re-timed beside every diffusion point: the headline takes each AR setting's median timing (the upper
    one of an even count), then the fastest setting, and reports how many timings and their range."""
    from wamdiff.decoding.bench import best_vs_best
    from wamdiff.decoding.bench.headline import best_line

    def row(threads, ar_plans, d_plans):
        return {"dtype": "fp32", "compile": False, "threads": threads, "batch": 1, "block_size": 17, "threshold": 0.5,
                "max_steps": 2, "cache": "exact",
                "ar": {"tok_s": 17 * ar_plans, "plans_per_s": ar_plans, "latency_ms": 1e3 / ar_plans},
                "diffusion": {"tok_s": 17 * d_plans, "plans_per_s": d_plans, "latency_ms": 1e3 / d_plans, "tpf": 10.0},
                "quality": {"l2_vs_expert": 1.0}, "ar_quality": {"l2_vs_expert": 1.0}}

    # 1 thread: one lucky AR timing (25 plans/s) among slower ones (median 16); 2 threads: steady 18-19
    rows = [row(1, p, 50.0) for p in (16.0, 25.0, 15.0, 17.0, 12.0)] + [row(2, p, 60.0) for p in (18.0, 19.0, 18.5, 17.5)]
    (b,) = best_vs_best(rows)
    assert b["ar_threads"] == 2 and b["ar_plans_per_s"] == 18.5  # upper median of 17.5, 18, 18.5, 19
    assert b["times_ar"] == pytest.approx(60.0 / 18.5) and b["ar_timings"] == 4
    assert b["ar_latency_range_ms"] == pytest.approx([1e3 / 19.0, 1e3 / 17.5])
    assert "the median of its 4 timings, 52.6-57.1 ms" in best_line(b)
    one = [row(1, p, 50.0) for p in (16.0, 25.0, 15.0)]
    assert best_vs_best(one)[0]["ar_plans_per_s"] == 16.0  # not the lucky 25


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


def _tiny_checkpoints_and_data(tmp_path, n=2):
    import numpy as np
    from PIL import Image

    from wamdiff.models import build_model, build_tokenizer, save_model, to_diffusion

    tok = build_tokenizer()
    save_model(build_model("tiny", tok, vision=True, seed=0), tok, tmp_path / "ar")
    save_model(to_diffusion(build_model("tiny", tok, vision=True, seed=1), 4, tokenizer=tok), tok, tmp_path / "diff")
    Image.fromarray(np.zeros((64, 64, 3), np.uint8)).save(tmp_path / "img.png")
    recs = [{"id": f"s{i}", "image": "img.png", "conversations": [
        {"from": "human", "value": f"Here is a front-view image: <image>\nThe navigation information is: {c}"},
        {"from": "gpt", "value": ",".join([f"+00{i}.0"] * 16)}]} for i, c in zip(range(n), ("left", "right", "straight"))]
    (tmp_path / "test.json").write_text(json.dumps(recs))
    return tmp_path / "ar", tmp_path / "diff", tmp_path / "test.json"


@pytest.mark.slow
def test_bench_tune_end_to_end_stores_the_curve_and_reports_the_picks(tmp_path):
    """--tune on tiny checkpoints: fixed1 answers with the format's grammar always have the template's shape, so the
    curve has quality figures; it is stored for block_size="auto" and the tables carry the dial's section."""
    from wamdiff.decoding.dial import CURVE_FILE, DialCurve, curve_path

    ar, diff, data = _tiny_checkpoints_and_data(tmp_path)
    out = tmp_path / "bench"
    res = CliRunner().invoke(app, ["--checkpoint", str(diff), "--ar-checkpoint", str(ar), "--data", str(data),
                                   "--n-prompts", "2", "--batch", "1,2", "--blocks", "8", "--taus", "0.9",
                                   "--dtypes", "fp32", "--max-steps", "4", "--caches", "exact", "--max-new-tokens", "120",
                                   "--no-step-cost", "--tune", "--out", str(out)])
    assert res.exit_code == 0, res.output
    got = json.loads((out / "bench.json").read_text())
    curve = DialCurve.load(out / CURVE_FILE)
    assert DialCurve.load(curve_path(curve.fingerprint)) == curve  # where block_size="auto" finds it
    assert len(curve.points) == 1 and all(t == 112 for p in curve.points for t in p.tokens)  # 111 template tokens + EOS
    assert {p["batch"] for p in got["tune"]["picks"]} == {1, 2} and got["tune"]["costs"][0]["model"]["batches"] == [1, 2]
    assert got["roofline"]["rows"] and got["roofline"]["peak_gflops"] > 0
    assert "Speed dial" in got["markdown"] and "Headline" in got["markdown"] and "Roofline" in got["markdown"]
    assert "headline" in res.output


def _row(batch, block, ar_pps, d_pps, l2, fails=0):
    def side(pps):
        return {"plans_per_s": pps, "latency_ms": 1e3 * batch / pps, "tok_s": 100 * pps, "tpf": 5.0, "ms_per_token": 1.0,
                "forwards_per_sample": 20.0}

    return {"dtype": "fp32", "compile": False, "batch": batch, "block_size": block, "threshold": 0.9, "max_steps": 4,
            "cache": "exact", "ar": side(ar_pps), "diffusion": side(d_pps), "times_ar": d_pps / ar_pps,
            "speedup": d_pps / ar_pps, "quality": {"l2_vs_expert": l2, "parse_failures": fails, "exact_match_vs_ar": 0.0},
            "ar_quality": {"l2_vs_expert": 1.0, "parse_failures": 0, "exact_match_vs_ar": 1.0}}


def test_picks_are_set_beside_the_grid_and_the_headline_table():
    from wamdiff.decoding.bench import best_vs_best, markdown_tables
    from wamdiff.decoding.bench.tune import attach_measurements

    rows = [_row(1, 32, 4.0, 14.0, 1.05), _row(1, 8, 4.0, 10.0, 1.02), _row(1, 16, 4.0, 20.0, 1.5),
            _row(8, 32, 20.0, 25.0, 1.05), _row(8, 8, 20.0, 40.0, 1.02), _row(8, 16, 20.0, 50.0, 1.0, fails=1)]
    pick = {"predicted_ms_per_plan": 70.0, "predicted_ar_ms_per_plan": 250.0}
    picks = [{"dtype": "fp32", "compile": False, "batch": n, "block_size": b, "threshold": 0.9, "max_steps": 4,
              "cache": "exact", "pick": pick} for n, b in ((1, 32), (8, 32))]
    preds = [{"dtype": "fp32", "compile": False, "batch": r["batch"], "block_size": r["block_size"], "threshold": 0.9,
              "max_steps": 4, "cache": "exact", "predicted_ms_per_plan": 1.1e3 / r["diffusion"]["plans_per_s"]}
             for r in rows]
    result = {"rows": rows, "best": best_vs_best(rows), "threads": 1, "tune": {
        "picks": picks, "predictions": preds, "curve_file": "x",
        "curve": {"prompts": 3, "format": "fixed1", "ar_tokens_mean": 113.0, "ar_quality": {"l2_vs_expert": 1.0},
                  "points": [{"block_size": b, "threshold": 0.9, "max_steps": 4, "cache": "exact", "at_ar_quality": ok}
                             for b, ok in ((32, True), (8, True), (16, False))]}}}
    attach_measurements(result)
    p1, p8 = result["tune"]["picks"]
    assert p1["of_best"] == 1.0 and p1["best"]["block_size"] == 32  # B16 is faster but not at AR quality
    assert p8["of_best"] == pytest.approx(25 / 40) and p8["best"]["block_size"] == 8  # B16: a failed parse more
    assert result["tune"]["prediction_error"] == pytest.approx(0.1)
    md = markdown_tables(result)
    dial = [line for line in md.splitlines() if "speed dial (auto)" in line]
    assert len(dial) == 2 and "62%" in dial[1] and "100%" in dial[0]
    assert "| 1 | AR VLA (fastest setting, median timing) | fp32 | 250.0 | 4.00 |" in md
    assert result["best"][1]["at_quality"]["block_size"] == 8  # judged on the curve
    rows[4]["at_ar_quality"] = False  # the curve says B8 misses the bound at batch 8: the headline follows it
    assert best_vs_best(rows)[1]["at_quality"]["block_size"] == 32


def test_a_dial_without_a_setting_at_ar_quality_is_reported_not_a_crash():
    """A pick of None (no setting meets the quality bound) has no B / tau / cache: its row, best and share stay empty
    (this raised KeyError('block_size') in `wamdiff bench --tune` on untrained checkpoints)."""
    from wamdiff.decoding.bench import best_vs_best, markdown_tables
    from wamdiff.decoding.bench.tune import attach_measurements

    rows = [_row(1, 8, 4.0, 10.0, 3.0)]
    picks = [{"dtype": "fp32", "compile": False, "batch": 1, "pick": None}]
    result = {"rows": rows, "best": best_vs_best(rows), "threads": 1, "tune": {
        "picks": picks, "predictions": [], "curve_file": "x",
        "curve": {"prompts": 2, "format": "fixed1", "ar_tokens_mean": 113.0, "ar_quality": {"l2_vs_expert": 1.0},
                  "points": [{"block_size": 8, "threshold": 0.9, "max_steps": 4, "cache": "exact", "at_ar_quality": False}]}}}
    attach_measurements(result)
    (p,) = result["tune"]["picks"]
    assert p["row"] is None and p["best"] is None and p["of_best"] is None
    assert "| fp32 | 1 | no setting at AR quality |" in markdown_tables(result)


def test_bench_tune_needs_expert_answers(tmp_path):
    res = CliRunner().invoke(app, ["--preset", "tiny", "--tune", "--out", str(tmp_path)])
    assert res.exit_code == 2 and "--tune" in res.output and "--data" in res.output


def test_levers_are_paired_against_the_reference_path():
    from wamdiff.decoding.bench.levers import LEVERS, decode_levers, step_levers
    from wamdiff.decoding.config import DecodeConfig
    from wamdiff.models import build_model, build_tokenizer, image_processor_for, to_diffusion
    from wamdiff.models.tokens import PAD, token_id

    tok = build_tokenizer()
    model = to_diffusion(build_model("tiny", tok, vision=True, seed=0), 4, tokenizer=tok)
    prompts = synthetic_prompts(tok, 2, vision=True, image_processor=image_processor_for(model))
    rows = decode_levers(model, tok, prompts, {"block": DecodeConfig(block_size=4, max_new_tokens=8)}, batches=(1,),
                         repeats=2)
    assert [r["lever"] for r in rows] == list(LEVERS) and all(r["same_tokens"] for r in rows)  # exact levers
    assert all(r["ratio"] > 0 for r in rows)
    steps = step_levers(model, prompts[0], pad_id=token_id(tok, PAD), block_size=4, batches=(1,), repeats=2)
    assert {r["mode"] for r in steps} == {"B4 step, 4 still-masked rows", "B4 fused commit + step", "prompt prefill (AR)"}
    from wamdiff.decoding.bench.analysis import answer_length_section

    grid = BenchGrid([1], [4], [0.9], ["fp32"], 12, [4], caches=["exact"])
    short, whole = answer_length_section(model, tok, prompts, grid, lengths=(5, None), repeats=2)
    assert (short["answer_tokens"], short["truncated"], whole["answer_tokens"], whole["truncated"]) == (5, True, 12, False)
    assert short["ar_ms_per_plan"] > 0 and whole["times_ar"] > 0


@pytest.mark.parametrize("fmt", ["delta", "fixed1"])
def test_fit_block_is_one_block_holding_the_whole_answer(fmt):
    """`fit` resolves to the token count of an answer the world's formatter writes, end of turn included."""
    import numpy as np

    from wamdiff.decoding.bench.grid import FIT
    from wamdiff.driving.trajectory import format_trajectory
    from wamdiff.models import build_tokenizer
    from wamdiff.models.tokens import IM_END

    tok = build_tokenizer()
    xy = np.stack([np.linspace(2, 40, 8), np.linspace(0, -3, 8)], 1)
    answer = tok.encode(format_trajectory(xy, fmt) + IM_END, add_special_tokens=False)
    grid = BenchGrid([1], [FIT, 32], [0.9], ["fp32"], 8, [4]).resolved(tok, answer_format(fmt))
    assert grid.block_sizes == [len(answer), 32]
    assert BenchGrid([1], [FIT, len(answer)], [0.9], ["fp32"]).resolved(tok, answer_format(fmt)).block_sizes == [len(answer)]
    with pytest.raises(ValueError, match="fit"):
        BenchGrid([1], [FIT], [0.9], ["fp32"]).resolved(tok, answer_format("text2"))  # variable-width answers have no fixed length


@pytest.mark.parametrize("blocks, word", [("fit", "fit"), ("4,x", "--blocks")])
def test_bench_rejects_a_fit_block_without_a_fixed_width_format(tmp_path, blocks, word):
    res = CliRunner().invoke(app, ["--preset", "tiny", "--blocks", blocks, "--out", str(tmp_path)])
    assert res.exit_code == 2 and word in res.output


def test_the_headline_pair_is_timed_again_paired(monkeypatch):
    """Only the at-quality pair of each batch size is re-timed; the figure is the median of per-round ratios."""
    from wamdiff.decoding.bench import best_vs_best, markdown_tables
    from wamdiff.decoding.bench import confirm
    from wamdiff.models import build_model, build_tokenizer, image_processor_for, to_diffusion

    tok = build_tokenizer()
    model = to_diffusion(build_model("tiny", tok, vision=True, seed=0), 4, tokenizer=tok)
    prompts = synthetic_prompts(tok, 2, vision=True, image_processor=image_processor_for(model))
    grid = BenchGrid([1, 2], [4], [0.9], ["fp32"], 8, [4], caches=["exact"])
    rows = [_row(1, 4, 4.0, 10.0, 1.05), _row(2, 4, 5.0, 6.0, 2.0)]  # batch 2 misses the quality bound
    result = {"rows": rows, "best": best_vs_best(rows), "threads": 1}
    decoded = []

    def fake_walls(fns, repeats):
        for f in fns.values():
            decoded.append(len(f()))  # one generate call per batch of the pool
        return {"ar": [0.5, 0.4, 0.9], "diffusion": [0.25, 0.1, 0.3]}  # per-round ratios 2, 4, 3

    monkeypatch.setattr(confirm, "paired_walls", fake_walls)
    got = confirm.confirm_headline(result, model, tok, prompts, grid, repeats=3)
    assert [c["batch"] for c in got] == [1] and decoded == [2, 2]
    c = got[0]
    assert c["times_ar"] == 3.0 and (c["times_ar_min"], c["times_ar_max"]) == (2.0, 4.0)
    assert c["ar_ms_per_plan"] == pytest.approx(1e3 * 0.5 / 2) and c["grid_times_ar"] == pytest.approx(2.5)
    result["confirmed"] = got
    md = markdown_tables(result)
    row = next(line for line in md.splitlines() if "fastest at AR quality" in line)
    assert row.split(" | ")[-2] == "3.00x"  # the "× AR paired" column
    assert "median of 3 paired rounds" in md


def test_thread_counts_are_a_grid_dimension_and_each_side_takes_its_best(tmp_path, monkeypatch):
    """`--threads 1,2`: every grid point is timed at each count (AR next to it at the same count), the process's
    count is restored, the headline pairs AR's fastest count with diffusion's fastest, and the paired re-timing
    runs each side at its own count."""
    import torch

    from wamdiff.decoding.bench import best_vs_best, confirm, markdown_tables

    before = torch.get_num_threads()
    res = CliRunner().invoke(app, ["--preset", "tiny", "--batch", "1", "--blocks", "4", "--taus", "0.9", "--dtypes",
                                   "fp32", "--max-new-tokens", "8", "--n-prompts", "2", "--no-step-cost", "--caches",
                                   "exact", "--threads", "1,2", "--confirm-repeats", "0", "--no-roofline", "--out",
                                   str(tmp_path)])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "bench.json").read_text())
    assert sorted(r["threads"] for r in data["rows"]) == [1, 2] and data["threads"] == [1, 2]
    assert torch.get_num_threads() == 1  # the first count stays the process's (curve, roofline, levers)
    torch.set_num_threads(before)

    r1, r2 = _row(1, 4, 10.0, 20.0, 1.0), _row(1, 4, 8.0, 30.0, 1.0)
    r1["threads"], r2["threads"] = 1, 2  # AR fastest at 1 thread, diffusion at 2
    best = best_vs_best([r1, r2])[0]
    assert (best["ar_threads"], best["diffusion_threads"], best["times_ar"]) == (1, 2, 3.0)
    assert best["at_quality"]["times_ar"] == 3.0
    md = markdown_tables({"rows": [r1, r2], "best": best_vs_best([r1, r2]), "threads": [1, 2]})
    assert "AR 1000.0 tok/s (fp32, 1 thread) vs diffusion 3000.0 tok/s (fp32, 2 threads," in md
    assert "| 1 | AR VLA (fastest setting, median timing) | fp32, 1 thread |" in md

    seen = []

    def fake_generate(model, tokenizer, prompts, cfg, **kw):
        seen.append((cfg.mode, torch.get_num_threads()))
        return []

    def fake_walls(fns, repeats):
        for f in fns.values():
            f()
        return {"ar": [1.0], "diffusion": [0.5]}

    from wamdiff.models import build_tokenizer

    monkeypatch.setattr(confirm, "generate", fake_generate)
    monkeypatch.setattr(confirm, "paired_walls", fake_walls)
    grid = BenchGrid([1], [4], [0.9], ["fp32"], 8, [4], caches=["exact"], threads=[1, 2])
    tok = build_tokenizer()
    model = torch.nn.Linear(1, 1)
    got = confirm.confirm_headline({"best": best_vs_best([r1, r2])}, model, tok, [object()], grid, repeats=1)
    assert sorted(set(seen)) == [("ar", 1), ("block", 2)] and torch.get_num_threads() == before
    assert got[0]["ar_setting"] == "fp32, 1 thread" and got[0]["diffusion_setting"].startswith("fp32, 2 threads, B4")


def test_a_one_step_cap_is_timed_once_whatever_tau():
    """At a cap of one step every position is decided by the first forward, so tau cannot matter: the grid times
    one such point per (B, cache), and the decode it stands for is the same for every tau."""
    from wamdiff.decoding import generate
    from wamdiff.models import build_model, build_tokenizer, to_diffusion

    grid = BenchGrid([1], [4, 8], [0.5, 0.9], ["fp32"], 12, [2, 1], caches=["exact"])
    points = grid.diffusion_points()
    assert sorted(points) == sorted([(4, 0.5, 2, "exact"), (4, 0.9, 2, "exact"), (4, 0.5, 1, "exact"),
                                     (8, 0.5, 2, "exact"), (8, 0.9, 2, "exact"), (8, 0.5, 1, "exact")])
    tok = build_tokenizer()
    model = to_diffusion(build_model("tiny", tok, vision=False, seed=0), 4, tokenizer=tok)
    prompts = synthetic_prompts(tok, 2, vision=False)
    ids = [[g.token_ids for g in generate(model, tok, prompts, grid.block_config((4, tau, 1, "exact")))]
           for tau in (0.5, 0.9, 0.999)]
    assert ids[0] == ids[1] == ids[2] and all(len(i) > 1 for i in ids[0])


def _forbid(monkeypatch, *targets):
    """Each (module, name) raises when called: a measurement the run was told not to make."""
    for module, name in targets:
        def refuse(*a, _name=name, **k):
            raise AssertionError(f"{_name} was called")
        monkeypatch.setattr(module, name, refuse)


def test_no_step_cost_measures_no_step_cost_model(tmp_path, monkeypatch):
    """--no-step-cost: neither the step-cost ratios nor (for the roofline) the machine's cost model are measured;
    with no cost model cached the roofline is left out and says so. A second run after one that measured the cost
    model uses the cached one for its roofline, still measuring nothing."""
    from wamdiff.decoding import cost_model
    from wamdiff.decoding.bench import analysis, grid

    monkeypatch.setenv("WAMDIFF_CACHE", str(tmp_path / "cache"))
    args = ["--preset", "tiny", "--batch", "1", "--blocks", "4", "--taus", "0.9", "--dtypes", "fp32",
            "--max-new-tokens", "8", "--n-prompts", "2", "--caches", "exact", "--confirm-repeats", "0"]
    with monkeypatch.context() as m:
        _forbid(m, (analysis, "step_costs_for"), (cost_model, "measure_step_costs"), (grid, "step_cost"))
        res = CliRunner().invoke(app, [*args, "--no-step-cost", "--out", str(tmp_path / "a")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "a" / "bench.json").read_text())
    assert got["step_cost"] == [] and "roofline" not in got and "roofline skipped" in res.output

    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "b")])  # measures (and caches) the cost model
    assert res.exit_code == 0, res.output
    assert json.loads((tmp_path / "b" / "bench.json").read_text())["step_cost"]
    with monkeypatch.context() as m:
        _forbid(m, (analysis, "step_costs_for"), (cost_model, "measure_step_costs"), (grid, "step_cost"))
        res = CliRunner().invoke(app, [*args, "--no-step-cost", "--out", str(tmp_path / "c")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "c" / "bench.json").read_text())
    assert got["step_cost"] == [] and got["roofline"]["rows"]


def test_quick_measures_the_shrunken_grid_and_nothing_else(tmp_path, monkeypatch):
    """--quick: the grid of batch 1, the model's own B, tau 0.9, fp32, the first cache, and no step costs, cost model or paired
    re-timing."""
    from wamdiff.decoding import cost_model
    from wamdiff.decoding.bench import analysis, confirm, grid

    monkeypatch.setenv("WAMDIFF_CACHE", str(tmp_path / "cache"))
    _forbid(monkeypatch, (analysis, "step_costs_for"), (cost_model, "measure_step_costs"), (grid, "step_cost"),
            (confirm, "confirm_headline"))
    res = CliRunner().invoke(app, ["--preset", "tiny", "--block-size", "8", "--quick", "--n-prompts", "1",
                                   "--max-steps", "4", "--caches", "delayed,exact", "--out", str(tmp_path / "q")])
    assert res.exit_code == 0, res.output
    got = json.loads((tmp_path / "q" / "bench.json").read_text())
    rows = [(r["batch"], r["block_size"], r["threshold"], r["dtype"], r["cache"]) for r in got["rows"]]
    assert rows == [(1, 8, 0.9, "fp32", "delayed")]  # one setting: the first cache listed
    assert got["step_cost"] == [] and "roofline" not in got and "confirmed" not in got


def test_a_judged_bench_puts_pdms_and_comfort_in_every_quality():
    """With a judge (`bench.judge`), every row's quality and AR's carry PDMS and comfort, judged over the prompts in
    order (each prompt once, however a batch repeats them); so do the speed dial's curve points and its AR."""
    from wamdiff.decoding.bench.tune import measure_curve
    from wamdiff.models import build_model, build_tokenizer, to_diffusion

    tok = build_tokenizer()
    model = to_diffusion(build_model("tiny", tok, vision=False, seed=0), 4, tokenizer=tok)
    prompts = synthetic_prompts(tok, 3, vision=False)
    seen = []

    def judge(texts):
        seen.append(list(texts))
        return {"pdms": 90.0 - len(texts), "comfort": 0.5}

    grid = BenchGrid([1, 2], [4], [0.9], ["fp32"], 6, 8, 1, False, False, caches=["exact"])
    res = run_bench(model, tok, prompts, grid, judge=judge)
    assert len(res["rows"]) == 2
    for r in res["rows"]:
        n = min(3, r["prompts"])  # batch 2 decodes one full batch of the 3 prompts: the first 2
        assert (r["quality"]["pdms"], r["quality"]["comfort"]) == (90.0 - n, 0.5)
        assert (r["ar_quality"]["pdms"], r["ar_quality"]["comfort"]) == (90.0 - n, 0.5)
    assert sorted({len(t) for t in seen}) == [2, 3] and all(isinstance(t, str) for ts in seen for t in ts)
    assert "PDMS within 0.5, comfort within 0.02" in res["quality_check"] and res["best"][0]["judged_on_scenes"]
    plain = run_bench(model, tok, prompts, grid)
    assert "pdms" not in plain["rows"][0]["quality"] and "PDMS" not in plain["quality_check"]
    seen.clear()
    curve = measure_curve(model, tok, prompts, None, BenchGrid([1], [4], [0.9], ["fp32"], 6, [4], caches=["exact"]),
                          judge=judge)
    assert curve.ar_quality["pdms"] == 87.0 and all(p.quality["comfort"] == 0.5 for p in curve.points)
    assert [len(t) for t in seen] == [3, 3]  # the one point's answers, then AR's


def test_the_headline_says_what_the_quality_bound_covered():
    """Judged on the scenes, a faster setting whose L2 passes but whose comfort falls is not at AR quality, and the
    line says PDMS and comfort were checked; unjudged, today's wording."""
    from wamdiff.decoding.bench import best_vs_best
    from wamdiff.decoding.bench.headline import at_quality_line

    rows = [_row(1, 32, 4.0, 20.0, 1.05), _row(1, 8, 4.0, 10.0, 1.02)]
    (b,) = best_vs_best(rows)
    assert b["at_quality"]["block_size"] == 32 and not b["judged_on_scenes"]
    assert "at AR quality (L2 within 10 % of AR's, no more failed parses): " in at_quality_line(b)
    for r, comfort in zip(rows, (0.80, 0.89)):  # the faster B32 is jerkier: comfort 0.80 against AR's 0.90
        r["quality"].update(pdms=70.0, comfort=comfort)
        r["ar_quality"].update(pdms=70.2, comfort=0.90)
    (b,) = best_vs_best(rows)
    assert b["judged_on_scenes"] and b["at_quality"]["block_size"] == 8
    line = at_quality_line(b)
    assert "(L2 within 10 % of AR's, PDMS within 0.5, comfort within 0.02, no more failed parses)" in line
    assert "PDMS 70.0 (AR 70.2), comfort 0.890 (AR 0.900)" in line


def test_wamdiff_bench_judges_on_the_scenes_of_its_data(tmp_path):
    """`wamdiff bench --data` judges by PDMS and comfort when the samples' scenes are there (the root CLI wires the
    eval layer's judge), not with --no-judge or without scenes; --judge without them is a one-line error."""
    from wamdiff.cli import app as root
    from wamdiff.driving.trajectory import format_trajectory
    from wamdiff.eval.synthetic import straight_road_scene

    recs = []
    for i in range(2):
        s = straight_road_scene(speed=8.0 + 2 * i, scene_id=f"road_{i}", family="road")
        s.save(tmp_path / "scenes" / s.scene_id)
        recs.append({"id": s.scene_id, "image": f"scenes/{s.scene_id}.png", "conversations": [
            {"from": "human", "value": "<image>\nThe navigation information is: straight"},
            {"from": "gpt", "value": format_trajectory(s.future[:, :2], "text2")}]})
    data = tmp_path / "test.json"
    data.write_text(json.dumps(recs))
    args = ["bench", "--preset", "tiny", "--no-vision", "--data", str(data), "--n-prompts", "2", "--batch", "1",
            "--blocks", "4", "--taus", "0.9", "--dtypes", "fp32", "--max-new-tokens", "8", "--max-steps", "4",
            "--caches", "exact", "--no-step-cost", "--confirm-repeats", "0", "--no-roofline"]

    def run(name, *extra):
        res = CliRunner().invoke(root, [*args, *extra, "--out", str(tmp_path / name)])
        got = json.loads((tmp_path / name / "bench.json").read_text()) if res.exit_code == 0 else None
        return res, got

    res, got = run("on")
    assert res.exit_code == 0, res.output
    (row,) = got["rows"]
    assert row["quality"]["pdms"] == row["ar_quality"]["pdms"] == 0.0  # untrained: no answer parses, every plan fails
    assert row["quality"]["comfort"] == 0.0 and "PDMS within 0.5" in got["quality_check"]
    res, got = run("off", "--no-judge")
    assert res.exit_code == 0 and "pdms" not in got["rows"][0]["quality"]
    (tmp_path / "scenes" / "road_1.npz").unlink()
    res, got = run("auto")
    assert res.exit_code == 0 and "pdms" not in got["rows"][0]["quality"]
    res, _ = run("bad", "--judge")
    assert res.exit_code == 2 and "road_1" in res.output and "Traceback" not in res.output


def test_the_step_caps_are_max_steps_and_the_old_name_still_reads(monkeypatch):
    """`BenchGrid.max_steps` (was `max_steps_per_block`): a pipeline `bench:` section with the old key still loads,
    and the journal's fingerprint hashes the caps under the old name, so a journal an older version left resumes."""
    import hashlib
    from dataclasses import asdict
    from types import SimpleNamespace

    import torch

    import wamdiff.decoding.bench.journal as journal_mod
    from wamdiff.decoding.bench.journal import fingerprint
    from wamdiff.decoding.bench.paired import grid_from_settings

    assert grid_from_settings({"max_steps": [4, 2]}).max_steps == [4, 2]
    assert grid_from_settings({"max_steps_per_block": [2, 1]}).max_steps == [2, 1]
    assert grid_from_settings({}).max_steps == BenchGrid().max_steps == [32]
    grid = BenchGrid([1], [4], [0.9], ["fp32"], max_steps=[4, 2], caches=["exact"])
    prompts = [SimpleNamespace(input_ids=torch.arange(3))]
    # an older version's grid: the caps under their old name, and no cuda_graphs or smoothness field (they came later)
    old_grid = {("max_steps_per_block" if k == "max_steps" else k): v for k, v in asdict(grid).items()
                if k not in ("cuda_graphs", "smoothness")}
    ident = {"grid": old_grid, "prompts": [[0, 1, 2]], "format": "delta", "model": "m", "ar_model": None}
    old = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    monkeypatch.setattr(journal_mod, "model_fingerprint", lambda model: "m")
    assert fingerprint(grid, prompts, object(), None, "delta") == old
    # graphs off is another benchmark: its journal must not resume the graphs-on run's rows
    no_graphs = BenchGrid([1], [4], [0.9], ["fp32"], max_steps=[4, 2], caches=["exact"], cuda_graphs=False)
    assert fingerprint(no_graphs, prompts, object(), None, "delta") != old
    # and so is the joint read-out on
    smooth = BenchGrid([1], [4], [0.9], ["fp32"], max_steps=[4, 2], caches=["exact"], smoothness=0.003)
    assert fingerprint(smooth, prompts, object(), None, "delta") != old


def test_the_grid_passes_cuda_graphs_to_every_decode():
    from wamdiff.decoding.bench.paired import grid_from_settings

    assert BenchGrid().config().cuda_graphs is True
    off = grid_from_settings({"cuda_graphs": False})
    assert off.cuda_graphs is False
    assert off.config().cuda_graphs is False
    assert off.block_config((8, 0.9, 4, "exact")).cuda_graphs is False


def test_the_grid_decodes_with_the_joint_read_out_of_its_settings_on_grid_formats_only():
    """`bench: smoothness` reaches every diffusion point of an ordinal format (the students' decode, so a speed figure
    is timed at the decode of its quality figure) and no point of a text format (no grid to read jointly)."""
    from wamdiff.decoding.bench.paired import grid_from_settings
    from wamdiff.driving.answer_format import BUILTIN
    from wamdiff.models import build_tokenizer

    tok = build_tokenizer()
    grid = grid_from_settings({"ordinal": 2, "smoothness": 0.003})
    delta = grid.block_config((17, 0.5, 4, "exact"), tok, BUILTIN["delta"])
    assert (delta.smoothness, delta.ordinal_window, delta.grammar is not None) == (0.003, 2, True)
    text = grid.block_config((17, 0.5, 4, "exact"), tok, BUILTIN["text2"])
    assert (text.smoothness, text.ordinal_window) == (0.0, 0)
    assert grid_from_settings({}).smoothness == 0.0
    with pytest.raises(ValueError, match="BenchGrid.smoothness"):
        BenchGrid(smoothness=-1.0)


def test_the_bench_reads_a_checkpoint_with_its_recorded_joint_read_out_unless_told(tmp_path):
    """`wamdiff bench` without `--smoothness` decodes with the checkpoint's recorded one (`wamdiff_decode`: the shipped
    main student's 0.003), so a `--tune` pick keeps the decode the model was evaluated with; `--smoothness 0` is
    taken as given."""
    from pathlib import Path

    from test_reliability_errors import cli
    from test_training_fixtures import one_thread

    from wamdiff.models.recorded import recorded_decode

    main = Path(__file__).resolve().parents[1] / "checkpoints" / "main" / "sh_qa2"
    recorded = recorded_decode(main)["smoothness"]
    assert recorded > 0
    args = ["--checkpoint", main, "--quick", "--n-prompts", "1", "--format", "delta", "--no-step-cost",
            "--confirm-repeats", "0", "--no-roofline", "--threads", "1"]
    with one_thread():
        default = cli("bench", *args, "--out", tmp_path / "default")
        off = cli("bench", *args, "--smoothness", "0", "--out", tmp_path / "off")
    assert default.exit_code == 0 and off.exit_code == 0, default.stdout + off.stdout
    assert f"smoothness={recorded}" in default.stdout and "smoothness=0.0" in off.stdout
