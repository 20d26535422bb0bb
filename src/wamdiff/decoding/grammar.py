"""Grammar constraints for answers: a per-position table of allowed tokens.

For fixed-width answer formats every answer position has a known token class (sign, digit, separator,
bin token, EOS, PAD), so the constraint is a [n_positions, vocab] bool table built once and applied to the
logits of each position (AR step or block step alike) before the argmax / confidence. That removes the
parallel-decoding failure of digit formats (number widths misaligned across positions decoded in parallel;
docs/concepts/decoding.md, "Answer formats and parallel decoding").

`Grammar.for_format(tokenizer, fmt)` derives the per-position token sets from the tokenizer itself, for an answer
format object (`decoding.answer.AnswerFormat`; the decoder resolves no names, its callers pass objects, e.g.
`driving.answer_format.answer_format("fixed1")`): the format's cells (`fmt.cells()`) are varied — every choice of
each token's own characters, every pair of neighbouring tokens' (sampled where that is too many), random whole answers — and
tokenized; every variant must give the same token boundaries, and the set at a position is the tokens seen
there. A real Qwen tokenizer may merge punctuation (',-' one token, ',+' two): such a format has no stable
positions for that tokenizer and gets a ValueError naming the format, the tokenizer and the characters.

Hand-written templates (`Grammar.from_template`, one entry per token: 'S' = sign, 'D' = digit, 'B' = any bin
token, anything else = that literal token) assume one token per character; EOS follows, PAD after it.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
import torch

from wamdiff.decoding.answer import FIXED_WIDTH_LAYOUTS, AnswerFormat, fixed_width, ordinal, ordinal_layout
from wamdiff.decoding.readout import OrdinalTable
from wamdiff.models.tokens import BIN_TOKENS, IM_END, token_id


MAX_VARIANTS = 4096  # character combinations tried per token (or pair of tokens) before sampling instead
RANDOM_ANSWERS = 256  # whole random answers checked on top
CONTEXT = 3  # tokens of the base answer kept on each side of a varied token (the rest cannot reach it)


def tokenizer_name(tokenizer) -> str:
    name = getattr(tokenizer, "name_or_path", "") or type(tokenizer).__name__
    return f"{name!r} ({type(tokenizer).__name__}, {len(tokenizer)} tokens)"


class _Layout:
    """Tokenizations of choices (one alternative index per cell) of a format, as token spans over cells."""

    def __init__(self, tokenizer, fmt: str, cells: list[tuple[str, ...]]):
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None:
            raise ValueError(f"grammar for format {fmt!r}: tokenizer {tokenizer_name(tokenizer)} is not a fast tokenizer")
        self.tokenizer, self.backend, self.fmt, self.cells = tokenizer, backend, fmt, cells

    def encode(self, choices, windows=None):
        """[(ids, spans)] per choice, over the cells of its window (lo, hi) (all cells by default); spans[k] =
        (first cell, end cell) of token k relative to the window, None where a boundary falls inside a cell."""
        windows = windows or [(0, len(self.cells))] * len(choices)
        texts, starts = [], []
        for choice, (lo, hi) in zip(choices, windows):
            parts = [self.cells[c][choice[c]] for c in range(lo, hi)]
            texts.append("".join(parts))
            starts.append({int(p): k for k, p in enumerate(np.cumsum([0] + [len(x) for x in parts]))})
        out = []
        for enc, index in zip(self.backend.encode_batch(texts, add_special_tokens=False), starts):
            spans = [(index.get(a), index.get(b)) for a, b in enc.offsets]
            out.append((list(enc.ids), [None if None in sp else sp for sp in spans]))
        return out

    def pieces(self, ids, spans, lo, hi) -> list[str]:
        return [self.tokenizer.decode([i]) for i, sp in zip(ids, spans) if sp is not None and lo <= sp[0] < hi]

    def unstable(self, base_choice, probe_choice) -> ValueError:
        """The error for a probe whose token boundaries differ from the base answer's, naming the characters."""
        (b_ids, b_spans), (p_ids, p_spans) = self.encode([base_choice, probe_choice])
        j = next((k for k, (x, y) in enumerate(zip(b_spans, p_spans)) if x != y), min(len(b_spans), len(p_spans)))
        lo = b_spans[j - 1][1] if j and b_spans[j - 1] else 0
        ends = {sp[1] for sp in b_spans if sp} & {sp[1] for sp in p_spans if sp}
        hi = min([e for e in ends if e > lo] or [len(self.cells)])
        region = range(lo, hi)
        changed = [c for c in region if probe_choice[c] != base_choice[c]]
        diff = sorted({self.cells[c][ch[c]] for c in changed for ch in (base_choice, probe_choice)})
        seg = lambda ch: "".join(self.cells[c][ch[c]] for c in region)  # noqa: E731
        return ValueError(
            f"trajectory format {self.fmt!r} cannot be tokenized at stable positions with tokenizer "
            f"{tokenizer_name(self.tokenizer)}: {seg(probe_choice)!r} becomes {self.pieces(p_ids, p_spans, lo, hi)} "
            f"but {seg(base_choice)!r} becomes {self.pieces(b_ids, b_spans, lo, hi)} (offending characters {diff}); "
            "a fixed-width answer must keep its token count whatever its digits and signs. Use a format this "
            "tokenizer keeps apart (bins: one added token per value) or text2 without a grammar."
        )


def token_classes(tokenizer, fmt: AnswerFormat, *, seed: int = 0) -> list[list[int]]:
    """Allowed token ids at each answer position of fixed-width format `fmt` (an `AnswerFormat`) under `tokenizer`
    (EOS excluded).

    ValueError when the format's token positions depend on its characters (see the module doc)."""
    cells = fmt.cells() if fixed_width(fmt) else None
    if not cells:
        raise ValueError(f"answer format {fmt.name!r} (layout {fmt.layout!r}) has no fixed-width cells")
    cells = [tuple(c) for c in cells]
    name = fmt.name
    lay = _Layout(tokenizer, name, cells)
    base_choice = (0,) * len(cells)
    ids, spans = lay.encode([base_choice])[0]
    if None in spans:
        bad = tokenizer.decode([ids[spans.index(None)]])
        raise ValueError(f"trajectory format {name!r}: tokenizer {tokenizer_name(tokenizer)} splits a cell "
                         f"(token {bad!r}); every cell {sorted(set(cells[0]))[:3]}... must be whole tokens")
    rng = np.random.default_rng(seed)
    probes, windows, tokens_in = [], [], []  # choice, its cell window, the base tokens that window holds

    def vary(tokens):
        """Choices varying the cells of the given tokens (every combination, or a sample), each in a window of
        CONTEXT base tokens either side."""
        free = [c for t in tokens for c in range(*spans[t])]
        sizes = [len(cells[c]) for c in free]
        combos = (itertools.product(*[range(n) for n in sizes]) if np.prod(sizes, dtype=np.float64) <= MAX_VARIANTS
                  else (tuple(int(rng.integers(n)) for n in sizes) for _ in range(64)))
        t0, t1 = max(0, tokens[0] - CONTEXT), min(len(spans), tokens[-1] + 1 + CONTEXT)
        for combo in combos:
            choice = list(base_choice)
            for c, i in zip(free, combo):
                choice[c] = i
            probes.append(tuple(choice))
            windows.append((spans[t0][0], spans[t1 - 1][1]))
            tokens_in.append((t0, t1))

    for t in range(len(spans)):
        vary([t])
        if t + 1 < len(spans):
            vary([t, t + 1])
    for _ in range(RANDOM_ANSWERS):
        probes.append(tuple(int(rng.integers(len(c))) for c in cells))
        windows.append((0, len(cells)))
        tokens_in.append((0, len(spans)))
    seen: list[set[int]] = [set() for _ in spans]
    for start in range(0, len(probes), 4096):  # in chunks: an unstable format fails at its first offending probe
        part = slice(start, start + 4096)
        for choice, (lo, _), (t0, t1), (got_ids, got) in zip(probes[part], windows[part], tokens_in[part],
                                                               lay.encode(probes[part], windows[part])):
            if got != [(a - lo, b - lo) for a, b in spans[t0:t1]]:
                raise lay.unstable(base_choice, choice)
            for k, i in enumerate(got_ids):
                seen[t0 + k].add(i)
    return [sorted(s) for s in seen]


@dataclass
class Grammar:
    """`classes[i]` = the list of allowed token ids at answer position i; positions past the end allow PAD."""

    classes: list[list[int]]
    name: str = "custom"
    # ordinal formats (layout "tokens", `decoding.answer.ordinal`): the grids' token ids in value order, and each answer
    # position's grid (-1: none); what `decoding.readout`'s ordinal read-out reads
    axes: list[list[int]] | None = None
    position_axis: list[int] | None = None

    @classmethod
    def from_template(cls, tokenizer, template, name: str = "template") -> "Grammar":
        def ids(tokens):
            try:
                return [token_id(tokenizer, t) for t in tokens]
            except ValueError as err:
                raise ValueError(f"grammar template {name!r}: {err}") from None

        class_tokens = {"S": ["+", "-"], "D": [str(d) for d in range(10)], "B": BIN_TOKENS}
        table = {c: ids(class_tokens[c]) for c in set(template) if c in class_tokens}  # only the classes used
        classes = [table[c] if c in table else ids([c]) for c in template]
        classes.append(ids([IM_END]))
        return cls(classes, name)

    @classmethod
    def for_format(cls, tokenizer, fmt: AnswerFormat) -> "Grammar":
        """Grammar of a fixed-width answer format (an `AnswerFormat` object of layout 'fixed' or 'tokens', e.g.
        fixed1, fixed2, bins, delta) under this tokenizer: the token sets of `token_classes`, then EOS. A
        variable-width layout ('text': text1, text2) or a name instead of an object: ValueError."""
        if not isinstance(fmt, AnswerFormat):
            raise ValueError(f"Grammar.for_format takes an answer format object (decoding.answer.AnswerFormat), not "
                             f"{fmt!r}; a format name is resolved by the caller (driving.answer_format.answer_format)")
        if not fixed_width(fmt):
            raise ValueError(f"no fixed-width grammar for trajectory format {fmt.name!r} (layout {fmt.layout!r}; a "
                             f"grammar needs one of the layouts {FIXED_WIDTH_LAYOUTS})")
        eos = tokenizer.convert_tokens_to_ids(IM_END)
        if eos is None or eos == getattr(tokenizer, "unk_token_id", None):
            raise ValueError(f"grammar for format {fmt.name!r}: tokenizer {tokenizer_name(tokenizer)} has no {IM_END!r}")
        classes = [*token_classes(tokenizer, fmt), [eos]]
        axes, position_axis = _ordinal_axes(tokenizer, fmt)
        return cls(classes, fmt.name, axes, position_axis)

    @property
    def answer_tokens(self) -> int:
        """Tokens of every answer of this grammar, end of turn included."""
        return len(self.classes)

    def table(self, n_positions: int, vocab_size: int, pad_id: int, device=None) -> torch.BoolTensor:
        """[n_positions, vocab] allowed-token table (positions beyond the template allow only PAD); built once per
        shape and device (every `generate` call asks for it)."""
        key = (n_positions, vocab_size, pad_id, str(torch.device(device) if device is not None else "cpu"))
        tables = self.__dict__.setdefault("_tables", {})
        if key not in tables:
            t = torch.zeros(n_positions, vocab_size, dtype=torch.bool)
            for i in range(n_positions):
                allowed = self.classes[i] if i < len(self.classes) else [pad_id]
                t[i, allowed] = True
            tables[key] = t.to(device)
        return tables[key]

    def ordinal_table(self, n_positions: int, device=None) -> OrdinalTable | None:
        """The grids as tensors for `decoding.readout.read_out` (None for a format without grids); built once per
        shape and device."""
        if not self.axes:
            return None
        key = ("ordinal", n_positions, str(torch.device(device) if device is not None else "cpu"))
        tables = self.__dict__.setdefault("_tables", {})
        if key not in tables:
            tables[key] = OrdinalTable.build(self.axes, self.position_axis, n_positions, device)
        return tables[key]


def _ordinal_axes(tokenizer, fmt: AnswerFormat) -> tuple[list[list[int]] | None, list[int] | None]:
    """(grids as token ids, grid of each answer position) of an ordinal format; (None, None) for other formats."""
    if not ordinal(fmt):
        return None, None
    grids, position_axis = ordinal_layout(fmt)
    return [[token_id(tokenizer, t) for t in grid] for grid in grids], position_axis
