"""Bring your own checkpoint (`make test-byoc`): the sequence of docs/guides/convert.md, command by command,
on a real-width (Qwen3-VL-2B: text 2048, vision 1024, vocab 151,936, patch 16), reduced-depth random
checkpoint with its own Qwen2-style tokenizer and processor file:

  model standin -> model convert -> data generate (text2) -> 2 LoRA steps on 8 samples -> eval pdms with the
  merged checkpoint as planner on 4 scenes -> bench --quick

Each step is the CLI in its own process, as a user runs it; nothing is downloaded.
"""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from safetensors import safe_open

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.slow


def wamdiff(*args: str, cwd: Path = ROOT) -> str:
    env = {**os.environ, "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "2"), "HF_HUB_DISABLE_PROGRESS_BARS": "1"}
    res = subprocess.run([sys.executable, "-m", "wamdiff.cli", *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, f"wamdiff {' '.join(args)} failed ({res.returncode}):\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def test_bring_your_own_checkpoint_end_to_end(tmp_path):
    qwen, b8, data, test, run = (tmp_path / n for n in ("qwen3-vl", "b8", "data", "test", "run"))
    # 1. a user's checkpoint: HF layout, published widths, 2 + 2 layers, Qwen2-style tokenizer without our tokens
    wamdiff("model", "standin", "--text-layers", "2", "--vision-layers", "2", "--out", str(qwen))
    config = json.loads((qwen / "config.json").read_text())
    assert config["text_config"]["hidden_size"] == 2048 and config["text_config"]["vocab_size"] == 151936
    assert config["vision_config"]["hidden_size"] == 1024 and config["vision_config"]["patch_size"] == 16
    assert "<|mask|>" not in (qwen / "tokenizer.json").read_text()

    # 2. conversion: mask / bin tokens added, settings recorded, weights (bf16) and processor kept
    wamdiff("model", "convert", str(qwen), "--block-size", "8", "--out", str(b8))
    converted = json.loads((b8 / "config.json").read_text())
    assert converted["diffusion"]["block_size"] == 8 and converted["dtype"] == "bfloat16"
    assert json.loads((b8 / "preprocessor_config.json").read_text())["patch_size"] == 16

    # 3. 8 WAM-Diff2 JSON training samples in text2, and 4 test scenes
    wamdiff("data", "generate", "--family", "highway,merge", "--split", "train", "--n", "4", "--fmt", "text2",
            "--workers", "1", "--out", str(data))
    wamdiff("data", "generate", "--family", "highway,merge", "--split", "test", "--n", "2", "--fmt", "text2",
            "--workers", "1", "--out", str(test))
    samples = json.loads((data / "train.json").read_text())
    assert len(samples) == 8 and "," in samples[0]["conversations"][1]["value"]

    # 4. 2 LoRA steps (the 2B recipe: bf16 weights, gradient checkpointing, adapters), merged final model
    wamdiff("train", "--recipe", "configs/recipes/lora/block8.yaml", "--set", f"model.init={b8}",
            "--set", f"data.train=[{data / 'train.json'}]", "--set", "data.val=null", "--set", "eval.qa.path=null",
            "--set", "optim.steps=2", "--set", "optim.batch_size=4", "--set", "optim.grad_accum=2",
            "--set", f"output_dir={run}")
    final = run / "final"
    metrics = json.loads((run / "metrics.json").read_text())
    assert metrics["steps"] == 2 and metrics["final_train_loss"] > 0
    keys = [k for f in final.glob("*.safetensors") for k in safe_open(str(f), "pt").keys()]
    assert keys and not any(w in k for k in keys for w in ("lora_", "trainable_tokens", "parametrizations"))  # merged
    assert json.loads((final / "config.json").read_text())["diffusion"]["block_size"] == 8

    # 5. the merged checkpoint as an eval planner on 4 scenes (decodes; an untrained model's text may not parse)
    planner = f"model:{final},mode=block,block=8,steps=2,max_new_tokens=32"
    wamdiff("eval", "pdms", "--planner", planner, "--data", str(test), "--limit", "4", "--plots", "0",
            "--out", str(tmp_path / "eval"))
    summary = json.loads((tmp_path / "eval" / "pdms_summary.json").read_text())
    assert planner in summary["planners"]
    rows = list(csv.DictReader(next((tmp_path / "eval").glob("pdms_model*.csv")).open()))
    assert len(rows) == 4 and not any("raised" in r["plan_reason"] for r in rows), [r["plan_reason"] for r in rows]

    # 6. the speed benchmark, quick grid; at a 151,936-token vocabulary every block position costs an LM-head
    #    row, so 1 prompt, a 4-step cap per block, the exact cache and no step-cost probe keep it to a minute
    wamdiff("bench", "--checkpoint", str(final), "--data", str(data / "train.json"), "--n-prompts", "1", "--quick",
            "--max-steps", "4", "--caches", "exact", "--no-step-cost", "--out", str(tmp_path / "bench"))
    bench = json.loads((tmp_path / "bench" / "bench.json").read_text())
    assert bench["rows"] and all(r["ar"]["tok_s"] > 0 and r["diffusion"]["tok_s"] > 0 for r in bench["rows"])
