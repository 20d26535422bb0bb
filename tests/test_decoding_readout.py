"""The ordinal read-out against a brute-force Python computation, alone and inside both decoders."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff.decoding import DecodeConfig, Grammar, generate
from wamdiff.driving.answer_format import answer_format
from wamdiff.decoding.config import resolve_decode
from wamdiff.decoding.readout import OrdinalTable, read_out
from wamdiff.decoding.testing import synthetic_prompt, tiny_qwen3, tiny_tokenizer
from wamdiff.models.tokens import BIN_TOKENS, IM_END, PAD, token_id

TOK = tiny_tokenizer()
EOS, PADID = token_id(TOK, IM_END), token_id(TOK, PAD)


def brute_read(logits: list[float], grid: list[int] | None, window: int) -> tuple[float, int]:
    """One row, plain Python: softmax; on a grid, the mode's window, its mass and the grid value nearest its mean."""
    z = max(logits)
    p = [math.exp(v - z) for v in logits]
    s = sum(p)
    p = [v / s for v in p]
    top = max(range(len(p)), key=lambda i: (p[i], -i))  # first maximum, as argmax
    if window == 0 or grid is None or top not in grid:
        return p[top], top
    j = grid.index(top)
    win = [k for k in range(len(grid)) if abs(k - j) <= window]
    mass = sum(p[grid[k]] for k in win)
    mean = sum(k * p[grid[k]] for k in win) / mass
    return mass, grid[round(mean)]


def test_hand_built_distributions():
    grid = list(range(10, 40))  # token 10 + k is grid value k
    table = OrdinalTable.build([grid], [0], 1)

    def row(probs: dict[int, float]) -> torch.Tensor:
        p = torch.full((50,), 1e-9)
        for k, v in probs.items():
            p[10 + k] = v
        return p.log()

    # two neighbours of equal weight: the plain read-out takes the first at 0.5, the ordinal one their middle at 1.0
    two = row({3: 0.5, 5: 0.5})
    assert read_out(two[None], torch.tensor([0]))[1].item() == 13
    conf, tok = read_out(two[None], torch.tensor([0]), window=2, table=table)
    assert tok.item() == 14 and conf.item() == pytest.approx(1.0, abs=1e-6)
    # two modes far apart: the window keeps the stronger one instead of averaging into the gap
    conf, tok = read_out(row({2: 0.45, 20: 0.55})[None], torch.tensor([0]), window=2, table=table)
    assert tok.item() == 30 and conf.item() == pytest.approx(0.55, abs=1e-6)
    # a position on no grid reads plainly
    off = OrdinalTable.build([grid], [-1], 1)
    assert read_out(two[None], torch.tensor([0]), window=2, table=off)[1].item() == 13


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10_000), window=st.sampled_from([0, 1, 2, 5, 100]), peaky=st.floats(0.5, 8.0))
def test_read_out_equals_brute_force(seed, window, peaky):
    g = torch.Generator().manual_seed(seed)
    vocab, n_pos = 60, 7
    grids = [list(range(5, 25)), list(range(30, 42))]
    axis_of = [0, 1, 0, 1, -1, 0, -1]
    table = OrdinalTable.build(grids, axis_of, n_pos)
    logits = torch.randn(3, n_pos, vocab, generator=g) * peaky
    # half the rows: mass concentrated around a grid value, as a trained model's
    centre = torch.randint(0, 12, (3, n_pos), generator=g)
    for i in range(3):
        for q in range(n_pos):
            if axis_of[q] >= 0 and (i + q) % 2 == 0:
                ids = torch.tensor(grids[axis_of[q]])
                logits[i, q, ids] += 6.0 - (torch.arange(len(ids)) - centre[i, q]).abs().float()
    conf, tok = read_out(logits, torch.arange(n_pos), window=window, table=table)
    for i in range(3):
        for q in range(n_pos):
            want_c, want_t = brute_read(logits[i, q].tolist(), grids[axis_of[q]] if axis_of[q] >= 0 else None, window)
            assert tok[i, q].item() == want_t
            assert conf[i, q].item() == pytest.approx(want_c, rel=1e-5, abs=1e-6)


def test_delta_grammar_lists_its_grids_in_value_order():
    from wamdiff.models import build_tokenizer
    from wamdiff.models import tokens as T

    tok = build_tokenizer()
    gram = Grammar.for_format(tok, answer_format("delta"))
    assert gram.axes == [[token_id(tok, t) for t in T.DELTA_X_TOKENS], [token_id(tok, t) for t in T.DELTA_Y_TOKENS]]
    assert gram.position_axis == [0, 1] * 8
    assert Grammar.for_format(tok, answer_format("fixed1")).axes is None  # digits carry: no grid


# --------------------------------------------------------------------------------------- inside the decoders
BIN_IDS = [token_id(TOK, t) for t in BIN_TOKENS]
GRIDS = [BIN_IDS[:128], BIN_IDS[128:]]  # two grids alternating over 16 positions, as delta's dx, dy: a position
# handed to the read-out off by one would read the other grid
TWO_GRIDS = Grammar([GRIDS[0], GRIDS[1]] * 8 + [[EOS]], "two grids", axes=GRIDS, position_axis=[0, 1] * 8)


def grid_at(pos: int) -> list[int] | None:
    return GRIDS[pos % 2] if pos < 16 else None


@pytest.fixture(scope="module")
def model():
    """A tiny model whose bin logits are a smooth bump over the grid (A cos(theta_k - phi(h)): a von Mises shape, as a
    trained model spreads its mass over neighbouring values), peaked enough that a window of +-2 bins is confident."""
    m = tiny_qwen3(TOK, peaky=3.0, seed=21)
    with torch.no_grad():
        w = m.lm_head.weight
        u, v = torch.randn(2, w.shape[1], generator=torch.Generator().manual_seed(0))
        theta = torch.arange(len(BIN_IDS)) * 2 * math.pi / len(BIN_IDS)
        w[BIN_IDS] = 500.0 * (theta.cos()[:, None] * u / u.norm() + theta.sin()[:, None] * v / v.norm())
    return m


def _brute_ar(model, prompt, window: int, n: int) -> list[int]:
    """Greedy AR with the brute-force read-out and the grammar, no cache: a full forward per token."""
    table = TWO_GRIDS.table(n + 4, len(TOK), PADID)
    ids = prompt.input_ids.tolist()
    out = []
    for t in range(n):
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([ids + out])).logits[0, -1].float()
        logits = logits.masked_fill(~table[t], float("-inf"))
        out.append(brute_read(logits.tolist(), grid_at(t), window)[1])
        if out[-1] == EOS:
            break
    return out


@pytest.mark.parametrize("window", [0, 2])
def test_ar_decoding_with_the_ordinal_read_out_equals_brute_force(model, window):
    prompt = synthetic_prompt(TOK, 9, seed=3)
    (gen,) = generate(model, TOK, [prompt], DecodeConfig(mode="ar", grammar=TWO_GRIDS, ordinal_window=window,
                                                         max_new_tokens=17))
    assert gen.token_ids == _brute_ar(model, prompt, window, 17)


def test_the_window_changes_tokens_and_raises_confidence(model):
    """Not a no-op on this model: the window moves tokens and unmasks more per forward at the same tau."""
    prompts = [synthetic_prompt(TOK, n, seed=n) for n in (5, 9, 13)]
    base = dict(block_size=17, threshold=0.9, max_new_tokens=17, grammar=TWO_GRIDS)
    plain = generate(model, TOK, prompts, DecodeConfig(**base))
    ordinal = generate(model, TOK, prompts, DecodeConfig(ordinal_window=2, **base))
    assert [g.token_ids for g in plain] != [g.token_ids for g in ordinal]
    assert sum(g.forwards for g in ordinal) < sum(g.forwards for g in plain)


@pytest.mark.parametrize("lean", ["off", "last_layer"])
@pytest.mark.parametrize("block", [5, 17])  # 5: odd, so a block offset shifts the grids
def test_block_decoding_with_the_ordinal_read_out_equals_recomputation(model, lean, block):
    """Each step read with the brute-force read-out on a full no-cache forward (test_decoding_engine's reference
    layout): the decoder hands every row its own answer position, also in lean (partial-row) steps."""
    from tests.test_decoding_engine import _full_logits

    prompt = synthetic_prompt(TOK, 7, seed=8)
    mask_id = model.config.mask_token_id
    tau, n = 0.97, 17
    (gen,) = generate(model, TOK, [prompt], DecodeConfig(block_size=block, threshold=tau, max_new_tokens=n,
                                                         grammar=TWO_GRIDS, ordinal_window=2, lean=lean))
    table = TWO_GRIDS.table(-(-n // block) * block + 64, len(TOK), PADID)
    p_ids, answer, steps = prompt.input_ids.tolist(), [], 0
    for b in range(-(-n // block)):
        x = [mask_id] * block
        for step in range(32):
            logits = _full_logits(model, p_ids + answer + x, len(p_ids), block, prompt)[-block:]
            reads = []
            for i in range(block):
                pos = b * block + i
                row = logits[i].masked_fill(~table[pos], float("-inf"))
                reads.append(brute_read(row.tolist(), grid_at(pos), 2))
            masked = [i for i in range(block) if x[i] == mask_id]
            chosen = {i for i in masked if reads[i][0] >= tau} | {max(masked, key=lambda i: reads[i][0])}
            for i in chosen:
                x[i] = reads[i][1]
            steps += 1
            if mask_id not in x:
                break
        answer += x
        if EOS in x:
            answer = answer[: answer.index(EOS) + 1]
            break
    assert gen.token_ids == answer[:n]
    assert 17 // block < steps < 17  # several tokens per forward, and several forwards: partial steps ran


def test_the_ordinal_read_out_needs_a_grammar(model):
    with pytest.raises(ValueError, match="grammar"):
        generate(model, TOK, [synthetic_prompt(TOK, 5)], DecodeConfig(ordinal_window=2, max_new_tokens=4))
    with pytest.raises(ValueError, match="ordinal"):
        resolve_decode({"ordinal": "-1"}, where="spec")
    assert resolve_decode({"ordinal": "2"}, where="spec").ordinal_window == 2


@pytest.mark.parametrize("weight", [0.0, 0.05, 1.0])
def test_smooth_path_equals_exhaustive_search(weight):
    """The Viterbi path against every path of a 6-value grid over 4 positions, scored in plain Python."""
    import itertools

    from wamdiff.decoding.readout import smooth_path

    g = torch.Generator().manual_seed(int(weight * 100))
    p = torch.softmax(3 * torch.randn(3, 4, 6, generator=g), -1)
    got = smooth_path(p, weight)
    for n in range(3):
        def score(path):
            return (sum(math.log(float(p[n, k, i])) for k, i in enumerate(path))
                    - weight * sum((a - b) ** 2 for a, b in zip(path, path[1:])))
        best = max(itertools.product(range(6), repeat=4), key=score)
        assert tuple(got[n].tolist()) == best


@pytest.mark.parametrize("candidates", [1, 2, 6])
def test_smooth_path_with_candidates_searches_the_rows_likeliest_values(candidates):
    """With c candidates the path runs through the values some position of the row ranks among its c likeliest:
    against every path over that set, scored in plain Python (c = the grid size: the exact search)."""
    import itertools

    from wamdiff.decoding.readout import smooth_path

    g = torch.Generator().manual_seed(candidates)
    p = torch.softmax(2 * torch.randn(4, 4, 6, generator=g), -1)
    got = smooth_path(p, 0.3, candidates)
    for n in range(4):
        allowed = sorted({int(i) for k in range(4) for i in p[n, k].topk(candidates).indices})
        def score(path):
            return (sum(math.log(float(p[n, k, i])) for k, i in enumerate(path))
                    - 0.3 * sum((a - b) ** 2 for a, b in zip(path, path[1:])))
        best = max(itertools.product(allowed, repeat=4), key=score)
        assert tuple(got[n].tolist()) == best
    assert torch.equal(smooth_path(p, 0.3, 6), smooth_path(p, 0.3))
    assert smooth_path(p[:0], 0.3, candidates).shape == (0, 4)  # an empty batch


def test_block_decoding_with_smoothness_reads_each_axis_as_one_path(model):
    """A finished block's values on each grid are re-read as one path: at a prohibitive weight every value of a grid
    is the same one; at a small weight some tokens move, not all; AR decoding ignores it."""
    prompts = [synthetic_prompt(TOK, n, seed=n) for n in (5, 9, 13)]
    base = dict(block_size=17, threshold=0.9, max_new_tokens=17, grammar=TWO_GRIDS, ordinal_window=0)
    plain = generate(model, TOK, prompts, DecodeConfig(**base))
    flat = generate(model, TOK, prompts, DecodeConfig(smoothness=1e6, **base))
    some = generate(model, TOK, prompts, DecodeConfig(smoothness=0.1, **base))
    for g, f in zip(plain, flat):
        assert len(set(g.token_ids[0:16:2])) > 1  # the model's own x values vary ...
        assert len(set(f.token_ids[0:16:2])) == 1 and len(set(f.token_ids[1:16:2])) == 1  # ... one value each
        assert f.token_ids[16] == EOS
    moved = sum(a != b for g, s in zip(plain, some) for a, b in zip(g.token_ids, s.token_ids))
    assert 0 < moved < sum(len(g.token_ids) for g in plain)
    # several blocks: each block's values of a grid are read as one path of their own (blocks of 8: 4 x and 4 y)
    eight = generate(model, TOK, prompts, DecodeConfig(smoothness=1e6, **{**base, "block_size": 8}))
    for f in eight:
        for start in (0, 8):
            assert len(set(f.token_ids[start:start + 8:2])) == 1 and len(set(f.token_ids[start + 1:start + 8:2])) == 1
        assert f.token_ids[16] == EOS
    ar = dict(mode="ar", grammar=TWO_GRIDS, max_new_tokens=17)
    assert generate(model, TOK, prompts[:1], DecodeConfig(smoothness=1.0, **ar))[0].token_ids == \
        generate(model, TOK, prompts[:1], DecodeConfig(**ar))[0].token_ids
    with pytest.raises(ValueError, match="smoothness"):
        resolve_decode({"smoothness": "-1"}, where="spec")
    assert resolve_decode({"smoothness": "0.01"}, where="spec").smoothness == 0.01
