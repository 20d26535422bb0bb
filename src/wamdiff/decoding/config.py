"""Public decoding types: what to run (`DecodeConfig`) and what comes back (`Generation`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

import torch


ATTENTIONS = ("sdpa", "flashinfer", "torch_paged")  # DecodeConfig.attention


@dataclass
class DecodeConfig:
    """How `generate` decodes.

    mode: "ar" (greedy, one token per forward) or "block" (block-causal masked diffusion).
    block_size: block length B; None = the model's own (``model.config.block_size``).
    threshold: tau of the threshold strategy: every masked position whose top probability >= tau is
        unmasked, and always at least the single most confident one.
    max_steps_per_block: cap on denoising forwards per block; masks left at the cap take the last argmax.
    strategy: "threshold" (adaptive) or "fixed" (a fixed count per step, min(B, max_steps) steps per block,
        most confident first).
    max_new_tokens: answer budget (generated tokens, EOS included).
    fused_commit: commit a finished block inside the next block's first denoising forward (and fuse the
        prompt prefill with the first block's first step) instead of a separate commit forward.
    delayed_cache: denoising steps after a block's first query only the still-masked positions and those
        decoded at the previous step; earlier-decoded positions keep K/V that are one step stale (dKV-Cache's
        delayed caching). Cheaper tail steps, approximate; the block commit stays exact. Off = every step
        recomputes the whole block (exact).
    grammar: optional `wamdiff.decoding.grammar.Grammar` (per-position allowed tokens).
    dtype: cast the model to this dtype first (IN PLACE; e.g. torch.bfloat16); None keeps it.
    compile: torch.compile the one-step function (same setting applies to AR and block). On CPU with
        inductor weight freezing: the compiled step keeps the weights it first saw (inference only; one
        compiled step per model, cached on it; first calls of each shape take tens of seconds).
    cuda_graphs: on CUDA, capture the fixed-shape steps as CUDA graphs (ignored on CPU).
    attention: "sdpa" (PyTorch SDPA over the slot cache with the slot mask), "flashinfer" (FlashInfer's paged
        prefill kernel reading the cache in place, only slots up to the current block; CUDA + `flashinfer`
        package; eager steps: no compile, no CUDA graphs; not yet verified on a GPU here) or "torch_paged"
        (the same paged layout in plain torch: a slow reference for tests).
    """

    mode: Literal["ar", "block"] = "block"
    block_size: int | None = None
    threshold: float = 0.9
    max_steps_per_block: int = 32
    strategy: Literal["threshold", "fixed"] = "threshold"
    max_new_tokens: int = 160
    fused_commit: bool = True
    delayed_cache: bool = False
    grammar: Any = None
    dtype: torch.dtype | str | None = None
    compile: bool = False
    cuda_graphs: bool = True
    attention: Literal["sdpa", "flashinfer", "torch_paged"] = "sdpa"

    def __post_init__(self) -> None:
        if self.attention not in ATTENTIONS:
            raise ValueError(f"DecodeConfig.attention must be one of {ATTENTIONS}, got {self.attention!r}")
        if self.mode not in ("ar", "block"):
            raise ValueError(f"DecodeConfig.mode must be 'ar' or 'block', got {self.mode!r}")
        if self.strategy not in ("threshold", "fixed"):
            raise ValueError(f"DecodeConfig.strategy must be 'threshold' or 'fixed', got {self.strategy!r}")
        if self.block_size is not None and (not isinstance(self.block_size, int) or self.block_size <= 0):
            raise ValueError(f"DecodeConfig.block_size must be a positive int or None, got {self.block_size!r}")
        if not 0.0 <= float(self.threshold) <= 1.0:
            raise ValueError(f"DecodeConfig.threshold must lie in [0, 1], got {self.threshold!r}")
        if self.max_steps_per_block < 1:
            raise ValueError(f"DecodeConfig.max_steps_per_block must be >= 1, got {self.max_steps_per_block!r}")
        if self.max_new_tokens < 1:
            raise ValueError(f"DecodeConfig.max_new_tokens must be >= 1, got {self.max_new_tokens!r}")
        if isinstance(self.dtype, str):
            names = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16,
                     "bfloat16": torch.bfloat16, "fp16": torch.float16, "float16": torch.float16}
            if self.dtype not in names:
                raise ValueError(f"DecodeConfig.dtype {self.dtype!r} unknown; use one of {sorted(names)}")
            self.dtype = names[self.dtype]


@dataclass
class Generation:
    """One decoded answer.

    token_ids: generated ids, EOS (<|im_end|>) included when it was produced, nothing after it.
    text: decoded ids without the EOS (special tokens such as bin tokens are kept).
    forwards: model forwards this sample took part in while unfinished (prefill counted; commit forwards
        counted; a fused commit is part of one forward). AR: forwards == len(token_ids).
    finished: True when EOS was produced within max_new_tokens.
    """

    token_ids: list[int]
    text: str
    forwards: int
    finished: bool

    @property
    def tokens_per_forward(self) -> float:
        return len(self.token_ids) / max(1, self.forwards)
