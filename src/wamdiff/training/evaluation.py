"""In-training evaluation: validation loss and token accuracy, teacher-student top-5 overlap, QA exact match.

Accuracies count the answer's content positions only (up to and including <|im_end|>): the PAD tail is
trained but trivially predictable and would inflate them. Validation noise uses a fixed generator so the
numbers of successive evaluations (and of successive stages) are comparable.
"""

from __future__ import annotations

import torch

from wamdiff.training.data import Example, batches
from wamdiff.training.objectives import ArSft, Distill, Objective, _inputs_for, ar_loss, build_objective, model_is_vision

VAL_SEED_SALT = 424_242


def content_mask(batch) -> torch.Tensor:
    """[N, A] True at positions before the end of each sample's own answer (its <|im_end|> included)."""
    lengths = torch.tensor([e.answer_ids.numel() for e in batch.examples])
    return torch.arange(batch.x0.shape[1])[None, :] < lengths[:, None]


@torch.no_grad()
def validation_metrics(model, objective: Objective, examples: list[Example], *, batch_size: int, pad_id: int, seed: int,
                       device=None) -> dict:
    from wamdiff.diffusion.forward import ar_forward
    from wamdiff.diffusion.losses import masked_diffusion_loss, symmetric_jsd, topk_overlap

    sums: dict[str, float] = {}
    counts: dict[str, float] = {}

    def add(name: str, value: float, weight: float) -> None:
        sums[name] = sums.get(name, 0.0) + float(value) * weight
        counts[name] = counts.get(name, 0.0) + weight

    for i, batch in enumerate(batches(examples, batch_size, pad_id=pad_id, block_multiple=objective.block_multiple)):
        n = len(batch)
        content = content_mask(batch)
        if device is not None:
            batch, content = batch.to(device), content.to(device)
        if isinstance(objective, ArSft):
            logits = ar_forward(model, answer=batch.x0, **_inputs_for(model, batch))
            add("val_loss", ar_loss(logits, batch.x0, batch.answer_mask), n)
            hit = (logits.argmax(-1) == batch.x0) & content
            add("val_ar_token_acc", hit.sum() / content.sum().clamp_min(1), float(content.sum()))
            continue
        gen = torch.Generator().manual_seed(seed * 1_000_003 + VAL_SEED_SALT + i)
        inputs = objective.noise(batch.to("cpu"), gen).to(batch.x0.device)  # noise drawn on CPU: same on any device
        masked = objective.masked(inputs)
        logits = objective.student_logits(model, inputs)
        add("val_loss", masked_diffusion_loss(logits, batch.x0, masked, inputs.t, batch.answer_mask), n)
        scored = masked & content
        hit = (logits.argmax(-1) == batch.x0) & scored
        add("val_masked_acc", hit.sum() / scored.sum().clamp_min(1), float(scored.sum()))
        if isinstance(objective, Distill):
            t_logits = objective.teacher_logits(inputs)
            V = min(logits.shape[-1], t_logits.shape[-1])
            s, t = logits[..., :V], t_logits[..., :V]
            cfg = objective.recipe.teacher
            add("val_kd_loss", symmetric_jsd(s, t, masked, batch.answer_mask, beta=cfg.beta, temperature=cfg.temperature), n)
            if scored.any():
                add("val_top5_overlap", topk_overlap(s, t, scored, k=5), float(scored.sum()))
            t_hit = (t.argmax(-1) == batch.x0) & scored
            add("val_teacher_masked_acc", t_hit.sum() / scored.sum().clamp_min(1), float(scored.sum()))
    return {k: sums[k] / counts[k] for k in sums if counts[k] > 0}


def normalise_answer(text: str) -> str:
    return " ".join(text.strip().lower().split())


@torch.no_grad()
def qa_exact_match(model, tokenizer, examples: list[Example], recipe) -> dict:
    """Greedy decode of the QA prompts in the run's own mode (AR for ar_sft, block at B otherwise)."""
    from wamdiff.decoding import DecodeConfig, generate

    qa = recipe.eval.qa
    if recipe.kind.diffusion:
        cfg = DecodeConfig(mode="block", block_size=recipe.block_size, max_new_tokens=qa.max_new_tokens)
    else:
        cfg = DecodeConfig(mode="ar", max_new_tokens=qa.max_new_tokens)
    hits = finished = 0
    for i in range(0, len(examples), qa.batch_size):
        chunk = examples[i : i + qa.batch_size]
        gens = generate(model, tokenizer, [e.prompt for e in chunk], cfg)
        for e, g in zip(chunk, gens):
            hits += normalise_answer(g.text) == normalise_answer(e.answer_text)
            finished += bool(g.finished)
    n = max(1, len(examples))
    return {"qa_exact_match": hits / n, "qa_finished": finished / n}


@torch.no_grad()
def teacher_student_overlap(student: str, teacher: str, *, teacher_kind: str, data: str, samples: int = 64,
                            seed: int = 0, block_size: int | None = None, teacher_block_size: int | None = None,
                            batch_size: int = 8) -> dict:
    """Top-5 token overlap of a student with a teacher on held-out masked positions (the paper's ablation).

    The same student, data and noise (fixed seed) for either teacher kind, so the figures of a diffusion
    teacher and an AR teacher are directly comparable: `diffusion` scores the noisy x_t under its own block
    mask, `ar` scores the clean answer causally.
    """
    from wamdiff.models.recorded import recorded_diffusion
    from wamdiff.models.tokens import PAD, token_id
    from wamdiff.training.config import RecipeKind, load_recipe
    from wamdiff.training.data import load_examples
    from wamdiff.training.loading import load_student, load_teacher

    if block_size is None:  # the block size the student was trained at
        block_size = int(recorded_diffusion(student).get("block_size", 1))
    recipe = load_recipe({"name": f"overlap_{teacher_kind}", "kind": RecipeKind.DISTILL_MODEL.value, "seed": seed,
                          "model": {"init": str(student), "block_size": block_size},
                          "data": {"train": [str(data)], "val": str(data)},
                          "teacher": {"path": str(teacher), "kind": teacher_kind,
                                      "block_size": teacher_block_size or block_size}})
    model, tokenizer, image_processor = load_student(recipe)
    model.eval()
    objective = build_objective(recipe, tokenizer.mask_token_id, load_teacher(recipe, tokenizer))
    examples = load_examples(data, tokenizer, vision=model_is_vision(model), limit=samples, image_processor=image_processor)
    m = validation_metrics(model, objective, examples, batch_size=batch_size, pad_id=token_id(tokenizer, PAD), seed=seed)
    return {"teacher_kind": teacher_kind, "teacher": str(teacher), "student": str(student), "samples": len(examples),
            "top5_overlap": m.get("val_top5_overlap"), "student_masked_acc": m.get("val_masked_acc"),
            "teacher_masked_acc": m.get("val_teacher_masked_acc")}
