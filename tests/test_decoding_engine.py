"""Decoding engines against independent computations (no-cache full forwards, HF generate, decoding alone)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from dataclasses import replace

from wamdiff.decoding import DecodeConfig, generate
from wamdiff.driving.answer_format import answer_format
from wamdiff.decoding.block import fixed_schedule, select_threshold
from wamdiff.decoding.config import resolve_decode
from wamdiff.decoding.engine import model_block_settings, to_generations
from wamdiff.models.convert import diffusion_settings
from wamdiff.models.tokens import token_id
from wamdiff.decoding.runner import StepRunner, collate_prompts
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_qwen3_vl, tiny_tokenizer
from wamdiff.decoding import block as block_mod
from wamdiff.models.tokens import IM_END, PAD

TOK = tiny_tokenizer()
EOS, PADID = token_id(TOK, IM_END), token_id(TOK, PAD)


@pytest.fixture(scope="module")
def qwen3():
    return tiny_qwen3(TOK, peaky=6.0, seed=1)


@pytest.fixture(scope="module")
def qwen3_vl():
    return tiny_qwen3_vl(TOK, peaky=6.0, seed=2)


def _shifted(model):
    model.config.diffusion = {**model.config.diffusion, "prediction": "shifted"}
    return model


@pytest.fixture(scope="module")
def qwen3_shifted():
    return _shifted(tiny_qwen3(TOK, peaky=6.0, seed=1))


@pytest.fixture(scope="module")
def qwen3_vl_shifted():
    return _shifted(tiny_qwen3_vl(TOK, peaky=6.0, seed=2))


def _eos_at(model, token: int):
    """Swap the LM-head rows of EOS and `token`: wherever the model would greedily emit `token` it now emits
    EOS (confidences unchanged), so samples of a batch finish at different, known places."""
    with torch.no_grad():
        w = model.lm_head.weight
        w[[EOS, token]] = w[[token, EOS]]
    return model


# ------------------------------------------------------------------------------------------- reference decoders
@torch.no_grad()
def _full_logits(model, ids: list[int], n_prompt: int, block: int, prompt) -> torch.Tensor:
    """No-cache forward over [prompt | answer] with a brute-force block-causal mask (prompt token-causal,
    answer block c sees the prompt and answer blocks <= c). Returns logits [L, V] in fp32."""
    L = len(ids)
    q, k = torch.arange(L)[:, None], torch.arange(L)[None, :]
    q_ans, k_ans = q >= n_prompt, k >= n_prompt
    same_or_earlier_block = (k - n_prompt).div(block, rounding_mode="floor") <= (q - n_prompt).div(block, rounding_mode="floor")
    allow = torch.where(q_ans, ~k_ans | same_or_earlier_block, k <= q)  # prompt rows: causal (never see the answer)
    x = torch.tensor([ids])
    if hasattr(model.model, "get_rope_index"):
        mm = torch.zeros_like(x)
        if prompt.mm_token_type_ids is not None:
            mm[0, :n_prompt] = prompt.mm_token_type_ids
        model.model.rope_deltas = None
        pos, _ = model.model.get_rope_index(x, mm_token_type_ids=mm, image_grid_thw=prompt.image_grid_thw)
        out = model(input_ids=x, attention_mask=allow[None, None], position_ids=pos, pixel_values=prompt.pixel_values,
                    image_grid_thw=prompt.image_grid_thw, mm_token_type_ids=mm)
    else:
        out = model(input_ids=x, attention_mask=allow[None, None], position_ids=torch.arange(L)[None])
    return out.logits[0].float()


def _reference_block_decode(model, prompt, *, block, tau, max_steps, max_new, mask_id, shifted=False):
    """Naive block decoding: full recomputation every step, plain Python selection. Returns (tokens, per-step logits).
    shifted: a position's logits are those of the token before it (the block's rows shifted down by one)."""
    p_ids = prompt.input_ids.tolist()
    answer, steps_logits = [], []
    for _ in range(-(-max_new // block)):
        x = [mask_id] * block
        for step in range(max_steps):
            full = _full_logits(model, p_ids + answer + x, len(p_ids), block, prompt)
            logits = full[-block - 1:-1] if shifted else full[-block:]
            steps_logits.append(logits)
            probs = logits.softmax(-1)
            conf, pred = probs.max(-1)
            masked = [i for i in range(block) if x[i] == mask_id]
            if step == max_steps - 1:
                chosen = masked
            else:
                chosen = [i for i in masked if conf[i] >= tau] or []
                best = max(masked, key=lambda i: conf[i].item())
                chosen = sorted(set(chosen) | {best})
            for i in chosen:
                x[i] = int(pred[i])
            if all(t != mask_id for t in x):
                break
        if EOS in x:
            answer += x[: x.index(EOS) + 1]
            break
        answer += x
    return answer[:max_new], steps_logits


def _decode_block_traced(model, prompts, cfg):
    bs, mask_id = model_block_settings(model, TOK)
    bs = cfg.block_size or bs
    batch = collate_prompts(prompts, PADID)
    runner = StepRunner(model, batch, bs, cfg.max_new_tokens, lean=cfg.lean, prefill_cache=cfg.prefill_cache)
    logs = []
    out, lengths, forwards, finished = block_mod.decode_block(
        runner, cfg, mask_id=mask_id, eos_id=EOS, pad_id=PADID,
        trace=lambda b, s, x, lg: logs.append((x == mask_id, lg.float())), shifted=diffusion_settings(model).shifted,
    )
    return to_generations(TOK, out, lengths, forwards, finished, EOS), logs


def _assert_step_logits_match(logs, ref_logs, lean: str, shifted: bool = False):
    """Every step's logits equal the no-cache reference's: at every block position (lean off) or at the positions
    still masked before the step (lean steps give logits only there; the others are NaN, except, for a shifted
    model, the first position, whose logits come with the block)."""
    assert len(logs) == len(ref_logs)
    for (masked, lg), rl in zip(logs, ref_logs):
        rows = torch.ones_like(masked[0]) if lean == "off" else masked[0]
        torch.testing.assert_close(lg[0][rows], rl[rows], atol=1e-5, rtol=0)
        if lean != "off" and not rows.all() and not shifted:
            assert lg[0][~rows].isnan().all()


# ------------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("lean", ["off", "head", "last_layer"])
@pytest.mark.parametrize("block", [4, 5, 32])  # 5: neither a power of two nor a divisor of anything (a `fit` block)
@pytest.mark.parametrize("fused", [True, False])
def test_cached_block_decoding_equals_recomputation(qwen3, block, fused, lean):
    """Exact paths, token for token and logit for logit against full recomputation: the static slot cache, the
    fused commit, and the lean steps (logits / last-layer MLP only where read)."""
    prompt = synthetic_prompt(TOK, 9, seed=3)
    cfg = DecodeConfig(block_size=block, threshold=0.5, max_steps=block, max_new_tokens=2 * block,
                       fused_commit=fused, lean=lean)
    (gen,), logs = _decode_block_traced(qwen3, [prompt], cfg)
    ref, ref_logs = _reference_block_decode(qwen3, prompt, block=block, tau=0.5, max_steps=block, max_new=2 * block,
                                            mask_id=model_block_settings(qwen3, TOK)[1])
    assert gen.token_ids == ref
    _assert_step_logits_match(logs, ref_logs, lean)
    assert len(logs) > 2 * 2  # several steps per block: partial steps really ran


@pytest.mark.parametrize("lean", ["off", "head", "last_layer"])
@pytest.mark.parametrize("block", [4, 5, 32])
@pytest.mark.parametrize("fused", [True, False])
def test_shifted_cached_block_decoding_equals_recomputation(qwen3_shifted, block, fused, lean):
    """A shifted model on the same exact paths: each position read from the query before it, the block's first from
    the prefill's or the commit's last row (kept by the forward that writes it)."""
    prompt = synthetic_prompt(TOK, 9, seed=3)
    cfg = DecodeConfig(block_size=block, threshold=0.5, max_steps=block, max_new_tokens=2 * block,
                       fused_commit=fused, lean=lean)
    (gen,), logs = _decode_block_traced(qwen3_shifted, [prompt], cfg)
    ref, ref_logs = _reference_block_decode(qwen3_shifted, prompt, block=block, tau=0.5, max_steps=block,
                                            max_new=2 * block, mask_id=model_block_settings(qwen3_shifted, TOK)[1],
                                            shifted=True)
    assert gen.token_ids == ref
    _assert_step_logits_match(logs, ref_logs, lean, shifted=True)
    assert len(logs) > 2 * 2
    same, _ = _reference_block_decode(qwen3_shifted, prompt, block=block, tau=0.5, max_steps=block, max_new=2 * block,
                                      mask_id=model_block_settings(qwen3_shifted, TOK)[1])
    assert same != ref  # the check can tell the two readings apart


@pytest.mark.parametrize("lean, delayed", [("head", False), ("last_layer", False), ("off", True)])
def test_shifted_partial_step_with_only_the_first_position_left_reads_the_carry(qwen3_shifted, lean, delayed,
                                                                                  monkeypatch):
    """A block whose first position is the last one masked: a partial step then reads no row of its own (the block's
    rows predict positions 1..B-1), and position 0 takes the carry's token, as the full step decides it."""
    def all_but_first(conf, masked, threshold):  # step 1 decides every position but the first
        keep_first = masked.clone()
        keep_first[:, 0] = False
        return keep_first if bool(keep_first.any()) else masked

    monkeypatch.setattr(block_mod, "select_threshold", all_but_first)
    prompts = [synthetic_prompt(TOK, 9, seed=3)]
    base = dict(block_size=4, threshold=0.5, max_steps=4, max_new_tokens=8)
    full, _ = _decode_block_traced(qwen3_shifted, prompts, DecodeConfig(**base))
    part, _ = _decode_block_traced(qwen3_shifted, prompts, DecodeConfig(lean=lean, delayed_cache=delayed, **base))
    mask_id = model_block_settings(qwen3_shifted, TOK)[1]
    assert part[0].token_ids == full[0].token_ids and mask_id not in full[0].token_ids


def test_shifted_generate_follows_the_reference_with_images_in_a_batch(qwen3_vl_shifted):
    """`generate` reads a shifted checkpoint's prediction itself; a batch of two image prompts of different lengths
    decodes as each prompt alone in the no-cache reference."""
    prompts = [synthetic_prompt(TOK, 7, seed=4, image=True), synthetic_prompt(TOK, 12, seed=22, image=True)]
    cfg = DecodeConfig(block_size=4, threshold=0.5, max_steps=4, max_new_tokens=8)
    gens = generate(qwen3_vl_shifted, TOK, prompts, cfg)
    for gen, prompt in zip(gens, prompts):
        ref, _ = _reference_block_decode(qwen3_vl_shifted, prompt, block=4, tau=0.5, max_steps=4, max_new=8,
                                         mask_id=model_block_settings(qwen3_vl_shifted, TOK)[1], shifted=True)
        assert gen.token_ids == ref


@pytest.mark.parametrize("lean, prefill_cache", [("off", False), ("last_layer", True)])
def test_cached_block_decoding_equals_recomputation_vl_with_image(qwen3_vl, lean, prefill_cache):
    prompt = synthetic_prompt(TOK, 7, seed=4, image=True)
    cfg = DecodeConfig(block_size=4, threshold=0.5, max_steps=4, max_new_tokens=8, lean=lean,
                       prefill_cache=prefill_cache)
    (gen,), logs = _decode_block_traced(qwen3_vl, [prompt], cfg)
    ref, ref_logs = _reference_block_decode(qwen3_vl, prompt, block=4, tau=0.5, max_steps=4, max_new=8,
                                            mask_id=model_block_settings(qwen3_vl, TOK)[1])
    assert gen.token_ids == ref
    _assert_step_logits_match(logs, ref_logs, lean)


# ------------------------------------------------------------------------------------------- delayed cache
@pytest.mark.parametrize("vl", [False, True])
def test_partial_step_on_unchanged_block_reproduces_full_step(qwen3, qwen3_vl, vl):
    """Fixed point: after a full B-query forward of a block state, querying any per-sample subset of its slots
    (shuffled, with repeats) over the same state gives the full forward's logits there and leaves the cache as
    it was. Checks the gathered mask rows, gathered positions and per-sample K/V scatter against the
    contiguous path."""
    model = qwen3_vl if vl else qwen3
    mask_id = model_block_settings(model, TOK)[1]
    prompts = [synthetic_prompt(TOK, n, seed=30 + n, image=vl) for n in (5, 13)]
    batch = collate_prompts(prompts, PADID)
    runner = StepRunner(model, batch, 8, 16)
    g = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        runner.prefill(None, keep=1)
        s0 = runner.P + 8  # the second block: the first is committed below
        runner.forward(torch.randint(0, 200, (2, 8), generator=g), runner.P, keep=0)
        x = torch.randint(0, 200, (2, 8), generator=g)
        x[0, [1, 4]] = mask_id
        x[1, [0, 5, 7]] = mask_id
        full = runner.forward(x, s0, keep=8).float()
        keys = [layer.keys.clone() for layer in runner.cache.layers]
        idx = torch.tensor([[6, 1, 4, 1, 2], [7, 0, 3, 3, 5]])
        part = runner.forward_slots(x.gather(1, idx), s0 + idx).float()
    torch.testing.assert_close(part, full.gather(1, idx[..., None].expand(-1, -1, full.shape[-1])), atol=1e-5, rtol=0)
    for layer, before in zip(runner.cache.layers, keys):
        torch.testing.assert_close(layer.keys, before, atol=1e-5, rtol=0)


def test_order_queries_puts_logit_rows_last_and_pads_with_repeats_in_front():
    first = torch.tensor([[False, True, False, False, True, False, False, False],
                          [False, False, False, False, False, False, False, False],
                          [False] * 8])
    last = torch.tensor([[False, False, False, True, False, False, True, False],
                         [True, False, False, False, False, False, False, False],
                         [False] * 8])
    idx, keep = block_mod.order_queries(first, last, static_shapes=False)
    assert idx.shape == (3, 4) and keep == 2
    assert idx[0].tolist() == [1, 4, 3, 6]  # K/V-only positions first, the logit positions last
    assert idx[1].tolist() == [0, 0, 0, 0]  # one position: repeated in front
    idx, keep = block_mod.order_queries(first, last, static_shapes=True)
    assert idx.shape == (3, 4) and keep == 2  # already powers of two
    idx, keep = block_mod.order_queries(first, last | first, static_shapes=True)
    assert keep == 4 and idx[0].tolist() == [1, 3, 4, 6]  # every queried row has logits: block order
    full = torch.ones(2, 8, dtype=torch.bool)
    assert block_mod.order_queries(full, torch.zeros_like(full), static_shapes=True)[0].shape == (2, 8)
    idx, keep = block_mod.order_queries(first, last & (torch.arange(8) == 3), static_shapes=True)
    assert keep == 1 and idx.shape == (3, 4)  # 3 needed in row 0 -> 4


@pytest.mark.parametrize("vl", [False, True])
@pytest.mark.parametrize("shifted", [False, True])
def test_delayed_cache_querying_every_position_equals_exact(qwen3, qwen3_vl, qwen3_shifted, qwen3_vl_shifted, vl,
                                                             shifted, monkeypatch):
    """With the query set forced to the whole block, a delayed-cache step is an exact step: same tokens and
    logits as exact decoding (checks the gather / scatter plumbing of partial steps, grammar included; shifted: the
    row of the block's last position, which predicts past the block, included)."""
    from wamdiff.decoding import Grammar

    model = {(False, False): qwen3, (True, False): qwen3_vl, (False, True): qwen3_shifted,
             (True, True): qwen3_vl_shifted}[(vl, shifted)]
    prompts = [synthetic_prompt(TOK, n, seed=40 + n, image=vl) for n in (4, 11)]
    gram = Grammar.from_template(TOK, "SDD.D,SDD.D,SD")
    base = dict(block_size=8, threshold=0.7, max_new_tokens=16, grammar=gram)
    exact, exact_logs = _decode_block_traced_batch(model, prompts, DecodeConfig(**base))
    n = torch.arange(8)
    monkeypatch.setattr(block_mod, "order_queries", lambda first, last, static: (n.expand(first.shape[0], 8).flip(1), 8))
    every, every_logs = _decode_block_traced_batch(model, prompts, DecodeConfig(delayed_cache=True, **base))
    assert [g.token_ids for g in every] == [g.token_ids for g in exact]
    assert len(every_logs) == len(exact_logs) > 2 * 2  # several steps per block
    for a, b in zip(every_logs, exact_logs):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)


def _decode_block_traced_batch(model, prompts, cfg):
    _, mask_id = model_block_settings(model, TOK)
    batch = collate_prompts(prompts, PADID)
    runner = StepRunner(model, batch, cfg.block_size, cfg.max_new_tokens)
    table = cfg.grammar.table(cfg.max_new_tokens, model.lm_head.out_features, PADID) if cfg.grammar else None
    logs = []
    out, lengths, forwards, finished = block_mod.decode_block(
        runner, replace(cfg, fused_commit=True), mask_id=mask_id, eos_id=EOS, pad_id=PADID, grammar_table=table,
        trace=lambda b, s, x, lg: logs.append(lg.float().nan_to_num(0.0, 0.0, 0.0)),
        shifted=diffusion_settings(model).shifted,
    )
    return to_generations(TOK, out, lengths, forwards, finished, EOS), logs


def test_block_size_one_is_one_token_per_forward_and_matches_mask_query_greedy(qwen3):
    """B=1: block decoding = greedy on the mask query, one forward per token (prefill fused), as AR's count."""
    prompt = synthetic_prompt(TOK, 8, seed=5)
    (gen,) = generate(qwen3, TOK, [prompt], DecodeConfig(block_size=1, max_new_tokens=12))
    ref, _ = _reference_block_decode(qwen3, prompt, block=1, tau=0.9, max_steps=32, max_new=12,
                                     mask_id=model_block_settings(qwen3, TOK)[1])
    assert gen.token_ids == ref
    assert gen.forwards == len(gen.token_ids)
    (ar,) = generate(qwen3, TOK, [prompt], DecodeConfig(mode="ar", max_new_tokens=12))
    assert ar.forwards == len(ar.token_ids)


@pytest.mark.parametrize("vl", [False, True])
def test_ar_equals_hf_generate_greedy(qwen3, qwen3_vl, vl):
    model = qwen3_vl if vl else qwen3
    prompt = synthetic_prompt(TOK, 11, seed=6, image=vl)
    (gen,) = generate(model, TOK, [prompt], DecodeConfig(mode="ar", max_new_tokens=10))
    kw = {}
    if vl:
        kw = dict(pixel_values=prompt.pixel_values, image_grid_thw=prompt.image_grid_thw,
                  mm_token_type_ids=prompt.mm_token_type_ids[None])
        model.model.rope_deltas = None
    hf = model.generate(input_ids=prompt.input_ids[None], attention_mask=torch.ones_like(prompt.input_ids)[None],
                        max_new_tokens=10, do_sample=False, eos_token_id=EOS, pad_token_id=PADID, **kw)
    assert gen.token_ids == hf[0, prompt.input_ids.numel():].tolist()


@pytest.mark.parametrize("mode", ["ar", "block", "delayed"])
@pytest.mark.parametrize("vl", [False, True])
def test_batch_of_different_lengths_equals_each_alone(qwen3, qwen3_vl, mode, vl):
    stop = {(False, "ar"): 98, (False, "block"): 232, (True, "ar"): 158, (True, "block"): 75}[(vl, mode.replace("delayed", "block"))]
    model = _eos_at(tiny_qwen3_vl(TOK, peaky=6.0, seed=9) if vl else tiny_qwen3(TOK, peaky=6.0, seed=7), stop)
    prompts = [synthetic_prompt(TOK, n, seed=10 + n, image=vl) for n in (3, 12, 7, 20)]
    cfg = DecodeConfig(mode="ar" if mode == "ar" else "block", block_size=4, threshold=0.6, max_new_tokens=16,
                       delayed_cache=mode == "delayed")
    together = generate(model, TOK, prompts, cfg)
    alone = [generate(model, TOK, [p], cfg)[0] for p in prompts]
    assert [g.token_ids for g in together] == [g.token_ids for g in alone]
    assert [g.forwards for g in together] == [g.forwards for g in alone]
    assert [g.finished for g in together] == [g.finished for g in alone]
    assert any(g.finished for g in alone) and not all(g.finished for g in alone)  # flags really exercised
    assert len({len(g.token_ids) for g in alone}) >= 3


@pytest.mark.parametrize("block", [2, 4])
def test_fused_commit_same_tokens_one_forward_fewer_per_block(block):
    model = _eos_at(tiny_qwen3(TOK, peaky=6.0, seed=7), 232)
    prompts = [synthetic_prompt(TOK, n, seed=10 + n) for n in (3, 12, 7, 20)]
    base = dict(block_size=block, threshold=0.6, max_new_tokens=24)
    fused = generate(model, TOK, prompts, DecodeConfig(fused_commit=True, **base))
    sep = generate(model, TOK, prompts, DecodeConfig(fused_commit=False, **base))
    for f, s in zip(fused, sep):
        assert f.token_ids == s.token_ids
        n_blocks = -(-len(f.token_ids) // block)  # blocks this sample decoded (prompt prefill = commit of "block -1")
        assert s.forwards - f.forwards == n_blocks
    assert any(f.finished for f in fused) and len({-(-len(f.token_ids) // block) for f in fused}) >= 2


def test_eos_stops_and_tail_is_not_returned():
    model = _eos_at(tiny_qwen3(TOK, peaky=6.0, seed=7), 232)
    gens = generate(model, TOK, [synthetic_prompt(TOK, 12, seed=22)], DecodeConfig(block_size=4, threshold=0.6,
                                                                                 max_new_tokens=40))
    g = gens[0]
    assert len(g.token_ids) == 12  # 232 first appears at answer index 11 (see the batch test)
    assert g.finished and g.token_ids[-1] == EOS and EOS not in g.token_ids[:-1]
    assert PADID not in g.token_ids


def _emits_at(token_row: int, instead: int = 232):
    """A tiny model that emits `token_row` wherever it would greedily emit `instead` (LM-head rows swapped)."""
    model = tiny_qwen3(TOK, peaky=6.0, seed=7)
    with torch.no_grad():
        w = model.lm_head.weight
        w[[token_row, instead]] = w[[instead, token_row]]
    return model


def test_a_pad_ends_an_ar_answer_as_eos_does():
    """Training puts PAD only after EOS, so a model that emits PAD has ended its answer: the same model with EOS
    where it emits PAD gives the reference tokens (causal: nothing before the end depends on which one it is)."""
    cfg = DecodeConfig(mode="ar", max_new_tokens=40)
    prompt = [synthetic_prompt(TOK, 12, seed=22)]
    (ref,) = generate(_emits_at(EOS, instead=264), TOK, prompt, cfg)  # 264: its 5th token in AR
    (got,) = generate(_emits_at(PADID, instead=264), TOK, prompt, cfg)
    assert ref.finished and ref.token_ids[-1] == EOS and len(ref.token_ids) < 40
    assert got.token_ids == ref.token_ids and got.finished and got.text == ref.text


def test_a_pad_ends_a_block_answer_as_eos_does():
    """Block decoding: the raw decode (PAD taken for an ordinary token: another id fills the tail) up to its first
    PAD, then EOS, is the answer; nothing after it is returned."""
    model = _emits_at(PADID)
    prompt = synthetic_prompt(TOK, 12, seed=22)
    cfg = DecodeConfig(block_size=4, threshold=0.6, max_new_tokens=40)
    mask_id = model_block_settings(model, TOK)[1]

    def run(pad_id):
        runner = StepRunner(model, collate_prompts([prompt], PADID), 4, 40)
        return block_mod.decode_block(runner, cfg, mask_id=mask_id, eos_id=EOS, pad_id=pad_id)

    raw = run(token_id(TOK, "z"))[0][0].tolist()  # "z": a token this model never emits here
    assert PADID in raw
    end = raw.index(PADID)
    tokens, lengths, _, finished = run(PADID)
    assert bool(finished[0]) and int(lengths[0]) == end + 1
    assert tokens[0, :end + 1].tolist() == raw[:end] + [EOS]
    assert set(tokens[0, end + 1:].tolist()) <= {PADID}


@pytest.mark.parametrize("delayed", [False, True])
@pytest.mark.parametrize("block", [4, 16])
def test_threshold_strategy_bounded_by_block_size_forwards(block, delayed):
    model = tiny_qwen3(TOK, peaky=1.0, seed=11)  # unconfident: ~1 token per step, the worst case
    steps = []
    prompt = synthetic_prompt(TOK, 6, seed=2)
    batch = collate_prompts([prompt], PADID)
    runner = StepRunner(model, batch, block, 2 * block)
    masks_before = []
    cfg = DecodeConfig(block_size=block, max_new_tokens=2 * block, threshold=0.9, max_steps=64, fused_commit=True,
                       delayed_cache=delayed)
    block_mod.decode_block(runner, cfg, mask_id=model_block_settings(model, TOK)[1], eos_id=-1, pad_id=PADID,
                           trace=lambda b, s, x, lg: (steps.append(b), masks_before.append(int((x == model.config.mask_token_id).sum()))))
    for b in set(steps):
        assert steps.count(b) <= block
    # each step unmasks >= 1: the mask count strictly decreases inside a block
    counts = {}
    for b, m in zip(steps, masks_before):
        counts.setdefault(b, []).append(m)
    for seq in counts.values():
        assert seq[0] == block and all(a > b for a, b in zip(seq, seq[1:]))


def test_fixed_strategy_uses_fixed_step_count():
    model = tiny_qwen3(TOK, peaky=6.0, seed=12)
    (g,) = generate(model, TOK, [synthetic_prompt(TOK, 6)], DecodeConfig(block_size=8, strategy="fixed",
                                                                         max_steps=4, max_new_tokens=16))
    assert len(g.token_ids) == 16 and g.forwards == 2 * 4  # 2 blocks x 4 steps (prefill + commit fused)
    assert fixed_schedule(8, 3) == [3, 3, 2] and fixed_schedule(4, 32) == [1, 1, 1, 1]


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 6), st.integers(1, 12), st.floats(0.0, 1.0), st.integers(0, 10_000))
def test_threshold_selection_property(n, b, tau, seed):
    g = torch.Generator().manual_seed(seed)
    conf = torch.rand(n, b, generator=g)
    masked = torch.rand(n, b, generator=g) < 0.6
    sel = select_threshold(conf, masked, tau)
    assert not (sel & ~masked).any()  # only masked positions
    has = masked.any(1)
    assert (sel.sum(1)[has] >= 1).all()  # at least one per row with masks
    assert ((conf >= tau) & masked & ~sel).sum() == 0  # every confident masked position
    best = conf.masked_fill(~masked, -1).argmax(1)
    assert sel[has, best[has]].all()


def test_grammar_forces_template():
    from wamdiff.decoding import Grammar

    model = tiny_qwen3(TOK, peaky=6.0, seed=13)
    gram = Grammar.from_template(TOK, "SD.D,SD.D")
    for mode, delayed in (("ar", False), ("block", False), ("block", True)):
        (g,) = generate(model, TOK, [synthetic_prompt(TOK, 5)], DecodeConfig(mode=mode, block_size=4, grammar=gram,
                                                                           max_new_tokens=16, delayed_cache=delayed))
        toks = TOK.convert_ids_to_tokens(g.token_ids)
        assert toks[-1] == IM_END and len(toks) == 10 and g.finished
        assert toks[0] in "+-" and toks[1].isdigit() and toks[2] == "." and toks[4] == ","


def test_bad_config_raises():
    with pytest.raises(ValueError, match="mode"):
        DecodeConfig(mode="beam")
    with pytest.raises(ValueError, match="threshold"):
        DecodeConfig(threshold=1.5)


@pytest.mark.parametrize("fmt", ["fixed1", "fixed2", "bins"])
def test_grammar_for_format_accepts_the_world_formatter_output(fmt):
    import numpy as np

    from wamdiff.decoding import Grammar
    from wamdiff.driving.trajectory import format_trajectory
    from wamdiff.models import build_tokenizer

    tok = build_tokenizer()
    gram = Grammar.for_format(tok, answer_format(fmt))
    table = gram.table(160, len(tok), token_id(tok, PAD))
    rng = np.random.default_rng(0)
    for _ in range(5):
        xy = np.stack([rng.uniform(-4, 110, 8), rng.uniform(-29, 29, 8)], 1)
        ids = tok.encode(format_trajectory(xy, fmt) + IM_END, add_special_tokens=False)
        assert all(table[i, t] for i, t in enumerate(ids)), fmt
        assert table[len(ids), token_id(tok, PAD)] and table[len(ids)].sum() == 1  # PAD after EOS
    assert table[0].sum() == {"fixed1": 2, "fixed2": 2, "bins": 256}[fmt]
    with pytest.raises(ValueError):
        Grammar.for_format(tok, answer_format("text2"))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["ar", "block", "delayed"])
def test_compiled_step_gives_eager_tokens(mode):
    model = tiny_qwen3(TOK, peaky=6.0, seed=14)
    prompts = [synthetic_prompt(TOK, n, seed=n) for n in (4, 9)]
    cfg = dict(mode="ar" if mode == "ar" else "block", block_size=8, threshold=0.6, max_new_tokens=24,
               delayed_cache=mode == "delayed")
    eager = generate(model, TOK, prompts, DecodeConfig(**cfg))
    from torch._dynamo.utils import counters

    counters.clear()
    comp = generate(model, TOK, prompts, DecodeConfig(compile=True, **cfg))
    assert [g.token_ids for g in comp] == [g.token_ids for g in eager]
    assert not counters["graph_break"], dict(counters["graph_break"])  # one graph per step shape, no fallbacks
    assert [g.forwards for g in comp] == [g.forwards for g in eager]


# ---------------------------------------------------------------------------------------------- int8 weights
def test_int8_decoding_follows_the_no_cache_reference_of_the_same_int8_model(qwen3_vl):
    """`dtype="int8"` quantizes every Linear in place (embeddings, norms and the vision patch convolution stay
    fp32), and the cached, lean decode of that model takes the tokens a no-cache full recomputation of the same
    int8 model takes. (Activations are quantized per call, so a few-row step and a full forward round differently:
    their logits are not compared bit for bit; the tokens are.)"""
    import copy

    from wamdiff.models.precision import INT8, is_int8, precision_name

    model = copy.deepcopy(qwen3_vl)
    assert precision_name(model) == "float32"
    n_linear = sum(isinstance(m, torch.nn.Linear) for m in model.modules())
    prompt = synthetic_prompt(TOK, 7, seed=4, image=True)
    cfg = DecodeConfig(block_size=4, threshold=0.5, max_steps=4, max_new_tokens=8, dtype="int8")
    assert cfg.dtype == INT8 and resolve_decode({"dtype": "int8"}).dtype == INT8  # planner spec dtype=int8
    (gen,) = generate(model, TOK, [prompt], cfg)
    quantized = [m for m in model.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]
    assert is_int8(model) and len(quantized) == n_linear > 0
    assert precision_name(model) == "int8"  # the step-cost cache keys int8 apart from fp32
    assert not any(type(m) is torch.nn.Linear for m in model.modules())
    (again,) = generate(model, TOK, [prompt], cfg)  # already quantized: nothing is quantized twice
    assert again.token_ids == gen.token_ids
    assert len([m for m in model.modules() if isinstance(m, torch.ao.nn.quantized.dynamic.Linear)]) == n_linear
    ref, _ = _reference_block_decode(model, prompt, block=4, tau=0.5, max_steps=4, max_new=8,
                                     mask_id=model_block_settings(model, TOK)[1])
    assert gen.token_ids == ref
    # and the int8 logits stay close to the fp32 model's (the same no-cache forward)
    ids = prompt.input_ids.tolist() + ref
    fp32 = _full_logits(qwen3_vl, ids, len(prompt.input_ids), 4, prompt)
    int8 = _full_logits(model, ids, len(prompt.input_ids), 4, prompt)
    assert (int8 - fp32).abs().max() < 0.05 * fp32.abs().max()
    assert (int8.argmax(-1) == fp32.argmax(-1)).float().mean() > 0.9


def test_int8_is_refused_where_it_cannot_run():
    from wamdiff.decoding.bench.grid import BenchGrid
    from wamdiff.models.precision import cast_model, quantize_linear_int8

    with pytest.raises(ValueError, match="int8 runs on the CPU only"):
        BenchGrid(dtypes=["fp32", "int8"], device="cuda")
    model = quantize_linear_int8(tiny_qwen3(TOK, seed=5))
    with pytest.raises(ValueError, match="cannot be cast to torch.bfloat16"):
        cast_model(model, torch.bfloat16)
