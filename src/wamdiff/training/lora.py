"""LoRA adapters (peft) for the trainer: low-rank updates of the language model's linear layers, the base
weights frozen, plus (optionally) the embedding rows of the tokens wamdiff adds to a foreign vocabulary —
the mask token above all, whose embedding a converted checkpoint has never trained.

The adapters are injected into the HF model in place (`PeftModel.get_base_model()` is the same object with
LoRA layers), so every forward in `wamdiff.diffusion.forward` runs through them unchanged. Resumable
checkpoints hold only the adapters, in peft's own layout (`save_adapter`: `adapter/adapter_config.json` +
`adapter_model.safetensors`); the final model is merged (`merge`) into plain weights, which every loader, planner
and benchmark reads like any other checkpoint, and its adapters are kept beside it in `final/adapter/`, so
`PeftModel.from_pretrained(base, "RUN/final/adapter")` gives the adapter model on the recipe's `model.init`.
"""

from __future__ import annotations

from pathlib import Path

import torch

TRAINABLE_FILE = "trainable.safetensors"  # the layout before peft's (still read on resume)
ADAPTER_DIR = "adapter"
ADAPTER_WEIGHTS = "adapter_model.safetensors"


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


def save_adapter(peft_model, directory: Path) -> Path:
    """The adapters (LoRA and the added tokens' rows) in peft's own layout: `PeftModel.from_pretrained(base,
    directory)` loads them. Embedding layers are not saved whole (only the trainable rows, as peft's delta)."""
    directory = Path(directory)
    peft_model.save_pretrained(str(directory), save_embedding_layers=False, safe_serialization=True)
    return directory


def has_adapter(directory: Path) -> bool:
    return (Path(directory) / ADAPTER_DIR / ADAPTER_WEIGHTS).is_file() or (Path(directory) / TRAINABLE_FILE).is_file()


def load_adapter(peft_model, directory: Path) -> None:
    """Load a checkpoint's adapters into `peft_model`: peft's layout (`directory/adapter/`) or the older
    `trainable.safetensors`. Every adapter tensor of the recipe's LoRA setup must be there, and no other."""
    from peft import load_peft_weights, set_peft_model_state_dict

    folder = Path(directory) / ADAPTER_DIR
    if not (folder / ADAPTER_WEIGHTS).is_file():
        return load_trainable(peft_model.get_base_model(), directory)
    result = set_peft_model_state_dict(peft_model, load_peft_weights(str(folder), device="cpu"))
    unexpected = sorted(result.unexpected_keys or [])
    missing = sorted(k for k in result.missing_keys or [] if "lora_" in k)  # a tied lm_head shares the rows' delta
    if unexpected or missing:
        raise ValueError(f"{folder}: adapter tensors do not match the recipe's LoRA setup "
                         f"(missing {missing[:3]}, unexpected {unexpected[:3]})")
