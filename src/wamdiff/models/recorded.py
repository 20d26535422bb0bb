"""What a checkpoint records about itself, read in one place: is a folder a model, is a model a diffusion model,
has it a vision tower, and the settings its `config.json` carries. Light (json only): planners, the pipeline and
the server ask here.

A diffusion checkpoint carries two block sizes, and they are different settings:
- `diffusion` (written by `models.convert.to_diffusion`): the block size the model was TRAINED at and its mask
  token; `models.convert.diffusion_settings(model)` reads it. It shapes the attention mask of training.
- `wamdiff_decode` (written by `wamdiff pipeline --export` from the pipeline's `evaluate.decode`): the decode the
  pipeline EVALUATED the checkpoint with, e.g. one 17-token block for the shipped students trained at 32;
  `recorded_decode` reads it. It is the lowest layer of `decoding.config.resolve_decode` for this checkpoint.
- `wamdiff_text_decode` (written by the same export from `evaluate.text_decode`): how the pipeline decoded the
  checkpoint's free-text answers (driving QA), over `wamdiff_decode`; `recorded_decode(..., free_text=True)` reads
  both. A student that plans in one 17-token block may answer questions better a few tokens at a time.
"""

from __future__ import annotations

import json
from pathlib import Path

CONFIG_FILE = "config.json"


def is_model_dir(path: str | Path) -> bool:
    """A model folder: one with a `config.json` (what `models.load_model` loads)."""
    return (Path(path) / CONFIG_FILE).is_file()


def _recorded(source, key: str):
    """`key` of a checkpoint folder's config.json, of a loaded model's (or a config's) config, or of a config.json's
    dict; None when absent."""
    if isinstance(source, dict):
        return source.get(key)
    if isinstance(source, (str, Path)):
        try:
            return json.loads((Path(source) / CONFIG_FILE).read_text()).get(key)
        except (OSError, ValueError):
            return None
    config = getattr(source, "config", source)
    return getattr(config, key, None)


def recorded_diffusion(source) -> dict:
    """The diffusion settings a model was TRAINED with (`diffusion`: block_size, mask_token_id, prediction), as
    recorded; {} for an AR model. A checkpoint saved before `prediction` was recorded predicts at the same position.
    `models.convert.diffusion_settings` is the checked, typed form of a loaded model's."""
    recorded = dict(_recorded(source, "diffusion") or {})
    return {"prediction": "same", **recorded} if recorded else recorded


def is_diffusion(source) -> bool:
    """Whether a model (a checkpoint folder, a loaded model or its config) is a block-diffusion model: it carries
    the diffusion settings `models.convert.to_diffusion` records. Otherwise it is an AR model."""
    return bool(recorded_diffusion(source))


def is_vision(source) -> bool:
    """Whether a model (a checkpoint folder, a loaded model or its config) has a vision tower (`vision_config`): its
    prompts take camera images."""
    return _recorded(source, "vision_config") is not None


def recorded_decode(source, free_text: bool = False) -> dict:
    """The decode the pipeline evaluated this checkpoint with (`wamdiff_decode`, option names as written, e.g.
    `{"block": 17, "steps": 4}`); {} when none was recorded. Not the trained block size (`diffusion_settings`).
    `free_text`: the decode of its free-text answers, `wamdiff_text_decode` over that (the same when absent)."""
    decode = dict(_recorded(source, "wamdiff_decode") or {})
    return {**decode, **(_recorded(source, "wamdiff_text_decode") or {})} if free_text else decode


def recorded_answer_format(source) -> str | None:
    """The answer format a checkpoint was trained on (`wamdiff_answer_format`, written by the trainer from the
    dataset's manifest), so a planner spec needs no `fmt=` for the world's own models."""
    return _recorded(source, "wamdiff_answer_format")


def recorded_prompt(source) -> str | None:
    """The served prompt template a checkpoint records (`wamdiff_prompt`: the human turn with one `<image>` per
    camera, in the model's order, and the fields `driving.prompts.scene_prompt` fills: {command}, {vx}, {vy}, {ax},
    {ay}); None: the world's own one-camera prompt (`driving.prompts.PROMPT_TEMPLATE`)."""
    value = _recorded(source, "wamdiff_prompt")
    return str(value) if value else None
