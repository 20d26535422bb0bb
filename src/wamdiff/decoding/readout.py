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
    positions = torch.as_tensor(positions, device=logits.device).clamp_max(len(table.position_axis) - 1)
    axis = table.position_axis[positions].expand(pred.shape)
    ids = table.grids.ids[axis.clamp_min(0)]  # [..., K]
    valid = table.grids.valid[axis.clamp_min(0)]
    p = torch.exp(logits.gather(-1, ids) - lse[..., None]).masked_fill(~valid, 0.0)
    mode = p.argmax(-1, keepdim=True)
    grid = torch.arange(ids.shape[-1], device=ids.device)
    near = ((grid - mode).abs() <= window) & valid
    mass = (p * near).sum(-1)
    mean = (p * near * grid).sum(-1) / mass.clamp_min(1e-30)
    value = mean.round().long().clamp(0, ids.shape[-1] - 1)[..., None]
    use = (axis >= 0) & (ids.gather(-1, mode).squeeze(-1) == pred)
    return torch.where(use, mass, conf), torch.where(use, ids.gather(-1, value).squeeze(-1), pred)
