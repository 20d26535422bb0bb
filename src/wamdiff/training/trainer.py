"""One trainer for every recipe, on accelerate (one process, or `accelerate launch` / torchrun with several).

Reads top to bottom as the run goes:
  1. recipe -> Accelerator (bf16 autocast or fp32, DDP/FSDP/DeepSpeed from the launch config)
  2. model (+ frozen teacher) in the recipe's weight dtype, gradient checkpointing, LoRA adapters (`lora.py`),
     tokenizer, encoded data, objective
  3. optimiser (separate LR for the vision tower), cosine schedule with warm-up
  4. resume: weights, optimiser, scheduler, RNG, data position from the last complete checkpoint
  5. loop: global batch -> noise (seeded by step) -> this process's rows -> micro-steps with gradient
     accumulation -> NaN/inf guard -> clip -> step -> metrics / eval / checkpoint
  6. final model (atomic), final eval + QA exact match, metrics.json

Data and noise are functions of (seed, step) and are drawn for the GLOBAL batch, which each process then
slices: with the same global batch, N processes compute the same update as one.
"""

from __future__ import annotations

import math
import os
import sys
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from wamdiff.errors import UserError
from wamdiff.models.recorded import is_model_dir
from wamdiff.models.precision import cpu_has_fast_bf16, needs_fp32_compute, restore_stored_weights, upcast_frozen_weights
from wamdiff.training import checkpoint as ckpt
from wamdiff.training import lora as lora_
from wamdiff.jsonfile import write_json
from wamdiff.models.tokens import MASK, PAD, token_id
from wamdiff.training.config import Recipe, RecipeKind, load_recipe
from wamdiff.training.data import Batch, MixtureSampler, collate, dataset_settings, load_examples
from wamdiff.training.loading import load_student, load_teacher
from wamdiff.training.metrics import MetricsLogger, read_metrics_csv
from wamdiff.training.objectives import Objective, StepInputs, build_objective


class TrainingDiverged(RuntimeError):
    """Raised by the NaN/inf guard: the loss or the gradient norm is not finite."""


@dataclass
class RunResult:
    output_dir: Path
    metrics: dict = field(default_factory=dict)

    @property
    def final_model(self) -> Path:
        """The trained model (save_model layout): what the next stage's `model.init` points to."""
        return self.output_dir / "final"


# ------------------------------------------------------------------------------------------------ helpers


def cosine_with_warmup(warmup: int, total: int, min_ratio: float) -> Callable[[int], float]:
    """LR multiplier: linear warm-up over `warmup` steps, then cosine from 1 to `min_ratio` at `total`."""

    def f(step: int) -> float:
        if warmup > 0 and step < warmup:
            return (step + 1) / warmup
        progress = min(1.0, (step - warmup) / max(1, total - warmup))
        return min_ratio + (1.0 - min_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))

    return f


def is_vision_param(name: str) -> bool:
    return ".visual." in f".{name}"


def param_groups(model, lr: float, vision_lr: float | None, weight_decay: float) -> list[dict]:
    """Vision tower vs language model, each split into decayed (matrices) and non-decayed (norms, biases)."""
    groups: dict[tuple[bool, bool], list] = {}
    for name, p in model.named_parameters():
        if p.requires_grad:
            groups.setdefault((is_vision_param(name), p.ndim >= 2), []).append(p)
    out = []
    for (vision, decay), params in sorted(groups.items()):
        out.append({
            "params": params,
            "lr": (vision_lr if vision and vision_lr is not None else lr),
            "weight_decay": weight_decay if decay else 0.0,
            "name": f"{'vision' if vision else 'lm'}{'' if decay else '_nodecay'}",
        })
    return out


def make_optimizer(model, o) -> torch.optim.Optimizer:
    """AdamW, fused (one kernel over all parameters: ~10x faster than the per-tensor loop on CPU)."""
    groups = param_groups(model, o.lr, o.vision_lr, o.weight_decay)
    try:
        return torch.optim.AdamW(groups, lr=o.lr, betas=o.betas, eps=o.eps, fused=True)
    except (RuntimeError, ValueError):  # a device/dtype without the fused kernel
        return torch.optim.AdamW(groups, lr=o.lr, betas=o.betas, eps=o.eps)


EMA_FILE = "ema.safetensors"  # a checkpoint's weight average (optim.ema_decay)


def step_generator(seed: int, step: int, salt: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed((seed * 1_000_003 + step * 7_919 + salt) % (2**63 - 1))


# ------------------------------------------------------------------------------------------------ trainer


class Trainer:
    def __init__(self, recipe: Recipe, *, resume: bool = False, step_callback: Callable[[int], None] | None = None):
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()  # per-save/load shard bars would drown the training bar
        self.recipe = r = recipe
        self.step_callback = step_callback
        self.output_dir = Path(r.output_dir)
        if r.threads:
            torch.set_num_threads(r.threads)
        self.accelerator = self._make_accelerator()
        self.world, self.rank = self.accelerator.num_processes, self.accelerator.process_index
        self.is_main = self.accelerator.is_main_process
        self.micro_rows = self._rows_per_micro_step()
        if self.is_main:
            for p in ckpt.remove_leftovers(self.output_dir):
                print(f"[train] cleared {p} (left by a killed save)")
        self.accelerator.wait_for_everyone()
        # which checkpoint to continue from is decided (and refused) before the model and data are loaded
        self._resume_state = self._pick_checkpoint() if resume else self._refuse_existing_run()

        torch.manual_seed(r.seed)  # same initial weights on every process
        self.model, self.tokenizer, self.image_processor = load_student(r)
        self.lora = self._memory_setup()
        self.ema = self._start_average()
        self.mask_id, self.pad_id = token_id(self.tokenizer, MASK), token_id(self.tokenizer, PAD)
        teacher = load_teacher(r, self.tokenizer) if r.kind.distills else None
        self.objective: Objective = build_objective(r, self.mask_id, teacher, self._grids())
        if teacher is not None:
            teacher.to(self.accelerator.device)
        self._load_data()

        o = r.optim
        self.optimizer = make_optimizer(self.model, o)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(self.optimizer, cosine_with_warmup(o.warmup_steps, o.steps, o.min_lr_ratio))
        self._distribute()

        self.step = 0
        self.resumed_from: Path | None = None
        if self._resume_state is not None:
            self._resume(self._resume_state)
        self.logger = MetricsLogger(self.output_dir, tensorboard=r.log.tensorboard, enabled=self.is_main,
                                    resume_step=self.step if self.resumed_from else None)

    def _start_average(self) -> dict[str, torch.Tensor] | None:
        """`optim.ema_decay`: an fp32 copy of every trained parameter, averaged after each optimiser step."""
        if self.recipe.optim.ema_decay is None:
            return None
        return {n: p.detach().float().clone() for n, p in self.model.named_parameters() if p.requires_grad}

    def _update_average(self) -> None:
        d = self.recipe.optim.ema_decay
        with torch.no_grad():
            for n, p in self.unwrapped.named_parameters():
                if n in self.ema:
                    self.ema[n].mul_(d).add_(p.detach().float(), alpha=1.0 - d)

    def _use_average(self) -> None:
        """Put the averaged weights into the model (the end of the run: final/ and its evaluation use them)."""
        with torch.no_grad():
            for n, p in self.unwrapped.named_parameters():
                if n in self.ema:
                    p.copy_(self.ema[n].to(p.dtype))

    def _memory_setup(self):
        """Gradient checkpointing, LoRA adapters (returns the PeftModel, else None; `self.model` stays the HF
        model with the adapters inside), and fp32 compute for frozen bf16 weights where bf16 is emulated."""
        r, m = self.recipe, self.recipe.model
        if m.gradient_checkpointing:  # non-reentrant: frozen inputs (LoRA) need no requires_grad trick
            self.model.activation_checkpointing_enable(activation_checkpointing_kwargs={"use_reentrant": False})
        peft_model = lora_.add_lora(self.model, m.lora, self.tokenizer) if m.lora.rank else None
        if m.dtype == "bf16" and needs_fp32_compute(self.accelerator.device):
            if peft_model is None:
                raise ValueError(f"recipe {r.name!r} field model.dtype: bf16 weights that train (no model.lora) would "
                                 "compute in bf16, which this CPU only emulates (~250x slower than fp32); set "
                                 "model.lora.rank > 0 (frozen bf16 weights compute in fp32) or model.dtype: fp32")
            upcast_frozen_weights(self.model)
        return peft_model

    def _make_accelerator(self):
        from accelerate import Accelerator
        from accelerate.state import AcceleratorState, GradientState

        # accelerate keeps a process-wide singleton; chained stages in one process (pipeline API) may differ in
        # mixed precision, so forget the previous run's settings (the process group, if any, is kept).
        AcceleratorState._reset_state(reset_partial_state=False)
        GradientState._reset_state()
        cpu = not torch.cuda.is_available()
        mp = "bf16" if self.recipe.optim.mixed_precision == "bf16" else "no"
        if mp == "bf16" and cpu and not cpu_has_fast_bf16():
            warnings.warn("optim.mixed_precision=bf16 but this CPU has no AVX512-BF16/AMX: training in fp32 instead")
            mp = "no"
        return Accelerator(cpu=cpu, mixed_precision=mp)

    def _rows_per_micro_step(self) -> int:
        o = self.recipe.optim
        rows = o.batch_size // (self.world * o.grad_accum)
        if rows * self.world * o.grad_accum != o.batch_size:
            raise ValueError(
                f"recipe {self.recipe.name!r} field optim.batch_size: global batch {o.batch_size} is not divisible "
                f"by processes ({self.world}) x grad_accum ({o.grad_accum})"
            )
        return rows

    def _load_data(self) -> None:
        """Read and encode every file once: training sources (mixture), validation split, QA pairs."""
        r = self.recipe
        enc = dict(vision=hasattr(self.model.config, "vision_config"), image_processor=self.image_processor,
                   image_root=r.data.image_root)
        self.train_sets = [load_examples(s.path, self.tokenizer, limit=r.data.max_train_samples, source=i, **enc)
                           for i, s in enumerate(r.data.train)]
        self.val_set = load_examples(r.data.val, self.tokenizer, limit=r.data.max_val_samples, **enc) if r.data.val else []
        qa = r.eval.qa
        self.qa_set = load_examples(qa.path, self.tokenizer, limit=qa.max_samples, **enc) if qa.path else []
        self.sampler = MixtureSampler([len(s) for s in self.train_sets], [s.weight for s in r.data.train], r.seed)
        recorded = dataset_settings([s.path for s in r.data.train if not s.path.endswith("_qa.json")])
        if recorded["camera"] is not None:  # the closed loop renders what this model was trained on (config.json)
            self.model.config.wamdiff_camera = recorded["camera"]
        if recorded["answer_format"] is not None:  # a planner spec then needs no fmt=
            self.model.config.wamdiff_answer_format = recorded["answer_format"]

    def _grids(self):
        """The vocabulary's value grids when the recipe asks for ordinal targets (`diffusion.ordinal_sigma`)."""
        if self.recipe.diffusion.ordinal_sigma <= 0:
            return None
        from wamdiff.diffusion.grids import Grids
        from wamdiff.driving.answer_format import vocabulary_grids

        axes = vocabulary_grids(self.tokenizer)
        return Grids.build(axes, self.accelerator.device) if axes else None

    def _distribute(self) -> None:
        """Place the model for the launch: one process, plain data parallel, or FSDP / DeepSpeed.

        The optimiser and scheduler are stepped by hand once per optimiser step (a prepared scheduler steps
        num_processes times per step when batches are not split). Plain data parallelism is an explicit
        gradient all-reduce: the diffusion forward drives the HF model's submodules directly (model.model...),
        which a DDP wrapper would not see. FSDP / DeepSpeed prepare model + optimiser as accelerate does.
        """
        from accelerate.utils import DistributedType

        r, dt = self.recipe, self.accelerator.distributed_type
        self.sharded = self.sharded_launch
        self.manual_allreduce = self.world > 1 and not self.sharded
        if self.sharded and self.ema is not None:
            raise ValueError(f"recipe {r.name!r} field optim.ema_decay: the weight average runs on one process or plain "
                             "data parallel, not under FSDP / DeepSpeed")
        if self.sharded and self.lora is not None:
            raise ValueError(f"recipe {r.name!r} field model.lora: LoRA runs on one process or plain data parallel "
                             "(torchrun / accelerate launch without an FSDP or DeepSpeed config); its adapters are small")
        if self.manual_allreduce:
            self.model.to(self.accelerator.device)
            for p in self.model.parameters():  # identical start on every process
                torch.distributed.broadcast(p.data, src=0)
        elif self.sharded:  # GPU clusters (configs/accelerate/fsdp.yaml, deepspeed_zero2.yaml)
            if dt == DistributedType.DEEPSPEED and r.optim.grad_accum != 1:
                raise ValueError(f"recipe {r.name!r} field optim.grad_accum: DeepSpeed steps inside backward; "
                                 "use grad_accum 1 (a larger optim.batch_size) or the FSDP config")
            self.model, self.optimizer = self.accelerator.prepare(self.model, self.optimizer)
        else:
            self.model = self.accelerator.prepare(self.model)

    # -------------------------------------------------------------------------------------- properties

    @property
    def unwrapped(self):
        return self.accelerator.unwrap_model(self.model)

    def log(self, values: dict) -> None:
        self.logger.log(self.step, {k: float(v) for k, v in values.items()})

    # -------------------------------------------------------------------------------------- data

    def next_global_batch(self) -> Batch:
        draws = self.sampler.draw(self.recipe.optim.batch_size)
        examples = [self.train_sets[s][i] for s, i in draws]
        return collate(examples, pad_id=self.pad_id, block_multiple=self.objective.block_multiple)

    def step_inputs(self, step: int) -> StepInputs:
        batch = self.next_global_batch()
        every = self.recipe.teacher.onpolicy_every
        if self.recipe.kind is RecipeKind.DISTILL_MODEL and every > 0 and step % every == 0:
            batch = self.onpolicy_refresh(batch)
        return self.objective.noise(batch, step_generator(self.recipe.seed, step))

    def my_rows(self, inputs: StepInputs, micro: int) -> StepInputs:
        """Rows of micro-step `micro` that belong to this process (global layout: [micro][rank][rows])."""
        start = (micro * self.world + self.rank) * self.micro_rows
        part = inputs.rows(start, start + self.micro_rows).to(self.accelerator.device)
        return self.objective.with_copies(part)

    # -------------------------------------------------------------------------------------- on-policy

    @torch.no_grad()
    def onpolicy_refresh(self, batch: Batch) -> Batch:
        """The student greedily decodes every answer (fixed steps per block); its decodes replace x_0.

        Each process decodes its share of the global batch; the decodes are gathered so every process
        re-collates the same global batch.
        """
        from accelerate.utils import gather_object

        from wamdiff.decoding import DecodeConfig, generate

        r = self.recipe
        B = r.block_size
        steps = r.teacher.onpolicy_steps_per_block or B
        cfg = DecodeConfig(mode="block", block_size=B, strategy="fixed", max_steps=steps,
                           max_new_tokens=batch.x0.shape[1])
        n = len(batch)
        per = math.ceil(n / self.world)
        mine = batch.examples[self.rank * per : (self.rank + 1) * per]
        model = self.unwrapped
        was_training = model.training
        model.eval()
        # no autocast: the decoder's static KV cache is allocated in the weights' dtype
        gens = generate(model, self.tokenizer, [e.prompt for e in mine], cfg) if mine else []
        model.train(was_training)
        ids = [list(g.token_ids) for g in gens]
        if self.world > 1:
            ids = gather_object(ids)
        answers = [torch.tensor(t if t else [self.pad_id], dtype=torch.long) for t in ids[:n]]
        return collate(batch.examples, pad_id=self.pad_id, block_multiple=self.objective.block_multiple, answer_ids=answers)

    # -------------------------------------------------------------------------------------- one step

    def train_step(self, step: int) -> dict:
        r, acc = self.recipe, self.accelerator
        inputs = self.step_inputs(step)
        tokens = inputs.batch.n_tokens(self.objective.streams) * self.objective.copies
        self.model.train()
        total = torch.zeros(())
        extra: dict[str, torch.Tensor] = {}
        model = self.unwrapped  # the HF module itself (forward hooks of FSDP/DeepSpeed live on it)
        for micro in range(r.optim.grad_accum):
            part = self.my_rows(inputs, micro)
            with acc.autocast():
                loss, logs = self.objective.loss(model, part)
            acc.backward(loss / r.optim.grad_accum)
            total += loss.detach().float() / r.optim.grad_accum
            for k, v in logs.items():
                extra[k] = extra.get(k, 0) + v.float() / r.optim.grad_accum
        if self.manual_allreduce:
            self.allreduce_gradients()
        values = {"loss": total, **extra}
        if self.world > 1:
            values = {k: acc.reduce(v.reshape(1), reduction="mean")[0] for k, v in values.items()}
        loss_value = float(values["loss"])
        if not math.isfinite(loss_value):
            raise TrainingDiverged(
                f"non-finite training loss {loss_value} at step {step + 1} of recipe {r.name!r} ({r.kind}, "
                f"output {self.output_dir}); last finite checkpoint: {ckpt.latest_checkpoint(self.output_dir)}. "
                f"Lower optim.lr, raise diffusion.min_rate or use optim.mixed_precision=no."
            )
        clip = r.optim.grad_clip if r.optim.grad_clip else float("inf")
        norm = acc.clip_grad_norm_(self.model.parameters(), clip)
        grad_norm = float(norm) if norm is not None else 0.0  # DeepSpeed clips inside its engine (None here)
        if not math.isfinite(grad_norm):
            raise TrainingDiverged(
                f"non-finite gradient norm {grad_norm} at step {step + 1} of recipe {r.name!r} ({r.kind}, loss "
                f"{loss_value:.4g}, output {self.output_dir})."
            )
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad(set_to_none=True)
        if self.ema is not None:
            self._update_average()
        out = {k: float(v) for k, v in values.items()}
        out["grad_norm"] = grad_norm
        out["tokens"] = tokens
        return out

    def allreduce_gradients(self) -> None:
        """Average gradients over processes in one flat buffer (what DDP does, without wrapping the model)."""
        from torch._utils import _flatten_dense_tensors, _unflatten_dense_tensors

        grads = [p.grad for p in self.model.parameters() if p.requires_grad]
        missing = [i for i, g in enumerate(grads) if g is None]
        params = [p for p in self.model.parameters() if p.requires_grad]
        for i in missing:  # a parameter unused on this process still takes part (zeros)
            params[i].grad = torch.zeros_like(params[i])
            grads[i] = params[i].grad
        flat = _flatten_dense_tensors(grads)
        torch.distributed.all_reduce(flat)
        flat /= self.world
        for g, synced in zip(grads, _unflatten_dense_tensors(flat, grads)):
            g.copy_(synced)

    # -------------------------------------------------------------------------------------- evaluation

    @torch.no_grad()
    def evaluate(self) -> dict:
        """Validation on the held-out split with fixed noise: loss and token accuracy (masked-token accuracy
        for diffusion kinds, next-token accuracy for ar_sft), plus teacher-student top-5 overlap for
        distillation."""
        from wamdiff.training.evaluation import validation_metrics

        if not self.val_set:
            return {}
        model = self.unwrapped
        was = model.training
        model.eval()
        with self.accelerator.autocast():
            out = validation_metrics(model, self.objective, self.val_set, batch_size=self.recipe.eval.batch_size,
                                     pad_id=self.pad_id, seed=self.recipe.seed, device=self.accelerator.device)
        model.train(was)
        return out

    @torch.no_grad()
    def qa_exact_match(self) -> dict:
        from wamdiff.training.evaluation import qa_exact_match

        if not self.qa_set:
            return {}
        model = self.unwrapped
        was = model.training
        model.eval()
        out = qa_exact_match(model, self.tokenizer, self.qa_set, self.recipe)  # fp32: see onpolicy_refresh
        model.train(was)
        return out

    def _main_only(self, fn) -> dict:
        """Run an evaluation on the main process only; the others wait."""
        out = fn() if self.is_main else {}
        self.accelerator.wait_for_everyone()
        return out

    # -------------------------------------------------------------------------------------- checkpoints

    def _save_model(self, directory: Path, state_dict: dict | None) -> None:
        """save_model layout; under FSDP/DeepSpeed from the gathered full state dict."""
        from wamdiff.models.build import save_model

        if state_dict is None:
            if self.lora is not None:  # merged into plain weights (stored dtype): a checkpoint like any other
                restore_stored_weights(self.unwrapped)
                lora_.save_adapter(self.lora, directory / lora_.ADAPTER_DIR)  # and the adapters, in peft's layout
                self.model = lora_.merge(self.lora)
                self.lora = None
            save_model(self.unwrapped, self.tokenizer, directory, self.image_processor)
            if self.recipe.model.dtype == "bf16" and needs_fp32_compute(self.accelerator.device):
                upcast_frozen_weights(self.unwrapped)  # the final evaluation runs at fp32 speed too
        else:
            from wamdiff.models.checksums import forget_checksums, record_checksums

            directory.mkdir(parents=True, exist_ok=True)
            forget_checksums(directory)
            self.unwrapped.save_pretrained(directory, state_dict=state_dict)
            record_checksums(directory)
            self.tokenizer.save_pretrained(directory)
            if hasattr(self.unwrapped.config, "vision_config"):
                self.image_processor.save_pretrained(directory)

    def save_checkpoint(self) -> None:
        from accelerate.utils import gather_object

        rngs = gather_object([ckpt.rng_state()]) if self.world > 1 else [ckpt.rng_state()]
        final = ckpt.checkpoint_root(self.output_dir) / f"step-{self.step:06d}"
        full = self.accelerator.get_state_dict(self.model) if self.sharded else None  # collective
        if self.sharded:  # sharded optimiser state: every process writes its part (collective)
            shards = final.with_name(final.name + ".shards")
            self.accelerator.save_state(str(shards))
            self.accelerator.wait_for_everyone()  # every shard on disk before the main process renames
        if self.is_main:

            def write(tmp: Path) -> None:
                if self.lora is not None:  # only the adapters train: the base weights are init's
                    lora_.save_adapter(self.lora, tmp / lora_.ADAPTER_DIR)
                else:
                    self._save_model(tmp / "model", full)
                if self.sharded:
                    os.replace(shards, tmp / "accelerate")
                if self.ema is not None:
                    from safetensors.torch import save_file

                    save_file({n: t.contiguous() for n, t in self.ema.items()}, str(tmp / EMA_FILE))
                ckpt.save_training_state(tmp, optimizer=None if self.sharded else self.optimizer, scheduler=self.scheduler, step=self.step,
                                         extra={"sampler": self.sampler.state_dict(), "recipe": self.recipe.to_dict(),
                                                "world_size": self.world})
                for rank, state in enumerate(rngs):
                    ckpt.save_rng(tmp, rank, state)

            ckpt.atomic_dir(final, write)
            ckpt.prune_checkpoints(self.output_dir, self.recipe.checkpoint.keep_last)
        self.accelerator.wait_for_everyone()

    def _steps_done(self) -> tuple[int, str]:
        """Steps an earlier run in output_dir already trained (its newest checkpoint or final/), and where."""
        found = ckpt.checkpoints(self.output_dir)
        done, where = (found[-1][0], str(found[-1][1])) if found else (0, "")
        final_steps = ckpt.final_steps(self.output_dir)
        if final_steps is not None and final_steps > done:
            done, where = final_steps, str(self.output_dir / "final")
        return done, where

    def _refuse_existing_run(self) -> None:
        """A fresh run must not write over an earlier one (pruning would even keep the OLD checkpoints)."""
        done, where = self._steps_done()
        if where or (self.output_dir / "final").exists():
            raise UserError(f"{self.output_dir}: output_dir already holds a run ({where or self.output_dir / 'final'}"
                            f"{f', {done} steps' if done else ''}); add --resume to continue it, or set another "
                            "output_dir (--set output_dir=...), or delete it")

    def _pick_checkpoint(self) -> ckpt.TrainingState | None:
        """The newest checkpoint that reads back whole; a broken newer one is skipped with a warning."""
        from wamdiff.models.build import unreadable_weights
        from wamdiff.models.checksums import verify_checksums

        r = self.recipe
        done, where = self._steps_done()
        if done > r.optim.steps:
            raise UserError(f"{where}: output_dir {self.output_dir} has already trained {done} steps, more than "
                            f"optim.steps={r.optim.steps}: resuming would overwrite final/ with a shorter run's weights; "
                            f"raise optim.steps to at least {done} or set another output_dir")
        found = ckpt.checkpoints(self.output_dir)
        if not found:
            if self.is_main:
                note = " (final/ is replaced by this run)" if (self.output_dir / "final").exists() else ""
                print(f"[train] --resume: no checkpoint under {ckpt.checkpoint_root(self.output_dir)}; starting fresh{note}")
            return None
        problems = []
        for _, path in reversed(found):
            try:
                state = ckpt.read_training_state(path, rank=self.rank, with_optimizer=not self.sharded_launch)
                if r.model.lora.rank:  # a LoRA checkpoint holds the adapters only (the base is model.init)
                    folder = path / lora_.ADAPTER_DIR if (path / lora_.ADAPTER_DIR).is_dir() else path
                    if unreadable_weights(folder) is not None or not lora_.has_adapter(path):
                        raise UserError(f"{folder}: unreadable adapter weights")
                else:
                    bad = None if self.sharded_launch else unreadable_weights(path / "model")
                    if bad is not None or not is_model_dir(path / "model"):
                        raise UserError(f"{bad or path / 'model'}: unreadable model weights")
                    verify_checksums(path / "model")  # bytes changed under an intact header: fall back too
            except UserError as err:
                problems.append(str(err))
                if self.is_main:
                    warnings.warn(f"--resume: skipping checkpoint {path}: {err}", stacklevel=2)
                if self.sharded_launch:  # every process must load the same shards: no fallback there
                    raise
                continue
            if problems and self.is_main:
                warnings.warn(f"--resume: falling back to the older checkpoint {path}", stacklevel=2)
            return state
        raise UserError(f"{ckpt.checkpoint_root(self.output_dir)}: no readable checkpoint ({problems[0]}); delete the "
                        "broken checkpoints or set another output_dir")

    @property
    def sharded_launch(self) -> bool:
        """FSDP / DeepSpeed with several processes (known before `_distribute` runs)."""
        from accelerate.utils import DistributedType

        return self.world > 1 and self.accelerator.distributed_type in (DistributedType.FSDP, DistributedType.DEEPSPEED)

    def _resume(self, state: ckpt.TrainingState) -> None:
        from wamdiff.models.build import load_model

        last = state.path
        if self.sharded:  # weights + sharded optimiser state through accelerate (collective)
            self.accelerator.load_state(str(last / "accelerate"))
            saved_state = ckpt.apply_training_state(state, optimizer=None, scheduler=self.scheduler)
        elif self.lora is not None:
            lora_.load_adapter(self.lora, last)
            saved_state = ckpt.apply_training_state(state, optimizer=self.optimizer, scheduler=self.scheduler)
        else:
            saved, _ = load_model(last / "model")
            self.unwrapped.load_state_dict(saved.state_dict())
            del saved
            saved_state = ckpt.apply_training_state(state, optimizer=self.optimizer, scheduler=self.scheduler)
        self.sampler.load_state_dict(saved_state["sampler"])
        if self.ema is not None and (last / EMA_FILE).is_file():
            from safetensors.torch import load_file

            self.ema = {n: t.float() for n, t in load_file(str(last / EMA_FILE)).items()}
        self.step = state.step
        self.resumed_from = last
        if self.is_main:
            print(f"[train] resumed {self.recipe.name!r} from {last} at step {self.step}")

    def save_final(self) -> Path:
        final = self.output_dir / "final"
        full = self.accelerator.get_state_dict(self.model) if self.sharded else None  # collective
        if self.is_main:

            def write(tmp: Path) -> None:
                self._save_model(tmp, full)
                ckpt.write_final_steps(tmp, self.step)

            ckpt.atomic_dir(final, write)
        self.accelerator.wait_for_everyone()
        return final

    # -------------------------------------------------------------------------------------- loop

    def run(self) -> RunResult:
        r = self.recipe
        t_start = time.perf_counter()
        summary: dict = {"recipe": r.name, "kind": r.kind.value, "block_size": r.block_size, "processes": self.world,
                         "mixed_precision": r.optim.mixed_precision, "global_batch": r.optim.batch_size}
        if r.kind.distills:
            summary.update(teacher=r.teacher.path, teacher_kind=r.teacher.kind, teacher_block_size=r.teacher_block_size)
        if self.resumed_from is None:
            if r.eval.qa.at_start and self.qa_set:
                qa = self._main_only(self.qa_exact_match)
                summary.update({f"{k}_start": v for k, v in qa.items()})
                self.log({f"{k}_start": v for k, v in qa.items()})
            if r.eval.at_start:
                val = self._main_only(self.evaluate)
                summary.update({f"{k}_start": v for k, v in val.items()})
                self.log(val)
        else:
            summary["resumed_from"] = str(self.resumed_from)

        progress = None
        if r.log.progress and self.is_main:
            from tqdm.auto import tqdm

            progress = tqdm(total=r.optim.steps, initial=self.step, desc=r.name, dynamic_ncols=True)
        window_tokens, window_time, losses = 0, 0.0, []
        train_tokens, train_time = 0, 0.0
        try:
            while self.step < r.optim.steps:
                t0 = time.perf_counter()
                out = self.train_step(self.step)
                dt = time.perf_counter() - t0
                self.step += 1
                window_tokens += out["tokens"]
                window_time += dt
                train_tokens += out["tokens"]
                train_time += dt
                losses.append(out["loss"])
                if self.step % max(1, r.log.every) == 0 or self.step == r.optim.steps:
                    lrs = {f"lr/{g['name']}": g["lr"] for g in self.optimizer.param_groups if not g["name"].endswith("_nodecay")}
                    logged = {k: v for k, v in out.items() if k != "tokens"}
                    self.log({**logged, **lrs, "tokens_per_s": window_tokens / max(window_time, 1e-9)})
                    window_tokens, window_time = 0, 0.0
                if progress is not None:
                    progress.update(1)
                    progress.set_postfix(loss=f"{out['loss']:.4f}")
                if r.eval.every and self.step % r.eval.every == 0 and self.step < r.optim.steps:
                    self.log(self._main_only(self.evaluate))
                if r.checkpoint.every and self.step % r.checkpoint.every == 0:
                    self.save_checkpoint()
                if self.step_callback is not None:
                    self.step_callback(self.step)
        finally:
            if progress is not None:
                progress.close()

        if self.ema is not None:
            self._use_average()
        final = self.save_final()
        if r.eval.at_end:
            val = self._main_only(self.evaluate)
            summary.update(val)
            self.log(val)
        if r.eval.qa.at_end and self.qa_set:
            qa = self._main_only(self.qa_exact_match)
            summary.update({f"{k}_end": v for k, v in qa.items()})
            self.log({f"{k}_end": v for k, v in qa.items()})
        tail = losses[-max(1, min(10, len(losses))):]
        summary.update(
            steps=self.step,
            final_train_loss=sum(tail) / len(tail) if tail else None,
            train_tokens_per_s=train_tokens / train_time if train_time else None,
            wall_s=time.perf_counter() - t_start,
            final_model=str(final),
        )
        if self.is_main:  # the whole run's curves, the part before a resume included
            history = read_metrics_csv(self.logger.path)
            before = {k: v[-1][1] for k, v in history.items() if k.endswith("_start")}
            before |= {f"{k}_start": v[0][1] for k, v in history.items() if k.startswith("val_") and v[0][0] == 0}
            summary |= {k: v for k, v in before.items() if k not in summary}
            summary["history"] = {k: v for k, v in history.items() if not k.startswith("lr/")}
            write_json(self.output_dir / "metrics.json", summary)
        self.logger.close()
        return RunResult(self.output_dir, summary)


@contextmanager
def flushed_denormals():
    """Denormal floats flushed to zero for the block (Adam's squared small gradients go denormal: ~10x slower CPU
    arithmetic), then the process's previous setting back: it is process-wide, and code that runs after a training
    run in the same process (a library user's, hypothesis' float strategies) expects IEEE subnormals."""
    was_flushed = sys.float_info.min / 2 == 0.0
    torch.set_flush_denormal(True)
    try:
        yield
    finally:
        torch.set_flush_denormal(was_flushed)


def train(recipe: dict | str | Path | Recipe, overrides: dict | list[str] | None = None, *, resume: bool = False,
          step_callback: Callable[[int], None] | None = None) -> RunResult:
    """Run one recipe in-process; chain stages with `train(next, {"model.init": str(prev.final_model)})`."""
    from contextlib import nullcontext

    from wamdiff.outdir import claim_output_dir

    r = recipe if isinstance(recipe, Recipe) else load_recipe(recipe, overrides)
    # one run per output_dir (checked writable before anything loads); only global rank 0 writes there
    lock = claim_output_dir(r.output_dir, option="output_dir") if int(os.environ.get("RANK", "0")) == 0 else nullcontext()
    with lock, flushed_denormals():
        return Trainer(r, resume=resume, step_callback=step_callback).run()
