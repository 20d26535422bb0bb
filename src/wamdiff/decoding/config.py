"""Public decoding types: what to run (`DecodeConfig`) and what comes back (`Generation`)."""

from __future__ import annotations

from dataclasses import dataclass, fields
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
        for name in ("mode", "strategy", "attention", "block_size", "threshold", "max_steps_per_block", "max_new_tokens"):
            reason = _field_error(name, getattr(self, name))
            if reason:
                raise ValueError(f"DecodeConfig.{name} {reason}")
        if isinstance(self.dtype, str):
            if self.dtype not in DTYPE_NAMES:
                raise ValueError(f"DecodeConfig.dtype {self.dtype!r} unknown; use one of {sorted(DTYPE_NAMES)}")
            self.dtype = DTYPE_NAMES[self.dtype]

    @classmethod
    def from_options(cls, options: dict, where: str = "decode options") -> "DecodeConfig":
        """A config from short `key=value` options (planner specs, a pipeline's `evaluate.decode`): values may be
        text ("32", "yes") or typed; an unknown key or a bad value raises ValueError naming `where` and the option."""
        kwargs = {}
        for key, value in options.items():
            if key not in OPTION_FIELDS:
                raise ValueError(f"{where}: unknown decode option {key!r} (known: {', '.join(OPTION_FIELDS)})")
            name = OPTION_FIELDS[key]
            kind = _FIELD_TYPES[name]
            try:
                kwargs[name] = _cast(value, kind)
            except ValueError:
                raise ValueError(f"{where}: option {key}={value!r} is not {_KIND_WORDS[kind]}") from None
            reason = _field_error(name, kwargs[name])
            if reason:
                raise ValueError(f"{where}: option {key}={value!r}: {reason}")
        try:
            return cls(**kwargs)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None


# short option name (planner specs, `evaluate.decode` in a pipeline YAML) -> DecodeConfig field
OPTION_FIELDS = {"mode": "mode", "block": "block_size", "threshold": "threshold", "steps": "max_steps_per_block",
                 "strategy": "strategy", "max_new_tokens": "max_new_tokens", "delayed": "delayed_cache",
                 "fused_commit": "fused_commit", "dtype": "dtype", "compile": "compile", "attention": "attention"}
_FIELD_TYPES = {"mode": str, "block_size": int, "threshold": float, "max_steps_per_block": int, "strategy": str,
                "max_new_tokens": int, "delayed_cache": bool, "fused_commit": bool, "dtype": str, "compile": bool,
                "attention": str}
_KIND_WORDS = {int: "an integer", float: "a number", bool: "yes/no", str: "text"}
assert set(_FIELD_TYPES) <= {f.name for f in fields(DecodeConfig)}
DTYPE_NAMES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
               "fp16": torch.float16, "float16": torch.float16}


def _field_error(name: str, value) -> str | None:
    """Why `value` is not valid for DecodeConfig field `name` (None when it is)."""
    if name == "mode" and value not in ("ar", "block"):
        return f"must be 'ar' or 'block', got {value!r}"
    if name == "strategy" and value not in ("threshold", "fixed"):
        return f"must be 'threshold' or 'fixed', got {value!r}"
    if name == "attention" and value not in ATTENTIONS:
        return f"must be one of {ATTENTIONS}, got {value!r}"
    if name == "block_size" and value is not None and (not isinstance(value, int) or value <= 0):
        return f"must be a positive int or None, got {value!r}"
    if name == "threshold" and not 0.0 < float(value) <= 1.0:
        return f"must lie in (0, 1], got {value!r}"
    if name in ("max_steps_per_block", "max_new_tokens") and value < 1:
        return f"must be >= 1, got {value!r}"
    return None


def parse_flag(value: str) -> bool:
    """A yes/no option value: 1/true/yes/on or 0/false/no/off."""
    word = str(value).strip().lower()
    if word not in ("1", "true", "yes", "on", "0", "false", "no", "off"):
        raise ValueError(f"not a yes/no value: {value!r}")
    return word in ("1", "true", "yes", "on")


def _cast(value, kind: type):
    if kind is bool:
        return value if isinstance(value, bool) else parse_flag(value)
    if kind is int:
        if isinstance(value, bool) or (isinstance(value, float) and not value.is_integer()):
            raise ValueError(value)
        return int(value)
    if kind is float:
        if isinstance(value, bool):
            raise ValueError(value)
        return float(value)
    return str(value)


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
