"""Golden tests of the training forwards against independent computations (plain HF causal forward, a KV-cache
block decode written here), plus block-causality properties. fp32, tiny presets."""

import copy

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from transformers import DynamicCache, Qwen3ForCausalLM, Qwen3VLForConditionalGeneration

from wamdiff.diffusion.forward import ar_forward, diffusion_forward
from wamdiff.diffusion.masks import (
    decode_block_mask_dense, decode_position_ids, encode_mask, prefill_mask_dense, prefix_position_ids,
)
from wamdiff.models import build_config, build_tokenizer, encode_answer, encode_prompt, to_diffusion
from wamdiff.models.image_geometry import processor_from_vision_config

TOL = 1e-5


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _pair(tok, vision):
    """(unmodified HF model, converted copy) with identical random weights."""
    torch.manual_seed(0)
    cls = Qwen3VLForConditionalGeneration if vision else Qwen3ForCausalLM
    ref = cls(build_config("tiny", tok, vision=vision)).eval()
    return ref, to_diffusion(copy.deepcopy(ref), 1, tokenizer=tok)


@pytest.fixture(scope="module")
def qwen3(tok):
    return _pair(tok, False)


@pytest.fixture(scope="module")
def qwen3vl(tok):
    return _pair(tok, True)


def _image(seed=0):
    return (np.random.RandomState(seed).rand(64, 64, 3) * 255).astype(np.uint8)


PROCESSOR = processor_from_vision_config(build_config("tiny", build_tokenizer()).vision_config)


def _vl_inputs(tok, answer="1.25,-3.50,2.00"):
    ep = encode_prompt(tok, "Here is a front-view image: <image>\nThe navigation information is: right", [_image()],
                       image_processor=PROCESSOR)
    ans = encode_answer(tok, answer)
    one = lambda x: torch.ones(1, x.shape[-1], dtype=torch.bool)  # noqa: E731
    kw = dict(prompt_ids=ep.input_ids[None], prompt_mask=one(ep.input_ids), pixel_values=ep.pixel_values,
              image_grid_thw=ep.image_grid_thw, mm_token_type_ids=ep.mm_token_type_ids[None])
    return ep, ans[None], one(ans), kw


def _text_batch(tok, prompts, answers, width_multiple):
    """Left-padded prompts, right-padded answers (PAD) to a multiple of B; answer_mask = own width."""
    pad = tok.pad_token_id
    p_ids = [torch.tensor(tok.encode(p, add_special_tokens=False)) for p in prompts]
    a_ids = [encode_answer(tok, a) for a in answers]
    P = max(len(x) for x in p_ids)
    own = [-(-len(x) // width_multiple) * width_multiple for x in a_ids]
    A = max(own)
    prompt_ids = torch.full((len(prompts), P), pad)
    prompt_mask = torch.zeros(len(prompts), P, dtype=torch.bool)
    x0 = torch.full((len(prompts), A), pad)
    answer_mask = torch.zeros(len(prompts), A, dtype=torch.bool)
    for i, (p, a) in enumerate(zip(p_ids, a_ids)):
        prompt_ids[i, P - len(p):], prompt_mask[i, P - len(p):] = p, True
        x0[i, : len(a)], answer_mask[i, : own[i]] = a, True
    return prompt_ids, prompt_mask, x0, answer_mask


PROMPTS = ["The navigation information is: left\nHow many vehicles are ahead within 30 m?",
           "Is the lead vehicle braking?"]
ANSWERS = ["2", "yes, keep lane 1.25,-0.50"]


def _noisy(x0, answer_mask, mask_id, seed=0):
    g = torch.Generator().manual_seed(seed)
    return x0.masked_fill((torch.rand(x0.shape, generator=g) < 0.5) & answer_mask, mask_id)


# ----------------------------------------------------------------------------------- B = 1 is the AR model


@torch.no_grad()
def test_b1_x0_stream_equals_plain_causal_qwen3(tok, qwen3):
    ref, model = qwen3
    p = torch.tensor(tok.encode(PROMPTS[0], add_special_tokens=False))[None]
    a = encode_answer(tok, ANSWERS[1])[None]
    plain = ref(input_ids=torch.cat([p, a], 1)).logits
    ones = lambda x: torch.ones_like(x, dtype=torch.bool)  # noqa: E731
    _, x0_logits = diffusion_forward(model, prompt_ids=p, prompt_mask=ones(p), x0=a, xt=a, answer_mask=ones(a),
                                     block_size=1, return_x0=True)
    assert (x0_logits - plain[:, p.shape[1]:]).abs().max() <= TOL
    ar = ar_forward(model, prompt_ids=p, prompt_mask=ones(p), answer=a, answer_mask=ones(a))
    assert (ar - plain[:, p.shape[1] - 1: -1]).abs().max() <= TOL


@torch.no_grad()
def test_b1_x0_stream_equals_plain_causal_qwen3vl_with_image(tok, qwen3vl):
    ref, model = qwen3vl
    ep, a, am, kw = _vl_inputs(tok)
    assert int(ep.mm_token_type_ids.sum()) == 16  # 64x64 image -> 16 image tokens
    tt = torch.nn.functional.pad(ep.mm_token_type_ids, (0, a.shape[1]))[None]
    plain = ref(input_ids=torch.cat([ep.input_ids[None], a], 1), pixel_values=ep.pixel_values,
                image_grid_thw=ep.image_grid_thw, mm_token_type_ids=tt).logits
    _, x0_logits = diffusion_forward(model, x0=a, xt=a, answer_mask=am, block_size=1, return_x0=True, **kw)
    P = ep.input_ids.numel()
    assert (x0_logits - plain[:, P:]).abs().max() <= TOL
    ar = ar_forward(model, answer=a, answer_mask=am, **kw)
    assert (ar - plain[:, P - 1: -1]).abs().max() <= TOL


# ------------------------------------------------------------------------------- encodings agree (inference)


@torch.no_grad()
@pytest.mark.parametrize("vision", [False, True])
def test_sdpa_eager_flex_agree(tok, qwen3, qwen3vl, vision):
    model = (qwen3vl if vision else qwen3)[1]
    B = 4
    if vision:
        _, x0, am, kw = _vl_inputs(tok, "0.50,1.00,1.50,2.00,2.50")
    else:
        p, pm, x0, am = _text_batch(tok, PROMPTS, ANSWERS, B)
        kw = dict(prompt_ids=p, prompt_mask=pm)
    xt = _noisy(x0, am, model.config.mask_token_id)
    out = {e: diffusion_forward(model, x0=x0, xt=xt, answer_mask=am, block_size=B, attn=e, **kw) for e in ("sdpa", "eager", "flex")}
    real = am[..., None]
    for e in ("eager", "flex"):
        assert ((out[e] - out["sdpa"]) * real).abs().max() <= TOL, e
    assert torch.isfinite(out["sdpa"]).all()


@torch.no_grad()
@pytest.mark.parametrize("vision", [False, True])
@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_one_block_answer_skips_the_clean_stream_with_the_same_logits(tok, qwen3, qwen3vl, vision, attn):
    """An answer in one block runs [prefix | x_t] only; its logits equal the full [prefix | x0 | x_t] layout's
    (`return_x0` always runs the full layout), padding and batching included."""
    model = (qwen3vl if vision else qwen3)[1]
    if vision:
        _, x0, am, kw = _vl_inputs(tok, "0.50,1.00,1.50,2.00,2.50")
    else:
        p, pm, x0, am = _text_batch(tok, PROMPTS, ANSWERS, 32)
        kw = dict(prompt_ids=p, prompt_mask=pm)
    xt = _noisy(x0, am, model.config.mask_token_id)
    block = 32 if vision else x0.shape[1]  # a block wider than the answer, and one exactly as wide
    short = diffusion_forward(model, x0=x0, xt=xt, answer_mask=am, block_size=block, attn=attn, **kw)
    full, _ = diffusion_forward(model, x0=x0, xt=xt, answer_mask=am, block_size=block, attn=attn, return_x0=True, **kw)
    real = am[..., None]
    assert ((short - full) * real).abs().max() <= TOL
    two_blocks = diffusion_forward(model, x0=x0, xt=xt, answer_mask=am, block_size=max(1, x0.shape[1] // 2), attn=attn, **kw)
    assert ((two_blocks - full) * real).abs().max() > TOL  # the check can tell a different layout apart


# ------------------------------------------------------- training logits == KV-cache block decode logits


def _cached_forward(model, ids, mask, pos, cache, **extra):
    return model(input_ids=ids, attention_mask=mask, position_ids=pos, cache=cache, use_cache=True, **extra).logits


@torch.no_grad()
def test_training_equals_kv_cache_decode_qwen3(tok, qwen3):
    """For every block b: prefill the (left-padded) prompt, commit clean blocks < b block by block into a
    DynamicCache, run noisy block b on top, crop it away; compare with the one-shot training forward."""
    model = qwen3[1]
    B = 4
    p, pm, x0, am = _text_batch(tok, PROMPTS, ANSWERS, B)
    xt = _noisy(x0, am, model.config.mask_token_id)
    train = diffusion_forward(model, prompt_ids=p, prompt_mask=pm, x0=x0, xt=xt, answer_mask=am, block_size=B)

    n, P = p.shape
    causal = torch.ones(P, P, dtype=torch.bool).tril()
    mask = ((causal[None] & pm[:, None, :]) | torch.eye(P, dtype=torch.bool))[:, None]
    assert torch.equal(mask, encode_mask(prefill_mask_dense(pm)))
    pos = (pm.long().cumsum(1) - 1).clamp_min(0)
    cache = DynamicCache(config=model.config)
    _cached_forward(model, p, mask, pos, cache)
    valid, n_real = pm.clone(), pm.sum(1)
    for b in range(x0.shape[1] // B):
        cols = slice(b * B, (b + 1) * B)
        block_mask = torch.cat([valid[:, None, :].expand(n, B, -1), torch.ones(n, B, B, dtype=torch.bool)], -1)[:, None]
        assert torch.equal(block_mask, encode_mask(decode_block_mask_dense(valid, B)))
        block_pos = n_real[:, None] + b * B + torch.arange(B)
        assert torch.equal(block_pos, decode_position_ids(n_real, b * B, B, mrope=False))
        real = am[:, cols, None]
        for enc in ("sdpa", "eager", "flex"):  # every encoding of the decode mask, each step cropped away
            noisy = _cached_forward(model, xt[:, cols], encode_mask(decode_block_mask_dense(valid, B), enc), block_pos, cache)
            cache.crop(-B)
            assert ((noisy - train[:, cols]) * real).abs().max() <= TOL, f"block {b} {enc}"
        _cached_forward(model, x0[:, cols], block_mask, block_pos, cache)  # commit the clean block
        valid = torch.cat([valid, am[:, cols]], 1)


@torch.no_grad()
def test_shifted_b1_columns_are_the_ar_models_next_token_logits(tok, qwen3):
    """At B=1 a shifted model is the AR model: column j's logits are the plain HF forward's at the token before j,
    whatever the noise (they come from the clean rows); a same-position model's depend on it."""
    ref, model = qwen3
    shifted = to_diffusion(copy.deepcopy(ref), 1, tokenizer=tok, prediction="shifted")
    p, pm, x0, am = _text_batch(tok, PROMPTS[:1], ANSWERS[1:], 1)
    xt = _noisy(x0, am, model.config.mask_token_id)
    plain = ref(input_ids=torch.cat([p, x0], 1)).logits[:, p.shape[1] - 1:-1]
    got = diffusion_forward(shifted, prompt_ids=p, prompt_mask=pm, x0=x0, xt=xt, answer_mask=am, block_size=1)
    assert (got - plain).abs().max() <= TOL
    same = diffusion_forward(model, prompt_ids=p, prompt_mask=pm, x0=x0, xt=xt, answer_mask=am, block_size=1)
    assert (same - plain).abs().max() > 0.1


@torch.no_grad()
@pytest.mark.parametrize("B", [4, 32])  # 32: one block, the forward without the clean stream
def test_shifted_training_equals_kv_cache_decode_qwen3(tok, qwen3, B):
    """A shifted model's column j is the decode's logits of the query before j: inside a block the noisy block's
    previous row; at a block's first column the last row of the forward that wrote the token before the block (the
    prefill, or the commit of the clean block before), as `decoding.block` reads them."""
    model = to_diffusion(copy.deepcopy(qwen3[0]), B, tokenizer=tok, prediction="shifted")
    p, pm, x0, am = _text_batch(tok, PROMPTS, ANSWERS, B)
    xt = _noisy(x0, am, model.config.mask_token_id)
    train = diffusion_forward(model, prompt_ids=p, prompt_mask=pm, x0=x0, xt=xt, answer_mask=am, block_size=B)

    n, P = p.shape
    pos = (pm.long().cumsum(1) - 1).clamp_min(0)
    cache = DynamicCache(config=model.config)
    carry = _cached_forward(model, p, encode_mask(prefill_mask_dense(pm)), pos, cache)[:, -1]
    valid, n_real = pm.clone(), pm.sum(1)
    for b in range(x0.shape[1] // B):
        cols = slice(b * B, (b + 1) * B)
        mask = encode_mask(decode_block_mask_dense(valid, B))
        block_pos = n_real[:, None] + b * B + torch.arange(B)
        noisy = _cached_forward(model, xt[:, cols], mask, block_pos, cache)
        cache.crop(-B)
        expected = torch.cat([carry[:, None], noisy[:, :-1]], 1)
        assert ((expected - train[:, cols]) * am[:, cols, None]).abs().max() <= TOL, f"block {b}"
        carry = _cached_forward(model, x0[:, cols], mask, block_pos, cache)[:, -1]  # commit the clean block
        valid = torch.cat([valid, am[:, cols]], 1)


@torch.no_grad()
def test_training_equals_kv_cache_decode_qwen3vl(tok, qwen3vl):
    """Same for Qwen3-VL with an image: the prefill is HF's own (it computes M-RoPE and caches rope_deltas);
    the answer blocks use positions P + rope_delta + offset on all three rows."""
    model = qwen3vl[1]
    B = 4
    ep, x0, am, kw = _vl_inputs(tok, "0.50,1.00,1.50,2.00,2.50")
    pad = -x0.shape[1] % B
    x0 = torch.nn.functional.pad(x0, (0, pad), value=tok.pad_token_id)
    am = torch.ones_like(x0, dtype=torch.bool)
    xt = _noisy(x0, am, model.config.mask_token_id, seed=1)
    train = diffusion_forward(model, x0=x0, xt=xt, answer_mask=am, block_size=B, **kw)

    P = ep.input_ids.numel()
    cache = DynamicCache(config=model.config.text_config)
    model.model.rope_deltas = None
    model(input_ids=ep.input_ids[None], pixel_values=ep.pixel_values, image_grid_thw=ep.image_grid_thw,
          mm_token_type_ids=ep.mm_token_type_ids[None], cache=cache, use_cache=True)
    start = P + int(model.model.rope_deltas)
    assert int(prefix_position_ids(model, kw["prompt_ids"], kw["prompt_mask"], image_grid_thw=ep.image_grid_thw)[1]) == start
    for b in range(x0.shape[1] // B):
        cols = slice(b * B, (b + 1) * B)
        C = cache.get_seq_length()
        block_mask = torch.ones(1, 1, B, C + B, dtype=torch.bool)
        block_pos = (start + b * B + torch.arange(B)).view(1, 1, B).expand(3, 1, B)
        assert torch.equal(block_pos, decode_position_ids(torch.tensor([start]), b * B, B, mrope=True))
        noisy = _cached_forward(model, xt[:, cols], block_mask, block_pos, cache)
        cache.crop(-B)
        assert (noisy - train[:, cols]).abs().max() <= TOL, f"block {b}"
        _cached_forward(model, x0[:, cols], block_mask, block_pos, cache)


# -------------------------------------------------------------------------------- block-causality properties


@settings(max_examples=12, deadline=None)
@given(st.data())
def test_block_causality_properties(tok, qwen3, data):
    model = qwen3[1]
    draw = data.draw
    B = draw(st.integers(1, 4), label="B")
    n_blocks = draw(st.integers(2, 4), label="n_blocks")
    n, P, A = 2, draw(st.integers(1, 6)), B * n_blocks
    V = model.config.vocab_size
    g = torch.Generator().manual_seed(draw(st.integers(0, 1000)))
    p = torch.randint(0, V, (n, P), generator=g)
    pm = torch.ones(n, P, dtype=torch.bool)
    pm[0, : draw(st.integers(0, P - 1))] = False  # left padding
    x0 = torch.randint(0, V, (n, A), generator=g)
    xt = x0.masked_fill(torch.rand(n, A, generator=g) < 0.5, model.config.mask_token_id)
    am = torch.ones(n, A, dtype=torch.bool)
    am[1, A - draw(st.integers(0, B - 1)):] = False  # a narrower second answer
    run = lambda x0_, xt_: diffusion_forward(model, prompt_ids=p, prompt_mask=pm, x0=x0_, xt=xt_,  # noqa: E731
                                             answer_mask=am, block_size=B)
    with torch.no_grad():
        base = run(x0, xt)
        b = draw(st.integers(0, n_blocks - 2), label="block")
        j = draw(st.integers((b + 1) * B, A - 1), label="later column")
        later_xt, later_x0 = xt.clone(), x0.clone()
        later_xt[0, j] = (later_xt[0, j] + 1) % V
        later_x0[0, j] = (later_x0[0, j] + 1) % V
        upto = slice(0, (b + 1) * B)
        # a later block (noisy or clean) never changes the logits of blocks <= b
        assert (run(x0, later_xt)[:, upto] - base[:, upto]).abs().max() <= 1e-6
        assert (run(later_x0, xt)[:, upto] - base[:, upto]).abs().max() <= 1e-6
        # the clean copy of block b itself is invisible to noisy block b (no answer leak)
        same_x0 = x0.clone()
        same_x0[0, b * B: (b + 1) * B] = (same_x0[0, b * B: (b + 1) * B] + 1) % V
        assert (run(same_x0, xt)[:, upto] - base[:, upto]).abs().max() <= 1e-6
        if B > 1:  # a token inside the same noisy block changes its neighbours (bidirectional block)
            i, k = b * B, b * B + 1
            inside = xt.clone()
            inside[0, k] = (inside[0, k] + 1) % V
            assert (run(x0, inside)[0, i] - base[0, i]).abs().max() > 1e-4
        # the clean block b changes noisy block b+1
        assert (run(same_x0, xt)[0, (b + 1) * B] - base[0, (b + 1) * B]).abs().max() > 1e-4


# -------------------------------------------------------------------------------------------- bad inputs


def test_bad_inputs_raise_clear_errors(tok, qwen3):
    model = qwen3[1]
    p = torch.ones(1, 3, dtype=torch.long)
    pm = torch.ones(1, 3, dtype=torch.bool)
    a = torch.ones(1, 4, dtype=torch.long)
    am = torch.ones(1, 4, dtype=torch.bool)
    with pytest.raises(ValueError, match="block_size"):
        diffusion_forward(model, prompt_ids=p, prompt_mask=pm, x0=a, xt=a, answer_mask=am, block_size=0)
    with pytest.raises(ValueError, match="answer is missing"):
        diffusion_forward(model, prompt_ids=p, prompt_mask=pm, x0=a[:, :0], xt=a[:, :0], answer_mask=am[:, :0], block_size=2)
    with pytest.raises(ValueError, match="answer is missing"):
        ar_forward(model, prompt_ids=p, prompt_mask=pm, answer=None, answer_mask=am)
    long_p = torch.ones(1, model.config.max_position_embeddings, dtype=torch.long)
    with pytest.raises(ValueError, match="max_position_embeddings"):
        diffusion_forward(model, prompt_ids=long_p, prompt_mask=torch.ones_like(long_p, dtype=torch.bool), x0=a, xt=a,
                          answer_mask=am, block_size=2)


@torch.no_grad()
def test_padding_and_batching_do_not_change_logits_qwen3vl(tok, qwen3vl):
    """A left-padded batch of two image prompts gives each sample the logits it gets alone."""
    model = qwen3vl[1]
    B = 4
    eps = [encode_prompt(tok, "<image>\nThe navigation information is: left", [_image(1)], image_processor=PROCESSOR),
           encode_prompt(tok, "Here is a front-view image: <image>\nIs the lead vehicle braking?", [_image(2)], image_processor=PROCESSOR)]
    answers = [encode_answer(tok, "yes"), encode_answer(tok, "0.50,1.00,1.50")]
    P, A = max(e.input_ids.numel() for e in eps), -(-max(a.numel() for a in answers) // B) * B
    p = torch.full((2, P), tok.pad_token_id)
    pm = torch.zeros(2, P, dtype=torch.bool)
    tt = torch.zeros(2, P, dtype=torch.long)
    x0 = torch.full((2, A), tok.pad_token_id)
    am = torch.zeros(2, A, dtype=torch.bool)
    for i, (e, a) in enumerate(zip(eps, answers)):
        n = e.input_ids.numel()
        p[i, P - n:], pm[i, P - n:], tt[i, P - n:] = e.input_ids, True, e.mm_token_type_ids
        x0[i, : a.numel()], am[i, : -(-a.numel() // B) * B] = a, True
    xt = _noisy(x0, am, model.config.mask_token_id, seed=3)
    both = diffusion_forward(model, prompt_ids=p, prompt_mask=pm, x0=x0, xt=xt, answer_mask=am, block_size=B,
                             pixel_values=torch.cat([e.pixel_values for e in eps]),
                             image_grid_thw=torch.cat([e.image_grid_thw for e in eps]), mm_token_type_ids=tt)
    for i, e in enumerate(eps):
        w = int(am[i].sum())
        alone = diffusion_forward(model, prompt_ids=e.input_ids[None], prompt_mask=torch.ones(1, e.input_ids.numel(), dtype=torch.bool),
                                  x0=x0[i:i + 1, :w], xt=xt[i:i + 1, :w], answer_mask=am[i:i + 1, :w], block_size=B,
                                  pixel_values=e.pixel_values, image_grid_thw=e.image_grid_thw,
                                  mm_token_type_ids=e.mm_token_type_ids[None])
        assert (both[i, :w] - alone[0]).abs().max() <= TOL


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_training_step_backward_is_finite(tok, attn):
    """One masked-diffusion step on a left-padded Qwen3-VL batch: finite loss, gradients reach the vision tower."""
    from wamdiff.diffusion.losses import masked_diffusion_loss
    from wamdiff.diffusion.noising import noise_answers

    torch.manual_seed(0)
    model = to_diffusion(Qwen3VLForConditionalGeneration(build_config("tiny", tok)), 4, tokenizer=tok).train()
    ep, x0, am, kw = _vl_inputs(tok, "0.50,1.00")
    x0 = torch.nn.functional.pad(x0, (0, -x0.shape[1] % 4), value=tok.pad_token_id)
    am = torch.ones_like(x0, dtype=torch.bool)
    xt, t = noise_answers(x0, 4, tok.mask_token_id, answer_mask=am, generator=torch.Generator().manual_seed(0))
    logits = diffusion_forward(model, x0=x0, xt=xt, answer_mask=am, block_size=4, attn=attn, **kw)
    loss = masked_diffusion_loss(logits, x0, xt == tok.mask_token_id, t, am)
    loss.backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert torch.isfinite(loss) and all(torch.isfinite(g).all() for g in grads)
    assert model.model.visual.patch_embed.proj.weight.grad.abs().sum() > 0


@torch.no_grad()
def test_fused_commit_and_next_block_step_equals_training(tok, qwen3):
    """decode_block_mask_dense(n_blocks=2): [clean block b-1 | noisy block b] in one forward on a cache holding the
    prompt + blocks < b-1 gives noisy block b its training logits (and commits b-1 to the cache)."""
    model = qwen3[1]
    B = 2
    p, pm, x0, am = _text_batch(tok, PROMPTS, ANSWERS, B)
    xt = _noisy(x0, am, model.config.mask_token_id, seed=5)
    train = diffusion_forward(model, prompt_ids=p, prompt_mask=pm, x0=x0, xt=xt, answer_mask=am, block_size=B)
    cache = DynamicCache(config=model.config)
    _cached_forward(model, p, encode_mask(prefill_mask_dense(pm)), (pm.long().cumsum(1) - 1).clamp_min(0), cache)
    valid, n_real = pm.clone(), pm.sum(1)
    for b in range(1, x0.shape[1] // B):
        prev, cols = slice((b - 1) * B, b * B), slice(b * B, (b + 1) * B)
        ids = torch.cat([x0[:, prev], xt[:, cols]], 1)
        logits = _cached_forward(model, ids, encode_mask(decode_block_mask_dense(valid, B, 2)),
                                 decode_position_ids(n_real, (b - 1) * B, 2 * B, mrope=False), cache)
        cache.crop(-B)  # keep the committed clean block, drop the noisy one
        assert ((logits[:, B:] - train[:, cols]) * am[:, cols, None]).abs().max() <= TOL, f"block {b}"
        valid = torch.cat([valid, am[:, prev]], 1)
