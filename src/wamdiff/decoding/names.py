"""The names `DecodeConfig`'s enumerated fields accept, torch-free.

`DecodeConfig` validates with these tuples and the command line offers them (`wamdiff.cli_choices`), so a help
text and the validation list the same values; importing this module does not import torch, which keeps
`wamdiff --help` fast.
"""

from __future__ import annotations

DECODE_MODES = ("ar", "block")  # DecodeConfig.mode: greedy one token per forward, or block-causal masked diffusion
STRATEGIES = ("threshold", "fixed")  # DecodeConfig.strategy
ATTENTIONS = ("sdpa", "flashinfer", "torch_paged")  # DecodeConfig.attention
LEAN_MODES = ("off", "head", "last_layer")  # DecodeConfig.lean (`wamdiff.decoding.lean`)
DTYPES = ("fp32", "float32", "bf16", "bfloat16", "fp16", "float16", "int8")  # DecodeConfig.dtype as text
GRID_DTYPES = ("fp32", "bf16", "int8")  # the dtypes `wamdiff bench` times (int8: CPU only)
CACHES = ("exact", "delayed")  # `wamdiff bench --caches`: DecodeConfig.delayed_cache off / on
DEFAULT_MAX_STEPS = 32  # DecodeConfig.max_steps_per_block, likewise
DEFAULT_THRESHOLD = 0.9  # DecodeConfig.threshold when neither the caller nor the checkpoint's recorded decode sets it
