"""Public decoding types: what to run (`DecodeConfig`) and what comes back (`Generation`), and the one parser
of decode settings (`resolve_decode`).

Every decode setting has one name, a `DecodeConfig` field, from the command line to the kernel: a planner spec
(`model:DIR,block_size=17,threshold=0.5`), a pipeline's `evaluate.decode`, `wamdiff serve`'s flags and a
checkpoint's recorded decode are mappings of these names, parsed and merged here once. The short names people
already type are accepted as aliases of them here and nowhere else: block = block_size, steps = max_steps,
delayed = delayed_cache, ordinal = ordinal_window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any, Literal

import torch

from wamdiff.names import ATTENTIONS, DECODE_MODES, DEFAULT_MAX_STEPS, DEFAULT_THRESHOLD, DTYPES, LEAN_MODES, STRATEGIES
from wamdiff.models.precision import INT8

AUTO = "auto"  # DecodeConfig.block_size: the speed dial picks B, tau, step cap and cache (`wamdiff.decoding.dial`)


@dataclass(frozen=True)
class DecodeConfig:
    """How `generate` decodes.

    mode: "ar" (greedy, one token per forward) or "block" (block-causal masked diffusion).
    block_size: block length B; None = the model's trained one (`models.convert.diffusion_settings`); "auto" = the
        speed dial (`wamdiff.decoding.dial`) sets block_size, threshold, max_steps and delayed_cache for this batch
        size and device from the machine's measured step costs and the model's measured TPF/quality curve (run
        `wamdiff bench --tune` once per model), under the quality bound (mean L2 within 10 % of AR's).
    threshold: tau of the threshold strategy: every masked position whose top probability >= threshold is
        unmasked, and always at least the single most confident one.
    max_steps: cap on denoising forwards per block; masks left at the cap take the last argmax.
    strategy: "threshold" (adaptive) or "fixed" (a fixed count per step, min(B, max_steps) steps per block,
        most confident first).
    max_new_tokens: answer budget (generated tokens, EOS included).
    fused_commit: commit a finished block inside the next block's first denoising forward (and fuse the
        prompt prefill with the first block's first step) instead of a separate commit forward.
    delayed_cache: denoising steps after a block's first query only the still-masked positions and those
        decoded at the previous step; earlier-decoded positions keep K/V that are one step stale (dKV-Cache's
        delayed caching). Cheaper tail steps, approximate; the block commit stays exact. Off = every step
        recomputes the whole block (exact).
    lean: exact work saving (`wamdiff.decoding.lean`): "off" (every queried row of a denoising step gets logits),
        "head" (the LM head only at still-masked positions), "last_layer" (also the last layer's MLP only at the
        rows whose logits are read: still-masked positions, the noisy half of a fused commit, the last prompt row
        of an AR prefill). Token-identical to "off"; applies to AR (its prefill) and block decoding alike.
    prefill_cache: compute the vision tower's grid-only tables once per image grid (`decoding.prefill_cache`;
        bitwise the same outputs).
    shared_prefix: the head every prompt of the batch shares (the template's text before the image) is prefilled
        once per model and kept (`decoding.shared_prefix`); each call prefills only the rest. Exact.
    grammar: optional `wamdiff.decoding.grammar.Grammar` (per-position allowed tokens).
    ordinal_window: w > 0 reads a position whose tokens are grid values (the grammar's grids: `delta` and `bins`
        answers) as the grid value nearest the probability-weighted mean within w grid steps of its most likely
        value, with that window's probability as its confidence (`wamdiff.decoding.readout`); 0 = the most likely
        token and its probability. Applies to AR and block decoding alike; needs the grammar.
    smoothness: lambda > 0 re-reads a finished block's grid values jointly (the grammar's grids, as `ordinal_window`):
        per axis (a delta answer's x displacements, its y displacements), the path through each position's grid
        probabilities, taken when it was decided, that maximises sum log p - lambda * sum (change between
        consecutive values, in grid steps)^2 (Viterbi, `decoding.readout.smooth_path`), then the ordinal window's
        mean around it. A model that picks each displacement on its own can put one 10 m off its neighbours; this
        prior reads it with them. 0 = each position on its own. Block decoding only; needs the grammar.
    dtype: cast the model to this dtype first (IN PLACE; e.g. torch.bfloat16, or "int8": its Linear layers
        dynamically quantized, CPU only, `models.precision.quantize_linear_int8`); None keeps it.
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
    block_size: int | Literal["auto"] | None = None
    threshold: float = DEFAULT_THRESHOLD
    max_steps: int = DEFAULT_MAX_STEPS
    strategy: Literal["threshold", "fixed"] = "threshold"
    max_new_tokens: int = 160
    fused_commit: bool = True
    delayed_cache: bool = False
    lean: Literal["off", "head", "last_layer"] = "last_layer"
    prefill_cache: bool = True
    shared_prefix: bool = True
    grammar: Any = None
    ordinal_window: int = 0
    smoothness: float = 0.0
    dtype: torch.dtype | str | None = None
    compile: bool = False
    cuda_graphs: bool = True
    attention: Literal["sdpa", "flashinfer", "torch_paged"] = "sdpa"

    def __post_init__(self) -> None:
        for name in ("mode", "strategy", "attention", "lean", "block_size", "threshold", "max_steps",
                     "max_new_tokens", "ordinal_window", "smoothness"):
            reason = _field_error(name, getattr(self, name))
            if reason:
                raise ValueError(f"DecodeConfig.{name} {reason}")
        if isinstance(self.dtype, str):
            if self.dtype not in DTYPE_NAMES:
                raise ValueError(f"DecodeConfig.dtype {self.dtype!r} unknown; use one of {sorted(DTYPE_NAMES)}")
            object.__setattr__(self, "dtype", DTYPE_NAMES[self.dtype])  # frozen: the one normalisation, at birth

    def static_shapes(self, device) -> bool:
        """Whether steps run at fixed shapes (compiled or CUDA-graph steps): query counts are then rounded up to
        powers of two and prompt widths to `runner.PROMPT_BUCKET`."""
        return self.compile or (self.cuda_graphs and self.attention == "sdpa" and torch.device(device).type == "cuda")


# the settings a mapping may give (every field but the grammar, which follows the answer format), with their types
_FIELD_TYPES = {"mode": str, "block_size": int, "threshold": float, "max_steps": int, "strategy": str,
                "max_new_tokens": int, "delayed_cache": bool, "fused_commit": bool, "dtype": str, "compile": bool,
                "attention": str, "lean": str, "prefill_cache": bool, "shared_prefix": bool, "ordinal_window": int,
                "smoothness": float, "cuda_graphs": bool}
ALIASES = {"block": "block_size", "steps": "max_steps", "delayed": "delayed_cache", "ordinal": "ordinal_window"}
# the block decode's own settings: an AR decode ignores them (the pipeline's AR rows drop them from `evaluate.decode`)
BLOCK_SETTINGS = ("block_size", "threshold", "max_steps", "strategy", "delayed_cache", "fused_commit", "ordinal_window",
                  "smoothness")
_KIND_WORDS = {int: "an integer", float: "a number", bool: "yes/no", str: "text"}
assert set(_FIELD_TYPES) == {f.name for f in fields(DecodeConfig)} - {"grammar"}
DTYPE_NAMES = {"fp32": torch.float32, "float32": torch.float32, "bf16": torch.bfloat16, "bfloat16": torch.bfloat16,
               "fp16": torch.float16, "float16": torch.float16, "int8": INT8}
assert tuple(DTYPE_NAMES) == DTYPES  # the names the command line offers (`wamdiff.names`)


def setting_name(key: str, where: str = "decode options") -> str:
    """The `DecodeConfig` field a mapping's key names (the field itself or its alias); ValueError when none."""
    name = ALIASES.get(key, key)
    if name not in _FIELD_TYPES:
        known = ", ".join([*_FIELD_TYPES, *(f"{a} (= {n})" for a, n in ALIASES.items())])
        raise ValueError(f"{where}: unknown decode setting {key!r} (known: {known})")
    return name


def parse_settings(options: Mapping, where: str = "decode options") -> dict:
    """One layer of decode settings -> {field: typed value}. Keys are field names or their aliases; values text
    ("32", "yes") or typed; None = not set. A key given twice (under both spellings), an unknown key or a bad value
    raises ValueError naming `where` and the option."""
    out: dict = {}
    for key, value in options.items():
        if value is None:
            continue
        name = setting_name(key, where)
        if name in out:
            raise ValueError(f"{where}: {name} is given twice ({key}={value!r} and another spelling)")
        kind = _FIELD_TYPES[name]
        if name == "block_size" and str(value).strip().lower() == AUTO:
            out[name] = AUTO
            continue
        try:
            out[name] = _cast(value, kind)
        except ValueError:
            raise ValueError(f"{where}: option {key}={value!r} is not {_KIND_WORDS[kind]}") from None
        reason = _field_error(name, out[name])
        if reason:
            raise ValueError(f"{where}: option {key}={value!r}: {reason}")
    return out


def resolve_decode(*layers: Mapping, recorded: Mapping | None = None, diffusion: bool = True,
                   where: str = "decode options") -> DecodeConfig:
    """THE precedence of decode settings, lowest first:

    1. `DecodeConfig`'s defaults;
    2. `recorded`: the checkpoint's recorded decode (`models.recorded.recorded_decode`), in block mode only;
    3. `layers`, each over the ones before it: a pipeline's `evaluate.decode` < a planner spec's options <
       command-line flags (each a mapping that `parse_settings` reads).

    The mode is the highest layer's `mode`; else "block" when a layer sets a block size; else the checkpoint's
    kind (`diffusion`: block for a diffusion model, ar for an AR one)."""
    given: dict = {}
    for layer in layers:
        given.update(parse_settings(layer, where))
    given.setdefault("mode", "block" if "block_size" in given or diffusion else "ar")
    if given["mode"] == "block" and recorded:
        given = {**parse_settings(recorded, f"{where} (the checkpoint's recorded decode)"), **given}
    try:
        return DecodeConfig(**given)
    except ValueError as err:
        raise ValueError(f"{where}: {err}") from None


def _field_error(name: str, value) -> str | None:
    """Why `value` is not valid for DecodeConfig field `name` (None when it is)."""
    if name == "mode" and value not in DECODE_MODES:
        return f"must be one of {DECODE_MODES}, got {value!r}"
    if name == "strategy" and value not in STRATEGIES:
        return f"must be one of {STRATEGIES}, got {value!r}"
    if name == "attention" and value not in ATTENTIONS:
        return f"must be one of {ATTENTIONS}, got {value!r}"
    if name == "lean" and value not in LEAN_MODES:
        return f"must be one of {LEAN_MODES}, got {value!r}"
    if name == "block_size" and value is not None and value != AUTO and (not isinstance(value, int) or value <= 0):
        return f"must be a positive int, 'auto' or None, got {value!r}"
    if name == "threshold" and not 0.0 < float(value) <= 1.0:
        return f"must lie in (0, 1], got {value!r}"
    if name in ("max_steps", "max_new_tokens") and value < 1:
        return f"must be >= 1, got {value!r}"
    if name == "smoothness" and not float(value) >= 0.0:
        return f"must be >= 0 (0 = each position on its own), got {value!r}"
    if name == "ordinal_window" and value < 0:
        return f"must be >= 0 (0 = plain read-out), got {value!r}"
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
