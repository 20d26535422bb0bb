"""Multi-task retention: driving QA exact match per model, with a 95 % interval, and paired differences.

`answer_questions(spec, qa_file)` decodes every question of a QA file (`<split>_qa.json`, written by
`wamdiff data generate`) with its spec's decode settings (a spec parsed with `free_text`: the checkpoint's recorded
free-text decode, else its planning one), a short answer budget and no trajectory grammar, and returns one row per
question with its hit (exact match after normalising case and spaces).
`qa_summary(rows_by_model, ref)`: per model accuracy with its Wilson 95 % interval (overall, per question kind and
per family), and for every other model the paired difference against `ref` on the same questions: the mean
difference of hits with its normal 95 % interval, the discordant counts and McNemar's exact p-value (a binomial
test on the discordant pairs). 64 questions give a +-12 point interval: too few to tell a 3 point loss; the
default test split holds about 900.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from .intervals import paired_ci95, wilson_ci95

QA_MAX_NEW_TOKENS = 32  # the longest answer ("change lane right, decelerate") is well under this


def read_questions(qa_file: str | Path, limit: int | None = None) -> list[dict]:
    """The questions of a QA file: id, kind and family per question (one line naming the file when unreadable)."""
    path = Path(qa_file)
    try:
        items = json.loads(path.read_text())
    except FileNotFoundError:
        raise ValueError(f"{path}: QA file not found (write one with `wamdiff data generate`)") from None
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: not a readable QA JSON file ({err})") from None
    if not isinstance(items, list) or not all(isinstance(q, dict) and "id" in q for q in items):
        raise ValueError(f"{path}: expected a JSON list of samples with an 'id' field")
    items = items[:limit] if limit else items
    return [{"id": str(q["id"]), "kind": str(q.get("qa_kind", "")), "family": str(q.get("family", ""))} for q in items]


def answer_questions(spec, qa_file: str | Path, limit: int | None = None, batch: int = 16, progress=None) -> list[dict]:
    """One row per question: id, kind, family, gold, answer, hit (0/1). `spec`: a model PlannerSpec."""
    import torch

    from wamdiff.decoding import generate
    from wamdiff.models import image_processor_for, is_vision_model, load_model
    from wamdiff.training.data import load_examples
    from wamdiff.training.evaluation import normalise_answer

    if spec.kind != "model":
        raise ValueError(f"planner spec {spec.text!r}: QA needs a model (model:PATH or stage:NAME), not {spec.kind}")
    meta = {q["id"]: q for q in read_questions(qa_file, limit)}
    model, tok = load_model(spec.checkpoint)
    examples = load_examples(qa_file, tok, vision=bool(is_vision_model(model)), limit=limit,
                             image_processor=image_processor_for(model))
    # QA answers are free text: no trajectory grammar and no grid read-outs (`ordinal_window`, `smoothness`), the
    # rest as planned
    config = replace(spec.decode, max_new_tokens=QA_MAX_NEW_TOKENS, grammar=None, ordinal_window=0, smoothness=0.0)
    rows = []
    with torch.inference_mode():
        for i in range(0, len(examples), batch):
            chunk = examples[i:i + batch]
            for e, g in zip(chunk, generate(model, tok, [e.prompt for e in chunk], config)):
                q = meta.get(e.sample_id, {"kind": "", "family": ""})
                rows.append({"id": e.sample_id, "kind": q["kind"], "family": q["family"], "gold": e.answer_text,
                             "answer": g.text, "hit": int(normalise_answer(g.text) == normalise_answer(e.answer_text))})
            if progress is not None:
                progress(len(chunk))
    return rows


def accuracy(rows: list[dict]) -> dict:
    """Exact-match accuracy with its Wilson 95 % interval (the hits are 0/1 per question)."""
    n, k = len(rows), sum(int(r["hit"]) for r in rows)
    return {"n": n, "hits": k, "accuracy": k / n if n else None, "ci95": wilson_ci95(k, n)}


def mcnemar_p(b: int, c: int) -> float:
    """McNemar's exact two-sided p-value: b and c are the discordant counts (a right only, ref right only)."""
    from scipy.stats import binomtest

    return float(binomtest(b, b + c, 0.5).pvalue) if b + c else 1.0


def paired_difference(rows: list[dict], ref_rows: list[dict]) -> dict:
    """rows' model minus the reference model on the questions both answered: mean hit difference, its paired 95 %
    interval, discordant counts and McNemar's p."""
    a = {r["id"]: int(r["hit"]) for r in rows}
    b = {r["id"]: int(r["hit"]) for r in ref_rows}
    common = [k for k in a if k in b]
    got = paired_ci95(a, b)
    only_a = sum(a[k] and not b[k] for k in common)
    only_ref = sum(b[k] and not a[k] for k in common)
    return {"n": len(common), "delta": None if got is None else got[0], "ci95": None if got is None else got[1],
            "only_this_right": only_a, "only_ref_right": only_ref, "mcnemar_p": mcnemar_p(only_a, only_ref)}


def qa_summary(rows_by_model: dict[str, list[dict]], ref: str | None = None) -> dict:
    """Per model: accuracy overall, per kind and per family; against `ref`: the paired difference."""
    out = {}
    for name, rows in rows_by_model.items():
        kinds = sorted({r["kind"] for r in rows})
        fams = sorted({r["family"] for r in rows})
        entry = {"overall": accuracy(rows),
                 "per_kind": {k: accuracy([r for r in rows if r["kind"] == k]) for k in kinds},
                 "per_family": {f: accuracy([r for r in rows if r["family"] == f]) for f in fams}}
        if ref is not None and name != ref:
            entry["vs_ref"] = {"ref": ref, **paired_difference(rows, rows_by_model[ref])}
        out[name] = entry
    return out


__all__ = ["accuracy", "answer_questions", "mcnemar_p", "paired_difference", "qa_summary", "read_questions"]
