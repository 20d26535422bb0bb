"""Training-time forwards: block diffusion over [prefix | x0 | xt], and plain AR over [prefix | answer].

Batch convention (shared by both):
- prompt_ids / prompt_mask [N, P]: prompts LEFT-padded to a common width P (mask False at the padding);
- x0 / answer, answer_mask [N, A]: answers start at the same column for every sample and are right-padded.
  Answer tokens after ``<|im_end|>`` are PAD and ARE real tokens (answer_mask True): the model learns to fill
  the tail of the last block with PAD, which lets block decoding finish fast. answer_mask is False only at
  answer columns beyond the sample's own width (e.g. its answer rounded up to a multiple of B) in a batch
  padded to a wider A. Padding is folded into the attention mask; its logits are garbage and must be ignored.
"""

from __future__ import annotations

import torch

from wamdiff.diffusion.attention import install_attention, text_config
from wamdiff.diffusion.masks import (
    check_block_size, decode_position_ids, encode_mask, prefill_mask_dense, prefix_position_ids, training_mask,
    training_mask_dense, training_position_ids, uses_mrope,
)


def _check_length(model, position_ids: torch.Tensor) -> None:
    limit = text_config(model).max_position_embeddings
    longest = int(position_ids.max()) + 1 if position_ids.numel() else 0
    if longest > limit:
        raise ValueError(f"sequence needs {longest} positions, longer than the model's max_position_embeddings={limit}")


def _check_batch(prompt_ids, prompt_mask, answer, answer_mask) -> None:
    if answer is None or answer.ndim != 2 or answer.shape[1] == 0:
        raise ValueError(f"answer is missing: expected answer ids [N, A>0], got {None if answer is None else tuple(answer.shape)}")
    if prompt_ids.shape != prompt_mask.shape or answer.shape != answer_mask.shape or prompt_ids.shape[0] != answer.shape[0]:
        raise ValueError(
            f"shape mismatch: prompt_ids {tuple(prompt_ids.shape)}, prompt_mask {tuple(prompt_mask.shape)}, "
            f"answer {tuple(answer.shape)}, answer_mask {tuple(answer_mask.shape)}"
        )


def _run(model, ids, mask, pos, n_keep, pixel_values, image_grid_thw, mm_token_type_ids):
    """One HF forward with an explicit 4-D mask and explicit positions; logits of the last n_keep positions."""
    install_attention(model)
    kwargs = {}
    if uses_mrope(model):
        model.model.rope_deltas = None
        if mm_token_type_ids is None:
            mm_token_type_ids = (ids == model.config.image_token_id).long()
        else:  # extend the prompt's token types over the (text) answer columns
            pad = ids.shape[1] - mm_token_type_ids.shape[1]
            mm_token_type_ids = torch.nn.functional.pad(mm_token_type_ids.long(), (0, pad))
        kwargs = dict(pixel_values=pixel_values, image_grid_thw=image_grid_thw, mm_token_type_ids=mm_token_type_ids)
    elif pixel_values is not None:
        raise ValueError(f"{type(model).__name__} is text-only but pixel_values were given")
    out = model(input_ids=ids, attention_mask=mask, position_ids=pos, use_cache=False, logits_to_keep=n_keep, **kwargs)
    return out.logits


def diffusion_forward(
    model, *, prompt_ids, prompt_mask, x0, xt, answer_mask, block_size: int, pixel_values=None,
    image_grid_thw=None, mm_token_type_ids=None, attn: str = "sdpa", return_x0: bool = False,
):
    """Block-diffusion forward over [prefix | x0 | xt]; returns logits [N, A, V], logits[:, j] predicting the clean
    token at answer column j whatever the model's `prediction`: a "same" model's x_t row j, a "shifted" model's row
    before it (`_shift_to_columns`). Losses and distillation compare columns and need not know which. The teacher of
    block-wise distillation calls this with its own (smaller) block size on the same inputs.
    attn: mask encoding / kernel: "sdpa" (bool), "eager" (additive float), "flex" (BlockMask, inference only
    on CPU). return_x0=True also returns the x0-stream logits as the model gives them (at B=1 they equal the AR
    model's logits; for a shifted model at B=1 so do the returned x_t logits, taken from the clean rows).
    mm_token_type_ids: [N, P] for the prompt (derived from the image token when None).
    """
    check_block_size(block_size)
    _check_batch(prompt_ids, prompt_mask, x0, answer_mask)
    if xt.shape != x0.shape:
        raise ValueError(f"xt {tuple(xt.shape)} must have the shape of x0 {tuple(x0.shape)}")
    a = x0.shape[1]
    shifted = _predicts_shifted(model)
    pos = training_position_ids(
        model, prompt_ids, prompt_mask, a, image_grid_thw=image_grid_thw, mm_token_type_ids=mm_token_type_ids
    )
    _check_length(model, pos)
    if a <= block_size and not return_x0:
        # One block: x_t block 0 attends the prefix and itself only, so no query reads the clean stream; without it
        # the forward is a third shorter for a short answer (delta: 17 tokens) and the logits are the same.
        p = prompt_ids.shape[1]
        keep = torch.cat([torch.arange(p), torch.arange(p + a, p + 2 * a)]).to(prompt_ids.device)
        dense = training_mask_dense(prompt_mask, answer_mask, block_size)[:, keep][:, :, keep]
        mask = encode_mask(dense, attn, dtype=model.dtype)
        logits = _run(model, torch.cat([prompt_ids, xt], dim=1), mask, pos[..., keep], a + int(shifted), pixel_values,
                      image_grid_thw, mm_token_type_ids)
        return logits[:, :a] if shifted else logits  # shifted: [last prompt token | xt columns 0..a-2]
    mask = training_mask(prompt_mask, answer_mask, block_size, attn, dtype=model.dtype)
    ids = torch.cat([prompt_ids, x0, xt], dim=1)
    logits = _run(model, ids, mask, pos, 2 * a + int(shifted) if return_x0 or shifted else a, pixel_values,
                  image_grid_thw, mm_token_type_ids)
    xt_logits = _shift_to_columns(logits, a, block_size) if shifted else logits[:, -a:]
    return (xt_logits, logits[:, -2 * a:-a]) if return_x0 else xt_logits


def _predicts_shifted(model) -> bool:
    """The model's recorded `prediction` (`models.convert.DiffusionSettings`; read from its config here, since the
    diffusion layer sits below the models layer); a model without diffusion settings predicts at the same position."""
    return (getattr(model.config, "diffusion", None) or {}).get("prediction") == "shifted"


def _shift_to_columns(logits: torch.Tensor, a: int, block_size: int) -> torch.Tensor:
    """A shifted model's logits per answer column j, from the rows [last prompt token | x0 | xt] (2a + 1 rows): inside a
    block the x_t row before j; at a block's first column the clean row before it (the last prompt token for column
    0), which sees exactly the context a decode has when it starts that block (the prompt and the committed blocks)."""
    j = torch.arange(a, device=logits.device)
    first = j % block_size == 0
    row = torch.where(first, j, a + j)  # x0 row j-1 sits at index j (index 0 is the last prompt token); xt row j-1 at a+j
    return logits[:, row]


def ar_forward(
    model, *, prompt_ids, prompt_mask, answer, answer_mask, pixel_values=None, image_grid_thw=None,
    mm_token_type_ids=None, attn: str = "sdpa",
):
    """Causal forward over [prefix | answer]; returns logits [N, A, V] with logits[:, i] predicting answer[:, i]
    (taken from the position before it: the last prompt token predicts the first answer token).

    For AR SFT and AR-teacher distillation; positions are the same as the x0 stream of `diffusion_forward`.
    """
    _check_batch(prompt_ids, prompt_mask, answer, answer_mask)
    a = answer.shape[1]
    pos, next_pos = prefix_position_ids(
        model, prompt_ids, prompt_mask, image_grid_thw=image_grid_thw, mm_token_type_ids=mm_token_type_ids
    )
    pos = torch.cat([pos, decode_position_ids(next_pos, 0, a, mrope=pos.ndim == 3)], dim=-1)
    _check_length(model, pos)
    mask = encode_mask(prefill_mask_dense(torch.cat([prompt_mask, answer_mask], dim=1)), attn, dtype=model.dtype)
    ids = torch.cat([prompt_ids, answer], dim=1)
    return _run(model, ids, mask, pos, a + 1, pixel_values, image_grid_thw, mm_token_type_ids)[:, :-1]
