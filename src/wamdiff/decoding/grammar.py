"""Grammar constraints for answers: a per-position table of allowed tokens.

For fixed-width answer formats every answer position has a known token class (sign, digit, separator,
bin token, EOS, PAD), so the constraint is a [n_positions, vocab] bool table built once and applied to the
logits of each position (AR step or block step alike) before the argmax / confidence. That removes the
parallel-decoding failure of DESIGN §2.8 (number widths misaligned across positions decoded in parallel).

Templates: one entry per answer token (a string of single-character entries, or a list of token strings):
'S' = sign (+/-), 'D' = digit, 'B' = any bin token, 'X' / 'Y' = any dx / dy step token, anything else = that literal token; EOS follows the
template, PAD after it. `Grammar.for_format` derives the template from the world's own formatter
(`wamdiff.driving.trajectory.format_trajectory`) and the tokenizer, so it cannot drift from the data.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wamdiff.models.tokens import BIN_TOKENS, DELTA_X_TOKENS, DELTA_Y_TOKENS, IM_END, token_id

GRAMMAR_FORMATS = ("bins", "delta", "fixed1", "fixed2")  # trajectory formats whose token positions never shift


@dataclass
class Grammar:
    """`classes[i]` = the list of allowed token ids at answer position i; positions past the end allow PAD."""

    classes: list[list[int]]
    name: str = "custom"

    @classmethod
    def from_template(cls, tokenizer, template, name: str = "template") -> "Grammar":
        def ids(tokens):
            try:
                return [token_id(tokenizer, t) for t in tokens]
            except ValueError as err:
                raise ValueError(f"grammar template {name!r}: {err}") from None

        class_tokens = {"S": ["+", "-"], "D": [str(d) for d in range(10)], "B": BIN_TOKENS, "X": DELTA_X_TOKENS,
                        "Y": DELTA_Y_TOKENS}
        table = {c: ids(class_tokens[c]) for c in set(template) if c in class_tokens}  # only the classes used
        classes = [table[c] if c in table else ids([c]) for c in template]
        classes.append(ids([IM_END]))
        return cls(classes, name)

    @classmethod
    def for_format(cls, tokenizer, fmt: str) -> "Grammar":
        """Grammar of a fixed-width trajectory format ('bins', 'fixed1', 'fixed2'): a sample answer is formatted
        by the world's formatter and tokenized; each token becomes its class (digit, sign, bin) or a literal.
        'text1'/'text2' have variable widths: no per-position grammar exists, ValueError."""
        import numpy as np

        from wamdiff.driving.trajectory import format_trajectory  # noqa: PLC0415

        if fmt not in GRAMMAR_FORMATS:
            raise ValueError(f"no fixed-width grammar for trajectory format {fmt!r} (use one of {GRAMMAR_FORMATS})")
        sample = format_trajectory(np.full((8, 2), 1.0), fmt)
        toks = tokenizer.convert_ids_to_tokens(tokenizer.encode(sample, add_special_tokens=False))
        classes = {**dict.fromkeys(BIN_TOKENS, "B"), **dict.fromkeys(DELTA_X_TOKENS, "X"), **dict.fromkeys(DELTA_Y_TOKENS, "Y")}
        template = [classes.get(t) or ("D" if t.isdigit() else "S" if t in "+-" else t) for t in toks]
        return cls.from_template(tokenizer, template, fmt)

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
