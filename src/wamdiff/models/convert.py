"""AR model -> block-diffusion model: the same HF object, diffusion settings recorded in its config.

Nothing in the weights changes; the block size only decides the attention mask (`wamdiff.diffusion.masks`).
At block size 1 the x0 stream's mask is the causal mask, so a freshly converted model is the AR model.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

from wamdiff.diffusion.attention import install_attention
from wamdiff.diffusion.masks import check_block_size
from wamdiff.models.recorded import is_diffusion, recorded_diffusion
from wamdiff.names import PREDICTIONS


@dataclass(frozen=True)
class DiffusionSettings:
    """What a diffusion model was trained with (`config.diffusion`): the block size of its training mask and its
    mask token, and which token its logits at an answer position predict (`prediction`: "same", that position's;
    "shifted", the next one's, as in the AR model it came from). How it decodes by default is another setting
    (`models.recorded.recorded_decode`)."""

    block_size: int
    mask_token_id: int
    prediction: str = "same"

    @property
    def shifted(self) -> bool:
        return self.prediction == "shifted"


def _check_prediction(prediction) -> str:
    if prediction not in PREDICTIONS:
        raise ValueError(f"prediction must be one of {', '.join(PREDICTIONS)}, got {prediction!r}")
    return prediction


def _vocab_size(model) -> int:
    return model.get_input_embeddings().weight.shape[0]


def _check_mask_token(model, mask_token_id) -> int:
    if mask_token_id is None or not 0 <= int(mask_token_id) < _vocab_size(model):
        raise ValueError(
            f"mask token absent from the vocabulary (mask_token_id={mask_token_id}, vocab size {_vocab_size(model)}); "
            "build the model with wamdiff's tokenizer or load it with wamdiff.models.load_model"
        )
    return int(mask_token_id)


def to_diffusion(model_or_path, block_size: int, *, tokenizer=None, prediction: str | None = None):
    """Return the diffusion model (same object when given a model) with block size + mask token in its config.

    prediction: None keeps a diffusion model's own and gives an AR model "same"; a value that differs from a
    diffusion model's own is a ValueError (the weights were trained for theirs)."""
    check_block_size(block_size)
    if isinstance(model_or_path, (str, Path)):
        from wamdiff.models.build import load_model

        model, tokenizer = load_model(model_or_path)
    else:
        model = model_or_path
    mask_id = tokenizer.convert_tokens_to_ids(tokenizer.mask_token) if tokenizer is not None and tokenizer.mask_token else None
    mask_id = _check_mask_token(model, mask_id if mask_id is not None else getattr(model.config, "mask_token_id", None))
    own = recorded_diffusion(model)["prediction"] if is_diffusion(model) else None
    if prediction is not None and own is not None and prediction != own:
        raise ValueError(f"the model predicts with {own!r} positions; it cannot be trained or decoded as {prediction!r}")
    prediction = _check_prediction(prediction or own or "same")
    model.config.mask_token_id = mask_id
    model.config.diffusion = asdict(DiffusionSettings(block_size, mask_id, prediction))
    return install_attention(model)


def diffusion_settings(model) -> DiffusionSettings:
    """The trained block size and mask token of a diffusion model; ValueError for an AR model (`is_diffusion`)."""
    if not is_diffusion(model):
        raise ValueError(f"{type(model).__name__} is not a diffusion model: call to_diffusion(model, block_size) first")
    d = recorded_diffusion(model)
    return DiffusionSettings(check_block_size(int(d["block_size"])), _check_mask_token(model, d["mask_token_id"]),
                             _check_prediction(d["prediction"]))


def set_block_size(model, block_size: int):
    """Change the block size of a converted model (progressive block-size adaptation: 1 -> 4 -> ... -> 32)."""
    s = diffusion_settings(model)
    model.config.diffusion = asdict(DiffusionSettings(check_block_size(block_size), s.mask_token_id, s.prediction))
    return model
