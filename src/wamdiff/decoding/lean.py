"""Lean steps: query rows whose outputs nobody reads skip the work that only feeds those outputs.

A decode forward has rows whose logits are used (the still-masked positions of a block) and rows that are run only
for their K/V (the prompt in a prefill, the clean half of a fused commit, the decoded positions of a block). The
K/V of every row are needed at every layer: under bidirectional attention inside a block, a decoded position's
K/V at layer l >= 1 depend on every token of the block, so they change whenever any block token does, and no
exact step can skip them. What an exact step can skip is what comes after the last layer's attention: that
layer's MLP, the final norm's output and the LM head of the rows without logits. `DecodeConfig.lean`:

- "off":        every queried row of a denoising step gets logits (the reference path);
- "head":       the LM head (and the confidence) only at the rows whose logits are used;
- "last_layer": also the last decoder layer's MLP only at those rows.

Convention: the rows with logits are the LAST `rows` query rows of the forward (the runner orders a step's
queries so). `install_tail(model)` gives the last layer's MLP an instance-level forward that runs the MLP on
those rows only and returns zeros for the others (their values reach nothing: only the last rows go to the LM
head, and their K/V were written before the MLP). It is a no-op while `rows` is None, changes no parameter or
state-dict key, and reads `rows` as a Python int, so a compiled step specialises on it like on its query count.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch.nn.functional as F

from wamdiff.names import LEAN_MODES  # noqa: F401  (re-exported: the modes this module implements)


class TailMLP:
    """The last decoder layer's MLP restricted to the last `rows` rows of its input (None: every row)."""

    def __init__(self, mlp):
        self.mlp = mlp  # its class forward runs the MLP (the instance attribute `forward` is this object)
        self.rows: int | None = None

    def full(self, x):
        return type(self.mlp).forward(self.mlp, x)

    def __call__(self, x):
        k, n = self.rows, x.shape[1]
        if k is None or k >= n:
            return self.full(x)
        if k == 0:
            return x.new_zeros(x.shape)
        return F.pad(self.full(x[:, n - k:]), (0, 0, n - k, 0))


def last_mlp(model):
    """The MLP module of the text decoder's last layer (Qwen3 and Qwen3-VL)."""
    inner = model.model.language_model if hasattr(model.model, "language_model") else model.model
    return inner.layers[-1].mlp


def install_tail(model) -> TailMLP:
    """The model's `TailMLP` (installed once, idempotent)."""
    mlp = last_mlp(model)
    tail = mlp.__dict__.get("forward")
    if not isinstance(tail, TailMLP):
        tail = mlp.forward = TailMLP(mlp)
    return tail


@contextmanager
def tail_rows(tail: TailMLP | None, rows: int):
    """Inside: the last layer's MLP runs on the last `rows` query rows only (no-op for `tail` None)."""
    if tail is None:
        yield
        return
    tail.rows = rows
    try:
        yield
    finally:
        tail.rows = None
