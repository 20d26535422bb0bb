"""Training throughput (tokens/s through fwd+bwd+step) on synthetic batches: `wamdiff train throughput`.

Tokens counted as the trainer logs them: real prompt tokens + answer columns per stream ([prefix | x0 | xt]
for diffusion kinds, [prefix | answer] for AR). Two warm-up steps are not timed.
"""

from __future__ import annotations

import tempfile
import time

import torch


def measure(*, preset: str = "student", kind: str = "block", block_size: int = 16, batch_size: int = 8,
            answer_tokens: int = 96, steps: int = 6, threads: int = 2, vision: bool = True,
            mixed_precision: str = "bf16", warmup: int = 2) -> float:
    from wamdiff.training.synthetic import write_dataset
    from wamdiff.training.config import load_recipe
    from wamdiff.training.trainer import Trainer

    torch.set_num_threads(threads)
    with tempfile.TemporaryDirectory() as tmp:
        # 2-decimal trajectories: ~5-6 tokens per number; n_points sets the answer length
        paths = write_dataset(tmp, n_train=batch_size, n_val=1, n_qa=1, n_points=max(1, answer_tokens // 11))
        recipe = load_recipe({
            "name": f"throughput-{preset}-{kind}", "kind": kind, "output_dir": f"{tmp}/run", "threads": threads,
            "model": {"preset": preset, "vision": vision, "block_size": block_size},
            "data": {"train": [str(paths["train"])]},
            "optim": {"steps": warmup + steps, "batch_size": batch_size, "mixed_precision": mixed_precision},
            "eval": {"at_end": False, "qa": {"at_start": False, "at_end": False}},
            "log": {"tensorboard": False, "progress": False},
        })
        trainer = Trainer(recipe)
        tokens, elapsed = 0, 0.0
        for step in range(warmup + steps):
            t0 = time.perf_counter()
            out = trainer.train_step(step)
            if step >= warmup:
                elapsed += time.perf_counter() - t0
                tokens += out["tokens"]
        trainer.logger.close()
        return tokens / elapsed
