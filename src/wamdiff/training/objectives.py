"""The training objective of each recipe kind: what is noised, what is run, what is compared.

- `ar_sft`:        next-token cross-entropy on the answer (ar_forward), per-sample mean then batch mean.
- `block`:         masked-diffusion loss at block size B (CE at masked x_t positions against the column's token,
                   1/t weight) — the progressive block-size curriculum.
- `distill_block`: frozen diffusion teacher at `teacher_block_size` (default B/2) and student at B see the SAME
                   x_t, positions and pixels; symmetric JSD at masked positions (+ (1-kd_ratio) masked CE).
- `distill_model`: larger teacher -> smaller student, same loss; the teacher is a diffusion model (same x_t,
                   its own block size) or an AR model scoring the clean answer causally (its distribution at
                   answer position i vs the student's at masked position i); optional on-policy refresh.

An objective works in two phases so distributed runs stay identical to one process: `noise(batch, gen)` is
applied to the GLOBAL batch with a generator seeded by the step, then every process slices its rows
(`StepInputs.rows`) and calls `loss(model, inputs)`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
import torch.nn.functional as F

from wamdiff.training.config import RecipeKind
from wamdiff.training.data import Batch


@dataclass
class StepInputs:
    batch: Batch
    xt: torch.Tensor | None = None  # [N, A] noisy answer (diffusion kinds)
    t: torch.Tensor | None = None  # per-position (or per-block) mask rate, as the noiser returns it

    def __len__(self) -> int:
        return len(self.batch)

    def to(self, device) -> "StepInputs":
        mv = lambda x: None if x is None else x.to(device)  # noqa: E731
        return StepInputs(self.batch.to(device), mv(self.xt), mv(self.t))

    def rows(self, start: int, stop: int) -> "StepInputs":
        return StepInputs(
            self.batch.rows(start, stop),
            None if self.xt is None else self.xt[start:stop],
            None if self.t is None else self.t[start:stop],
        )


def model_is_vision(model) -> bool:
    return hasattr(model.config, "vision_config")


def _inputs_for(model, batch: Batch) -> dict:
    """Pixels go only to a vision model (a text-only teacher sees the same prompt ids without them)."""
    kw = batch.model_inputs()
    if not model_is_vision(model):
        kw.update(pixel_values=None, image_grid_thw=None, mm_token_type_ids=None)
    return kw


def ar_loss(logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Next-token CE, averaged per sample then over samples (logits[:, i] predicts targets[:, i])."""
    ce = F.cross_entropy(logits.float().transpose(1, 2), targets, reduction="none")
    valid = valid.float()
    return ((ce * valid).sum(1) / valid.sum(1).clamp_min(1)).mean()


class Objective:
    """Diffusion objectives share noising, complementary masking and the student forward; `loss` differs."""

    streams = 2  # answer copies in the forward layout (x0 and xt), for token counting

    def __init__(self, recipe, mask_token_id: int, grids=None):
        self.recipe = recipe
        self.block_size = recipe.block_size
        self.mask_token_id = mask_token_id
        self.teacher = None
        self.grids = grids  # the vocabulary's value grids, for `diffusion.ordinal_sigma` targets

    def masked_ce(self, logits, inputs: "StepInputs", masked: torch.Tensor | None = None) -> torch.Tensor:
        """The masked-diffusion CE of the student's logits at `masked` (default: every masked answer position;
        ordinal targets on value grids when configured)."""
        from wamdiff.diffusion.losses import masked_diffusion_loss

        masked = self.masked(inputs) if masked is None else masked
        return masked_diffusion_loss(logits, inputs.batch.x0, masked, inputs.t, inputs.batch.answer_mask,
                                     grids=self.grids, sigma=self.recipe.diffusion.ordinal_sigma)

    @property
    def block_multiple(self) -> int:
        """Answers are padded to a multiple of this (every block size in play must divide the width)."""
        return self.block_size

    def noise(self, batch: Batch, gen: torch.Generator) -> StepInputs:
        from wamdiff.diffusion.noising import noise_answers

        xt, t = noise_answers(batch.x0, self.block_size, self.mask_token_id, answer_mask=batch.answer_mask,
                              min_rate=self.recipe.diffusion.min_rate, generator=gen)
        return StepInputs(batch, xt, t)

    def masked(self, inputs: StepInputs) -> torch.Tensor:
        """Positions the loss scores: masked in x_t and inside the sample's answer."""
        return (inputs.xt == self.mask_token_id) & inputs.batch.answer_mask

    @property
    def copies(self) -> int:
        """Rows per sample in a step: the noised one, its complementary copy, its fully masked copy."""
        d = self.recipe.diffusion
        return 1 + int(d.complementary) + int(d.full_mask_copy)

    def with_copies(self, inputs: StepInputs) -> StepInputs:
        """Append the copy that masks exactly the positions the first copy left visible (`diffusion.complementary`)
        and the copy with every answer token masked, rate 1 (`diffusion.full_mask_copy`: the state a decode's first
        step sees, which random per-block rates reach almost never)."""
        if self.copies == 1:
            return inputs
        from wamdiff.diffusion.noising import complementary_copy

        b, d = inputs.batch, self.recipe.diffusion
        xts, ts = [inputs.xt], [inputs.t]
        if d.complementary:
            xt2, t2 = complementary_copy(b.x0, inputs.xt, inputs.t, self.mask_token_id, answer_mask=b.answer_mask,
                                         min_rate=d.min_rate)
            xts.append(xt2)
            ts.append(t2)
        if d.full_mask_copy:
            xts.append(b.x0.masked_fill(b.answer_mask.bool(), self.mask_token_id))
            ts.append(torch.ones_like(inputs.t))
        return StepInputs(stacked(b, len(xts)), torch.cat(xts), torch.cat(ts))

    def student_logits(self, model, inputs: StepInputs) -> torch.Tensor:
        from wamdiff.diffusion.forward import diffusion_forward

        b = inputs.batch
        return diffusion_forward(model, x0=b.x0, xt=inputs.xt, block_size=self.block_size, **_inputs_for(model, b))

    def loss(self, model, inputs: StepInputs) -> tuple[torch.Tensor, dict]:
        raise NotImplementedError


def stacked(b: Batch, k: int) -> Batch:
    """The batch stacked k times on itself (rows 0..N-1, then again, ...), pixels included."""
    cat = lambda x: None if x is None else torch.cat([x] * k)  # noqa: E731
    return replace(
        b,
        prompt_ids=cat(b.prompt_ids),
        prompt_mask=cat(b.prompt_mask),
        x0=cat(b.x0),
        answer_mask=cat(b.answer_mask),
        pixel_values=cat(b.pixel_values),
        image_grid_thw=cat(b.image_grid_thw),
        mm_token_type_ids=cat(b.mm_token_type_ids),
        patches_per_sample=b.patches_per_sample * k,
        images_per_sample=b.images_per_sample * k,
        examples=b.examples * k,
    )


class ArSft(Objective):
    streams = 1

    def noise(self, batch: Batch, gen: torch.Generator) -> StepInputs:
        return StepInputs(batch)

    @property
    def copies(self) -> int:
        return 1

    def with_copies(self, inputs: StepInputs) -> StepInputs:
        return inputs

    def loss(self, model, inputs: StepInputs) -> tuple[torch.Tensor, dict]:
        from wamdiff.diffusion.forward import ar_forward

        b = inputs.batch
        logits = ar_forward(model, answer=b.x0, **_inputs_for(model, b))
        return ar_loss(logits, b.x0, b.answer_mask), {}


class BlockDiffusion(Objective):
    """Masked-diffusion cross-entropy at the masked x_t positions, 1/t weighted."""

    def loss(self, model, inputs: StepInputs) -> tuple[torch.Tensor, dict]:
        return self.masked_ce(self.student_logits(model, inputs), inputs), {}


class Distill(Objective):
    """Shared by distill_block and distill_model: frozen teacher, symmetric JSD at masked x_t positions."""

    def __init__(self, recipe, mask_token_id: int, teacher, grids=None):
        super().__init__(recipe, mask_token_id, grids)
        self.teacher = teacher.eval().requires_grad_(False)
        self.teacher_kind = recipe.teacher.kind
        self.teacher_block_size = recipe.teacher_block_size

    @property
    def block_multiple(self) -> int:
        return math.lcm(self.block_size, self.teacher_block_size if self.teacher_kind == "diffusion" else 1)

    @torch.no_grad()
    def teacher_logits(self, inputs: StepInputs) -> torch.Tensor:
        from wamdiff.diffusion.forward import ar_forward, diffusion_forward

        b = inputs.batch
        if self.teacher_kind == "ar":  # scores the clean answer causally: [:, i] predicts answer[:, i]
            return ar_forward(self.teacher, answer=b.x0, **_inputs_for(self.teacher, b))
        return diffusion_forward(self.teacher, x0=b.x0, xt=inputs.xt, block_size=self.teacher_block_size, **_inputs_for(self.teacher, b))

    def distilled(self, batch: Batch) -> torch.Tensor:
        """[N] bool: the rows whose source the teacher scores (`DataSource.distil`; the others learn from their
        labels alone)."""
        sources = self.recipe.data.train
        flags = [sources[e.source].distil if e.source < len(sources) else True for e in batch.examples]
        return torch.tensor(flags or [True] * len(batch), dtype=torch.bool, device=batch.x0.device)

    def loss(self, model, inputs: StepInputs) -> tuple[torch.Tensor, dict]:
        """Per sample: kd_ratio * JSD + (1 - kd_ratio) * masked CE for a distilled row, the masked CE alone for a
        row of a `distil: false` source (each term a per-sample mean over the whole batch, so the two kinds of rows
        add up as one mean)."""
        from wamdiff.diffusion.losses import symmetric_jsd

        cfg = self.recipe.teacher
        s_logits = self.student_logits(model, inputs)
        t_logits = self.teacher_logits(inputs)
        V = min(s_logits.shape[-1], t_logits.shape[-1])  # embeddings may be padded differently
        masked = self.masked(inputs)
        rows = self.distilled(inputs.batch)[:, None]
        kd = symmetric_jsd(s_logits[..., :V], t_logits[..., :V], masked & rows, inputs.batch.answer_mask,
                           beta=cfg.beta, temperature=cfg.temperature)
        logs = {"kd_loss": kd.detach()}
        if inputs.batch.on_policy and not cfg.onpolicy_ce:
            return kd, logs  # the student's own decode is no label to learn from: the teacher alone
        own = None if bool(rows.all()) else self.masked_ce(s_logits, inputs, masked & ~rows)  # labels, full weight
        if cfg.kd_ratio >= 1.0:
            loss = kd
        else:
            ce = self.masked_ce(s_logits, inputs, masked & rows)
            logs["ce_loss"] = ce.detach()
            loss = cfg.kd_ratio * kd + (1.0 - cfg.kd_ratio) * ce
        return (loss, logs) if own is None else (loss + own, {**logs, "own_label_loss": own.detach()})


OBJECTIVES = {  # the registry: one line per recipe kind
    RecipeKind.AR_SFT: ArSft,
    RecipeKind.BLOCK: BlockDiffusion,
    RecipeKind.DISTILL_BLOCK: Distill,
    RecipeKind.DISTILL_MODEL: Distill,
}


def build_objective(recipe, mask_token_id: int, teacher=None, grids=None) -> Objective:
    """The recipe kind's objective; `grids` (`diffusion.grids.Grids` of the vocabulary) for ordinal targets."""
    if recipe.kind.diffusion and recipe.diffusion.ordinal_sigma > 0 and grids is None:
        raise ValueError(f"recipe {recipe.name!r} field diffusion.ordinal_sigma: the tokenizer has no value grid "
                         "(delta or bin tokens)")
    if recipe.kind.distills:
        if teacher is None:
            raise ValueError(f"recipe {recipe.name!r}: {recipe.kind} needs a teacher model")
        return Distill(recipe, mask_token_id, teacher, grids)
    return OBJECTIVES[recipe.kind](recipe, mask_token_id, grids)
