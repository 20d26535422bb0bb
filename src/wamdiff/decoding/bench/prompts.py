"""What a benchmark decodes, as its caller hands it over (`BenchInputs`: the prompts, the expert answers, the answer
format and the trajectory parser; the `wamdiff bench` command and the pipeline build them from the driving layer,
`wamdiff.driving.bench_inputs`), and how a prompt set is cut into the full batches every timed setting decodes
(`cycled`, `chunks`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from wamdiff.decoding.answer import AnswerFormat, ParsedAnswer

Parser = Callable[[str], "ParsedAnswer | None"]  # answer text -> parsed waypoints (None: not parsed at all)


@dataclass
class BenchInputs:
    """`prompts` (encoded, `models.processor.encode_prompt`), `expert` answer texts (one per prompt, or None),
    `fmt` (the answer format, `decoding.answer.AnswerFormat`: its grammar and ordinal read-out; None: neither) and
    `parse` (how the bench reads waypoints from an answer text for its L2 figures; None: `fmt.parse`) and `ids` (what
    the caller calls each prompt, e.g. its data's sample ids; None: unnamed, synthetic)."""

    prompts: list
    expert: list[str] | None = None
    fmt: AnswerFormat | None = None
    parse: Parser | None = None
    ids: list[str] | None = None

    def __getitem__(self, s: slice) -> "BenchInputs":
        """The first prompts (and their expert answers and ids) only: `inputs[:n]`."""
        return BenchInputs(self.prompts[s], None if self.expert is None else self.expert[s], self.fmt, self.parse,
                           None if self.ids is None else self.ids[s])

    def described(self, source: str | None) -> dict:
        """What was decoded, for a report: `source` (the data file; None: synthetic), the prompt ids, and per prompt
        its images and image tokens (0 for a text prompt)."""
        def images(p) -> int:
            grid = getattr(p, "image_grid_thw", None)
            return 0 if grid is None else int(grid.reshape(-1, 3).shape[0])

        def image_tokens(p) -> int:
            mm = getattr(p, "mm_token_type_ids", None)
            return 0 if mm is None else int(mm.sum())

        return {"data": source, "prompts": len(self.prompts), "ids": self.ids,
                "images": [images(p) for p in self.prompts], "image_tokens": [image_tokens(p) for p in self.prompts]}


def cycled(items: list, n: int) -> list:
    """`items` repeated in order up to at least `n` entries (a batch larger than the prompt set still runs full)."""
    return [items[i % len(items)] for i in range(max(n, len(items)))]


def chunks(pool: list, n: int) -> list[list]:
    """The full batches of n of `pool` (a last partial batch is left out: every timed batch has n prompts)."""
    return [pool[i:i + n] for i in range(0, len(pool) - len(pool) % n, n)]
