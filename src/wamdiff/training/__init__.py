"""One trainer (accelerate), recipes as YAML: ar_sft, block{1,4,8,16,32}, distill_block, distill_model.

Python API for pipelines: `train(recipe: dict | path, overrides: dict | None = None) -> RunResult`.
"""

from wamdiff._lazy import lazy_exports

__getattr__, __all__ = lazy_exports(__name__, {
    "config": ["Recipe", "load_recipe"],
    "trainer": ["RunResult", "TrainingDiverged", "train"],
})
