"""One trainer (accelerate), recipes as YAML: ar_sft, block{1,4,8,16,32}, distill_block, distill_model.

Python API for pipelines: `train(recipe: dict | path, overrides: dict | None = None) -> RunResult`.
"""

from wamdiff.training.config import Recipe, load_recipe
from wamdiff.training.trainer import RunResult, TrainingDiverged, train

__all__ = ["Recipe", "RunResult", "TrainingDiverged", "load_recipe", "train"]
