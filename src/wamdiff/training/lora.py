"""LoRA adapters (peft) for the trainer: low-rank updates of the language model's linear layers, the base
weights frozen, plus (optionally) the embedding rows of the tokens wamdiff adds to a foreign vocabulary —
the mask token above all, whose embedding a converted checkpoint has never trained.

The adapters are injected into the HF model in place (`PeftModel.get_base_model()` is the same object with
LoRA layers), so every forward in `wamdiff.diffusion.forward` runs through them unchanged. Resumable
checkpoints hold only the trainable tensors; the final model is merged (`merge`) into plain weights, which
every loader, planner and benchmark reads like any other checkpoint.
"""

from __future__ import annotations

from pathlib import Path

import torch

TRAINABLE_FILE = "trainable.safetensors"


def add_lora(model, section, tokenizer):
    """Wrap `model` with LoRA adapters per the recipe's `model.lora` section; returns the PeftModel."""
    from peft import LoraConfig, get_peft_model

    from wamdiff.models.tokens import SPECIAL_TOKENS

    tokens = None
    if section.train_added_tokens:
        tokens = sorted({tokenizer.convert_tokens_to_ids(t) for t in SPECIAL_TOKENS})
    config = LoraConfig(r=section.rank, lora_alpha=section.alpha, lora_dropout=section.dropout, bias="none",
                        target_modules=list(section.targets), exclude_modules=r".*\.visual\..*",
                        trainable_token_indices=tokens)
    try:
        return get_peft_model(model, config)
    except ValueError as err:
        if "No modules were targeted" not in str(err):
            raise
        raise ValueError(f"recipe field model.lora.targets: no module of {type(model).__name__} matches "
                         f"{list(section.targets)}") from None


def merge(peft_model):
    """Fold the adapters into the base weights; returns the plain HF model (the same object peft wrapped)."""
    return peft_model.merge_and_unload()


def trainable_state(model) -> dict[str, torch.Tensor]:
    return {n: p.detach().cpu().contiguous() for n, p in model.named_parameters() if p.requires_grad}


def save_trainable(model, directory: Path) -> None:
    from safetensors.torch import save_file

    save_file(trainable_state(model), str(Path(directory) / TRAINABLE_FILE))


def load_trainable(model, directory: Path) -> None:
    """Copy saved adapter tensors into the model (names and shapes must match exactly)."""
    from safetensors.torch import load_file

    saved = load_file(str(Path(directory) / TRAINABLE_FILE))
    params = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if set(saved) != set(params):
        missing, extra = sorted(set(params) - set(saved))[:3], sorted(set(saved) - set(params))[:3]
        raise ValueError(f"{directory}/{TRAINABLE_FILE}: adapter tensors do not match the recipe's LoRA setup "
                         f"(missing {missing}, unexpected {extra})")
    with torch.no_grad():
        for n, t in saved.items():
            params[n].copy_(t)
