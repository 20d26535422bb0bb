"""The models of a recipe: the student (init checkpoint or preset, converted at its block size) and the frozen
teacher. Shared by the trainer and the offline overlap measurement."""

from __future__ import annotations

from pathlib import Path

import torch

from wamdiff.models.tokens import MASK, token_id
from wamdiff.training.config import Recipe

WEIGHT_DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def load_student(recipe: Recipe):
    """(model, tokenizer, image processor) from the recipe's init checkpoint or preset, at its block size, with
    weights in `model.dtype`; the image processor is the model's own geometry (`models.image_processor_for`)."""
    from wamdiff.models.build import build_model, load_model
    from wamdiff.models.convert import to_diffusion
    from wamdiff.models.grow import grow_depth
    from wamdiff.models.image_geometry import image_processor_for
    from wamdiff.models.tokenizer import build_tokenizer

    if recipe.model.init:
        if not Path(recipe.model.init).exists():
            raise ValueError(f"recipe {recipe.name!r} field model.init: checkpoint {recipe.model.init} does not exist")
        model, tokenizer = load_model(recipe.model.init, dtype=WEIGHT_DTYPES[recipe.model.dtype])
        grow_depth(model, recipe.model.grow)
    else:
        tokenizer = build_tokenizer()
        model = build_model(recipe.model.preset, tokenizer, vision=recipe.model.vision, seed=recipe.seed)
        model.to(WEIGHT_DTYPES[recipe.model.dtype])
    if recipe.kind.diffusion:
        model = to_diffusion(model, recipe.block_size, prediction=recipe.diffusion.prediction)
    return model, tokenizer, image_processor_for(model)


def load_teacher(recipe: Recipe, tokenizer):
    from wamdiff.models.build import load_model
    from wamdiff.models.convert import to_diffusion

    path = recipe.teacher.path
    if not Path(path).exists():
        raise ValueError(f"recipe {recipe.name!r} field teacher.path: checkpoint {path} does not exist")
    from wamdiff.models.precision import needs_fp32_compute, upcast_frozen_weights

    teacher, t_tok = load_model(path, dtype=WEIGHT_DTYPES[recipe.model.dtype])
    if token_id(t_tok, MASK) != token_id(tokenizer, MASK) or len(t_tok) != len(tokenizer):
        raise ValueError(f"recipe {recipe.name!r}: teacher {path} uses a different tokenizer than the student")
    if recipe.teacher.kind == "diffusion":
        teacher = to_diffusion(teacher, recipe.teacher_block_size)
    teacher.eval().requires_grad_(False)
    if recipe.model.dtype == "bf16" and needs_fp32_compute("cuda" if torch.cuda.is_available() else "cpu"):
        upcast_frozen_weights(teacher)  # frozen bf16 weights compute in fp32 where bf16 is only emulated
    return teacher
