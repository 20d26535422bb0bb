"""Reading a token and its confidence out of a position's logits (AR steps and block steps alike).

Plain read-out: the most likely token, confidence = its probability.

Ordinal read-out (`DecodeConfig.ordinal_window` w > 0), for positions whose tokens are values on a uniform grid
(the `delta` and `bins` answer formats: one token per coordinate, layout "tokens": `decoding.answer.ordinal`). Such a
position's distribution spreads over neighbouring grid values: a model sure of a displacement to +-0.1 m still
gives its single most likely token 0.3-0.5, so a top-1 threshold waits for confidence that never comes, and the
argmax of positions decided in parallel jitters by a grid step or two (0.1 m per 0.5 s is 0.4 m/s^2 of
acceleration). Here the token is the grid value nearest the probability-weighted mean over the window of w grid
steps either side of the most likely value, and the confidence is the probability of that window: "the value is
within w steps of this". The mean is the L2-optimal estimate of a coordinate, and since a delta waypoint is a sum
of displacements, the means of displacements decided in parallel add up to the mean of the waypoint, without the
joint decision an argmax would need. The window keeps a two-mode distribution (keep lane / change lane) from being
averaged into a value between the modes. w = 0 is the plain read-out.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wamdiff.diffusion.grids import Grids


@dataclass(frozen=True)
class OrdinalTable:
    """The grids (`diffusion.grids.Grids`) and each answer position's grid (`position_axis[i]`, -1: none)."""

    grids: Grids
    position_axis: torch.LongTensor  # [n_positions]

    @classmethod
    def build(cls, axes: list[list[int]], position_axis: list[int], n_positions: int, device=None) -> "OrdinalTable":
        pos = torch.full((n_positions,), -1, dtype=torch.long)
        m = min(n_positions, len(position_axis))
        pos[:m] = torch.tensor(position_axis[:m], dtype=torch.long)
        return cls(Grids.build(axes, device), pos.to(device))


def read_out(logits: torch.Tensor, positions: torch.Tensor | int | None = None, *, window: int = 0,
             table: OrdinalTable | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(confidence, token) per row of `logits` [..., V] (fp32 probabilities, no full softmax kept).

    `positions` (broadcastable to logits.shape[:-1]): each row's answer position, which picks its grid in `table`;
    rows on no grid, or whose most likely token is not on their grid (no grammar), get the plain read-out."""
    logits = logits.float()
    lse = torch.logsumexp(logits, -1)
    top, pred = logits.max(-1)
    conf = torch.exp(top - lse)
    if window <= 0 or table is None or positions is None:
        return conf, pred
    axis, p = grid_probs(logits, positions, table, lse)
    ids = table.grids.ids[axis.clamp_min(0)]  # [..., K]
    mode = p.argmax(-1, keepdim=True)
    mass, value = window_mean(p, mode, window)
    use = (axis >= 0) & (ids.gather(-1, mode).squeeze(-1) == pred)
    return torch.where(use, mass, conf), torch.where(use, ids.gather(-1, value[..., None]).squeeze(-1), pred)


def grid_probs(logits: torch.Tensor, positions, table: OrdinalTable, lse: torch.Tensor | None = None):
    """(axis [...], p [..., K]): each row's grid (-1: none) and its probabilities over that grid's values in value
    order (0 at padding; of a row on no grid, those of grid 0, to be ignored)."""
    logits = logits.float()
    lse = torch.logsumexp(logits, -1) if lse is None else lse
    positions = torch.as_tensor(positions, device=logits.device).clamp_max(len(table.position_axis) - 1)
    axis = table.position_axis[positions].expand(logits.shape[:-1])
    ids = table.grids.ids[axis.clamp_min(0)]
    valid = table.grids.valid[axis.clamp_min(0)]
    return axis, torch.exp(logits.gather(-1, ids) - lse[..., None]).masked_fill(~valid, 0.0)


def window_mean(p: torch.Tensor, centre: torch.Tensor, window: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(mass, grid index): the probability within `window` steps of `centre` [..., 1] and the index nearest the
    probability-weighted mean there (window 0: the centre itself)."""
    grid = torch.arange(p.shape[-1], device=p.device)
    near = (grid - centre).abs() <= window
    mass = (p * near).sum(-1)
    mean = (p * near * grid).sum(-1) / mass.clamp_min(1e-30)
    return mass, mean.round().long().clamp(0, p.shape[-1] - 1)


def smooth_path(p: torch.Tensor, weight: float, candidates: int | None = None) -> torch.Tensor:
    """The grid indices [N, L] of L consecutive values of one axis (a delta answer's x displacements, say) read
    jointly: the path maximising sum_k log p[:, k, i_k] - weight * sum_k (i_k - i_{k-1})^2, grid steps squared
    (Viterbi). p [N, L, K]: each position's probabilities over the grid. weight 0 = each position's own mode.

    `candidates` c: the path runs only through values that some position of the row has among its c most likely
    (at most L*c values instead of K): the search costs (L*c)^2 per position instead of K^2, and with c >= K it is
    the exact search. A value no position ranks that high is not worth its log-probability on any path."""
    logp = p.clamp_min(1e-30).log()
    n, length, k = logp.shape
    if candidates is not None and candidates < k:
        values = logp.topk(candidates, -1).indices.reshape(n, length * candidates)  # [N, M] grid indices (repeats harmless)
        logp = logp.gather(2, values[:, None, :].expand(n, length, -1))
    else:
        values = torch.arange(k, device=p.device).expand(n, k)
    step = values.to(logp.dtype)
    cost = weight * (step[:, :, None] - step[:, None, :]) ** 2  # [N, from, to]
    score, back = logp[:, 0], []
    for i in range(1, length):
        score, arg = (score[:, :, None] - cost).max(1)
        score = score + logp[:, i]
        back.append(arg)
    path = [score.argmax(-1)]
    for arg in reversed(back):
        path.append(arg.gather(1, path[-1][:, None]).squeeze(1))
    return values.gather(1, torch.stack(path[::-1], 1))
