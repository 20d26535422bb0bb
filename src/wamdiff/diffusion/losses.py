"""Losses of block diffusion training and distillation (docs/concepts/loss.md).

All are computed at selected (masked) positions only, normalised per sample by its answer length (the
number of real answer tokens), then averaged over samples. Only the selected rows are gathered, so the
full [N, A, V] logits are never upcast to float32 at once.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from wamdiff.diffusion.grids import Grids


def _answer_lengths(answer_mask, like):
    if answer_mask is None:
        return torch.full((like.shape[0],), like.shape[1], dtype=torch.float32, device=like.device)
    return answer_mask.sum(1).float().clamp_min(1.0)


def _per_sample_mean(values, rows, n, lengths):
    """Sum row values into their samples, divide by answer length, mean over samples."""
    sums = torch.zeros(n, dtype=values.dtype, device=values.device).index_add(0, rows, values)
    return (sums / lengths).mean()


def masked_diffusion_loss(logits, x0, masked, t, answer_mask=None, *, grids: Grids | None = None, sigma: float = 0.0):
    """Masked-diffusion ELBO: CE at masked xt positions against the clean token of the SAME column (the training
    forward gives logits per column whatever the model's prediction), weight 1/t,
    summed per sample / answer length, mean over samples. logits [N, A, V]; x0, masked, t, answer_mask [N, A].
    A sample with no masked token contributes 0 (no division by the mask count). With `grids` and `sigma` > 0 a
    target on a value grid is a Gaussian over its neighbours (`grid_cross_entropy`)."""
    rows, cols = masked.nonzero(as_tuple=True)
    if grids is not None and sigma > 0:
        ce = grid_cross_entropy(logits[rows, cols].float(), x0[rows, cols], grids, sigma)
    else:
        ce = F.cross_entropy(logits[rows, cols].float(), x0[rows, cols], reduction="none")
    return _per_sample_mean(ce / t[rows, cols].float(), rows, logits.shape[0], _answer_lengths(answer_mask, x0))


def grid_cross_entropy(logits, target, grids: Grids, sigma: float):
    """Per-row CE [M] of logits [M, V] against `target` [M]; a target on a value grid (a `delta` displacement, a bin)
    becomes a Gaussian over that grid, `sigma` grid steps wide (HL-Gauss, "Stop Regressing", Farebrother et al.
    2024): one-hot CE calls the neighbouring value as wrong as a far one, the Gaussian teaches that values are
    ordered and puts the model's mass where the decoder's ordinal read-out reads it. Other targets stay one-hot."""
    logp = logits.log_softmax(-1)
    hard = -logp.gather(-1, target[:, None]).squeeze(-1)
    axis, index = grids.locate(target)
    on = axis >= 0
    if not bool(on.any()):
        return hard
    ids, valid = grids.ids[axis.clamp_min(0)], grids.valid[axis.clamp_min(0)]  # [M, K]
    offset = torch.arange(ids.shape[1], device=ids.device)[None] - index[:, None]
    q = torch.exp(-0.5 * (offset / sigma) ** 2) * valid
    q = q / q.sum(-1, keepdim=True)
    soft = -(q * logp.gather(-1, ids)).sum(-1)
    return torch.where(on, soft, hard)


def _jsd_rows(student, teacher, beta: float, temperature: float):
    """Generalised JSD per row: beta*KL(P||M) + (1-beta)*KL(Q||M), M = beta*P + (1-beta)*Q, P teacher, Q student."""
    log_p = F.log_softmax(teacher.float() / temperature, dim=-1)
    log_q = F.log_softmax(student.float() / temperature, dim=-1)
    log_m = torch.logaddexp(log_p + math.log(beta), log_q + math.log(1 - beta))
    kl_p = (log_p.exp() * (log_p - log_m)).sum(-1)
    kl_q = (log_q.exp() * (log_q - log_m)).sum(-1)
    return beta * kl_p + (1 - beta) * kl_q


def symmetric_jsd(student_logits, teacher_logits, mask, answer_mask=None, *, beta: float = 0.5,
                  temperature: float = 1.0, chunk_size: int = 256):
    """Symmetric JSD (x T^2) over the full vocabulary at `mask` positions [N, A]; per sample / answer length,
    then batch mean. Rows are processed `chunk_size` at a time (recomputed in backward), so long answers
    never hold float32 full-vocab copies of every position. Teacher gradients are not blocked: detach it."""
    if not 0.0 < beta < 1.0:
        raise ValueError(f"beta must be in (0, 1), got {beta}")
    if temperature <= 0:
        raise ValueError(f"temperature must be > 0, got {temperature}")
    rows, cols = mask.nonzero(as_tuple=True)
    s, t = student_logits[rows, cols], teacher_logits[rows, cols]
    parts = []
    for i in range(0, max(len(rows), 1), chunk_size):
        args = (s[i:i + chunk_size], t[i:i + chunk_size], beta, temperature)
        grad = torch.is_grad_enabled() and (s.requires_grad or t.requires_grad)
        parts.append(checkpoint(_jsd_rows, *args, use_reentrant=False) if grad else _jsd_rows(*args))
    jsd = torch.cat(parts) * temperature**2
    return _per_sample_mean(jsd, rows, student_logits.shape[0], _answer_lengths(answer_mask, mask))


@torch.no_grad()
def topk_overlap(a_logits, b_logits, mask, k: int = 5):
    """Mean over `mask` positions of |topk(a) ∩ topk(b)| / k (the paper's teacher–student top-5 overlap).
    NaN when mask selects nothing."""
    ia, ib = a_logits[mask].topk(k, dim=-1).indices, b_logits[mask].topk(k, dim=-1).indices
    return (ia[:, :, None] == ib[:, None, :]).any(-1).float().sum(-1).div(k).mean()
