"""The bench's scene judge: how PDMS and comfort reach the bench's quality dicts while the decoding layer does not
import the evaluation layer.

A judge is any callable `judge(texts) -> {"pdms": mean PDMS 0-100, "comfort": mean comfort C 0-1}` that scores
answer texts on the scenes of the bench's prompts, text i on prompt i's scene. The decoding code only takes one as
an argument (`grid.run_bench`, `tune.measure_curve`, `paired.paired_bench`) and merges its figures into every
quality dict (`judged_quality`), which makes `dial.meets_quality` check PDMS and comfort besides L2.

Who builds it: the eval layer (`wamdiff.eval.bench_judge`). The pipeline's bench stage (`eval_stages.stage_bench`, a
layer above eval) builds one from its test scenes and passes it; so does the `wamdiff bench` command, which sits in
the eval layer (`wamdiff.eval.bench_cli`). Called without one, the bench checks L2 and parses only.
"""

from __future__ import annotations

from typing import Callable

Judge = Callable[[list[str]], dict]


def judged_quality(q: dict, judge: Judge | None, texts: list[str], n_prompts: int) -> dict:
    """`q` with the judge's `pdms` and `comfort` of the answers to the first `n_prompts` prompts (each prompt once:
    a bench pool repeats its prompts to fill a batch, and decoding is batch-invariant); `q` when there is no judge."""
    if judge is None:
        return q
    return {**q, **judge(list(texts[:n_prompts]))}
