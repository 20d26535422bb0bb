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
    `parse` (how the bench reads waypoints from an answer text for its L2 figures; None: `fmt.parse`)."""

    prompts: list
    expert: list[str] | None = None
    fmt: AnswerFormat | None = None
    parse: Parser | None = None

    def __getitem__(self, s: slice) -> "BenchInputs":
        """The first prompts (and their expert answers) only: `inputs[:n]`."""
        return BenchInputs(self.prompts[s], None if self.expert is None else self.expert[s], self.fmt, self.parse)


def cycled(items: list, n: int) -> list:
    """`items` repeated in order up to at least `n` entries (a batch larger than the prompt set still runs full)."""
    return [items[i % len(items)] for i in range(max(n, len(items)))]


def chunks(pool: list, n: int) -> list[list]:
    """The full batches of n of `pool` (a last partial batch is left out: every timed batch has n prompts)."""
    return [pool[i:i + n] for i in range(0, len(pool) - len(pool) % n, n)]
