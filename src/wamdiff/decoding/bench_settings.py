"""The default prompt count of a paired bench (`decoding.bench.paired.paired_bench`, the pipeline's `bench:` section),
in a module of its own: the pipeline's config check reads it without importing torch and the bench."""

PROMPTS = 8  # prompts per bench unless the settings say `prompts`
