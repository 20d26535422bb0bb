"""Masks and position ids against brute-force references written plainly here (docs/concepts/masks.md)."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff.diffusion import masks as M


def reference_training_mask(prompt_mask, answer_mask, B):
    """Loop over every (query, key) pair and apply the five rules of docs/concepts/masks.md literally."""
    n, p = prompt_mask.shape
    a = answer_mask.shape[1]
    L = p + 2 * a

    def kind(i):  # (segment, index inside segment)
        return ("prefix", i) if i < p else ("x0", i - p) if i < p + a else ("xt", i - p - a)

    def real(s, i, j):
        return bool(prompt_mask[s, j]) if kind(j)[0] == "prefix" else bool(answer_mask[s, kind(j)[1]])

    out = torch.zeros(n, L, L, dtype=torch.bool)
    for s in range(n):
        for q in range(L):
            for k in range(L):
                (qs, qi), (ks, ki) = kind(q), kind(k)
                if qs == "prefix":
                    ok = ks == "prefix" and ki <= qi
                elif qs == "x0":
                    ok = ks == "prefix" or (ks == "x0" and ki // B <= qi // B)
                else:
                    ok = ks == "prefix" or (ks == "x0" and ki // B < qi // B) or (ks == "xt" and ki // B == qi // B)
                out[s, q, k] = (ok and real(s, q, k)) or q == k
    return out


def padded_masks(draw, n, p_max, a_max):
    p = draw(st.integers(1, p_max))
    a = draw(st.integers(1, a_max))
    plen = [draw(st.integers(1, p)) for _ in range(n)]  # left padding: real tokens at the end
    alen = [draw(st.integers(1, a)) for _ in range(n)]
    pm = torch.arange(p)[None] >= (p - torch.tensor(plen))[:, None]
    am = torch.arange(a)[None] < torch.tensor(alen)[:, None]
    return pm, am


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 5))
def test_training_mask_matches_brute_force(data, n, B):
    pm, am = padded_masks(data.draw, n, 6, 9)
    dense = M.training_mask_dense(pm, am, B)
    assert torch.equal(dense, reference_training_mask(pm, am, B))
    assert dense.any(-1).all()  # no fully masked query row -> no NaN
    assert torch.equal(M.training_mask(pm, am, B, "sdpa")[:, 0], dense)
    eager = M.training_mask(pm, am, B, "eager")[:, 0]
    assert torch.equal(eager == 0, dense) and torch.isneginf(eager[~dense]).all()


@settings(max_examples=30, deadline=None)
@given(st.integers(1, 3), st.integers(0, 7), st.integers(1, 4), st.integers(1, 3), st.data())
def test_decode_block_mask_matches_rule(n, c, block_len, n_blocks, data):
    rows = data.draw(st.lists(st.lists(st.booleans(), min_size=c, max_size=c), min_size=n, max_size=n))
    valid = torch.tensor(rows, dtype=torch.bool).reshape(n, c)
    dense = M.decode_block_mask_dense(valid, block_len, n_blocks)
    q = block_len * n_blocks
    assert dense.shape == (n, q, c + q)
    for s in range(n):
        for i in range(q):
            for k in range(c + q):
                expect = bool(valid[s, k]) if k < c else (k - c) // block_len <= i // block_len
                assert bool(dense[s, i, k]) == expect
    if block_len == 1 and n_blocks > 1:  # B=1 == causal over the new tokens
        assert torch.equal(dense[0, :, c:], torch.ones(q, q, dtype=torch.bool).tril())


def test_decode_mask_is_the_training_x0_rule():
    """A decode step of block b (cache = prompt + clean blocks < b) sees what training's x0 block b sees."""
    pm = torch.tensor([[False, True, True]])
    am = torch.ones(1, 6, dtype=torch.bool)
    B, b = 2, 1
    train = M.training_mask_dense(pm, am, B)
    rows = slice(3 + b * B, 3 + (b + 1) * B)  # x0 block b
    cache_valid = torch.cat([pm, am[:, : b * B]], 1)
    dec = M.decode_block_mask_dense(cache_valid, B)
    assert torch.equal(train[:, rows, : 3 + (b + 1) * B], dec)


def test_flex_block_mask_encodes_the_same_mask():
    pm = torch.tensor([[False, True, True], [True, True, True]])
    am = torch.tensor([[True] * 4, [True, True, False, False]])
    bm = M.training_mask(pm, am, 2, "flex")
    dense = M.training_mask_dense(pm, am, 2)
    q = torch.arange(dense.shape[1])
    for s in range(2):
        got = bm.mask_mod(torch.tensor(s), torch.tensor(0), q[:, None], q[None, :])
        assert torch.equal(got, dense[s])


@pytest.mark.parametrize("bad", [0, -3, 1.5])
def test_block_size_must_be_positive(bad):
    with pytest.raises(ValueError, match="block_size"):
        M.training_mask(torch.ones(1, 2, dtype=torch.bool), torch.ones(1, 4, dtype=torch.bool), bad)


def test_missing_answer_and_unknown_encoding():
    with pytest.raises(ValueError, match="answer is missing"):
        M.training_mask_dense(torch.ones(1, 2, dtype=torch.bool), torch.ones(1, 0, dtype=torch.bool), 2)
    with pytest.raises(ValueError, match="encoding"):
        M.encode_mask(torch.ones(1, 2, 2, dtype=torch.bool), "xformers")


class _TextOnly:  # positions of a plain Qwen3 need no model internals
    model = None


@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(1, 6), min_size=1, max_size=4), st.integers(0, 3), st.integers(1, 5))
def test_left_padding_never_shifts_real_positions(lengths, extra, a):
    p = max(lengths) + extra
    pm = torch.arange(p)[None] >= (p - torch.tensor(lengths))[:, None]
    pos = M.training_position_ids(_TextOnly(), torch.zeros_like(pm, dtype=torch.long), pm, a)
    for s, n_real in enumerate(lengths):
        assert pos[s, p - n_real: p].tolist() == list(range(n_real))
        x0, xt = pos[s, p: p + a], pos[s, p + a:]
        assert x0.tolist() == list(range(n_real, n_real + a)) and torch.equal(x0, xt)
    assert torch.equal(M.decode_position_ids(pm.sum(1), 2, 3, mrope=True)[1], pm.sum(1)[:, None] + 2 + torch.arange(3))
