"""Real-size decode step costs and the speedup they predict, on a random Qwen3-VL of published sizes.

Builds a Qwen3-VL stand-in of published widths and depths (random weights, built in memory on the device; no
download), converts it to a block-diffusion model and measures, inside the real decode loops
(`decoding.bench.timing.step_cost`), one AR step against one block step of B query rows, at each batch size and with
CUDA graphs on and off. It then measures this machine's step-cost model for that architecture
(`decoding.cost_model.measure_step_costs`) and prices a shipped student's measured decode trace (its `dial_curve.json`:
the forwards each test prompt took at the quoted setting, hence its tokens per forward) at real size with the dial's
own predictor (`decoding.dial.predict_ms_per_plan`): the speedup that student's decoding would give at that size.

Tokens per forward come from the small model's trace: a real-size student decodes with its own confidences, so the
prediction assumes it unmasks at the same rate. The prompt is one camera image of IMAGE pixels plus the driving text.

    python tools/gpu_step_costs.py --out runs/gpu/step_costs.json            # on a CUDA machine
    python tools/gpu_step_costs.py --device cpu --text-layers 2 --vision-layers 1 --batches 1 --tokens 8  # a CPU check
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
import torch

PAPER = {"speedup_paradigm": 2.8, "speedup_kernels_graphs": 15.1, "ms_per_token": 1.5, "tokens_per_s": 673}


def build(size: str, text_layers, vision_layers, dtype, device, block_size: int):
    from transformers import Qwen3VLForConditionalGeneration
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from wamdiff.models.convert import to_diffusion
    from wamdiff.models.standin import PUBLISHED_PROCESSOR, standin_config, standin_corpus
    from wamdiff.models.tokenizer import build_qwen2_style_tokenizer
    from wamdiff.models.tokens import MASK

    tok = build_qwen2_style_tokenizer(standin_corpus())
    if tok.mask_token is None:
        tok.add_special_tokens({"mask_token": MASK})
    config = standin_config(size, text_layers=text_layers, vision_layers=vision_layers, tokenizer=tok)
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3VLForConditionalGeneration._from_config(config, dtype=dtype).eval()
    model = to_diffusion(model, block_size, tokenizer=tok)
    keys = ("patch_size", "temporal_patch_size", "merge_size", "image_mean", "image_std", "size")
    processor = Qwen2VLImageProcessorPil(**{k: PUBLISHED_PROCESSOR[k] for k in keys})
    return model, tok, processor


def driving_prompt(tok, processor, width: int, height: int):
    from wamdiff.driving.prompts import PROMPT_TEMPLATE
    from wamdiff.models.processor import encode_prompt

    text = PROMPT_TEMPLATE.format(command="straight", vx=8.0, vy=0.1, ax=0.2, ay=0.0)
    image = np.random.default_rng(0).integers(0, 256, (height, width, 3), dtype=np.uint8)
    return encode_prompt(tok, text, [image], vision=True, image_processor=processor)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="qwen3-vl-2b")
    ap.add_argument("--text-layers", type=int, default=None, help="default: the published depth")
    ap.add_argument("--vision-layers", type=int, default=None, help="default: the published depth")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bf16", choices=["bf16", "fp32"])
    ap.add_argument("--blocks", default="4,8,16,17,32", help="block sizes B (17: one block holding a delta answer)")
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--tokens", type=int, default=64, help="tokens decoded per timed loop")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--image", default="640x352", help="camera image WIDTHxHEIGHT in pixels")
    ap.add_argument("--curve", type=Path, default=Path("checkpoints/small/small_student_dagger4/dial_curve.json"),
                    help="a student's measured decode trace (dial_curve.json) to price at this size")
    ap.add_argument("--out", type=Path, default=Path("runs/gpu/step_costs.json"))
    a = ap.parse_args()

    from wamdiff.decoding.bench.timing import step_cost
    from wamdiff.decoding.config import DecodeConfig
    from wamdiff.decoding.cost_model import measure_step_costs
    from wamdiff.decoding.dial import DialCurve, predict_ar_ms_per_plan, predict_ms_per_plan, prefill_share
    from wamdiff.models.tokens import PAD, token_id

    blocks = [int(b) for b in a.blocks.split(",")]
    batches = [int(n) for n in a.batches.split(",")]
    width, height = (int(v) for v in a.image.lower().split("x"))
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    t0 = time.perf_counter()
    model, tok, processor = build(a.size, a.text_layers, a.vision_layers, dtype, a.device, max(blocks))
    prompt = driving_prompt(tok, processor, width, height)
    if prompt.pixel_values is not None:
        prompt.pixel_values = prompt.pixel_values.to(dtype)
    params = sum(p.numel() for p in model.parameters())
    print(f"built {a.size} ({params / 1e9:.2f} B parameters, {a.dtype}) on {a.device} in {time.perf_counter() - t0:.0f} s; "
          f"prompt {prompt.input_ids.numel()} tokens", flush=True)
    report = {"size": a.size, "parameters": params, "dtype": a.dtype, "device": a.device,
              "device_name": torch.cuda.get_device_name(a.device) if a.device.startswith("cuda") else "cpu",
              "torch": torch.__version__, "prompt_tokens": int(prompt.input_ids.numel()), "image": a.image,
              "tokens_per_loop": a.tokens, "step_costs": [], "paper": PAPER}

    graph_modes = [True, False] if a.device.startswith("cuda") else [False]
    for graphs in graph_modes:
        for n in batches:
            r = step_cost(model, tok, prompt, blocks, n_tokens=a.tokens, repeats=a.repeats, batch=n, cuda_graphs=graphs)
            row = {"cuda_graphs": graphs, "batch": n, **{k: round(v, 4) for k, v in r.items()}}
            report["step_costs"].append(row)
            print(json.dumps(row), flush=True)

    # the cost model of this architecture on this device (CUDA graphs on, as the decoders run), then the prices
    config = DecodeConfig()
    costs = measure_step_costs(model, prompt, config, pad_id=token_id(tok, PAD), block_sizes=(17, 32),
                               batches=tuple(batches), repeats=a.repeats, progress=lambda s: print(s, flush=True))
    report["cost_model"] = {"step_ms": costs.step_ms, "rows": costs.rows, "prefill_ms": costs.prefill_ms,
                            "batches": costs.batches}
    if a.curve.is_file():
        curve = DialCurve.load(a.curve)
        static = config.static_shapes(torch.device(a.device))
        preds = []
        for point in curve.points:
            for n in batches:
                ms = predict_ms_per_plan(point, costs, n, lean=config.lean, static_shapes=static)
                ar_ms = predict_ar_ms_per_plan(curve.ar_tokens, costs, n, lean=config.lean)
                tokens = float(np.mean(point.tokens))
                preds.append({"setting": point.setting, "batch": n, "tpf": round(point.tpf, 3),
                              "ms_per_plan": round(ms, 3), "ar_ms_per_plan": round(ar_ms, 3),
                              "speedup": round(ar_ms / ms, 3),
                              "prefill_share": round(prefill_share(point, costs, n, lean=config.lean,
                                                                   static_shapes=static), 3),
                              "ms_per_token": round(ms / tokens, 3), "tokens_per_s": round(n * tokens * 1e3 / ms, 1),
                              "ar_ms_per_token": round(ar_ms / tokens, 3)})
                print(json.dumps(preds[-1]), flush=True)
        report["predicted"] = {"curve": str(a.curve), "points": preds}
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {a.out} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
