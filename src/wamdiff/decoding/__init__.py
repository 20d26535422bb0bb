"""Decoding engines (AR baseline and block-causal diffusion) and the speed benchmark.

Public API: `DecodeConfig`, `Generation`, `generate(model, tokenizer, prompts, config)`, `Grammar`.
"""

from wamdiff.decoding.config import DecodeConfig, Generation
from wamdiff.decoding.generate import generate
from wamdiff.decoding.grammar import Grammar

__all__ = ["DecodeConfig", "Generation", "Grammar", "generate"]
