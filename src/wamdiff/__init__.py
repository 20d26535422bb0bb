"""wamdiff: autoregressive driving VLA -> block-causal masked diffusion, trained hierarchically, decoded fast."""

__version__ = "0.1.0"
