"""One model from several fine-tunes of the same start: the uniform average of their weights (a "model soup").

`average_weights(paths)` loads each checkpoint and returns the first one's model with every floating-point
parameter and buffer replaced by the mean over all of them (accumulated in float64). The checkpoints must share
the architecture (same tensor names and shapes) and the decoding settings the student is read with (block size,
answer grid); anything else is one error naming the first checkpoint that differs.

Why: two runs of the level-2 stage from one `block32` that differ only in their seed average to a student that
drives better than either on states neither trained much (docs/PARITY.md, stop 32: PDMS +0.2, L2@4s -0.03 m over
4,800 scenes of six splits, against the mean of the two). Fine-tunes of one start stay in one basin, so their
mean is a model of its own, not a blur (Wortsman et al. 2022, "Model soups").
"""

from __future__ import annotations

from pathlib import Path

import torch

from wamdiff.models.recorded import recorded_diffusion

# config fields the averaged checkpoints must agree on besides their tensors: what the model is, how it decodes
# (block size, mask token), what its answers mean and what its camera sees
AGREEING_CONFIG = ("model_type", "diffusion", "wamdiff_answer_format", "wamdiff_camera")


def _recorded(config: dict, field: str):
    return recorded_diffusion(config) if field == "diffusion" else config.get(field)


@torch.no_grad()
def average_weights(paths: list[str | Path]):
    """(model, tokenizer) of the first checkpoint in `paths` with the mean of all their floating-point weights."""
    from wamdiff.models import load_model

    if len(paths) < 2:
        raise ValueError(f"averaging needs at least two checkpoints, got {len(paths)}")
    model, tokenizer = load_model(paths[0])
    state = model.state_dict()
    total = {k: v.double() for k, v in state.items() if v.is_floating_point()}
    first = model.config.to_dict()
    for path in paths[1:]:
        other, _ = load_model(path)
        theirs = other.state_dict()
        if theirs.keys() != state.keys() or any(theirs[k].shape != state[k].shape for k in state):
            raise ValueError(f"{path}: its weights do not match {paths[0]}'s (other tensor names or shapes); "
                             "average only fine-tunes of one model")
        cfg = other.config.to_dict()
        for field in AGREEING_CONFIG:
            if _recorded(cfg, field) != _recorded(first, field):
                raise ValueError(f"{path}: config field {field} is {cfg.get(field)!r}, {paths[0]} has "
                                 f"{first.get(field)!r}; average only checkpoints decoded alike")
        for k in total:
            total[k] += theirs[k].double()
    model.load_state_dict({k: (total[k] / len(paths)).to(v.dtype) if k in total else v for k, v in state.items()})
    return model, tokenizer
