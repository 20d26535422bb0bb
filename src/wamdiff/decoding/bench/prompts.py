"""Prompts for the benchmark: from a WAM-Diff2 JSON (the one reader, `driving.wamdiff2_json`) or synthesised
with the one prompt template (`driving.prompts`) and random camera images; and how a prompt set is cut into the
full batches every timed setting decodes (`cycled`, `chunks`)."""

from __future__ import annotations

from pathlib import Path

from wamdiff.driving.prompts import PROMPT_TEMPLATE
from wamdiff.driving.wamdiff2_json import read_samples
from wamdiff.models.processor import encode_prompt

COMMANDS = ("left", "straight", "right", "unknown")


def load_wamdiff2_json(path: Path, tokenizer, *, vision: bool, limit: int | None = None, image_processor=None):
    """(prompts, expert answer texts) of the first `limit` samples of a WAM-Diff2 JSON / JSONL file."""
    from PIL import Image

    samples = read_samples(path)
    prompts = []
    for s in samples[:limit] if limit else samples:
        images = []
        for p in s.image_paths if vision else []:
            try:
                images.append(Image.open(p).convert("RGB"))
            except OSError as err:
                raise ValueError(f"{path}: sample {s.id}: field 'image': cannot open {p} ({err})") from err
        prompts.append(encode_prompt(tokenizer, s.human, images, vision=vision, image_processor=image_processor))
    return prompts, [s.answer for s in samples[:len(prompts)]]


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


def cycled(items: list, n: int) -> list:
    """`items` repeated in order up to at least `n` entries (a batch larger than the prompt set still runs full)."""
    return [items[i % len(items)] for i in range(max(n, len(items)))]


def chunks(pool: list, n: int) -> list[list]:
    """The full batches of n of `pool` (a last partial batch is left out: every timed batch has n prompts)."""
    return [pool[i:i + n] for i in range(0, len(pool) - len(pool) % n, n)]
