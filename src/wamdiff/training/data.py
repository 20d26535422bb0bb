"""WAM-Diff2 JSON -> encoded examples -> padded batches, and the resumable mixture sampler.

Every file is read and encoded ONCE (prompt ids, pixel values, answer ids) so the training loop only
pads and stacks. Batch convention (docs/ARCHITECTURE.md): prompts LEFT-padded to a common width P,
answers RIGHT-padded with PAD to a multiple of the block size; PADs after <|im_end|> are real answer tokens
(the model learns to emit padding after the end of turn). Each sample's answer is padded to its OWN multiple of
B; columns beyond that (a batch padded wider for a longer sample) have `answer_mask` False and are not trained.

Distributed runs collate the GLOBAL batch on every process and keep their own rows (`Batch.rows`): the
padding width, and therefore the loss, is then identical to a single process with the same global batch.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from wamdiff.errors import UserError


@dataclass
class Example:
    sample_id: str
    prompt: object  # models.processor.EncodedPrompt
    answer_ids: torch.Tensor  # [A_i], ends with <|im_end|>
    answer_text: str
    source: int = 0


@dataclass
class Batch:
    prompt_ids: torch.Tensor  # [N, P] left-padded
    prompt_mask: torch.Tensor  # [N, P] bool, True = real token
    x0: torch.Tensor  # [N, A] right-padded with PAD, A % block_multiple == 0
    answer_mask: torch.Tensor  # [N, A] bool
    pixel_values: torch.Tensor | None = None  # [sum patches, D]
    image_grid_thw: torch.Tensor | None = None  # [n images, 3]
    mm_token_type_ids: torch.Tensor | None = None  # [N, P]
    patches_per_sample: list[int] = field(default_factory=list)
    images_per_sample: list[int] = field(default_factory=list)
    examples: list[Example] = field(default_factory=list)
    on_policy: bool = False  # x0 is the student's own decode (`collate(answer_ids=...)`), not the dataset's answer

    def __len__(self) -> int:
        return self.prompt_ids.shape[0]

    def rows(self, start: int, stop: int) -> "Batch":
        """Rows [start, stop) with their own pixel patches and image grids."""
        pv = grid = None
        if self.pixel_values is not None:
            p0, p1 = sum(self.patches_per_sample[:start]), sum(self.patches_per_sample[:stop])
            i0, i1 = sum(self.images_per_sample[:start]), sum(self.images_per_sample[:stop])
            pv, grid = self.pixel_values[p0:p1], self.image_grid_thw[i0:i1]
        mm = self.mm_token_type_ids[start:stop] if self.mm_token_type_ids is not None else None
        return replace(
            self,
            prompt_ids=self.prompt_ids[start:stop],
            prompt_mask=self.prompt_mask[start:stop],
            x0=self.x0[start:stop],
            answer_mask=self.answer_mask[start:stop],
            pixel_values=pv,
            image_grid_thw=grid,
            mm_token_type_ids=mm,
            patches_per_sample=self.patches_per_sample[start:stop],
            images_per_sample=self.images_per_sample[start:stop],
            examples=self.examples[start:stop],
        )

    def to(self, device) -> "Batch":
        """Tensors on `device` (a no-op on CPU); bookkeeping lists stay as they are."""
        mv = lambda x: None if x is None else x.to(device, non_blocking=True)  # noqa: E731
        return replace(self, prompt_ids=mv(self.prompt_ids), prompt_mask=mv(self.prompt_mask), x0=mv(self.x0),
                       answer_mask=mv(self.answer_mask), pixel_values=mv(self.pixel_values),
                       image_grid_thw=mv(self.image_grid_thw), mm_token_type_ids=mv(self.mm_token_type_ids))

    def model_inputs(self) -> dict:
        """Keyword arguments shared by diffusion_forward / ar_forward (besides x0/xt/block size)."""
        return dict(
            prompt_ids=self.prompt_ids,
            prompt_mask=self.prompt_mask,
            answer_mask=self.answer_mask,
            pixel_values=self.pixel_values,
            image_grid_thw=self.image_grid_thw,
            mm_token_type_ids=self.mm_token_type_ids,
        )

    def n_tokens(self, streams: int) -> int:
        """Tokens a forward processes: real prompt tokens + `streams` copies of the answer (x0, xt)."""
        return int(self.prompt_mask.sum()) + streams * self.x0.numel()


# ------------------------------------------------------------------------------------------------ reading


def dataset_settings(json_paths) -> dict:
    """What the world recorded about these files (`manifest.json` beside them): the camera their images were
    rendered with and the answer format, as {"camera": dict | None, "answer_format": str | None}; None where no
    manifest says (data brought from elsewhere, e.g. NAVSIM). Files that disagree: ValueError."""
    import json

    found: dict[str, dict] = {"camera": {}, "answer_format": {}}
    for p in json_paths:
        manifest = Path(p).parent / "manifest.json"
        if not manifest.is_file():
            continue
        for split in json.loads(manifest.read_text()).get("splits", {}).values():
            for key in found:
                if split.get(key):
                    found[key][json.dumps(split[key], sort_keys=True)] = split[key]
    out = {}
    for key, values in found.items():
        if len(values) > 1:
            raise ValueError(f"training files disagree on their {key}: {sorted(values)}")
        out[key] = next(iter(values.values()), None)
    return out


def load_examples(json_path: str | Path, tokenizer, *, vision: bool, limit: int | None = None, source: int = 0,
                  image_processor=None, image_root: str | Path | None = None) -> list[Example]:
    """Read one WAM-Diff2 JSON file and encode every sample (prompt with its images, answer ids)."""
    from wamdiff.driving.wamdiff2_json import read_samples

    json_path = Path(json_path)
    if not json_path.exists():
        raise UserError(f"{json_path}: training data file not found (check the recipe's data paths)")
    samples = read_samples(json_path, image_root=image_root)  # image paths come back absolute
    if limit is not None:
        samples = samples[:limit]
    out = [encode_sample(s, tokenizer, vision=vision, image_processor=image_processor, json_path=json_path, source=source)
           for s in samples]
    if not out:
        raise ValueError(f"{json_path}: no samples")
    return out


def encode_sample(s, tokenizer, *, vision: bool, image_processor=None, json_path: str | Path = "",
                  source: int = 0) -> Example:
    """One sample as training encodes it: its prompt as every path encodes it (`driving.wamdiff2_json.
    encode_sample_prompt`: the human turn with its images through the tokenizer's chat template) and its answer ids."""
    from wamdiff.driving.wamdiff2_json import encode_sample_prompt
    from wamdiff.models.processor import encode_answer

    prompt = encode_sample_prompt(s, tokenizer, vision=vision, image_processor=image_processor, json_path=json_path)
    return Example(str(s.id), prompt, encode_answer(tokenizer, s.answer), s.answer, source)


# ------------------------------------------------------------------------------------------------ collate


def collate(examples: list[Example], *, pad_id: int, block_multiple: int, answer_ids: list[torch.Tensor] | None = None) -> Batch:
    """Left-pad prompts, right-pad answers with PAD to a multiple of `block_multiple`.

    `answer_ids` replaces the examples' answers (on-policy refresh: the student's own decodes).
    """
    answers = answer_ids if answer_ids is not None else [e.answer_ids for e in examples]
    n = len(examples)
    P = max(e.prompt.input_ids.numel() for e in examples)
    A = max(1, max(a.numel() for a in answers))
    A = math.ceil(A / block_multiple) * block_multiple
    prompt_ids = torch.full((n, P), pad_id, dtype=torch.long)
    prompt_mask = torch.zeros((n, P), dtype=torch.bool)
    x0 = torch.full((n, A), pad_id, dtype=torch.long)
    answer_mask = torch.zeros((n, A), dtype=torch.bool)
    has_mm = examples[0].prompt.mm_token_type_ids is not None
    mm = torch.zeros((n, P), dtype=torch.long) if has_mm else None
    pixels, grids, patches, n_images = [], [], [], []
    for i, (e, a) in enumerate(zip(examples, answers)):
        ids = e.prompt.input_ids
        prompt_ids[i, P - ids.numel():] = ids
        prompt_mask[i, P - ids.numel():] = True
        x0[i, : a.numel()] = a
        answer_mask[i, : max(1, math.ceil(a.numel() / block_multiple)) * block_multiple] = True
        if has_mm:
            mm[i, P - ids.numel():] = e.prompt.mm_token_type_ids
        if e.prompt.pixel_values is not None:
            pixels.append(e.prompt.pixel_values)
            grids.append(e.prompt.image_grid_thw.reshape(-1, 3))
            patches.append(e.prompt.pixel_values.shape[0])
            n_images.append(grids[-1].shape[0])
        else:
            patches.append(0)
            n_images.append(0)
    return Batch(
        prompt_ids=prompt_ids,
        prompt_mask=prompt_mask,
        x0=x0,
        answer_mask=answer_mask,
        pixel_values=torch.cat(pixels) if pixels else None,
        image_grid_thw=torch.cat(grids) if grids else None,
        mm_token_type_ids=mm,
        patches_per_sample=patches,
        images_per_sample=n_images,
        examples=list(examples),
        on_policy=answer_ids is not None,
    )


def batches(examples: list[Example], batch_size: int, **collate_kwargs):
    for i in range(0, len(examples), batch_size):
        yield collate(examples[i : i + batch_size], **collate_kwargs)


# ------------------------------------------------------------------------------------------------ sampler


class MixtureSampler:
    """Draws (source, index) pairs: source by mix weight, index from a per-source shuffled epoch.

    Deterministic in (seed, draws so far); `state_dict` is the data position a resumed run continues from.
    """

    def __init__(self, sizes: list[int], weights: list[float], seed: int):
        if len(sizes) != len(weights) or not sizes:
            raise ValueError("MixtureSampler: one weight per source")
        self.sizes, self.seed = list(sizes), int(seed)
        w = torch.tensor(weights, dtype=torch.float64)
        self.probs = w / w.sum()
        self.gen = torch.Generator().manual_seed(self.seed)
        self.counters = [0] * len(sizes)  # draws from each source so far
        self._perms: dict[tuple[int, int], torch.Tensor] = {}

    def _perm(self, source: int, epoch: int) -> torch.Tensor:
        key = (source, epoch)
        if key not in self._perms:
            g = torch.Generator().manual_seed(self.seed * 1_000_003 + source * 10_007 + epoch)
            self._perms = {k: v for k, v in self._perms.items() if k[0] != source}  # one epoch per source
            self._perms[key] = torch.randperm(self.sizes[source], generator=g)
        return self._perms[key]

    def draw(self, n: int) -> list[tuple[int, int]]:
        if len(self.sizes) == 1:
            sources = [0] * n
        else:
            sources = torch.multinomial(self.probs, n, replacement=True, generator=self.gen).tolist()
        out = []
        for s in sources:
            k = self.counters[s]
            self.counters[s] += 1
            out.append((s, int(self._perm(s, k // self.sizes[s])[k % self.sizes[s]])))
        return out

    def state_dict(self) -> dict:
        return {"counters": list(self.counters), "gen": self.gen.get_state().tolist(), "seed": self.seed}

    def load_state_dict(self, state: dict) -> None:
        self.counters = list(state["counters"])
        self.gen.set_state(torch.tensor(state["gen"], dtype=torch.uint8))
