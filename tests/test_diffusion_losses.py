"""Noising and losses against hand-written references."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from wamdiff.diffusion.losses import masked_diffusion_loss, symmetric_jsd, topk_overlap
from wamdiff.diffusion.noising import complementary_copy, noise_answers, sample_block_rates

MASK = 99


def add_noise(x0, answer_mask, block_size, mask_token_id, *, min_rate=0.05, complementary=False, generator=None):
    """Reference noising of a batch in one call: `noise_answers`, with its `complementary_copy` appended as rows
    N..2N-1. Returns (xt, masked, t). Training splits it (noise the global batch, copies per process's rows)."""
    xt, t = noise_answers(x0, block_size, mask_token_id, answer_mask=answer_mask, min_rate=min_rate, generator=generator)
    if complementary:
        xt2, t2 = complementary_copy(x0, xt, t, mask_token_id, answer_mask=answer_mask, min_rate=min_rate)
        xt, t = torch.cat([xt, xt2]), torch.cat([t, t2])
    return xt, xt == mask_token_id, t


def _logits(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


# ------------------------------------------------------------------------------------------------- noising


def test_block_rates_are_stratified_and_clipped():
    t = sample_block_rates(500, 4, min_rate=0.05, generator=torch.Generator().manual_seed(0))
    strata = torch.sort(t, dim=1).values
    lo = torch.tensor([0.0, 0.25, 0.5, 0.75])
    assert ((strata >= lo.clamp_min(0.05)) & (strata < lo + 0.25)).all()  # one rate per quarter
    assert t.min() >= 0.05
    assert not torch.equal(t.argsort(1), torch.arange(4).expand(500, 4))  # shuffled over blocks


def test_noise_is_per_block_and_respects_answer_mask():
    x0 = torch.arange(64).view(2, 32) % 50
    am = torch.ones(2, 32, dtype=torch.bool)
    am[1, 20:] = False
    xt, t = noise_answers(x0, 8, MASK, answer_mask=am, generator=torch.Generator().manual_seed(1))
    assert torch.equal(t.view(2, 4, 8), t.view(2, 4, 8)[..., :1].expand(2, 4, 8))  # one t per block
    assert not (xt[~am] == MASK).any()
    assert torch.equal(xt[xt != MASK], x0[xt != MASK])


def test_complementary_copy_masks_exactly_the_visible_real_tokens():
    x0 = torch.randint(0, 50, (3, 12))
    am = torch.ones(3, 12, dtype=torch.bool)
    am[2, 8:] = False
    xt, masked, t = add_noise(x0, am, 4, MASK, complementary=True, generator=torch.Generator().manual_seed(2))
    first, second = masked[:3], masked[3:]
    assert torch.equal(first ^ second, am) and not (first & second).any()
    assert torch.equal(xt[3:][~second], x0[~second])
    xt2, t2 = complementary_copy(x0, xt[:3], t[:3], MASK, answer_mask=am)
    assert torch.equal(xt2, xt[3:]) and torch.allclose(t2, (1 - t[:3]).clamp_min(0.05))


def test_the_training_objective_noises_as_the_reference():
    """The trainer's path (`Objective.noise` on the global batch, then `with_copies` on a process's rows) draws the
    same x_t, t and complementary copy as the one-call reference with the same generator."""
    from wamdiff.training.config import load_recipe
    from wamdiff.training.data import Batch
    from wamdiff.training.objectives import build_objective

    recipe = load_recipe({"name": "t", "kind": "block", "data": {"train": ["x.json"]}, "model": {"preset": "tiny", "block_size": 4},
                          "diffusion": {"complementary": True, "min_rate": 0.1}})
    objective = build_objective(recipe, MASK)
    x0 = torch.randint(0, 50, (3, 12), generator=torch.Generator().manual_seed(4))
    am = torch.ones(3, 12, dtype=torch.bool)
    am[1, 7:] = False
    batch = Batch(torch.ones(3, 2, dtype=torch.long), torch.ones(3, 2, dtype=torch.bool), x0, am)
    got = objective.with_copies(objective.noise(batch, torch.Generator().manual_seed(5)))
    xt, masked, t = add_noise(x0, am, 4, MASK, min_rate=0.1, complementary=True, generator=torch.Generator().manual_seed(5))
    assert torch.equal(got.xt, xt) and torch.equal(got.t, t) and torch.equal(objective.masked(got), masked & am.repeat(2, 1))
    assert masked[:3].any() and masked[3:].any()


# ----------------------------------------------------------------------------------------- diffusion loss


def test_masked_diffusion_loss_matches_reference_and_zero_grad_elsewhere():
    N, A, V = 3, 8, 11
    logits = _logits(N, A, V).requires_grad_()
    x0 = torch.randint(0, V, (N, A), generator=torch.Generator().manual_seed(3))
    masked = torch.rand(N, A, generator=torch.Generator().manual_seed(4)) < 0.5
    masked[2] = False  # a sample with zero masks: contributes 0, no division by zero
    t = torch.rand(N, A).clamp_min(0.05)
    am = torch.ones(N, A, dtype=torch.bool)
    am[1, 6:] = False
    loss = masked_diffusion_loss(logits, x0, masked, t, am)
    ref = 0.0
    for i in range(N):
        s = sum(-F.log_softmax(logits[i, j], -1)[x0[i, j]] / t[i, j] for j in range(A) if masked[i, j])
        ref += s / am[i].sum() if masked[i].any() else 0.0
    assert torch.isclose(loss, ref / N, atol=1e-5)
    loss.backward()
    assert (logits.grad[~masked] == 0).all() and (logits.grad[masked].abs().sum(-1) > 0).all()
    none = masked_diffusion_loss(logits, x0, torch.zeros_like(masked), t, am)
    assert none.item() == 0.0 and math.isfinite(none.item())


# ------------------------------------------------------------------------------------------------- JSD


def _reference_jsd(s, t, temperature):
    p, q = F.softmax(t / temperature, -1), F.softmax(s / temperature, -1)
    m = 0.5 * (p + q)
    return (0.5 * (p * (p / m).log()).sum(-1) + 0.5 * (q * (q / m).log()).sum(-1)) * temperature**2


@settings(max_examples=20, deadline=None)
@given(st.integers(1, 3), st.integers(1, 9), st.floats(0.5, 3.0), st.integers(0, 10_000), st.integers(1, 7))
def test_jsd_symmetric_nonnegative_chunked(n, a, temperature, seed, chunk):
    s, t = _logits(n, a, 13, seed=seed), _logits(n, a, 13, seed=seed + 1) * 2
    mask = torch.rand(n, a, generator=torch.Generator().manual_seed(seed)) < 0.6
    am = torch.ones(n, a, dtype=torch.bool)
    full = symmetric_jsd(s, t, mask, am, temperature=temperature, chunk_size=10_000)
    chunked = symmetric_jsd(s, t, mask, am, temperature=temperature, chunk_size=chunk)
    assert full >= 0 and torch.isclose(full, chunked, atol=1e-6)
    assert torch.isclose(full, symmetric_jsd(t, s, mask, am, temperature=temperature), atol=1e-6)
    assert symmetric_jsd(s, s.clone(), mask, am, temperature=temperature).abs() <= 1e-6
    ref = torch.stack([(_reference_jsd(s[i], t[i], temperature) * mask[i]).sum() / a for i in range(n)]).mean()
    assert torch.isclose(full, ref, atol=1e-5)


def test_jsd_gradient_chunked_equals_unchunked_and_only_at_masked():
    s = _logits(2, 6, 17).requires_grad_()
    t = _logits(2, 6, 17, seed=9)
    mask = torch.tensor([[1, 0, 1, 1, 0, 0], [0, 1, 1, 0, 0, 1]], dtype=torch.bool)
    grads = []
    for chunk in (1, 100):
        s.grad = None
        symmetric_jsd(s, t, mask, chunk_size=chunk).backward()
        grads.append(s.grad.clone())
    assert torch.allclose(grads[0], grads[1], atol=1e-7)
    assert (grads[0][~mask] == 0).all()


def test_jsd_rejects_bad_beta():
    with pytest.raises(ValueError, match="beta"):
        symmetric_jsd(_logits(1, 2, 3), _logits(1, 2, 3), torch.ones(1, 2, dtype=torch.bool), beta=1.0)


# ------------------------------------------------------------------------------------------ top-k overlap


def test_topk_overlap():
    a = _logits(2, 5, 20)
    mask = torch.ones(2, 5, dtype=torch.bool)
    assert topk_overlap(a, a.clone(), mask, k=5).item() == 1.0
    assert topk_overlap(a, -a, mask, k=5).item() == 0.0  # top-5 of -a are the bottom 5 of a (V=20 > 10)
    b = a.clone()
    top = a[0, 0].topk(5).indices
    b[0, 0, top[:2]] = -100.0  # two of row (0,0)'s top-5 leave it
    assert torch.isclose(topk_overlap(a, b, mask, k=5), torch.tensor(1 - 2 / 5 / 10))


# ------------------------------------------------------------------------------------ ordinal (grid) targets
def _brute_grid_ce(logits: list[float], target: int, grids: list[list[int]], sigma: float) -> float:
    z = max(logits)
    logp = [v - z - math.log(sum(math.exp(u - z) for u in logits)) for v in logits]
    for grid in grids:
        if target in grid:
            j = grid.index(target)
            q = [math.exp(-0.5 * ((k - j) / sigma) ** 2) for k in range(len(grid))]
            return -sum(qk / sum(q) * logp[tok] for qk, tok in zip(q, grid))
    return -logp[target]


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 10_000), sigma=st.floats(0.3, 4.0))
def test_grid_cross_entropy_equals_brute_force(seed, sigma):
    from wamdiff.diffusion.grids import Grids
    from wamdiff.diffusion.losses import grid_cross_entropy

    g = torch.Generator().manual_seed(seed)
    axes = [list(range(3, 15)), list(range(20, 27))]
    logits = torch.randn(9, 30, generator=g) * 3
    target = torch.tensor([3, 9, 14, 20, 26, 0, 29, 17, 23])  # grid ends, middles, and tokens on no grid
    got = grid_cross_entropy(logits, target, Grids.build(axes), sigma)
    for i in range(len(target)):
        assert got[i].item() == pytest.approx(_brute_grid_ce(logits[i].tolist(), int(target[i]), axes, sigma), rel=1e-5)


def test_grid_targets_reward_a_near_miss_and_reduce_to_one_hot():
    from wamdiff.diffusion.grids import Grids

    grids = Grids.build([list(range(10))])
    x0 = torch.tensor([[4]])
    near, far = torch.full((1, 1, 12), -5.0), torch.full((1, 1, 12), -5.0)
    near[0, 0, 5], far[0, 0, 9] = 5.0, 5.0  # confident one grid step off, or five
    t, masked = torch.ones(1, 1), torch.ones(1, 1, dtype=torch.bool)
    loss = lambda lg, s: masked_diffusion_loss(lg, x0, masked, t, grids=grids, sigma=s)  # noqa: E731
    assert loss(near, 0.0) == pytest.approx(loss(far, 0.0).item())  # one-hot: every miss costs the same
    assert loss(near, 1.0) < loss(far, 1.0) - 2  # Gaussian targets: the near miss is cheaper
    assert loss(near, 1e-3) == pytest.approx(loss(near, 0.0).item(), rel=1e-4)  # a narrow Gaussian is one-hot
