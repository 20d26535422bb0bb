"""The block-causal masked-diffusion core: masks + positions, noising, losses, training forwards."""
