"""Decoding engines (AR baseline and block-causal diffusion) and the speed benchmark.

Public API: `DecodeConfig`, `Generation`, `generate(model, tokenizer, prompts, config)`, `Grammar`.
"""

from wamdiff._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "config": ["DecodeConfig", "Generation"],
    "engine": ["generate"],
    "grammar": ["Grammar"],
})
