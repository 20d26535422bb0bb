"""Frozen weights stored in bf16, arithmetic in fp32: half the memory of fp32 weights at fp32 speed.

On a CPU without native bf16 dot products (no AVX512-BF16 / AMX) a bf16 matmul is emulated: 0.3 GFLOP/s
against 76 GFLOP/s in fp32 on this machine (2048x6144 weights, 2 threads). `upcast_frozen_weights(model)`
keeps every frozen bf16 parameter as it is stored and registers a parametrization that hands each op an fp32
copy (one layer's worth at a time), so a LoRA run on a 2B model holds 4 GB of weights, not 8.5 GB, and
computes at fp32 speed. `restore_stored_weights` takes the parametrizations off again (before merging LoRA
adapters into the weights, or saving). GPUs and bf16-capable CPUs compute in bf16 directly and need neither.

`INT8` (`DecodeConfig(dtype="int8")`, a bench grid dtype): inference with every `nn.Linear` dynamically quantized
(int8 weights per output channel, activations quantized per call; torch's fbgemm/x86 kernels). It shortens the
prefill, which dominates a one-forward decode (docs/development/results-notes.md, "int8 weights"); CPU only (`quantize_linear_int8`).
"""

from __future__ import annotations

import warnings
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


INT8 = torch.qint8  # the dtype name "int8" stands for: fp32 activations, int8 Linear weights (CPU)


def is_int8(model) -> bool:
    """Whether the model's Linear layers are dynamically quantized (`quantize_linear_int8`)."""
    return any(isinstance(m, torch.ao.nn.quantized.dynamic.Linear) for m in model.modules())


def precision_name(model) -> str:
    """The weights' precision as a name: "int8" (`quantize_linear_int8`) or the first parameter's dtype ("float32")."""
    return "int8" if is_int8(model) else str(next(model.parameters()).dtype).replace("torch.", "")


def quantize_linear_int8(model):
    """In place: every `nn.Linear` of an fp32 model becomes a dynamically quantized int8 Linear (per-channel
    weights); embeddings, norms and convolutions stay fp32. For inference on a CPU; returns the model."""
    if next(model.parameters()).device.type != "cpu":
        raise ValueError("int8 weights run on the CPU only (torch's dynamic quantization has no GPU kernels)")
    if is_int8(model):
        return model
    model.float().eval()
    with warnings.catch_warnings():  # torch 2.13 marks the quantized-tensor constructors deprecated; pinned here
        warnings.filterwarnings("ignore", message=".*quantize_per_tensor.*deprecated", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*torch.ao.quantization.*deprecated", category=DeprecationWarning)
        torch.ao.quantization.quantize_dynamic(
            model, {torch.nn.Linear: torch.ao.quantization.per_channel_dynamic_qconfig}, inplace=True)
    return model


def cast_model(model, dtype: torch.dtype):
    """In place: the model in `dtype` (`INT8`: fp32 with int8 Linear layers). Returns the model."""
    if dtype == INT8:
        return quantize_linear_int8(model)
    if is_int8(model):
        raise ValueError(f"a model with int8 Linear layers cannot be cast to {dtype}; load it again")
    return model.to(dtype)
