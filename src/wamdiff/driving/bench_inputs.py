"""What `wamdiff bench` and the pipeline's bench stage decode, built from the driving layer and handed to the
decode bench (`wamdiff.decoding.bench`, which knows no driving data): prompts from a WAM-Diff2 JSON (the one
reader and the one encoding of a sample, `driving.wamdiff2_json`: each sample's own prompt, all its cameras,
the model's chat template) or synthesised with the one prompt template (`driving.prompts`) and random camera
images; the answer format (`driving.answer_format`, given or guessed from the first expert answer); and the
trajectory parser of the bench's L2 figures (the format's own, or guessed per answer when no format is known)."""

from __future__ import annotations

from pathlib import Path

from wamdiff.decoding.bench.prompts import BenchInputs
from wamdiff.driving.answer_format import BUILTIN, AnswerFormat, answer_format, guess_format
from wamdiff.driving.prompts import PROMPT_TEMPLATE
from wamdiff.driving.wamdiff2_json import encode_sample_prompt, read_samples
from wamdiff.models.processor import encode_prompt

COMMANDS = ("left", "straight", "right", "unknown")


def load_wamdiff2_json(path: Path, tokenizer, *, vision: bool, limit: int | None = None, image_processor=None):
    """(prompts, expert answer texts, sample ids) of the first `limit` samples of a WAM-Diff2 JSON / JSONL file, each
    prompt encoded as training encodes it (`driving.wamdiff2_json.encode_sample_prompt`: its own human turn and all
    its images, through the model's chat template)."""
    samples = read_samples(path)
    samples = samples[:limit] if limit else samples
    if not samples:
        raise ValueError(f"{path}: no samples")
    prompts = [encode_sample_prompt(s, tokenizer, vision=vision, image_processor=image_processor, json_path=path)
               for s in samples]
    return prompts, [s.answer for s in samples], [str(s.id) for s in samples]


def synthetic_prompts(tokenizer, n: int, *, vision: bool, seed: int = 0, image_processor=None):
    """Driving prompts (the dataset's template, random ego state) with random 64x64 images (vision), encoded
    with the model's image processor (`models.image_processor_for`)."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        (vx, vy), (ax, ay) = rng.normal(8, 3, 2), rng.normal(0, 1, 2)
        text = PROMPT_TEMPLATE.format(command=COMMANDS[i % len(COMMANDS)], vx=vx, vy=vy, ax=ax, ay=ay)
        images = [rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)] if vision else []
        out.append(encode_prompt(tokenizer, text, images, vision=vision, image_processor=image_processor))
    return out


def answer_parser(fmt: str | AnswerFormat | None):
    """The bench's trajectory parser: text -> parsed answer. A format (name or object): its `parse`; None: each
    text parsed in the format `guess_format` names for it (None for an empty text)."""
    if fmt is not None:
        return answer_format(fmt).parse

    def guessed(text: str):
        name = guess_format(text)
        return BUILTIN[name].parse(text) if name else None

    return guessed


def bench_format(fmt: str | AnswerFormat | None, expert: list[str] | None) -> AnswerFormat | None:
    """The bench's answer format: `fmt` (a name or an object), else the one the first expert answer is written in;
    None when neither says."""
    fmt = fmt or guess_format(expert[0] if expert else None)
    return None if fmt is None else answer_format(fmt)


def bench_inputs(tokenizer, *, data: Path | None, n: int, vision: bool, image_processor=None,
                 fmt: str | AnswerFormat | None = None) -> BenchInputs:
    """The first `n` samples of the WAM-Diff2 file `data` (prompts, expert answers and sample ids), or `n` synthetic
    prompts (no expert answers, no ids) when `data` is None; with the answer format and the parser the bench reads answers with."""
    expert = ids = None
    if data is not None:
        prompts, expert, ids = load_wamdiff2_json(Path(data), tokenizer, vision=vision, limit=n,
                                                  image_processor=image_processor)
    else:
        prompts = synthetic_prompts(tokenizer, n, vision=vision, image_processor=image_processor)
    answer = bench_format(fmt, expert)
    return BenchInputs(prompts, expert, answer, answer_parser(answer), ids)
