"""The names of the code's closed value sets, in one torch- and simulator-free module at the bottom of the layers.

Each registry that gives a name its meaning validates with these tuples or checks at import that its own names
are these: `driving.trajectory` (answer formats), `decoding.config.DecodeConfig` (modes, strategies, attention,
lean, dtypes, the defaults of tau and the step cap), `decoding.bench.grid` (the dtypes and caches it times),
`driving.world.FAMILY_REGISTRY` (road families), `driving.dataset.SPLIT_SEED_BASE` (splits) and
`eval.closedloop.route_set` (route sets). The command line offers them as choices (`wamdiff.cli_choices`), so a
help text and the validation list the same values, and `wamdiff --help` needs neither torch nor highway-env.
"""

from __future__ import annotations

# answer formats (driving.trajectory): always x1,y1,...,x8,y8 in metres, ego frame
FORMATS = ("text2", "text1", "fixed1", "fixed2", "bins", "delta")
FIXED_WIDTH_FORMATS = ("fixed1", "fixed2", "bins", "delta")  # token positions never shift: a per-position grammar

# decoding (DecodeConfig)
# what a diffusion model's logits at answer column j predict (`models.convert.DiffusionSettings.prediction`): the
# token at j ("same", the masked-diffusion convention), or the token at j + 1 ("shifted", the AR model's own
# next-token reading, kept through the conversion)
PREDICTIONS = ("same", "shifted")
DECODE_MODES = ("ar", "block")  # greedy one token per forward, or block-causal masked diffusion
STRATEGIES = ("threshold", "fixed")
ATTENTIONS = ("sdpa", "flashinfer", "torch_paged")
LEAN_MODES = ("off", "head", "last_layer")  # `wamdiff.decoding.lean`
DTYPES = ("fp32", "float32", "bf16", "bfloat16", "fp16", "float16", "int8")  # DecodeConfig.dtype as text
GRID_DTYPES = ("fp32", "bf16", "int8")  # the dtypes `wamdiff bench` times (int8: CPU only)
CACHES = ("exact", "delayed")  # `wamdiff bench --caches`: DecodeConfig.delayed_cache off / on
DEFAULT_THRESHOLD = 0.9  # DecodeConfig.threshold when neither the caller nor the checkpoint's recorded decode sets it
DEFAULT_MAX_STEPS = 32  # DecodeConfig.max_steps, likewise

# the driving world
FAMILIES = ("highway", "merge", "roundabout", "intersection")  # in registry order: it fixes route seeds and report order
SPLITS = ("train", "val", "test")  # disjoint seed ranges
ROUTE_SETS = ("dev", "full")  # closed loop: each family's dev routes (10 in all), or 25 per family
