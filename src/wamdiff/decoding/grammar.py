"""Grammar constraints for answers: a per-position table of allowed tokens.

For fixed-width answer formats every answer position has a known token class (sign, digit, separator,
bin token, EOS, PAD), so the constraint is a [n_positions, vocab] bool table built once and applied to the
logits of each position (AR step or block step alike) before the argmax / confidence. That removes the
parallel-decoding failure of DESIGN §2.8 (number widths misaligned across positions decoded in parallel).

Templates: a string with one character per answer token: 'S' = sign (+/-), 'D' = digit, 'B' = any bin
token, anything else = that literal token; EOS follows the template, PAD after it.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from wamdiff.models.tokens import BIN_TOKENS, IM_END, PAD


@dataclass
class Grammar:
    """`classes[i]` = the list of allowed token ids at answer position i; positions past the end allow PAD."""

    classes: list[list[int]]
    name: str = "custom"

    @classmethod
    def from_template(cls, tokenizer, template: str, name: str = "template") -> "Grammar":
        def ids(tokens):
            out = [tokenizer.convert_tokens_to_ids(t) for t in tokens]
            unk = getattr(tokenizer, "unk_token_id", None)
            bad = [t for t, i in zip(tokens, out) if i is None or (unk is not None and i == unk)]
            if bad:
                raise ValueError(f"grammar template {name!r}: tokenizer has no token for {bad}")
            return out

        table = {"S": ids(["+", "-"]), "D": ids([str(d) for d in range(10)]), "B": ids(BIN_TOKENS)}
        classes = [table[c] if c in table else ids([c]) for c in template]
        classes.append(ids([IM_END]))
        return cls(classes, name)

    @classmethod
    def for_format(cls, tokenizer, fmt: str, n_waypoints: int = 8) -> "Grammar":
        """Grammar of a fixed-width trajectory format: 'bins' (2 bin tokens per waypoint), 'fixed1' (+012.3),
        'fixed2' (+012.34); comma separated. 'text1'/'text2' have variable widths: no per-position grammar."""
        if fmt == "bins":
            return cls.from_template(tokenizer, "B" * (2 * n_waypoints), fmt)
        if fmt in ("fixed1", "fixed2"):
            number = "SDDD." + "D" * int(fmt[-1])
            return cls.from_template(tokenizer, ",".join([number] * (2 * n_waypoints)), fmt)
        raise ValueError(f"no fixed-width grammar for trajectory format {fmt!r} (use bins, fixed1 or fixed2)")

    def table(self, n_positions: int, vocab_size: int, pad_id: int, device=None) -> torch.BoolTensor:
        """[n_positions, vocab] allowed-token table (positions beyond the template allow only PAD)."""
        t = torch.zeros(n_positions, vocab_size, dtype=torch.bool)
        for i in range(n_positions):
            allowed = self.classes[i] if i < len(self.classes) else [pad_id]
            t[i, allowed] = True
        return t.to(device)
