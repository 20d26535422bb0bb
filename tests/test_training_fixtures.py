"""Shared helpers of the trainer tests: a tiny synthetic WAM-Diff2 dataset (read back through the world's
reader), tiny recipes, an attention-mask spy, safetensors loading."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import torch


@contextlib.contextmanager
def one_thread():
    """Tiny models are overhead-bound and the CI box is shared: 1 thread is faster and never oversubscribes."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def make_data(directory: Path, **kw) -> dict[str, Path]:
    from wamdiff.training.synthetic import write_dataset

    return write_dataset(directory, **kw)


def tiny_recipe(paths: dict[str, Path], out: Path, kind: str = "block", **sections) -> dict:
    """A few-step recipe on the tiny preset that overfits the 4 training samples (val = the train file)."""
    r = {
        "name": f"test-{kind}",
        "kind": kind,
        "seed": 0,
        "output_dir": str(out),
        "model": {"preset": "tiny", "block_size": 4},
        "data": {"train": [str(paths["train"])], "val": str(paths["train"]), "max_train_samples": 4, "max_val_samples": 4},
        "optim": {"steps": 8, "batch_size": 4, "lr": 1e-2, "vision_lr": 2e-3, "warmup_steps": 1, "mixed_precision": "no"},
        "eval": {"at_start": True, "at_end": True, "batch_size": 4, "qa": {"at_start": False, "at_end": False}},
        "checkpoint": {"every": 0},
        "log": {"every": 1, "progress": False, "tensorboard": True},
    }
    from wamdiff.yamlconfig import merge

    return merge(r, sections)


def text_layers(model):
    inner = model.model
    return (inner.language_model if hasattr(inner, "language_model") else inner).layers


class MaskSpy:
    """Records the attention mask that reaches layer 0's self-attention on every forward."""

    def __init__(self, model):
        self.masks: list[torch.Tensor] = []
        self.handle = text_layers(model)[0].self_attn.register_forward_pre_hook(self._hook, with_kwargs=True)

    def _hook(self, module, args, kwargs):
        self.masks.append(kwargs["attention_mask"].detach().clone())

    def remove(self) -> None:
        self.handle.remove()


def state_dict_of(path: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    out = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        out.update(load_file(f))
    return out


def test_synthetic_dataset_is_wamdiff2_json(tmp_path):
    paths = make_data(tmp_path)
    rows = json.loads(paths["train"].read_text())
    assert {"id", "image", "conversations"} <= set(rows[0])
    assert rows[0]["conversations"][0]["from"] == "human" and "<image>" in rows[0]["conversations"][0]["value"]
    assert Path(rows[0]["image"][0]).exists()
