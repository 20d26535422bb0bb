"""Forward (noising) process of block-causal masked diffusion (docs/concepts/loss.md, "Noising").

One mask rate t per answer block, stratified over the n blocks of a sample (u ~ U[0,1), t_i = (u + i)/n,
shuffled over blocks) and clipped to >= min_rate (the official u/n can reach 0.001/n, so 1/t ~ 3000);
each real answer token is replaced by the mask token independently with its block's t. A block can draw
zero masks: the loss normalises by answer length, never by the mask count.
"""

from __future__ import annotations

import torch

from wamdiff.diffusion.masks import block_ids


def sample_block_rates(n_samples: int, n_blocks: int, *, min_rate: float = 0.05, generator=None, device=None):
    """Stratified per-block mask rates [n_samples, n_blocks] in [min_rate, 1)."""
    if not 0.0 < min_rate <= 1.0:
        raise ValueError(f"min_rate must be in (0, 1], got {min_rate}")
    u = torch.rand(n_samples, 1, generator=generator, device=device)
    t = (u + torch.arange(n_blocks, device=device)) / n_blocks
    order = torch.rand(n_samples, n_blocks, generator=generator, device=device).argsort(dim=1)
    return t.gather(1, order).clamp_min(min_rate)


def noise_answers(x0, block_size: int, mask_token_id: int, *, answer_mask=None, min_rate: float = 0.05, generator=None):
    """Mask x0 [N, A] block-wise -> (xt [N, A], t [N, A] = each token's block rate). Only answer_mask tokens
    are ever masked (all columns when None); masked positions are exactly ``xt == mask_token_id``."""
    n, a = x0.shape
    blk = block_ids(a, block_size, x0.device)
    t = sample_block_rates(n, int(blk[-1]) + 1, min_rate=min_rate, generator=generator, device=x0.device)[:, blk]
    masked = torch.rand(n, a, generator=generator, device=x0.device) < t
    if answer_mask is not None:
        masked &= answer_mask.bool()
    return x0.masked_fill(masked, mask_token_id), t


def complementary_copy(x0, xt, t, mask_token_id: int, *, answer_mask=None, min_rate: float = 0.05):
    """The copy that masks exactly the real answer tokens `xt` left visible; its rate is 1 - t (clipped)."""
    masked = xt != mask_token_id
    if answer_mask is not None:
        masked &= answer_mask.bool()
    return x0.masked_fill(masked, mask_token_id), (1.0 - t).clamp_min(min_rate)

