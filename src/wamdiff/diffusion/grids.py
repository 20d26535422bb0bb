"""Value grids in the vocabulary: the answer formats that spend one token per coordinate value (`delta`, `bins`)
list each grid's tokens in value order, so neighbouring tokens are neighbouring values. Training's ordinal targets
(`losses.grid_cross_entropy`) and decoding's ordinal read-out (`decoding.readout`) both read them from here."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class Grids:
    """`ids[a]`: the token ids of grid a in value order, padded to the longest grid (`valid` False at padding)."""

    ids: torch.LongTensor  # [n_axes, K]
    valid: torch.BoolTensor  # [n_axes, K]

    @classmethod
    def build(cls, axes: list[list[int]], device=None) -> "Grids":
        if not axes:
            raise ValueError("Grids.build: no grid given")
        k = max(len(a) for a in axes)
        ids = torch.zeros(len(axes), k, dtype=torch.long)
        valid = torch.zeros(len(axes), k, dtype=torch.bool)
        for a, grid in enumerate(axes):
            ids[a, : len(grid)] = torch.tensor(grid, dtype=torch.long)
            valid[a, : len(grid)] = True
        return cls(ids.to(device), valid.to(device))

    def locate(self, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(grid, index on it) of each token id; grid -1 for a token on no grid."""
        size = max(int(tokens.max()) + 1 if tokens.numel() else 1, int(self.ids.max()) + 1)
        axis = torch.full((size,), -1, dtype=torch.long, device=self.ids.device)
        index = torch.zeros(size, dtype=torch.long, device=self.ids.device)
        grid_of = torch.arange(len(self.ids), device=self.ids.device)[:, None].expand_as(self.ids)
        slot = torch.arange(self.ids.shape[1], device=self.ids.device)[None].expand_as(self.ids)
        axis[self.ids[self.valid]] = grid_of[self.valid]
        index[self.ids[self.valid]] = slot[self.valid]
        return axis[tokens], index[tokens]
