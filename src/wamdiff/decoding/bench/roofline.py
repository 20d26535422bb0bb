"""A roofline estimate beside the measured step costs: the FLOPs of each kind of forward (counted from the
architecture), this machine's measured matmul rate, and what is left over once the arithmetic is paid for
(per-call overhead: Python, kernel launches, small-matrix inefficiency). It says which regime a step is in:
an AR step of a small model is overhead-bound, a 32-row block step close to compute-bound -- and so where the
levers are (fewer FLOPs per decoded token when compute-bound, fewer forwards or less overhead otherwise).

FLOPs per query row and text-decoder layer: q/k/v/o projections 2*H*(Hq + 2*Hkv) + 2*Hq*H, attention
2*2*Hq*keys (the slot cache's every key: SDPA computes the masked ones too), MLP 2*3*H*I; plus 2*H*V per row with
logits. The vision tower (prefill only): patch embedding, per-layer qkv / proj / MLP / attention over its image,
the patch mergers.
"""

from __future__ import annotations

import time

import torch

from wamdiff.decoding.cost_model import Forward, StepCosts
from wamdiff.decoding.runner import text_config


def text_flops(model, rows: int, keys: int, logits: int, mlp_rows: int | None = None) -> float:
    """FLOPs of one text-decoder forward of `rows` query rows over `keys` cache slots, `logits` rows with logits and
    `mlp_rows` rows through the last layer's MLP (None: every row)."""
    t = text_config(model)
    h, layers, v, inter = t.hidden_size, t.num_hidden_layers, t.vocab_size, t.intermediate_size
    hd = getattr(t, "head_dim", None) or h // t.num_attention_heads
    hq, hkv = t.num_attention_heads * hd, (t.num_key_value_heads or t.num_attention_heads) * hd
    proj, attn, mlp = 2 * h * (hq + 2 * hkv) + 2 * hq * h, 2 * 2 * hq * keys, 2 * 3 * h * inter
    mlp_rows = rows if mlp_rows is None else mlp_rows
    return layers * rows * (proj + attn) + (layers - 1) * rows * mlp + mlp_rows * mlp + logits * 2 * h * v


def vision_flops(model, images: int, patches: int = 64) -> float:
    """FLOPs of the vision tower for `images` images of `patches` patches each (0 for a text-only model)."""
    vc = getattr(model.config, "vision_config", None)
    if vc is None:
        return 0.0
    hv, iv, m = vc.hidden_size, vc.intermediate_size, vc.spatial_merge_size ** 2
    embed = 2 * vc.in_channels * vc.temporal_patch_size * vc.patch_size ** 2 * hv
    layer = 2 * hv * 3 * hv + 2 * hv * hv + 2 * 2 * hv * iv + 2 * 2 * hv * patches
    merger = 2 * (hv * m) * (hv * m) + 2 * (hv * m) * vc.out_hidden_size  # per merged token
    n_mergers = 1 + len(getattr(vc, "deepstack_visual_indexes", []) or [])
    return images * (patches * (embed + vc.depth * layer) + n_mergers * (patches // m) * merger)


def forward_flops(model, f: Forward, n: int, prompt_len: int, keys: int) -> float:
    if f.kind == "prefill":
        rows = prompt_len + f.rows
        return n * (text_flops(model, rows, keys, f.logits, f.mlp) + vision_flops(model, 1))
    return n * text_flops(model, f.rows, keys, f.logits, f.mlp)


def matmul_gflops(dtype=torch.float32, device="cpu", size: int = 1024, repeats: int = 5) -> float:
    """This machine's dense matmul rate (GFLOP/s, best of `repeats`): the compute roof."""
    a = torch.randn(size, size, dtype=dtype, device=device)
    b = torch.randn(size, size, dtype=dtype, device=device)
    a @ b
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        a @ b
        if a.is_cuda:
            torch.cuda.synchronize()
        best = min(best, time.perf_counter() - t0)
    return 2 * size ** 3 / best / 1e9


def roofline(model, costs: StepCosts, *, block_sizes, peak_gflops: float, keys: int, lean: str = "last_layer") -> list[dict]:
    """Per batch size of the cost model: each forward kind's FLOPs, measured ms, achieved GFLOP/s, the roofline
    time (FLOPs at the matmul rate) and the overhead left (measured - roofline)."""
    tail = lean == "last_layer"
    kinds = [("AR prefill (prompt + vision)", Forward("prefill", 0, 1, 1 if tail else None)),
             ("AR step", Forward("step", 1, 1))]
    for b in block_sizes:
        kinds += [(f"B{b} prefill + first step", Forward("prefill", b, b, b if tail else None)),
                  (f"B{b} step (all rows with logits)", Forward("step", b, b)),
                  (f"B{b} lean step (4 masked rows)", Forward("step", b, 4, 4 if tail else None, gathered=True)),
                  (f"B{b} fused commit + step", Forward("step", 2 * b, b, b if tail else None))]
    out = []
    for n in costs.batches:
        for name, f in kinds:
            flops = forward_flops(model, f, n, costs.prompt_len, keys)
            ms = costs.forward(n, f)
            roof = 1e3 * flops / (peak_gflops * 1e9)
            out.append({"batch": n, "forward": name, "rows": f.rows, "mflop": flops / 1e6, "measured_ms": ms,
                        "gflop_s": flops / max(ms, 1e-9) / 1e6, "roofline_ms": roof, "overhead_ms": ms - roof,
                        "of_peak": roof / ms if ms else None})
    return out


def weight_bytes(model) -> int:
    return sum(p.numel() * p.element_size() for p in model.parameters())
