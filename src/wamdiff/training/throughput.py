"""Training throughput (tokens/s through fwd+bwd+step) on synthetic batches: `wamdiff train throughput`;
memory and time per step of a real recipe: `wamdiff train footprint`.

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
    from wamdiff.training.trainer import Trainer, flushed_denormals

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
        with flushed_denormals():
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


def _rss_gb() -> float:
    """Current resident set size of this process (VmRSS), GB."""
    for line in open("/proc/self/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1e6
    return float("nan")


def footprint(recipe, overrides: dict | list[str] | None = None, *, steps: int = 3) -> dict:
    """Memory and time of a real recipe's optimiser steps (its model, data and memory setting; nothing saved):
    peak RSS of the process (loading included), RSS after setup, seconds per step (median after the first),
    parameter counts, the batch's token widths, and what full fine-tuning's weights + AdamW state would take."""
    import resource
    import statistics

    from wamdiff.training.config import load_recipe
    from wamdiff.training.trainer import Trainer, flushed_denormals

    with tempfile.TemporaryDirectory() as tmp:
        quiet = {"output_dir": f"{tmp}/run", "optim.steps": steps, "checkpoint.every": 0, "eval.at_start": False,
                 "eval.at_end": False, "eval.every": 0, "eval.qa.at_start": False, "eval.qa.at_end": False,
                 "log.tensorboard": False, "log.progress": False}
        r = load_recipe(load_recipe(recipe, overrides).to_dict(), quiet)
        t0 = time.perf_counter()
        with flushed_denormals():
            trainer = Trainer(r)
            setup_s, rss_setup = time.perf_counter() - t0, _rss_gb()
            times = []
            for step in range(steps):
                t1 = time.perf_counter()
                trainer.train_step(step)
                times.append(time.perf_counter() - t1)
        batch = trainer.next_global_batch()
        model = trainer.unwrapped
        n_params = sum(p.numel() for p in model.parameters())
        n_train = sum(p.numel() for p in model.parameters() if p.requires_grad)
        trainer.logger.close()
    return {
        "recipe": r.name, "kind": r.kind, "block_size": r.block_size, "weights": r.model.dtype,
        "lora_rank": r.model.lora.rank, "gradient_checkpointing": r.model.gradient_checkpointing,
        "micro_batch": trainer.micro_rows, "grad_accum": r.optim.grad_accum, "threads": torch.get_num_threads(),
        "prompt_tokens": int(batch.prompt_mask.sum(1).max()), "answer_tokens": int(batch.x0.shape[1]),
        "params": n_params, "trainable_params": n_train, "setup_s": setup_s, "first_step_s": times[0],
        "s_per_step": statistics.median(times[1:] or times), "rss_after_setup_gb": rss_setup,
        "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6,
        # full fine-tuning, weights + gradients + AdamW moments only (activations come on top)
        "full_ft_fp32_adamw_gb": n_params * 16 / 1e9, "full_ft_bf16_weights_fp32_adamw_gb": n_params * 12 / 1e9,
    }
