"""The models of a recipe: the student (init checkpoint or preset, converted at its block size) and the frozen
teacher. Shared by the trainer and the offline overlap measurement."""

from __future__ import annotations

from pathlib import Path

from wamdiff.models.tokens import MASK, token_id
from wamdiff.training.config import Recipe


def load_student(recipe: Recipe):
    """(model, tokenizer, image processor) from the recipe's init checkpoint or preset, at its block size."""
    from wamdiff.models.build import build_image_processor, build_model, load_image_processor, load_model
    from wamdiff.models.convert import to_diffusion
    from wamdiff.models.tokenizer import build_tokenizer

    if recipe.model.init:
        if not Path(recipe.model.init).exists():
            raise ValueError(f"recipe {recipe.name!r} field model.init: checkpoint {recipe.model.init} does not exist")
        model, tokenizer = load_model(recipe.model.init)
        image_processor = load_image_processor(recipe.model.init)
    else:
        tokenizer = build_tokenizer()
        model = build_model(recipe.model.preset, tokenizer, vision=recipe.model.vision, seed=recipe.seed)
        image_processor = build_image_processor()
    if recipe.kind.diffusion:
        model = to_diffusion(model, recipe.block_size)
    return model, tokenizer, image_processor


def load_teacher(recipe: Recipe, tokenizer):
    from wamdiff.models.build import load_model
    from wamdiff.models.convert import to_diffusion

    path = recipe.teacher.path
    if not Path(path).exists():
        raise ValueError(f"recipe {recipe.name!r} field teacher.path: checkpoint {path} does not exist")
    teacher, t_tok = load_model(path)
    if token_id(t_tok, MASK) != token_id(tokenizer, MASK) or len(t_tok) != len(tokenizer):
        raise ValueError(f"recipe {recipe.name!r}: teacher {path} uses a different tokenizer than the student")
    if recipe.teacher.kind == "diffusion":
        teacher = to_diffusion(teacher, recipe.teacher_block_size)
    return teacher.eval().requires_grad_(False)
