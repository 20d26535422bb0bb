"""Does a diffusion student read the answer tokens it can see?

For every real answer position j of a sample (the answer up to and including its end-of-answer token; the PAD tail
is left out) the model's prediction of the gold token at j twice, in the student's own training forward at its
block size: with only j masked (every other answer token visible, the state late in a decode) and with every answer
token masked (a decode's first step). Earlier blocks are clean in both (as in a decode), so at B=1 the two are the
same. `gain` = log p(gold | one masked) - log p(gold | all masked), in nats: what the visible tokens of its block add.

A student whose gain is near 0 predicts each position from the prompt alone; where two answers share a prefix, a
block decoded in parallel then takes one position from each ("keep lane, keepcelerate"). For an AR model, "one
masked" is its next-token prediction from the gold tokens before j (teacher forcing), the reference a student's
accuracy can be held against; it has no all-masked state. Per task (planning, and each QA kind): positions,
accuracy one / all masked, the mean gain over samples with its 95 % interval.
"""

from __future__ import annotations

from collections import defaultdict

from .intervals import mean_ci95
from .qa_retention import read_questions


def sample_rows(model, batch, block_size: int, mask_token_id: int, end_id: int) -> list[dict]:
    """One row per real answer position of the single-sample `batch` (`training.data.collate` of one example)."""
    import torch

    from wamdiff.diffusion.forward import diffusion_forward
    from wamdiff.training.objectives import stacked

    x0 = batch.x0[0]
    length = _answer_length(batch, end_id)
    if length < 2:
        return []  # one token: nothing to see but itself
    real = batch.answer_mask[0].bool()
    xt = x0.repeat(length + 1, 1)
    xt[torch.arange(length), torch.arange(length)] = mask_token_id  # row j: position j masked
    xt[length, real] = mask_token_id  # last row: every answer token masked
    rows = stacked(batch, length + 1)
    with torch.inference_mode():
        logits = diffusion_forward(model, x0=rows.x0, xt=xt, block_size=block_size, **rows.model_inputs())
    logp = logits[:, :length].float().log_softmax(-1)  # [length + 1, length, V]
    gold = x0[:length]
    pos = torch.arange(length)
    one, every = logp[pos, pos], logp[length, pos]  # [length, V]
    return [{"position": j, "gold": int(gold[j]), "logp_one": float(one[j, gold[j]]),
             "logp_all": float(every[j, gold[j]]), "hit_one": int(one[j].argmax() == gold[j]),
             "hit_all": int(every[j].argmax() == gold[j])} for j in range(length)]


def ar_rows(model, batch, end_id: int) -> list[dict]:
    """An AR model's rows for the single-sample `batch`: each gold token predicted from the gold tokens before it."""
    import torch

    from wamdiff.diffusion.forward import ar_forward

    x0 = batch.x0[0]
    length = _answer_length(batch, end_id)
    if length < 2:
        return []  # as `sample_rows`: the same positions for every model
    with torch.inference_mode():
        logp = ar_forward(model, answer=batch.x0, **batch.model_inputs())[0, :length].float().log_softmax(-1)
    return [{"position": j, "gold": int(x0[j]), "logp_one": float(logp[j, x0[j]]), "logp_all": None,
             "hit_one": int(logp[j].argmax() == x0[j]), "hit_all": None} for j in range(length)]


def _answer_length(batch, end_id: int) -> int:
    """Real answer tokens of the single-sample `batch`, up to and including its end-of-answer token."""
    ends = (batch.x0[0] == end_id).nonzero().flatten()
    return int(ends[0]) + 1 if len(ends) else int(batch.answer_mask[0].sum())


def model_rows(checkpoint: str, files: dict[str, str], limit: int | None = None, progress=None) -> list[dict]:
    """Rows of every sample of `files` ({"planning": JSON path, "qa": QA JSON path}, either; a question's rows take
    its kind as their task) for the checkpoint: a diffusion model at the block size it was trained on, an AR model
    by teacher forcing."""
    from wamdiff.models import image_processor_for, is_vision_model, load_model
    from wamdiff.models.convert import diffusion_settings
    from wamdiff.models.recorded import is_diffusion
    from wamdiff.models.tokens import IM_END, PAD, token_id
    from wamdiff.training.data import collate, load_examples

    model, tok = load_model(checkpoint)
    settings = diffusion_settings(model) if is_diffusion(model) else None
    block = settings.block_size if settings else 1
    pad, end = token_id(tok, PAD), token_id(tok, IM_END)
    model.eval()
    rows = []
    for source, path in files.items():
        kinds = {q["id"]: q["kind"] for q in read_questions(path, limit)} if source == "qa" else {}
        examples = load_examples(path, tok, vision=bool(is_vision_model(model)), limit=limit,
                                 image_processor=image_processor_for(model))
        for e in examples:
            task = f"qa: {kinds[e.sample_id]}" if kinds.get(e.sample_id) else source
            batch = collate([e], pad_id=pad, block_multiple=block)
            got = sample_rows(model, batch, block, settings.mask_token_id, end) if settings else ar_rows(model, batch, end)
            rows += [{"id": e.sample_id, "task": task, **r} for r in got]
            if progress is not None:
                progress(1)
    return rows


def context_summary(rows: list[dict]) -> dict:
    """Per task: positions, samples, accuracy one / all masked, and the mean per-sample gain with its 95 % interval
    (None where the rows have no all-masked state: an AR model's)."""
    by_task: dict[str, list[dict]] = defaultdict(list)
    for r in rows:
        by_task[r["task"]].append(r)
    out = {}
    for task, got in sorted(by_task.items()):
        per_sample: dict[str, list[float]] = defaultdict(list)
        for r in got:
            per_sample[r["id"]].append(None if r["logp_all"] is None else r["logp_one"] - r["logp_all"])
        gains = [sum(v) / len(v) for v in per_sample.values() if None not in v]
        n = len(got)
        both = bool(gains) and all(r["hit_all"] is not None for r in got)
        out[task] = {"positions": n, "samples": len(per_sample), "acc_one": sum(r["hit_one"] for r in got) / n,
                     "acc_all": sum(r["hit_all"] for r in got) / n if both else None,
                     "gain": sum(gains) / len(gains) if both else None, "gain_ci95": mean_ci95(gains) if both else None}
    return out


__all__ = ["ar_rows", "context_summary", "model_rows", "sample_rows"]
