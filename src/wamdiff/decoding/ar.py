"""The AR baseline: greedy decoding, one token per forward, on the same `StepRunner` as the block decoder.

Same model class, dtype, static slot cache, precomputed masks/positions and compile setting as the
diffusion decoder, so the measured speed ratio compares decoding paradigms, not implementation effort.
The first token comes from the prefill forward; each further token costs one [N, 1] forward.
"""

from __future__ import annotations

import torch

from wamdiff.decoding.readout import read_out
from wamdiff.decoding.runner import StepRunner


@torch.inference_mode()
def decode_ar(runner: StepRunner, *, max_new_tokens: int, eos_id: int, pad_id: int, grammar_table=None, readout=None):
    """Returns (tokens [N, max_new_tokens] padded with pad_id, lengths [N], forwards [N], finished [N]).
    `readout`: keyword arguments of `decoding.readout.read_out` (window, table); None = the most likely token."""
    n, p = runner.n, runner.P
    dev = runner.device
    out = torch.full((n, max_new_tokens), pad_id, dtype=torch.long, device=dev)
    forwards = torch.zeros(n, dtype=torch.long, device=dev)
    finished = torch.zeros(n, dtype=torch.bool, device=dev)
    lengths = torch.zeros(n, dtype=torch.long, device=dev)

    logits = runner.prefill(None, keep=1)[:, -1]
    for t in range(max_new_tokens):
        if grammar_table is not None:
            logits = logits.masked_fill(~grammar_table[t], float("-inf"))
        tok = read_out(logits, t, **(readout or {}))[1]
        tok = torch.where(tok == pad_id, eos_id, tok)  # a PAD ends the answer, as EOS does (PAD follows EOS in training)
        active = ~finished
        out[:, t] = torch.where(active, tok, out[:, t])
        forwards += active
        lengths += active
        finished |= active & (tok == eos_id)
        if t + 1 == max_new_tokens or bool(finished.all()):
            break
        logits = runner.forward(tok[:, None], p + t, keep=1)[:, -1]
    return out, lengths, forwards, finished
