"""The keys of a paired bench's settings mapping (`decoding.bench.paired.paired_bench`, the pipeline's `bench:`
section), in a module of their own: a config is checked against them without importing torch and the bench."""

PROMPTS = 8  # prompts per bench unless the settings say `prompts`
# The other settings keys `paired_bench` reads: the grid's (`grid_from_settings`; `ordinal` is
# `BenchGrid.ordinal_window`, `max_steps_per_block` the step caps' old name) and the headline's re-timing rounds.
SETTINGS_KEYS = ("batch_sizes", "block_sizes", "thresholds", "dtypes", "max_new_tokens", "max_steps",
                 "max_steps_per_block", "repeats", "compile", "step_cost", "caches", "device", "attention", "cuda_graphs", "lean",
                 "prefill_cache", "ordinal", "threads", "confirm_repeats")
