"""The speed dial against independent computations: the forwards it predicts for a batch against the forwards the
real batched decoder runs, its choice against hand-computed costs, `block_size="auto"` against the explicit
setting it picks, and the step-cost model's measurement and cache."""

from __future__ import annotations

import json

import pytest
import torch

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.decoding import block as block_mod
from wamdiff.decoding.bench.grid import BenchGrid
from wamdiff.decoding.config import resolve_decode
from wamdiff.decoding.bench.tune import measure_curve
from wamdiff.decoding.cost_model import Forward, StepCosts, machine_key, step_costs_for
from wamdiff.decoding.dial import (
    CurvePoint, DialCurve, batch_forwards, choose, curve_path, meets_quality, model_fingerprint, predict_ms_per_plan,
)
from wamdiff.decoding.engine import model_block_settings
from wamdiff.decoding.runner import StepRunner, collate_prompts
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_tokenizer
from wamdiff.models.tokens import IM_END, PAD, token_id

TOK = tiny_tokenizer()
EOS, PADID = token_id(TOK, IM_END), token_id(TOK, PAD)


def _model():
    model = tiny_qwen3(TOK, peaky=30.0, seed=7)  # confident enough to unmask several positions per step
    with torch.no_grad():  # EOS where the model would write token 232: samples finish in different blocks
        w = model.lm_head.weight
        w[[EOS, 232]] = w[[232, EOS]]
    return model


def _runner(model, prompts, block, lean, static):
    r = StepRunner(model, collate_prompts(prompts, PADID), block, 24, lean=lean)
    r.static_shapes = static  # rounded query counts, run eagerly (no compile needed for the shapes)
    return r


def _decode(runner, mask_id, cache, trace=None):
    cfg = DecodeConfig(block_size=runner.block_size, max_new_tokens=24, threshold=0.6, max_steps=4, fused_commit=True,
                       delayed_cache=cache == "delayed")
    return block_mod.decode_block(runner, cfg, mask_id=mask_id, eos_id=EOS, pad_id=PADID, trace=trace)


@pytest.mark.parametrize("static", [False, True])
@pytest.mark.parametrize("lean", ["off", "head", "last_layer"])
@pytest.mark.parametrize("cache", ["exact", "delayed"])
def test_batch_forwards_are_the_forwards_the_batched_decoder_runs(cache, lean, static):
    model = _model()
    mask_id = model_block_settings(model, TOK)[1]
    prompts = [synthetic_prompt(TOK, n, seed=10 + n) for n in (3, 12, 7, 20)]
    traces = []
    for p in prompts:  # batch-1 traces: masked count before every step, per block
        blocks = []
        _decode(_runner(model, [p], 8, lean, static), mask_id, cache,
                trace=lambda b, s, x, lg: (blocks.append([]) if s == 0 else None, blocks[-1].append(int((x == mask_id).sum()))))
        traces.append(blocks)
    assert len({len(t) for t in traces}) >= 2  # samples finish in different blocks
    assert len({tuple(b) for t in traces for b in t}) >= 3  # and unmask at different rates
    runner = _runner(model, prompts, 8, lean, static)
    logged = []
    tail = lean == "last_layer"
    prefill, forward, forward_slots = runner.prefill, runner.forward, runner.forward_slots

    def log_prefill(extra, keep):
        logged.append(Forward("prefill", 0 if extra is None else extra.shape[1], keep, keep if tail else None))
        return prefill(extra, keep)

    def log_forward(ids, q0, keep):
        logged.append(Forward("step", ids.shape[1], keep, keep if tail else None))
        return forward(ids, q0, keep)

    def log_slots(ids, slots, keep=None):
        k = ids.shape[1] if keep is None else keep
        logged.append(Forward("step", ids.shape[1], k, k if tail else None, gathered=True))
        return forward_slots(ids, slots, keep)

    runner.prefill, runner.forward, runner.forward_slots = log_prefill, log_forward, log_slots
    _decode(runner, mask_id, cache)
    assert logged == batch_forwards(traces, 8, cache, lean, static)
    assert any(f.gathered for f in logged) == (cache == "delayed" or lean != "off")


def _costs(a: dict, b: dict, prefill: dict) -> StepCosts:
    """Synthetic cost model: a step of r rows at batch n costs a[n] + b[n] * r, a prefill with e rows p[n] + b[n] * e;
    nothing else costs anything."""
    ns, rows = sorted(a), [1, 8, 16, 32, 64]
    return StepCosts({}, 100, ns, rows, [[a[n] + b[n] * r for r in rows] for n in ns], [0.0] * len(ns), [0.0] * len(ns),
                     [0.0] * len(ns), [{str(e): prefill[n] + b[n] * e for e in (0, 4, 8, 32)} for n in ns], [0.0] * len(ns),
                     [0.0] * len(ns), [0.0] * len(ns))


def _point(block, steps_per_block, n_blocks, l2, n_samples=3, threshold=0.9):
    """Identical samples; `steps_per_block`: one count for every block, or a list (one per block)."""
    steps = steps_per_block if isinstance(steps_per_block, list) else [steps_per_block] * n_blocks
    masked = [[[block] + [max(1, block // 2)] * (k - 1) for k in steps] for _ in range(n_samples)]
    return CurvePoint(block, threshold, 4, "exact", masked, [block * n_blocks] * n_samples,
                      {"l2_vs_expert": l2, "parse_failures": 0})


def test_the_dial_picks_the_fastest_setting_at_ar_quality_per_batch_size():
    # 64-token answers. A: B32, 2 steps per block; B: B8, 1 step per block; C: B32, 1 step per block, but worse
    # than AR by more than 10 % (excluded). Hand-computed forwards (exact cache, lean off, fused commit):
    #   A: prefill(32) + step(32) + step(64) + step(32)  -> p + 3a + 160b
    #   B: prefill(8) + 7 x step(16)                     -> p + 7a + 120b
    a, b, p = {1: 1.0, 32: 1.0}, {1: 0.01, 32: 0.32}, {1: 5.0, 32: 5.0}
    costs = _costs(a, b, p)
    curve = DialCurve("fp", "fixed1", 100, [64, 64, 64], {"l2_vs_expert": 1.0, "parse_failures": 0},
                      [_point(32, 2, 2, 1.05), _point(8, 1, 8, 1.08), _point(32, 1, 2, 1.2, threshold=0.5)])
    for n in (1, 32):
        want = {32: p[n] + 3 * a[n] + 160 * b[n], 8: p[n] + 7 * a[n] + 120 * b[n]}
        for pt in curve.points[:2]:
            assert predict_ms_per_plan(pt, costs, n, lean="off", static_shapes=False) == pytest.approx(want[pt.block_size] / n)
    assert choose(curve, costs, 1, lean="off", static_shapes=False).block_size == 32  # overhead-bound: fewer forwards
    pick = choose(curve, costs, 32, lean="off", static_shapes=False)
    assert pick.block_size == 8 and pick.threshold == 0.9  # compute-bound: fewer FLOPs; C excluded
    assert pick.predicted_ar_ms_per_plan == pytest.approx((p[32] + 63 * (a[32] + b[32])) / 32)
    assert not meets_quality({"l2_vs_expert": 1.05, "parse_failures": 1}, curve.ar_quality)  # a failed parse more
    bad = DialCurve("fp", None, 100, [64], {"l2_vs_expert": 1.0, "parse_failures": 0}, [_point(32, 1, 2, 2.0)])
    assert choose(bad, costs, 1, lean="off", static_shapes=False) is None


def test_the_quality_bound_covers_pdms_and_comfort_when_both_sides_were_judged():
    """A faster, jerkier setting can keep L2 within 10 % of AR's while its comfort (or PDMS) falls: judged on the
    scenes, it is not at AR quality; within the tolerances it is; unjudged, L2 and parses decide as before."""
    from wamdiff.decoding.dial import COMFORT_TOLERANCE, PDMS_TOLERANCE, choose, quality_bound_text

    ar = {"l2_vs_expert": 1.0, "parse_failures": 0, "pdms": 80.0, "comfort": 0.90}

    def q(pdms, comfort, l2=1.05):
        return {"l2_vs_expert": l2, "parse_failures": 0, "pdms": pdms, "comfort": comfort}

    assert meets_quality(q(80.0, 0.90), ar)
    assert not meets_quality(q(80.0, 0.90 - COMFORT_TOLERANCE - 0.01), ar)  # L2 passes, comfort falls too far
    assert meets_quality(q(80.0, 0.90 - COMFORT_TOLERANCE + 0.005), ar)  # within the comfort tolerance
    assert not meets_quality(q(80.0 - PDMS_TOLERANCE - 0.1, 0.90), ar)  # L2 passes, PDMS falls too far
    assert meets_quality(q(80.0 - PDMS_TOLERANCE + 0.1, 0.90), ar)
    assert not meets_quality(q(85.0, 0.95, l2=1.2), ar)  # better PDMS does not buy back an L2 beyond the bound
    unjudged = {"l2_vs_expert": 1.0, "parse_failures": 0}
    assert meets_quality(q(10.0, 0.1), unjudged) and meets_quality({"l2_vs_expert": 1.05}, ar)  # one side unjudged
    assert meets_quality({"l2_vs_expert": 1.05, "pdms": None, "comfort": None}, {**ar, "pdms": None})
    # the dial refuses the jerky setting although it is faster and its L2 is fine
    a, b, p = {1: 1.0}, {1: 0.01}, {1: 5.0}
    curve = DialCurve("fp", "fixed1", 100, [64] * 3, ar, [_point(32, 1, 2, 1.02, threshold=0.5), _point(32, 2, 2, 1.05)])
    curve.points[0].quality.update(pdms=80.0, comfort=0.9)  # one step per block: the fastest
    curve.points[1].quality.update(pdms=80.0, comfort=0.9)
    assert choose(curve, _costs(a, b, p), 1, lean="off", static_shapes=False).threshold == 0.5
    curve.points[0].quality["comfort"] = 0.5  # ... but uncomfortable: the slower, comfortable setting is picked
    assert choose(curve, _costs(a, b, p), 1, lean="off", static_shapes=False).threshold == 0.9
    assert quality_bound_text(judged_on_scenes=True) == ("L2 within 10 % of AR's, PDMS within 0.5, comfort within 0.02, "
                                                         "no more failed parses")
    assert quality_bound_text() == "L2 within 10 % of AR's, no more failed parses"


def test_block_size_auto_decodes_with_the_setting_the_dial_picks(tmp_path, monkeypatch):
    monkeypatch.setenv("WAMDIFF_CACHE", str(tmp_path))
    model = _model()
    prompts = [synthetic_prompt(TOK, n, seed=n) for n in (4, 9, 6)]
    auto = DecodeConfig(block_size="auto", max_new_tokens=16, threshold=0.5)
    # a curve in which B4 and B8 both keep AR quality, and a cost model under which B8 wins at batch 1 (overhead:
    # fewer forwards) and B4 at batch 3 (compute: fewer rows). B4, steps [1, 1, 2, 2]: p + 5a + 36b; B8, 2 steps per
    # block: p + 3a + 40b; B4 is cheaper once b > a / 2.
    curve = DialCurve(model_fingerprint(model), None, 10, [16] * 3, {"l2_vs_expert": 1.0, "parse_failures": 0},
                      [_point(4, [1, 1, 2, 2], 4, 1.0, threshold=0.7), _point(8, 2, 2, 1.0, threshold=0.8)])
    curve.save(curve_path(curve.fingerprint))
    key = machine_key(model, auto)
    c = _costs({1: 1.0, 8: 1.0}, {1: 0.001, 8: 2.0}, {1: 1.0, 8: 1.0})
    c.key = key
    c.save()
    assert choose(curve, c, 1, lean=auto.lean, static_shapes=False).block_size == 8
    assert choose(curve, c, 3, lean=auto.lean, static_shapes=False).block_size == 4
    for batch, (block, tau) in ((prompts[:1], (8, 0.8)), (prompts, (4, 0.7))):
        got = generate(model, TOK, batch, auto)
        want = generate(model, TOK, batch, DecodeConfig(block_size=block, threshold=tau, max_steps=4,
                                                        max_new_tokens=16))
        assert [g.token_ids for g in got] == [g.token_ids for g in want]
        assert [g.forwards for g in got] == [g.forwards for g in want]


def test_the_pick_decodes_with_the_read_out_its_curve_was_measured_with(tmp_path):
    """A curve measured with the ordinal and joint read-outs (`BenchGrid.ordinal_window`, `smoothness`) keeps them
    through save / load, and its pick sets them: the quality the dial vouches for is those read-outs'."""
    costs = _costs({1: 1.0}, {1: 0.01}, {1: 5.0})
    curve = DialCurve("fp", "delta", 100, [17] * 3, {"l2_vs_expert": 1.0, "parse_failures": 0},
                      [_point(17, 2, 1, 1.0)], ordinal_window=2, smoothness=0.003)
    back = DialCurve.load(curve.save(tmp_path / "c.json"))
    assert (back.ordinal_window, back.smoothness) == (2, 0.003)
    cfg = choose(back, costs, 1, lean="off", static_shapes=False).apply(DecodeConfig(block_size="auto"))
    assert cfg.ordinal_window == 2 and cfg.smoothness == 0.003 and cfg.block_size == 17
    old = {k: v for k, v in json.loads((tmp_path / "c.json").read_text()).items()
           if k not in ("ordinal_window", "smoothness")}
    (tmp_path / "old.json").write_text(json.dumps(old))  # a curve from before the read-outs existed: plain read-out
    assert (DialCurve.load(tmp_path / "old.json").ordinal_window, DialCurve.load(tmp_path / "old.json").smoothness) == (0, 0.0)


def test_block_size_auto_without_a_tuned_curve_says_what_to_run(tmp_path, monkeypatch):
    monkeypatch.setenv("WAMDIFF_CACHE", str(tmp_path))
    with pytest.raises(ValueError, match="wamdiff bench --tune"):
        generate(_model(), TOK, [synthetic_prompt(TOK, 5)], DecodeConfig(block_size="auto", max_new_tokens=8))


def test_auto_in_options_and_bad_values():
    assert resolve_decode({"block": "auto"}).block_size == "auto"
    assert resolve_decode({"lean": "head"}).lean == "head"
    with pytest.raises(ValueError, match="block"):
        resolve_decode({"block": "fast"}, where="spec x")
    with pytest.raises(ValueError, match="lean"):
        DecodeConfig(lean="skinny")


def test_step_costs_are_measured_in_the_runner_and_cached(tmp_path, monkeypatch):
    monkeypatch.setenv("WAMDIFF_CACHE", str(tmp_path))
    model = _model()
    prompt = synthetic_prompt(TOK, 20, seed=1)
    cfg = DecodeConfig()
    got = step_costs_for(model, prompt, cfg, pad_id=PADID, block_sizes=(4,), batches=(1, 2), rows=(1, 4, 8),
                         ref_rows=8, repeats=1)
    assert got.batches == [1, 2] and len(got.step_ms[1]) == 3 and all(ms > 0 for row in got.step_ms for ms in row)
    assert set(got.prefill_ms[0]) == {"0", "4", "8"} and got.prompt_len == prompt.input_ids.numel()
    lean = got.forward(2, Forward("step", 8, 1, 1, gathered=False))
    assert lean <= got.forward(2, Forward("step", 8, 8)) + 1e-9  # savings per row are never negative
    monkeypatch.setattr("wamdiff.decoding.cost_model.measure_step_costs", lambda *a, **k: pytest.fail("re-measured"))
    again = step_costs_for(model, prompt, cfg, pad_id=PADID, block_sizes=(4,))
    assert again.step_ms == got.step_ms  # loaded from the cache, not measured again
    with pytest.raises(pytest.fail.Exception, match="re-measured"):  # the stand-in is what measures: the check above can fail
        step_costs_for(model, prompt, cfg, pad_id=PADID, block_sizes=(4,), remeasure=True)


def test_the_curve_traces_count_every_forward():
    model = _model()
    prompts = [synthetic_prompt(TOK, n, seed=n) for n in (4, 9)]
    grid = BenchGrid([1], [4], [0.6], ["fp32"], 12, [4], caches=["exact", "delayed"])
    curve = measure_curve(model, TOK, prompts, None, grid)
    assert [(p.block_size, p.cache) for p in curve.points] == [(4, "exact"), (4, "delayed")]
    for point in curve.points:
        cfg = grid.block_config(tuple(point.setting.values()))
        gens = [generate(model, TOK, [p], cfg)[0] for p in prompts]
        assert [sum(len(b) for b in s) for s in point.masked] == [g.forwards for g in gens]
        assert point.tokens == [len(g.token_ids) for g in gens]
        assert all(b[0] == 4 and all(x > y for x, y in zip(b, b[1:])) for s in point.masked for b in s)
    assert curve.fingerprint == model_fingerprint(model) and len(curve.ar_tokens) == 2


def test_answer_length_effect_prices_short_and_long_answers_from_the_same_costs():
    from dataclasses import asdict

    from wamdiff.decoding.bench.tune import answer_length_effect

    a, b, p = {1: 1.0}, {1: 0.01}, {1: 5.0}
    costs = _costs(a, b, p)
    curve = DialCurve("fp", "fixed1", 100, [113] * 3, {"l2_vs_expert": 1.0, "parse_failures": 0}, [_point(32, 2, 4, 1.0)])
    pick = {"batch": 1, "dtype": "fp32", "compile": False, "pick": {}, **curve.points[0].setting}
    tune_res = {"costs": [{"dtype": "fp32", "compile": False, "model": {**asdict(costs), "key": {"static_shapes": False}}}],
                "picks": [pick], "lean": "last_layer"}
    short, long_ = answer_length_effect(tune_res, curve, lengths=(17, 112))
    assert short["ar_ms"] == pytest.approx(p[1] + 16 * (a[1] + b[1]))  # prefill + 16 one-row steps
    one_block = (p[1] + 32 * b[1]) + (a[1] + 32 * b[1])  # prefill fused with step 1, then step 2
    assert short["diffusion_ms"] == pytest.approx(one_block)
    assert short["diffusion_prefill_share"] == pytest.approx((p[1] + 32 * b[1]) / one_block)
    assert long_["diffusion_ms"] == pytest.approx(one_block + 3 * ((a[1] + 64 * b[1]) + (a[1] + 32 * b[1])))
    assert short["diffusion_prefill_share"] > long_["diffusion_prefill_share"]  # short answers: the prefill dominates


def test_costs_are_priced_non_decreasing_in_rows():
    """A measured dip (more rows timed cheaper, noise) is pooled away before pricing; the stored figures stay raw."""
    import json
    from dataclasses import asdict

    rows = [1, 8, 16, 32, 64]
    step = [2.0, 4.0, 3.0, 6.0, 12.0]  # 16 rows timed below 8
    c = StepCosts({}, 100, [1], rows, [step], [0.0], [0.0], [0.0], [{"0": 20.0, "17": 30.0, "32": 28.0}], [0.0],
                  [0.0], [0.0])
    assert c.step_ms == [step]  # what was measured
    assert [c.step(1, r) for r in rows] == pytest.approx([2.0, 3.5, 3.5, 6.0, 12.0])  # the dip pooled with its neighbour
    assert c.prefill(1, 17) == pytest.approx(29.0) and c.prefill(1, 32) == pytest.approx(29.0)
    assert c.prefill(1, 24) == pytest.approx(29.0) and c.prefill(1, 0) == 20.0
    assert StepCosts.from_dict(json.loads(json.dumps(asdict(c)))).prefill(1, 32) == pytest.approx(29.0)
