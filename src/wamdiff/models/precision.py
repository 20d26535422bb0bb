"""Frozen weights stored in bf16, arithmetic in fp32: half the memory of fp32 weights at fp32 speed.

On a CPU without native bf16 dot products (no AVX512-BF16 / AMX) a bf16 matmul is emulated: 0.3 GFLOP/s
against 76 GFLOP/s in fp32 on this machine (2048x6144 weights, 2 threads). `upcast_frozen_weights(model)`
keeps every frozen bf16 parameter as it is stored and registers a parametrization that hands each op an fp32
copy (one layer's worth at a time), so a LoRA run on a 2B model holds 4 GB of weights, not 8.5 GB, and
computes at fp32 speed. `restore_stored_weights` takes the parametrizations off again (before merging LoRA
adapters into the weights, or saving). GPUs and bf16-capable CPUs compute in bf16 directly and need neither.
"""

from __future__ import annotations

from pathlib import Path

import torch
from torch.nn.utils import parametrize

_FLAG = "_wamdiff_compute_dtype"


class _ToFloat32(torch.nn.Module):
    def forward(self, weight: torch.Tensor) -> torch.Tensor:
        return weight.float()


def cpu_has_fast_bf16() -> bool:
    """bf16 only pays on CPUs with native bf16 dot products (emulated bf16 is far slower than fp32)."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # not Linux: let torch decide
    return any(f in flags for f in ("avx512_bf16", "amx_bf16"))


def needs_fp32_compute(device) -> bool:
    """True where bf16 weights should be computed in fp32: a CPU without native bf16."""
    return torch.device(device).type == "cpu" and not cpu_has_fast_bf16()


def upcast_frozen_weights(model) -> int:
    """Give every frozen bf16 parameter an fp32 view for compute (storage unchanged); returns how many.
    Tied parameters (embedding = LM head) stay one bf16 tensor."""
    targets = [(module, name) for module in model.modules() if not isinstance(module, parametrize.ParametrizationList)
               for name, p in module.named_parameters(recurse=False) if p.dtype == torch.bfloat16 and not p.requires_grad]
    for module, name in targets:  # collected first: registering adds modules to the tree
        parametrize.register_parametrization(module, name, _ToFloat32(), unsafe=True)  # unsafe: the dtype changes
    n = len(targets)
    if n:
        setattr(model, _FLAG, torch.float32)
    return n


def restore_stored_weights(model) -> None:
    """Remove the fp32 views: parameters are the stored bf16 tensors again."""
    for module in model.modules():
        if parametrize.is_parametrized(module):
            for name in list(module.parametrizations):
                parametrize.remove_parametrizations(module, name, leave_parametrized=False)
    if hasattr(model, _FLAG):
        delattr(model, _FLAG)


def compute_dtype(model) -> torch.dtype:
    """The dtype the model computes in (fp32 for upcast bf16 weights): what activations and KV caches use."""
    return getattr(model, _FLAG, None) or next(model.parameters()).dtype
